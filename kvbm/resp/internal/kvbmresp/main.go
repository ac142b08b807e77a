// Command kvbmresp serves a host-memory kvbm.Store over RESP2 on its own, for load tests
// of the protocol server (scripts/kvbm-redis-bench.sh) before `turbine kvbm` runs it;
// docs/reference.md §9.3.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/kvbm/resp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kvbmresp:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:6390", "TCP address to listen on")
	hostBytes := flag.Int64("host-bytes", 8<<30, "host-memory tier cap (bytes)")
	password := flag.String("password", "", "password clients must AUTH with")
	flag.Parse()
	st, err := kvbm.Open(kvbm.Config{HostBytes: *hostBytes})
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := resp.New(st, resp.Options{Password: *password, Logger: zerolog.New(os.Stderr).Level(zerolog.InfoLevel)})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	fmt.Fprintln(os.Stderr, "kvbmresp: serving on", ln.Addr())
	return srv.Serve(ln)
}
