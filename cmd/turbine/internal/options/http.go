package options

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"
)

// HTTP are the OpenAI HTTP listener's flags.
type HTTP struct {
	Host         string
	Port         int
	MaxBodyBytes int64 // largest accepted request body, bytes
}

// DefaultHTTP returns 127.0.0.1:8000 and a 4 MiB body limit.
func DefaultHTTP() HTTP { return HTTP{Host: "127.0.0.1", Port: 8000, MaxBodyBytes: 4 << 20} }

// Flags registers the HTTP flags on fs.
func (o *HTTP) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address the OpenAI HTTP API listens on")
	fs.IntVar(&o.Port, "port", o.Port, "port of the OpenAI HTTP API (0 picks a free one)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest accepted HTTP request body in bytes")
}

// Validate checks the HTTP options; errors name the flag.
func (o *HTTP) Validate() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("--port %d: want 0..65535", o.Port)
	case o.MaxBodyBytes < 1024:
		return fmt.Errorf("--max-body-bytes %d: must be ≥ 1024", o.MaxBodyBytes)
	}
	return nil
}

// Listen binds the HTTP port; errors name --port.
func (o *HTTP) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, fmt.Errorf("--port: %w", err)
	}
	return ln, nil
}

// Serve serves handler on ln until ctx ends, then shuts down gracefully (10 s for
// in-flight requests). Bodies must arrive within 60 s (stalled uploads would otherwise
// hold connections forever); there is no write timeout, since streams last as long as
// generation. It returns nil after a shutdown and the server's error otherwise.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, log zerolog.Logger) error {
	srv := newHTTPServer(handler)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// newHTTPServer is the server of Serve and ServeDrained.
func newHTTPServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second}
}
