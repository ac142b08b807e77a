package epp

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/turbine-llm/turbine/epp/pool"
	"github.com/turbine-llm/turbine/messages"
)

func chatBody(model, content string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "messages": []any{map[string]any{"role": "user", "content": content}}})
	return b
}

func threeWorkers() (*staticSource, *fakeTurbine) {
	src := newStatic("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
	ft := newFakeTurbine(Worker{ID: "w1", Endpoint: "10.0.0.1:8000", Ready: true}, Worker{ID: "w2", Endpoint: "10.0.0.2:8000", Ready: true},
		Worker{ID: "w3", Endpoint: "10.0.0.3:8000", Ready: true})
	return src, ft
}

// TestPickRechunksLargeBody: a 200 KB body sent in 16 KiB pieces comes back whole in
// chunks of at most 62,000 bytes, after a headers response whose destination header
// equals the envoy.lb metadata, with the client's x-gateway-* headers removed.
func TestPickRechunksLargeBody(t *testing.T) {
	src, ft := threeWorkers()
	h := startEPP(t, &Picker{Source: src, Turbine: ft})
	body := chatBody("m", strings.Repeat("a", 200_000), false)
	x := h.requestPath(t, context.Background(), "/v1/chat/completions", body, 16<<10, nil, "x-gateway-inference-objective", "x", "x-request-id", "r1")
	if x.imm != nil {
		t.Fatalf("immediate response %v", x.imm)
	}
	if got := x.destination(); got != "10.0.0.1:8000" || got != x.metadataDestination() {
		t.Fatalf("header %q, metadata %q; want both 10.0.0.1:8000", got, x.metadataDestination())
	}
	if !x.headers.GetResponse().GetClearRouteCache() {
		t.Error("clear_route_cache not set")
	}
	if rm := x.headers.GetResponse().GetHeaderMutation().GetRemoveHeaders(); len(rm) != 1 || rm[0] != "x-gateway-inference-objective" {
		t.Errorf("removed %v", rm)
	}
	if !bytes.Equal(x.body, body) {
		t.Fatalf("body changed: %d bytes back of %d", len(x.body), len(body))
	}
	if len(x.bodyMsgs) != (len(body)+MaxChunk-1)/MaxChunk {
		t.Errorf("%d chunks for %d bytes", len(x.bodyMsgs), len(body))
	}
	for i, c := range x.bodyMsgs {
		if len(c.Body) > MaxChunk || c.EndOfStream != (i == len(x.bodyMsgs)-1) {
			t.Errorf("chunk %d: %d bytes, eos %v", i, len(c.Body), c.EndOfStream)
		}
	}
	if len(ft.acked) != 1 || !strings.HasPrefix(ft.acked[0], "r1#epp-") {
		t.Errorf("acked %v", ft.acked)
	}
	x.stream.CloseSend()
}

// TestPickCases: subset hints, fallbacks and the immediate responses.
func TestPickCases(t *testing.T) {
	list := func(s ...string) *structpb.Value {
		var vs []*structpb.Value
		for _, x := range s {
			vs = append(vs, structpb.NewStringValue(x))
		}
		return structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	for _, tc := range []struct {
		name      string
		body      []byte
		subset    *structpb.Value
		outcome   messages.RouteOutcome
		fallbacks int
		want      string // destination, or "" when an immediate response is wanted
		status    int
		retry     bool
		code      string
	}{
		{name: "router pick", body: chatBody("m", "hi", false), want: "10.0.0.1:8000"},
		{name: "subset list", body: chatBody("m", "hi", false), subset: list("10.0.0.3:8000"), want: "10.0.0.3:8000"},
		{name: "subset comma string", body: chatBody("m", "hi", false), subset: structpb.NewStringValue("10.0.0.9:1, 10.0.0.2:8000"), want: "10.0.0.2:8000"},
		{name: "fallbacks", body: chatBody("m", "hi", false), fallbacks: 2, want: "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000"},
		{name: "fallbacks in subset", body: chatBody("m", "hi", false), fallbacks: 2, subset: list("10.0.0.3:8000", "10.0.0.2:8000"), want: "10.0.0.2:8000,10.0.0.3:8000"},
		{name: "empty subset", body: chatBody("m", "hi", false), subset: list(), status: 503, retry: true, code: "no_ready_endpoint"},
		{name: "subset outside pool", body: chatBody("m", "hi", false), subset: list("10.9.9.9:1"), status: 503, retry: true, code: "no_ready_endpoint"},
		{name: "bad json", body: []byte(`{"model":`), status: 400, code: "invalid_request"},
		{name: "not an object", body: []byte(`[1]`), status: 400, code: "invalid_request"},
		{name: "unknown model", body: chatBody("nope", "hi", false), status: 404, code: "model_not_found"},
		{name: "busy", body: chatBody("m", "hi", false), outcome: messages.RouteOutcome_ROUTE_ALL_BUSY, status: 429, retry: true, code: "all_busy"},
		{name: "no workers", body: chatBody("m", "hi", false), outcome: messages.RouteOutcome_ROUTE_NO_WORKERS, status: 503, retry: true, code: "no_ready_endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ft := threeWorkers()
			ft.outcome = tc.outcome
			h := startEPP(t, &Picker{Source: src, Turbine: ft, Fallbacks: tc.fallbacks})
			var md = subsetMDOrNil(tc.subset)
			x := h.requestPath(t, context.Background(), "/v1/chat/completions", tc.body, 1000, md)
			defer x.stream.CloseSend()
			if tc.want != "" {
				if x.imm != nil {
					t.Fatalf("immediate %d %s", x.imm.Status.Code, x.imm.Body)
				}
				if x.destination() != tc.want || x.metadataDestination() != tc.want {
					t.Fatalf("header %q metadata %q, want %q", x.destination(), x.metadataDestination(), tc.want)
				}
				return
			}
			if x.imm == nil {
				t.Fatalf("picked %q, want status %d", x.destination(), tc.status)
			}
			if int(x.imm.Status.Code) != tc.status {
				t.Errorf("status %d, want %d", x.imm.Status.Code, tc.status)
			}
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal(x.imm.Body, &e); err != nil || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("body %s (code want %s)", x.imm.Body, tc.code)
			}
			retry := false
			for _, hv := range x.imm.GetHeaders().GetSetHeaders() {
				retry = retry || hv.GetHeader().GetKey() == "retry-after"
			}
			if retry != tc.retry {
				t.Errorf("retry-after %v, want %v", retry, tc.retry)
			}
		})
	}
}

func subsetMDOrNil(v *structpb.Value) *corev3.Metadata {
	if v == nil {
		return nil
	}
	return subsetMD(v)
}

// TestNonTurbineEndpointsByLoad: with no Turbine workers for a model, the least loaded
// endpoint wins (fewest waiting, then KV usage), and a bodiless GET goes to one too.
func TestNonTurbineEndpointsByLoad(t *testing.T) {
	src := newStatic("10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000")
	src.loads["10.0.1.1:8000"] = pool.Load{Waiting: 3}
	src.loads["10.0.1.2:8000"] = pool.Load{Waiting: 0, KVUsage: 0.5}
	src.loads["10.0.1.3:8000"] = pool.Load{Waiting: 0, KVUsage: 0.2}
	h := startEPP(t, &Picker{Source: src, Turbine: newFakeTurbine()})
	x := h.requestPath(t, context.Background(), "/v1/chat/completions", chatBody("llama", "hi", true), 1000, nil)
	if x.destination() != "10.0.1.3:8000" {
		t.Fatalf("picked %q", x.destination())
	}
	x.stream.CloseSend()
	g := h.requestPath(t, context.Background(), "/v1/models", nil, 0, nil)
	if g.destination() == "" || g.imm != nil {
		t.Fatalf("GET: %q %v", g.destination(), g.imm)
	}
}

// TestResponsePathUsageAndRelease: the answer's SSE chunks come back unchanged, the
// usage of the last chunk is read and the router's load freed once the body ends.
func TestResponsePathUsageAndRelease(t *testing.T) {
	sse, err := os.ReadFile(filepath.Join("testdata", "chat_stream_usage.sse"))
	if err != nil {
		t.Fatal(err)
	}
	src, ft := threeWorkers()
	h := startEPP(t, &Picker{Source: src, Turbine: ft})
	x := h.requestPath(t, context.Background(), "/v1/chat/completions", chatBody("m", "hi", true), 1000, nil)
	st := x.stream
	if err := st.Send(respHeadersMsg("200", "text/event-stream", servedMD("10.0.0.1:8000"))); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || r.GetResponseHeaders() == nil {
		t.Fatalf("response headers answer %v %v", r, err)
	}
	events := strings.SplitAfter(string(sse), "\n\n")
	var back []byte
	for i, ev := range events {
		if err := st.Send(respBodyMsg(ev, i == len(events)-1)); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sb := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil || string(sb.Body) != ev || sb.EndOfStream != (i == len(events)-1) {
			t.Fatalf("chunk %d came back as %v", i, r)
		}
		back = append(back, sb.Body...)
		if i < len(events)-1 {
			select {
			case id := <-ft.freed:
				t.Fatalf("freed %s before the end", id)
			default:
			}
		}
	}
	if id := ft.waitFreed(t); !strings.HasPrefix(id, "generated-id#epp-") {
		t.Errorf("freed %q", id)
	}
	if string(back) != string(sse) {
		t.Error("answer changed")
	}
	st.CloseSend()
	if got := readCounter(h.srv.Metrics, "turbine_epp_completion_tokens_total"); got != 7 {
		t.Errorf("completion tokens %v, want 7", got)
	}
}

// TestModelServerErrorCounted: a 500 from the model server is counted against the
// served endpoint, and the request is still freed.
func TestModelServerErrorCounted(t *testing.T) {
	src, ft := threeWorkers()
	h := startEPP(t, &Picker{Source: src, Turbine: ft})
	x := h.requestPath(t, context.Background(), "/v1/chat/completions", chatBody("m", "hi", false), 1000, nil)
	st := x.stream
	st.Send(respHeadersMsg("500", "application/json", servedMD("10.0.0.2:8000")))
	st.Recv()
	st.Send(respBodyMsg(`{"error":{"message":"boom"}}`, true))
	st.Recv()
	ft.waitFreed(t)
	var b bytes.Buffer
	h.srv.Metrics.WritePrometheus(&b)
	if !strings.Contains(b.String(), `turbine_epp_model_server_errors_total{endpoint="10.0.0.2:8000",code="500"} 1`) {
		t.Errorf("metrics:\n%s", b.String())
	}
}

// TestClientDisconnectFrees: the gateway's stream ending mid-answer (the client went
// away) frees the router's load.
func TestClientDisconnectFrees(t *testing.T) {
	src, ft := threeWorkers()
	h := startEPP(t, &Picker{Source: src, Turbine: ft})
	ctx, cancel := context.WithCancel(context.Background())
	x := h.requestPath(t, ctx, "/v1/chat/completions", chatBody("m", "hi", true), 1000, nil)
	x.stream.Send(respHeadersMsg("200", "text/event-stream", nil))
	x.stream.Recv()
	x.stream.Send(respBodyMsg("data: {\"choices\":[]}\n\n", false))
	x.stream.Recv()
	cancel()
	if id := ft.waitFreed(t); !strings.Contains(id, "#epp-") {
		t.Errorf("freed %q", id)
	}
	select {
	case id := <-ft.freed:
		t.Fatalf("freed twice (%s)", id)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestRestart: a new EPP on the same address serves the gateway's next stream; the stream
// open when the first stopped fails on the gateway's side (where failure_mode_allow
// decides: FailOpen forwards without a pick, FailClose answers 500).
func TestRestart(t *testing.T) {
	src, ft := threeWorkers()
	h := startEPP(t, &Picker{Source: src, Turbine: ft})
	x := h.requestPath(t, context.Background(), "/v1/chat/completions", chatBody("m", "hi", false), 1000, nil)
	h.gs.Stop()
	if _, err := x.stream.Recv(); err == nil {
		t.Fatal("the stream open across the restart did not fail")
	}
	ft.waitFreed(t) // the stopped server released what it picked
	h2 := startEPP(t, &Picker{Source: src, Turbine: ft})
	y := h2.requestPath(t, context.Background(), "/v1/chat/completions", chatBody("m", "hi", false), 1000, nil)
	if y.destination() == "" {
		t.Fatal("no pick after the restart")
	}
	y.stream.CloseSend()
}

// TestHealth: readiness follows the Source.
func TestHealth(t *testing.T) {
	src, ft := threeWorkers()
	s := NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{}, nil, zerolog.Nop())
	if !s.UpdateHealth(context.Background()) {
		t.Fatal("not ready")
	}
	src.mu.Lock()
	src.ready = false
	src.mu.Unlock()
	if s.UpdateHealth(context.Background()) {
		t.Fatal("ready with the pool not resolved")
	}
}

// readCounter is a metric's value from the Prometheus text (0 when absent).
func readCounter(m *Metrics, name string) float64 {
	var b bytes.Buffer
	m.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
