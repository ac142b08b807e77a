package gateway

import (
	"context"
	"encoding/json"
	"errors"
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
	// With one model served, a GET may leave the model out (as /admin/planner's).
	one := &fakeAdmin{fakeBackend: newFakeBackend(), st: a.st}
	one.cards = one.cards[:1]
	if rr := serve(newTestServer(t, one), "GET", "/admin/busy_thresholds", ""); rr.Code != 200 || !strings.Contains(rr.Body.String(), `"worker_id":"w0"`) {
		t.Errorf("GET without a model, one model served: %d %s", rr.Code, rr.Body.String())
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
	handedBack := &messages.TokenChunk{FinishReason: "error", Fault: messages.Fault_FAULT_ENGINE_ERROR,
		Error: "worker w0: engine request ended by the drain; not migrated: no live worker"}
	// What the frontend's stream returns when the handed-back request found no worker to
	// migrate to (503 no_live_workers outside a drain).
	notRerouted := &APIError{Kind: KindNoWorkers, Message: "The request could not be routed to a worker in time; retry later.",
		Cause: fmt.Errorf("%w: no live worker", ErrNoWorkers)}
	for _, tc := range []struct {
		name     string
		drain    bool
		stream   bool
		rerouted bool // the hand-back surfaces as a failed re-route, not an error chunk
		code     int
		want     string
	}{
		{"drained, whole answer", true, false, false, 503, `"code":"service_draining"`},
		{"drained, stream", true, true, false, 200, `"code":"service_draining"`},
		{"not draining", false, false, false, 502, `"code":"backend_unavailable"`},
		{"drained, not rerouted, whole answer", true, false, true, 503, `"code":"service_draining"`},
		{"drained, not rerouted, stream", true, true, true, 200, `"code":"service_draining"`},
		{"not rerouted, not draining", false, false, true, 503, `"code":"no_live_workers"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend()
			s := newTestServer(t, b)
			last := step{chunk: handedBack}
			if tc.rerouted {
				last = step{err: notRerouted}
			}
			last.before = func() {
				if tc.drain {
					s.Drain()
				}
			}
			b.steps = []step{tokens("Hel"), last}
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

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		inUse, limit int
		queue        bool
		want         admission
	}{
		{0, 0, false, admitRun},       // no limit
		{5000, 0, false, admitRun},    // no limit, however many run
		{0, 1, false, admitRun},       // a slot free
		{3, 4, true, admitRun},        // the last slot free
		{4, 4, false, admitRefuse},    // all taken, no queue
		{4, 4, true, admitWait},       // all taken, queue on
		{5, 4, false, admitRefuse},    // more than the limit (cannot happen; still refused)
		{1024, 1024, true, admitWait}, // the default limit, all taken
	} {
		if got := admit(tc.inUse, tc.limit, tc.queue); got != tc.want {
			t.Errorf("admit(%d, %d, queue %v) = %d, want %d", tc.inUse, tc.limit, tc.queue, got, tc.want)
		}
	}
}

// TestSlots runs a script of acquires and releases over two tickets on 2 slots and on
// no limit, checking what each step reports and the slots in use after it.
func TestSlots(t *testing.T) {
	type op struct {
		ticket  int    // 0, 1 or 2
		act     string // "acquire" or "release"
		want    bool   // acquire's result
		inUse   int
		freedBy int // freed callbacks so far
	}
	for _, tc := range []struct {
		name  string
		limit int
		ops   []op
	}{
		{"two slots", 2, []op{
			{0, "acquire", true, 1, 0},
			{0, "acquire", true, 1, 0}, // a ticket holds one slot at most
			{1, "acquire", true, 2, 0},
			{2, "acquire", false, 2, 0}, // all taken
			{2, "release", false, 2, 0}, // a ticket without a slot gives nothing back
			{0, "release", false, 1, 1},
			{0, "release", false, 1, 1}, // released once only
			{2, "acquire", true, 2, 1},
			{1, "release", false, 1, 2},
			{2, "release", false, 0, 3},
		}},
		{"no limit", 0, []op{
			{0, "acquire", true, 0, 0},
			{1, "acquire", true, 0, 0},
			{2, "acquire", true, 0, 0},
			{1, "release", false, 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			freed := 0
			l := newSlots(tc.limit, func() { freed++ })
			tickets := []*ticket{{slots: l}, {slots: l}, {slots: l}}
			for i, o := range tc.ops {
				got := false
				if o.act == "acquire" {
					got = tickets[o.ticket].acquire()
				} else {
					tickets[o.ticket].release()
				}
				if got != o.want || l.inUse() != o.inUse || freed != o.freedBy {
					t.Fatalf("step %d (%s ticket %d): got %v, %d in use, %d freed; want %v, %d, %d",
						i, o.act, o.ticket, got, l.inUse(), freed, o.want, o.inUse, o.freedBy)
				}
			}
		})
	}
}

// TestSlotsAdmit: a request arriving when the one slot is taken waits with the queue on,
// is refused without it, and takes no slot either way.
func TestSlotsAdmit(t *testing.T) {
	l := newSlots(1, nil)
	for i, step := range []struct {
		queue bool
		want  admission
		inUse int
	}{
		{true, admitRun, 1},
		{true, admitWait, 1},
		{false, admitRefuse, 1},
	} {
		if got := l.admit(step.queue); got != step.want || l.inUse() != step.inUse {
			t.Fatalf("step %d: admit(queue %v) = %d with %d in use, want %d with %d", i, step.queue, got, l.inUse(), step.want, step.inUse)
		}
	}
	l.release()
	if got := l.admit(false); got != admitRun || l.inUse() != 1 {
		t.Fatalf("after a release: %d with %d in use", got, l.inUse())
	}
	if got := (*slots)(nil).admit(false); got != admitRun {
		t.Fatalf("no limit: %d", got)
	}
}

func TestQueueRefusal(t *testing.T) {
	why := fmt.Errorf("waited")
	for _, tc := range []struct {
		name            string
		triedBusy, full bool
		overloaded      bool // else all workers busy
	}{
		{"never routed, no slot free: the server's bound held it back", false, true, true},
		{"never routed, a slot free: the requests ahead waited for workers", false, false, false},
		{"routed and found every worker busy, no slot free", true, true, false},
		{"routed and found every worker busy, slots free", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := queueRefusal(tc.triedBusy, tc.full, why)
			if errors.Is(err, errOverloaded) != tc.overloaded || errors.Is(err, ErrAllBusy) == tc.overloaded {
				t.Errorf("got %v", err)
			}
			if !errors.Is(err, why) {
				t.Errorf("%v does not wrap the reason", err)
			}
		})
	}
}

// answerOf returns the result of a request expected to be answered without waiting for
// other requests to end; a request that hangs fails the test (after a guard of 10 s,
// not a timing assertion: the answer comes at once or never).
func answerOf(t *testing.T, ch chan *httpResult) *httpResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer: the request waits instead of being refused")
		return nil
	}
}

func newLimitServer(t *testing.T, b Backend, limit, depth int, timeout time.Duration) *Server {
	t.Helper()
	// A retry period of an hour: only a freed slot, a stream's end or the timeout wakes
	// the queue.
	s, err := New(Config{Now: func() time.Time { return testTime }, MaxConcurrentRequests: limit, QueueDepth: depth,
		QueueTimeout: timeout, QueueRetry: time.Hour}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConcurrencyLimitRefusesAtOnce: one slot, workers free; while a runs, b is answered
// 503 server_overloaded with Retry-After without reaching the Backend, and counted; once
// a ended, c runs.
func TestConcurrencyLimitRefusesAtOnce(t *testing.T) {
	b := newSlotBackend(8)
	s := newLimitServer(t, b, 1, 0, time.Hour)
	ra := post(s, "a")
	<-b.started
	r := answerOf(t, post(s, "b"))
	if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, `"code":"server_overloaded"`) ||
		!strings.Contains(r.body, `"type":"server_error"`) {
		t.Fatalf("b over the limit: %d Retry-After=%q %s", r.code, r.retryAfter, r.body)
	}
	if got := metricValue(s, `turbine_frontend_rejected_requests_total{model="",reason="server_overloaded"}`); got != "1" {
		t.Errorf("rejected = %q, want 1", got)
	}
	close(b.release)
	if r := <-ra; r.code != 200 {
		t.Fatalf("a: %d %s", r.code, r.body)
	}
	if r := <-post(s, "c"); r.code != 200 {
		t.Fatalf("c after a ended: %d %s", r.code, r.body)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls != 2 {
		t.Errorf("Backend called %d times, want 2 (a and c)", b.calls)
	}
}

// TestConcurrencyLimitQueues: one slot and a queue of 2; while a runs, b and c wait,
// d finds the queue full and gets 503 server_overloaded; when a ends b gets the slot,
// then c, in arrival order.
func TestConcurrencyLimitQueues(t *testing.T) {
	b := newSlotBackend(8)
	s := newLimitServer(t, b, 1, 2, time.Hour)
	ra := post(s, "a")
	<-b.started
	rb := post(s, "b")
	waitQueued(t, s, "tiny", 1)
	rc := post(s, "c")
	waitQueued(t, s, "tiny", 2)
	if r := answerOf(t, post(s, "d")); r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, `"code":"server_overloaded"`) {
		t.Fatalf("d with a full queue and no slot: %d %s", r.code, r.body)
	}
	if got := metricValue(s, `turbine_frontend_rejected_requests_total{model="tiny",reason="server_overloaded"}`); got != "1" {
		t.Errorf("rejected = %q, want 1", got)
	}
	close(b.release)
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
	if n := s.slots.inUse(); n != 0 {
		t.Errorf("%d slots still taken after every request ended", n)
	}
}

// TestConcurrencyLimitQueueTimeout: a request that waited its QueueTimeout for a slot
// gets 503 server_overloaded (the server's limit held it back, not busy workers), and
// leaves the queue.
func TestConcurrencyLimitQueueTimeout(t *testing.T) {
	b := newSlotBackend(8)
	s := newLimitServer(t, b, 1, 4, time.Millisecond)
	ra := post(s, "a")
	<-b.started
	r := answerOf(t, post(s, "b"))
	if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, `"code":"server_overloaded"`) {
		t.Fatalf("b after its wait: %d %s", r.code, r.body)
	}
	if s.queue.len("tiny") != 0 {
		t.Error("the timed-out request is still queued")
	}
	close(b.release)
	if r := <-ra; r.code != 200 {
		t.Fatalf("a: %d %s", r.code, r.body)
	}
}

// TestConcurrencyLimitBusyHeadKeepsOrder: two slots, one worker slot. a runs; b holds a
// slot, finds the worker busy and queues (giving its slot back); c arrives with a free
// slot but joins the queue's end behind b; when a ends, b runs before c.
func TestConcurrencyLimitBusyHeadKeepsOrder(t *testing.T) {
	b := newSlotBackend(1)
	s := newLimitServer(t, b, 2, 4, time.Hour)
	ra := post(s, "a")
	<-b.started
	rb := post(s, "b")
	waitQueued(t, s, "tiny", 1)
	if n := s.slots.inUse(); n != 1 {
		t.Fatalf("%d slots taken while b waits, want 1 (a's)", n)
	}
	rc := post(s, "c")
	waitQueued(t, s, "tiny", 2)
	close(b.release)
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
}

func TestConfigMaxConcurrentRequests(t *testing.T) {
	if _, err := New(Config{MaxConcurrentRequests: -1}, newFakeBackend()); err == nil ||
		!strings.Contains(err.Error(), "MaxConcurrentRequests") {
		t.Fatalf("negative limit: %v", err)
	}
}
