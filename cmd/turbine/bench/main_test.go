package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
)

// fakeServeEnv makes the test binary act as `turbine serve` (see fakeServe); its value
// says how: "ok", or "fail:<mode>" to exit at once with an error for that router mode.
const fakeServeEnv = "TURBINE_BENCH_TEST_FAKE_SERVE"

func TestMain(m *testing.M) {
	if how := os.Getenv(fakeServeEnv); how != "" {
		os.Exit(fakeServe(how, os.Args[1:]))
	}
	if os.Getenv(runEnv) != "" {
		os.Exit(runMain())
	}
	os.Exit(m.Run())
}

// fakeServe is a stand-in for `turbine serve` that starts in milliseconds: it takes
// serve's flags, logs "turbine serving" with its URL as JSON, lists the model, reports
// every worker ready in /metrics and answers streaming completions at once, reporting as
// cached half the prompt under router mode kv and none under the others. It exits 0 on
// SIGTERM.
func fakeServe(how string, args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "fake serve: want serve as the first argument")
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	workers := fs.Int("workers", 2, "")
	mode := fs.String("router-mode", "kv", "")
	model := fs.String("model", "turbine-mock", "")
	for _, name := range []string{"host", "port", "log-format", "tokenizer", "block-size", "num-gpu-blocks", "max-num-seqs",
		"max-num-batched-tokens", "max-model-len", "speedup-ratio", "overlap-weight", "router-temperature", "ready-timeout",
		"max-local-prefill-tokens", "max-prefill-queue-tokens", "enforce-disagg", "kv-bytes-per-token", "kv-transfer-bandwidth"} {
		fs.String(name, "", "")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if how == "fail:"+*mode {
		for i := range 30 {
			fmt.Fprintf(os.Stderr, `{"level":"info","message":"starting line %d"}`+"\n", i)
		}
		fmt.Fprintln(os.Stderr, `{"level":"error","message":"engine w0 exited: out of KV blocks"}`)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, *model)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE turbine_router_worker_ready gauge")
		for i := range *workers {
			fmt.Fprintf(w, "turbine_router_worker_ready{model=%q,worker=\"w%d\"} 1\n", *model, i)
		}
	})
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Prompt    []uint32 `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cached := 0
		if *mode == "kv" {
			cached = len(b.Prompt) / 2
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\ndata: [DONE]\n\n",
			len(b.Prompt), b.MaxTokens, cached)
	})
	var h http.Handler = mux
	if key := os.Getenv("TURBINE_API_KEY"); key != "" { // as serve --api-key would
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") != "Bearer "+key {
				http.Error(w, `{"error":{"code":"invalid_api_key"}}`, http.StatusUnauthorized)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, `{"level":"info","url":"http://%s","model":%q,"workers":%d,"router_mode":%q,"message":"turbine serving"}`+"\n",
		ln.Addr(), *model, *workers, *mode)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	_ = srv.Close()
	fmt.Fprintln(os.Stderr, `{"level":"info","message":"drained"}`)
	return 0
}

// fakeServeArgs are compare flags that run the fake serve for a tiny synthetic workload.
func fakeServeArgs(t *testing.T, how, out string, extra ...string) []string {
	t.Setenv(fakeServeEnv, how)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"--serve-executable", exe, "--workers", "3", "--isl", "40", "--osl", "3", "--requests", "8",
		"--concurrency", "4", "--out", out, "--progress-interval", "0"}, extra...)
}
