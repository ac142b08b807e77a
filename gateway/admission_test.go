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

// slotBackend admits at most slots streams at once; others get ErrAllBusy. A stream
// holds its slot until closed. Every stream blocks on its first Recv until release is
// closed, then finishes.
type slotBackend struct {
	*fakeBackend
	mu      sync.Mutex
	slots   int
	calls   int
	started chan string // request id of every admitted stream
	release chan struct{}
}

func newSlotBackend(slots int) *slotBackend {
	return &slotBackend{fakeBackend: newFakeBackend(), slots: slots, started: make(chan string, 64), release: make(chan struct{})}
}

func (b *slotBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.slots == 0 {
		return nil, fmt.Errorf("%w: test", ErrAllBusy)
	}
	b.slots--
	b.started <- req.RequestID
	return &slotStream{b: b}, nil
}

type slotStream struct {
	b    *slotBackend
	once sync.Once
	done bool
}

func (s *slotStream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	if s.done {
		return nil, fmt.Errorf("slot stream: Recv after the finish")
	}
	select {
	case <-s.b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.done = true
	return finish("ok", "stop").chunk, nil
}

func (s *slotStream) WorkerID() string { return "worker-a" }

func (s *slotStream) Close() {
	s.once.Do(func() {
		s.b.mu.Lock()
		s.b.slots++
		s.b.mu.Unlock()
	})
}

func newQueueServer(t *testing.T, b Backend, depth int, timeout time.Duration) *Server {
	t.Helper()
	// A retry period of an hour: only a stream's end (or the timeout) wakes the queue.
	s, err := New(Config{Now: func() time.Time { return testTime }, QueueDepth: depth, QueueTimeout: timeout, QueueRetry: time.Hour},
		b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// post runs one chat request with request id id in the background.
func post(s *Server, id string) chan *httpResult {
	out := make(chan *httpResult, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, chatPath, strings.NewReader(`{"model":"tiny",`+hiChat+`}`))
		req.Header.Set("X-Request-Id", id)
		rr := newRecorder()
		s.ServeHTTP(rr, req)
		out <- &httpResult{code: rr.Code, body: rr.Body.String(), retryAfter: rr.Header().Get("Retry-After")}
	}()
	return out
}

type httpResult struct {
	code       int
	body       string
	retryAfter string
}

// waitQueued waits until n requests of model wait in s's queue (an event: the queue's
// own length, polled without a timing assertion).
func waitQueued(t *testing.T, s *Server, model string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.queue.len(model) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s holds %d, want %d", model, s.queue.len(model), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestQueueOffRejectsAtOnce(t *testing.T) {
	b := newSlotBackend(0)
	s := newTestServer(t, b)
	r := <-post(s, "a")
	if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, "all_workers_busy") {
		t.Fatalf("got %d Retry-After=%q %s", r.code, r.retryAfter, r.body)
	}
	if got := metricValue(s, `turbine_frontend_rejected_requests_total{model="tiny",reason="all_workers_busy"}`); got != "1" {
		t.Errorf("rejected = %q, want 1", got)
	}
}

// TestQueueFIFO: one slot; a holds it, b and c queue; when a ends b gets the slot, then c,
// in arrival order; d finds the queue full (depth 2) and gets 503 at once.
func TestQueueFIFO(t *testing.T) {
	b := newSlotBackend(1)
	s := newQueueServer(t, b, 2, time.Hour)
	ra := post(s, "a")
	if id := <-b.started; id != "a" {
		t.Fatalf("first admitted %s", id)
	}
	rb := post(s, "b")
	waitQueued(t, s, "tiny", 1)
	rc := post(s, "c")
	waitQueued(t, s, "tiny", 2)
	if r := <-post(s, "d"); r.code != 503 || !strings.Contains(r.body, "all_workers_busy") {
		t.Fatalf("d with a full queue: %d %s", r.code, r.body)
	}
	close(b.release) // every admitted stream finishes at once from now on
	for _, want := range []string{"b", "c"} {
		if id := <-b.started; id != want {
			t.Fatalf("admitted %s, want %s", id, want)
		}
	}
	for name, ch := range map[string]chan *httpResult{"a": ra, "b": rb, "c": rc} {
		if r := <-ch; r.code != 200 {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	if got := metricValue(s, `turbine_frontend_queued_requests_total{model="tiny"}`); got != "2" {
		t.Errorf("queued = %q, want 2", got)
	}
	if got := metricValue(s, `turbine_frontend_queue_depth{model="tiny"}`); got != "0" {
		t.Errorf("queue depth = %q, want 0", got)
	}
}

func TestQueueTimeout(t *testing.T) {
	b := newSlotBackend(0)
	s := newQueueServer(t, b, 4, time.Millisecond)
	r := <-post(s, "a")
	if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, "all_workers_busy") {
		t.Fatalf("got %d %s", r.code, r.body)
	}
	if s.queue.len("tiny") != 0 {
		t.Error("the timed-out request is still queued")
	}
}

// TestDrain: a running request finishes after Drain; new ones and queued ones get 503
// service_draining with Retry-After; /health says draining, /live stays 200; WaitIdle
// returns once the running request has ended.
func TestDrain(t *testing.T) {
	b := newSlotBackend(1)
	s := newQueueServer(t, b, 4, time.Hour)
	running := post(s, "a")
	<-b.started
	queued := post(s, "b")
	waitQueued(t, s, "tiny", 1)

	s.Drain()
	for name, r := range map[string]*httpResult{"queued": <-queued, "new": <-post(s, "c")} {
		if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, "service_draining") {
			t.Errorf("%s request while draining: %d Retry-After=%q %s", name, r.code, r.retryAfter, r.body)
		}
	}
	if rr := serve(s, http.MethodGet, "/health", ""); rr.Code != 503 || !strings.Contains(rr.Body.String(), `"draining"`) {
		t.Errorf("/health while draining: %d %s", rr.Code, rr.Body.String())
	}
	if rr := serve(s, http.MethodGet, "/live", ""); rr.Code != 200 {
		t.Errorf("/live while draining: %d", rr.Code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitIdle(ctx); err == nil {
		t.Fatal("WaitIdle returned nil with a request running")
	}
	close(b.release)
	if r := <-running; r.code != 200 {
		t.Errorf("running request: %d %s", r.code, r.body)
	}
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// fakeAdmin is a BusyAdmin over fakeBackend's models.
type fakeAdmin struct {
	*fakeBackend
	st  BusyStatus
	set []BusyUpdate
}

func (a *fakeAdmin) SetBusyThresholds(_ context.Context, model string, u BusyUpdate) error {
	if model != "tiny" {
		return fmt.Errorf("%w: %q", ErrUnknownModel, model)
	}
	a.set = append(a.set, u)
	if u.KVUsage != nil {
		a.st.KVUsage = *u.KVUsage
	}
	if u.PrefillTokens != nil {
		a.st.PrefillTokens = *u.PrefillTokens
	}
	return nil
}

func (a *fakeAdmin) BusyStatus(_ context.Context, model string) (*BusyStatus, error) {
	if model != "tiny" {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, model)
	}
	st := a.st
	st.Model = model
	return &st, nil
}

func TestAdminBusyThresholds(t *testing.T) {
	a := &fakeAdmin{fakeBackend: newFakeBackend(), st: BusyStatus{Workers: []BusyWorker{{WorkerID: "w0", Ready: true}}}}
	s := newTestServer(t, a)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"set both", "POST", "/admin/busy_thresholds", `{"model":"tiny","kv_usage":0.5,"prefill_tokens":100}`, 200, `"kv_usage":0.5,"prefill_tokens":100`},
		{"set one", "POST", "/admin/busy_thresholds", `{"model":"tiny","prefill_tokens":0}`, 200, `"kv_usage":0.5,"prefill_tokens":0`},
		{"get", "GET", "/admin/busy_thresholds?model=tiny", ``, 200, `"workers":[{"worker_id":"w0","ready":true,"busy":false`},
		{"get without model", "GET", "/admin/busy_thresholds", ``, 400, `"param":"model"`},
		{"unknown model", "POST", "/admin/busy_thresholds", `{"model":"nope","kv_usage":0.5}`, 404, `model_not_found`},
		{"nothing to set", "POST", "/admin/busy_thresholds", `{"model":"tiny"}`, 400, `"param":"kv_usage"`},
		{"negative usage", "POST", "/admin/busy_thresholds", `{"model":"tiny","kv_usage":-1}`, 400, `"param":"kv_usage"`},
		{"usage above 1", "POST", "/admin/busy_thresholds", `{"model":"tiny","kv_usage":1.5}`, 400, `"param":"kv_usage"`},
		{"negative tokens", "POST", "/admin/busy_thresholds", `{"model":"tiny","prefill_tokens":-5}`, 400, `"param":"prefill_tokens"`},
		{"bad json", "POST", "/admin/busy_thresholds", `{`, 400, `invalid_json`},
		{"wrong method", "DELETE", "/admin/busy_thresholds", ``, 405, `method_not_allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := serve(s, tc.method, tc.path, tc.body)
			if rr.Code != tc.code || !strings.Contains(rr.Body.String(), tc.want) {
				t.Errorf("%s %s: %d %s, want %d containing %s", tc.method, tc.path, rr.Code, rr.Body.String(), tc.code, tc.want)
			}
		})
	}
	if len(a.set) != 2 || a.set[1].KVUsage != nil || *a.set[1].PrefillTokens != 0 {
		b, _ := json.Marshal(a.set)
		t.Errorf("updates passed on: %s", b)
	}
}

func TestAdminWithoutBusyAdmin(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	if rr := serve(s, "GET", "/admin/busy_thresholds?model=tiny", ""); rr.Code != 404 {
		t.Errorf("got %d %s", rr.Code, rr.Body.String())
	}
}

// TestDrainCutRequestSaysDraining: a request that its worker hands back, migratable, while
// the server drains (the drain period is over and no worker is left to take it) answers
// 503 service_draining — the server is shutting down — not 502 "a worker failed"; a
// stream gets that error frame. Outside a drain the same chunk stays a 502.
func TestDrainCutRequestSaysDraining(t *testing.T) {
	handedBack := &messages.TokenChunk{FinishReason: "error", Migratable: true,
		Error: "worker w0: engine request ended by the drain; not migrated: no live worker"}
	for _, tc := range []struct {
		name   string
		drain  bool
		stream bool
		code   int
		want   string
	}{
		{"drained, whole answer", true, false, 503, `"code":"service_draining"`},
		{"drained, stream", true, true, 200, `"code":"service_draining"`},
		{"not draining", false, false, 502, `"code":"backend_unavailable"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend()
			s := newTestServer(t, b)
			b.steps = []step{tokens("Hel"), {chunk: handedBack, before: func() {
				if tc.drain {
					s.Drain()
				}
			}}}
			body := `{"model":"tiny","prompt":"hi","max_tokens":8}`
			if tc.stream {
				body = `{"model":"tiny","prompt":"hi","max_tokens":8,"stream":true}`
			}
			rr := serve(s, http.MethodPost, "/v1/completions", body)
			if rr.Code != tc.code || !strings.Contains(rr.Body.String(), tc.want) {
				t.Fatalf("%d %s; want %d with %s", rr.Code, rr.Body.String(), tc.code, tc.want)
			}
		})
	}
}
