package chaintest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/frontend"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
	"github.com/turbine-llm/turbine/tracing"
)

// chain is one process's whole request path: a gateway over the actor backend, the
// Router and Catalog grains on an in-process cluster, one worker actor whose engine is
// the mock engine in vLLM's dialect behind an HTTP server that records the traceparent
// header of every generation request.
type chain struct {
	url     string
	mu      sync.Mutex
	headers []string // traceparent of each POST /v1/completions the engine got
}

func (c *chain) engineHeaders() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.headers)
}

// chainLauncher runs a placeholder process and connects the worker to the test's engine.
type chainLauncher struct{ url string }

func (chainLauncher) Command(string, int, string) (argv, env []string) {
	return []string{"/bin/sh", "-c", "exec sleep 60"}, nil
}
func (l chainLauncher) Connect(string) engines.Engine {
	return vllm.Connect(l.url, vllm.EngineOptions{Model: "m"})
}
func (chainLauncher) SubscribeKVEvents(ctx context.Context, _ string, _ func(kv.Batch)) error {
	<-ctx.Done()
	return ctx.Err()
}

func startChain(t *testing.T) *chain {
	t.Helper()
	mdl, err := model.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	cfg := mocker.DefaultConfig()
	cfg.SpeedupRatio = 1000
	eng, err := server.New(server.Options{Params: server.Params{Engine: cfg, Dialect: server.DialectVLLM},
		ServedModelName: "m", Model: mdl})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	c := &chain{}
	engineHTTP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/completions" {
			c.mu.Lock()
			c.headers = append(c.headers, r.Header.Get("Traceparent"))
			c.mu.Unlock()
		}
		eng.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { engineHTTP.Close(); _ = eng.Close() })

	rcfg := router.Config{BlockSize: cfg.BlockSize, Mode: "kv", OverlapWeight: 1, Logger: zerolog.Nop()}
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("tracing-%d", time.Now().UnixNano()), Discovery: "local",
		Logger: zerolog.Nop(), Kinds: []*pcluster.Kind{router.Kind(rcfg), catalog.Kind()}})
	if err != nil {
		t.Fatal(err)
	}
	// A member leaving races inside protoactor itself (BlockList.Block against the gossip
	// loop, docs/actor-library.md §13): under the race detector the member is left to the
	// end of the test binary.
	t.Cleanup(func() {
		if !raceEnabled {
			member.Stop()
		}
	})
	const hb = 50 * time.Millisecond
	rc, cc := worker.GrainClients(member.Cluster, "m", catalog.Identity, worker.GrainTimeout(hb))
	card := &messages.ModelCard{Model: "m", Tokenizer: "builtin:cl100k_base", ContextLength: int32(cfg.MaxModelLen),
		KvBlockSize: int32(cfg.BlockSize), TotalKvBlocks: int64(cfg.NumGPUBlocks), MaxNumSeqs: int32(cfg.MaxNumSeqs),
		MaxNumBatchedTokens: int32(cfg.MaxNumBatchedTokens), EosTokenIds: mdl.EOSTokenIDs}
	props, err := worker.Props(worker.Config{WorkerID: "w0", Card: card, Launcher: chainLauncher{url: engineHTTP.URL},
		Heartbeat: hb, StopGrace: time.Second, Router: rc, Catalog: cc, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := member.System.Root.SpawnNamed(props, worker.ActorName("w0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.System.Root.PoisonFuture(pid).Wait() })

	backend := frontend.New(member.Cluster, frontend.Config{Logger: zerolog.Nop()})
	gw, err := gateway.New(gateway.Config{Logger: zerolog.Nop()}, backend)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	t.Cleanup(hs.Close)
	c.url = hs.URL
	// The catalog has no event to wait on: poll it until the worker's engine is ready.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cards, err := backend.Models(context.Background())
		if err == nil && slices.ContainsFunc(cards, func(c *messages.ModelCard) bool { return c.Model == "m" }) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not become ready within 30 s (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// complete posts a completion of 4 tokens with the given traceparent ("" none).
func (c *chain) complete(t *testing.T, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.url+"/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"hello there","max_tokens":4,"ignore_eos":true}`))
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// endedSpans is a span processor that records ended spans and wakes waiters.
type endedSpans struct {
	tracetest.SpanRecorder
	mu      sync.Mutex
	changed chan struct{}
}

func newEndedSpans() *endedSpans { return &endedSpans{changed: make(chan struct{})} }

func (e *endedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	e.SpanRecorder.OnEnd(s)
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// waitFor returns the ended spans of trace id once every name in names has ended there.
func (e *endedSpans) waitFor(t *testing.T, id trace.TraceID, names ...string) map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		e.mu.Lock()
		changed := e.changed
		e.mu.Unlock()
		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range e.Ended() {
			if s.SpanContext().TraceID() == id {
				byName[s.Name()] = append(byName[s.Name()], s)
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return len(byName[n]) == 0 }) {
			return byName
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("spans ended in trace %s: %v; want %v", id, keys(byName), names)
		}
	}
}

func keys(m map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestChainPropagatesClientTrace: a request with a client's traceparent yields the span
// tree of docs/tracing.md in the client's trace — across the Router grain and the worker
// actor — and the engine's HTTP request carries the worker span as its traceparent.
// Then, with Turbine's tracing off (an SDK provider still installed globally), nothing
// is recorded and the engine gets no traceparent.
func TestChainPropagatesClientTrace(t *testing.T) {
	c := startChain(t)
	rec := newEndedSpans()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	restore := tracing.Install(tp)

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c.complete(t, "00-"+clientTrace+"-"+clientSpan+"-01")
	tid, _ := trace.TraceIDFromHex(clientTrace)
	spans := c.waitSpans(t, rec, tid)
	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		if n := len(spans[name]); n != 1 {
			t.Fatalf("%d %s spans, want 1", n, name)
		}
		return spans[name][0]
	}
	recv, pre, route, rr, dec, wg := one(tracing.SpanReceive), one(tracing.SpanPreprocess), one(tracing.SpanRoute),
		one(tracing.SpanRouterRoute), one(tracing.SpanDecode), one(tracing.SpanWorkerGenerate)
	if recv.Parent().SpanID().String() != clientSpan || !recv.Parent().IsRemote() || recv.SpanKind() != trace.SpanKindServer {
		t.Errorf("gateway.receive parent %v (remote %v), kind %v; want the client's span %s",
			recv.Parent().SpanID(), recv.Parent().IsRemote(), recv.SpanKind(), clientSpan)
	}
	for _, child := range []sdktrace.ReadOnlySpan{pre, route, dec} {
		if child.Parent().SpanID() != recv.SpanContext().SpanID() {
			t.Errorf("%s parent %v, want gateway.receive %v", child.Name(), child.Parent().SpanID(), recv.SpanContext().SpanID())
		}
	}
	if rr.Parent().SpanID() != route.SpanContext().SpanID() || !rr.Parent().IsRemote() {
		t.Errorf("router.route parent %v, want the route span %v across the grain call", rr.Parent().SpanID(), route.SpanContext().SpanID())
	}
	if wg.Parent().SpanID() != dec.SpanContext().SpanID() || !wg.Parent().IsRemote() {
		t.Errorf("worker.generate parent %v, want the decode span %v across the actor message", wg.Parent().SpanID(), dec.SpanContext().SpanID())
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]string {
		out := map[string]string{}
		for _, kv := range s.Attributes() {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
	if a := attrs(recv); a["http.response.status_code"] != "200" || a["gen_ai.request.model"] != "m" ||
		a["gen_ai.usage.output_tokens"] != "4" || a["http.route"] != "/v1/completions" || a["turbine.worker_id"] != "w0" {
		t.Errorf("gateway.receive attributes %v", a)
	}
	if a := attrs(pre); a["gen_ai.usage.input_tokens"] != "2" {
		t.Errorf("preprocess attributes %v; want the prompt's 2 tokens", a)
	}
	if a := attrs(route); a["turbine.worker_id"] != "w0" || a["turbine.route.outcome"] != "ROUTE_OK" {
		t.Errorf("route attributes %v", a)
	}
	if a := attrs(rr); a["turbine.worker_id"] != "w0" || a["turbine.route.candidates"] != "1" {
		t.Errorf("router.route attributes %v", a)
	}
	if a := attrs(dec); a["gen_ai.usage.output_tokens"] != "4" || a["turbine.finish_reason"] != "length" {
		t.Errorf("decode attributes %v", a)
	}
	if ev := dec.Events(); len(ev) == 0 || ev[0].Name != tracing.EventFirstToken {
		t.Errorf("decode events %v, want first_token", ev)
	}
	want := "00-" + clientTrace + "-" + wg.SpanContext().SpanID().String() + "-01"
	if got := c.engineHeaders(); len(got) != 1 || got[0] != want {
		t.Errorf("engine traceparent headers %q, want [%q] (the worker's span)", got, want)
	}

	// Off: Turbine's tracing off, a provider still set globally by someone else.
	restore()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(trace.NewNoopTracerProvider()) })
	before := len(rec.Ended())
	c.complete(t, "00-"+clientTrace+"-"+clientSpan+"-01")
	if got := c.engineHeaders(); len(got) != 2 || got[1] != "" {
		t.Errorf("engine traceparent headers %q; want none on the request made with tracing off", got)
	}
	if n := len(rec.Ended()); n != before {
		t.Errorf("%d spans recorded with tracing off", n-before)
	}
}

// waitSpans waits for every span of the aggregated request's tree.
func (c *chain) waitSpans(t *testing.T, rec *endedSpans, tid trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	return rec.waitFor(t, tid, tracing.SpanReceive, tracing.SpanPreprocess, tracing.SpanRoute, tracing.SpanRouterRoute,
		tracing.SpanDecode, tracing.SpanWorkerGenerate)
}
