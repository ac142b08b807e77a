package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// scriptedEmbedder embeds as fakeEmbedder does, each input on worker "w-<its last
// byte>"; an input whose last byte is in hold waits until release is closed (or its
// context ends); one whose last byte is in busy gets ErrAllBusy while busy is set; one
// whose last byte is in refuse gets an Embedding with that error and fault.
type scriptedEmbedder struct {
	*fakeEmbedder
	hold    byte
	release chan struct{}
	started chan string // request id of every input that reached the embedder
	mu      sync.Mutex
	busy    map[byte]bool
	refuse  map[byte]refusal
}

// refusal is the error and fault of an Embedding that failed.
type refusal struct {
	msg   string
	fault messages.Fault
}

func newScriptedEmbedder() *scriptedEmbedder {
	return &scriptedEmbedder{fakeEmbedder: newFakeEmbedder(), release: make(chan struct{}), started: make(chan string, 64),
		busy: map[byte]bool{}, refuse: map[byte]refusal{}}
}

func (f *scriptedEmbedder) Embed(ctx context.Context, model, requestID string, ids []uint32, dims int) (*messages.Embedding, error) {
	last := byte(ids[len(ids)-1] - fakeByteBase)
	f.started <- requestID
	f.mu.Lock()
	busy, ref, refused := f.busy[last], f.refuse[last], f.refuse[last] != refusal{}
	f.mu.Unlock()
	switch {
	case busy:
		return nil, fmt.Errorf("%w: test", ErrAllBusy)
	case refused:
		return &messages.Embedding{RequestId: requestID, WorkerId: "w-" + string(last), Error: ref.msg, Fault: ref.fault}, nil
	case f.hold != 0 && last == f.hold:
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e, err := f.fakeEmbedder.Embed(ctx, model, requestID, ids, dims)
	if e != nil {
		e.WorkerId = "w-" + string(last)
	}
	return e, err
}

func (f *scriptedEmbedder) setBusy(b byte, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy[b] = on
}

// embedResult is an embeddings answer: an httpResult and its X-Turbine-Worker.
type embedResult struct {
	httpResult
	worker string
}

// postEmbeddings runs one embeddings request with body in the background.
func postEmbeddings(s *Server, id, body string) chan *embedResult {
	out := make(chan *embedResult, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "/v1/embeddings", strings.NewReader(body))
		req.Header.Set("X-Request-Id", id)
		rr := newRecorder()
		s.ServeHTTP(rr, req)
		out <- &embedResult{httpResult{code: rr.Code, body: rr.Body.String(), retryAfter: rr.Header().Get("Retry-After")},
			rr.Header().Get("X-Turbine-Worker")}
	}()
	return out
}

// embedAnswer waits for an answer as answerOf does.
func embedAnswer(t *testing.T, ch chan *embedResult) *embedResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer: the request waits instead of being answered")
		return nil
	}
}

// An engine that refuses an input (its HTTP 400 or 422, carried as FAULT_INVALID_REQUEST)
// is a 400 invalid_request_error with the engine's message and the input as param; any
// other engine failure stays a 500 engine_error whose message does not repeat the
// engine's.
func TestEmbeddingsEngineRefusal(t *testing.T) {
	const msg = "This model's maximum context length is 512 tokens. However, you requested 600 tokens."
	for _, tc := range []struct {
		name, input string
		fault       messages.Fault
		status      int
		typ, code   string
		param       *string
		wantMsg     bool
	}{
		{"refused, one input", `"ab"`, messages.Fault_FAULT_INVALID_REQUEST, 400, "invalid_request_error", "invalid_value", ptr("input"), true},
		{"refused, second of two", `["a","b"]`, messages.Fault_FAULT_INVALID_REQUEST, 400, "invalid_request_error", "invalid_value", ptr("input[1]"), true},
		{"engine failed", `"ab"`, messages.Fault_FAULT_ENGINE_ERROR, 500, "server_error", "engine_error", nil, false},
		{"no fault", `"ab"`, messages.Fault_FAULT_NONE, 500, "server_error", "engine_error", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newScriptedEmbedder()
			b.refuse['b'] = refusal{msg, tc.fault}
			rr := serve(newTestServer(t, b), http.MethodPost, "/v1/embeddings", `{"model":"embed","input":`+tc.input+`}`)
			var got struct {
				Error struct {
					Message, Type, Code string
					Param               *string
				}
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &got); err != nil {
				t.Fatalf("%d %s: %v", rr.Code, rr.Body, err)
			}
			e := got.Error
			if rr.Code != tc.status || e.Type != tc.typ || e.Code != tc.code || strings.Contains(e.Message, msg) != tc.wantMsg ||
				(e.Param == nil) != (tc.param == nil) || e.Param != nil && *e.Param != *tc.param {
				t.Errorf("%d %s", rr.Code, rr.Body)
			}
			if w := rr.Header().Get("X-Turbine-Worker"); w != "w-b" {
				t.Errorf("X-Turbine-Worker %q, want w-b (the worker that refused)", w)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// An embeddings answer names the worker of its first input in X-Turbine-Worker, as a
// generation names its worker, even when a later input finished first on another.
func TestEmbeddingsWorkerHeader(t *testing.T) {
	b := newScriptedEmbedder()
	b.hold = 'x' // the first input finishes after the second
	s := newTestServer(t, b)
	res := postEmbeddings(s, "h", `{"model":"embed","input":["ax","by"]}`)
	for range 2 {
		<-b.started
	}
	close(b.release)
	if r := embedAnswer(t, res); r.code != 200 || r.worker != "w-x" {
		t.Fatalf("%d %s, X-Turbine-Worker %q, want w-x", r.code, r.body, r.worker)
	}
	rr := serve(s, http.MethodPost, "/v1/embeddings", `{"model":"embed","input":["ay","bx"]}`)
	if w := rr.Header().Get("X-Turbine-Worker"); rr.Code != 200 || w != "w-y" {
		t.Errorf("%d, X-Turbine-Worker %q, want w-y", rr.Code, w)
	}
}

// An embeddings request that runs past Config.RequestTimeout is answered 504
// request_timeout, its inputs cancelled, and counted as such.
func TestEmbeddingsRequestTimeout(t *testing.T) {
	b := newFakeEmbedder()
	b.blockTok = toks("z")[0] // waits for its context
	s, err := New(Config{Now: func() time.Time { return testTime }, RequestTimeout: 20 * time.Millisecond}, b,
		fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	// A guard, not a timing assertion: without the server's limit the request would wait
	// for this context, and end without a 504.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr := serveCtx(ctx, s, http.MethodPost, "/v1/embeddings", `{"model":"embed","input":["a","zz"]}`)
	if rr.Code != 504 || !strings.Contains(rr.Body.String(), `"code":"request_timeout"`) {
		t.Fatalf("%d %s; want 504 request_timeout", rr.Code, rr.Body)
	}
	if got := metricValue(s, `turbine_frontend_requests_total{model="embed",endpoint="embeddings",request_type="unary",status="504"}`); got != "1" {
		t.Errorf("504s counted: %q, want 1", got)
	}
}

// With every slot of MaxConcurrentRequests taken and a queue, an embeddings request
// waits in its model's queue for a slot, as a generation does, instead of a 503.
func TestEmbeddingsWaitForSlot(t *testing.T) {
	b := newScriptedEmbedder()
	b.hold = 'a'
	s := newLimitServer(t, b, 1, 2, time.Hour)
	ra := postEmbeddings(s, "a", `{"model":"embed","input":"a"}`)
	<-b.started
	rb := postEmbeddings(s, "b", `{"model":"embed","input":"b"}`)
	waitQueued(t, s, "embed", 1)
	close(b.release)
	for name, ch := range map[string]chan *embedResult{"a": ra, "b": rb} {
		if r := embedAnswer(t, ch); r.code != 200 {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	if n := s.slots.inUse(); n != 0 {
		t.Errorf("%d slots still taken after every request ended", n)
	}
	// With the queue full, the next request over the limit is refused at once.
	b2 := newScriptedEmbedder()
	b2.hold = 'a'
	s = newLimitServer(t, b2, 1, 0, time.Hour)
	ra = postEmbeddings(s, "a", `{"model":"embed","input":"a"}`)
	<-b2.started
	if r := embedAnswer(t, postEmbeddings(s, "b", `{"model":"embed","input":"b"}`)); r.code != 503 ||
		!strings.Contains(r.body, `"code":"server_overloaded"`) || r.retryAfter == "" {
		t.Errorf("b without a queue: %d %s", r.code, r.body)
	}
	close(b2.release)
	if r := embedAnswer(t, ra); r.code != 200 {
		t.Errorf("a: %d %s", r.code, r.body)
	}
}

// An input that finds every worker busy makes its request wait in the model's queue
// (with the queue on); once woken, only the inputs not yet embedded run again.
func TestEmbeddingsWaitForBusyWorkers(t *testing.T) {
	b := newScriptedEmbedder()
	b.setBusy('b', true)
	s := newQueueServer(t, b, 2, time.Hour)
	res := postEmbeddings(s, "q", `{"model":"embed","input":["a","b"]}`)
	waitQueued(t, s, "embed", 1)
	b.setBusy('b', false)
	s.released("embed") // a request of the model ended: its queue's head tries again
	if r := embedAnswer(t, res); r.code != 200 || r.worker != "w-a" {
		t.Fatalf("%d %s, X-Turbine-Worker %q", r.code, r.body, r.worker)
	}
	var ids []string
	for range 3 {
		ids = append(ids, <-b.started)
	}
	n := map[string]int{}
	for _, id := range ids {
		n[id]++
	}
	if n["q-0"] != 1 || n["q-1"] != 2 || len(b.started) != 0 {
		t.Errorf("embedded %v, want q-0 once and q-1 twice", ids)
	}
}
