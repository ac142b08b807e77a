package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// scriptedWorker is a worker actor whose next token is 1000 plus its position in the whole
// sequence (prompt and output), so that a continuation (prompt plus produced tokens)
// goes on exactly where the first attempt stopped. After failAfter tokens (when ≥ 0) it
// fails as fault says: "error" sends a migratable error chunk, "fatal" a non-migratable
// one, "stop" stops the actor, "stall" goes silent. It acknowledges each Generate
// first (messages.GenerateAccepted), as a worker does, unless fault is "lost": then
// the Generate never reached it (it records it, and does nothing else); with "late" it
// reaches it (acknowledged and run) once held is closed.
type scriptedWorker struct {
	failAfter int
	fault     string
	cached    int32         // prompt tokens it reports cached; 0: the whole prompt
	held      chan struct{} // a "late" Generate's way to the worker
	// stopGate, when set, holds a "stop" fault's Stop until it is closed: a test closes
	// it once its consumer has the chunks sent before, which the termination notice
	// (a system message, delivered first) could otherwise overtake.
	stopGate chan struct{}

	mu        sync.Mutex
	generates []*messages.Generate
	cancels   []string
	releases  []*messages.ReleaseKv
}

func (w *scriptedWorker) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *messages.Generate:
		w.mu.Lock()
		w.generates = append(w.generates, m)
		w.mu.Unlock()
		switch w.fault {
		case "lost":
			return
		case "late":
			// held on the way: it arrives (and is acknowledged) when held is closed
			held, self := w.held, c.Self()
			go func() { <-held; c.ActorSystem().Root.Send(self, &lateGenerate{m}) }()
			return
		}
		c.Send(actor.NewPID(m.ReplyTo.Address, m.ReplyTo.Id), &messages.GenerateAccepted{RequestId: m.RequestId})
		w.run(c, m)
	case *lateGenerate:
		c.Send(actor.NewPID(m.g.ReplyTo.Address, m.g.ReplyTo.Id), &messages.GenerateAccepted{RequestId: m.g.RequestId})
		w.run(c, m.g)
	case *messages.Cancel:
		w.mu.Lock()
		w.cancels = append(w.cancels, m.RequestId)
		w.mu.Unlock()
	case *messages.ReleaseKv:
		w.mu.Lock()
		w.releases = append(w.releases, m)
		w.mu.Unlock()
	}
}

// kvParamsFor is the transfer parameters a scripted prefill worker returns for request id.
func kvParamsFor(id string) string {
	return `{"do_remote_prefill":true,"remote_block_ids":[1,2],"remote_request_id":"` + id + `"}`
}

func (w *scriptedWorker) run(c actor.Context, m *messages.Generate) {
	to := actor.NewPID(m.ReplyTo.Address, m.ReplyTo.Id)
	send := func(ch *messages.TokenChunk) { ch.RequestId = m.RequestId; c.Send(to, ch) }
	limit := int(m.Sampling.MaxTokens)
	decode := m.Sampling.GetDisagg().GetLeg() == messages.Leg_LEG_DECODE
	for i := 0; i < limit; i++ {
		// "kv" fails decode legs only (their engine could not load the prompt's KV);
		// "kvall" fails every request with that error.
		if i == w.failAfter && (w.fault != "kv" || decode) && (w.fault != "stall-once" || len(w.generated()) == 1) {
			switch w.fault {
			case "error":
				send(&messages.TokenChunk{Index: uint32(i), FinishReason: "error", Error: "engine: process died", Fault: messages.Fault_FAULT_ENGINE_ERROR})
			case "kv", "kvall":
				send(&messages.TokenChunk{Index: uint32(i), FinishReason: "error", Fault: messages.Fault_FAULT_KV_TRANSFER,
					Error: "engine: " + engines.ErrKVTransfer.Error() + ": vllm: engine answered 503 KVTransferError: KV transfer from p0 failed: EOF"})
			case "fatal":
				send(&messages.TokenChunk{Index: uint32(i), FinishReason: "error", Error: "engine: bad request"})
			case "stop":
				if w.stopGate == nil {
					c.Stop(c.Self())
					break
				}
				sys, self := c.ActorSystem(), c.Self()
				go func() { <-w.stopGate; sys.Root.Stop(self) }()
			}
			return
		}
		ch := &messages.TokenChunk{Index: uint32(i), TokenIds: []uint32{uint32(1000 + len(m.TokenIds) + i)}}
		if i == limit-1 {
			ch.FinishReason, ch.PromptTokens, ch.CompletionTokens, ch.CachedTokens = "length", int32(len(m.TokenIds)), int32(limit), int32(len(m.TokenIds))
			if w.cached > 0 {
				ch.CachedTokens = w.cached
			}
			if m.Sampling.GetDisagg().GetLeg() == messages.Leg_LEG_PREFILL && m.Sampling.GetDisagg().GetBootstrapHost() == "" {
				ch.KvTransferParams = kvParamsFor(m.RequestId)
			}
		}
		send(ch)
	}
}

// generated is the Generates the worker took.
func (w *scriptedWorker) generated() []*messages.Generate {
	g, _ := w.calls()
	return g
}

func (w *scriptedWorker) calls() ([]*messages.Generate, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.generates), slices.Clone(w.cancels)
}

func (w *scriptedWorker) released() []*messages.ReleaseKv {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.releases)
}

// fakeRouter picks the first of its workers not excluded and records every call. With
// prefill workers it answers like a disaggregated router: the first prefill worker not
// excluded gets the prefill leg ("remote") unless local says otherwise, the request asks
// for local prefill, or none is left (then enforce refuses the request).
type fakeRouter struct {
	ids  []string
	pids map[string]*actor.PID

	prefillIDs []string                // prefill workers, in preference order
	local      messages.DisaggDecision // a local decision to answer instead of "remote" (DISAGG_AGGREGATED: none)
	bootstrap  bool                    // remote routes name an SGLang bootstrap address
	enforce    bool
	// callErr, when set, fails every Route call after the router recorded the request:
	// the call timed out while the router was busy, and the answer never came back.
	callErr error
	// refuse, when not ROUTE_OK, is the outcome of every Route call (nothing recorded).
	refuse messages.RouteOutcome
	// loraPath is every route's RouteResponse.lora_path.
	loraPath string
	// onRoute, when set, runs at the start of each Route call (the n-th, from 0) before
	// it answers.
	onRoute func(n int)

	mu      sync.Mutex
	routes  []*messages.RouteRequest
	routed  []string // ids of the routes that got a worker, and of their prefill legs
	granted []string // ids of the routes that got a worker
	acked   []string // Started
	freed   []string
	prefill []string
}

func (r *fakeRouter) Route(rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.onRoute != nil {
		r.onRoute(len(r.routes))
	}
	r.routes = append(r.routes, rr)
	if r.callErr != nil {
		r.routed = append(r.routed, rr.RequestId)
		return nil, r.callErr
	}
	if r.refuse != messages.RouteOutcome_ROUTE_OK {
		return &messages.RouteResponse{Outcome: r.refuse, Error: "refused: " + r.refuse.Label()}, nil
	}
	for _, id := range r.ids {
		if slices.Contains(rr.ExcludeWorkers, id) {
			continue
		}
		p := r.pids[id]
		resp := &messages.RouteResponse{WorkerId: id, Worker: &messages.ActorRef{Address: p.Address, Id: p.Id}, LoraPath: r.loraPath,
			WorkerAcknowledges: true, PrefillWorkerAcknowledges: true}
		if r.prefillIDs == nil && !r.enforce {
			r.routed = append(r.routed, rr.RequestId)
			r.granted = append(r.granted, rr.RequestId)
			return resp, nil
		}
		prefill := ""
		for _, pid := range r.prefillIDs {
			if !slices.Contains(rr.ExcludePrefillWorkers, pid) {
				prefill = pid
				break
			}
		}
		switch {
		case rr.LocalPrefill:
			resp.DisaggDecision = messages.DisaggDecision_DISAGG_LOCAL_REQUESTED
		case prefill == "" && r.enforce:
			return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS, Error: "no live prefill worker"}, nil
		case prefill == "":
			resp.DisaggDecision = messages.DisaggDecision_DISAGG_LOCAL_NO_PREFILL_WORKERS
		case r.local != messages.DisaggDecision_DISAGG_AGGREGATED:
			resp.DisaggDecision = r.local
		default:
			pp := r.pids[prefill]
			resp.DisaggDecision, resp.PrefillWorkerId, resp.PrefillRequestId = messages.DisaggDecision_DISAGG_REMOTE, prefill, rr.RequestId+"/p"
			resp.PrefillWorker = &messages.ActorRef{Address: pp.Address, Id: pp.Id}
			if r.bootstrap {
				resp.PrefillBootstrapHost, resp.PrefillBootstrapPort = "10.0.0.7", 8998
			}
			r.routed = append(r.routed, resp.PrefillRequestId)
		}
		r.routed = append(r.routed, rr.RequestId)
		r.granted = append(r.granted, rr.RequestId)
		return resp, nil
	}
	return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS, Error: "every worker is excluded"}, nil
}

func (r *fakeRouter) Started(id string, router *messages.ActorRef) {
	r.mu.Lock()
	r.acked = append(r.acked, id)
	r.mu.Unlock()
}

func (r *fakeRouter) PrefillDone(id string) {
	r.mu.Lock()
	r.prefill = append(r.prefill, id)
	r.mu.Unlock()
}
func (r *fakeRouter) Free(id string) { r.mu.Lock(); r.freed = append(r.freed, id); r.mu.Unlock() }

// harness is a stream over fake workers w0, w1, … (and prefill workers p0, p1, …) in
// one actor system, on a fakeClock: a stall timer fires only where harnessOpts.stallAfter
// says, a prefill release wait only when the test fires it, and a receiver's grace after
// its worker's termination notice at once (in one actor system the chunks a worker sent
// before it stopped are in the receiver's mailbox before the grace's workerGone).
type harness struct {
	workers  []*scriptedWorker
	prefill  []*scriptedWorker
	pids     []*actor.PID
	router   *fakeRouter
	clock    *fakeClock
	stream   *stream
	rec      *fakeRecorder
	migrated []string
	startErr error
}

// fakeRecorder keeps a stream's metric events as "event:model/label" strings.
type fakeRecorder struct {
	h      *harness
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) add(e string) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }
func (r *fakeRecorder) migrated(model string, fault messages.Fault) {
	r.h.migrated = append(r.h.migrated, model+"/"+fault.Label())
}
func (r *fakeRecorder) decided(model string, decision messages.DisaggDecision) {
	r.add("decided:" + model + "/" + decision.Label())
}
func (r *fakeRecorder) prefillRetried(model string, fault messages.Fault) {
	r.add("retried:" + model + "/" + fault.Label())
}
func (r *fakeRecorder) released(model string) { r.add("released:" + model) }
func (r *fakeRecorder) notMoved(model string) { r.add("not_moved:" + model) }
func (r *fakeRecorder) prefillLeg(model string, d time.Duration) {
	r.add("prefill_leg:" + model)
}
func (r *fakeRecorder) transferWait(model string, d time.Duration) {
	r.add("transfer_wait:" + model)
}

func (r *fakeRecorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func newHarness(t *testing.T, limit int, stall time.Duration, workers ...*scriptedWorker) *harness {
	t.Helper()
	h := buildHarness(t, harnessOpts{limit: limit, stall: stall}, workers...)
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	return h
}

// harnessOpts configure buildHarness.
type harnessOpts struct {
	limit int
	stall time.Duration // Config.StallTimeout
	// stallAfter, with stall set, are the waits that run out: for each k, the stream's
	// first wait for a chunk once k chunks were handed out ends with its stall timer
	// firing (the worker went silent after its k-th chunk). No other stall timer fires.
	stallAfter []int
	// acceptFires are the accept timers (Config.AcceptTimeout, 1 s), counted from 0 in
	// the order armed, that fire at once (their leg's Generate was lost); no other does.
	acceptFires []int
	onRoute     func(n int)             // fakeRouter.onRoute
	prefill     []*scriptedWorker       // prefill workers p0, p1, …: the router disaggregates
	local       messages.DisaggDecision // fakeRouter.local
	bootstrap   bool
	enforce     bool
	callErr     error                 // fakeRouter.callErr
	refuse      messages.RouteOutcome // fakeRouter.refuse
	// structured constrains the request's output (SamplingParams.structured).
	structured *messages.StructuredOutput
	// lora names the request's LoRA adapter (SamplingParams.lora_name), onDemand is
	// Config.LoraOnDemand, and loraPath the lora_path of every route's answer.
	lora, loraPath string
	onDemand       bool
}

// buildHarness starts the stream over workers; a start error is kept in startErr.
func buildHarness(t *testing.T, o harnessOpts, workers ...*scriptedWorker) *harness {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	h := &harness{workers: workers, prefill: o.prefill, router: &fakeRouter{pids: map[string]*actor.PID{},
		local: o.local, bootstrap: o.bootstrap, enforce: o.enforce, callErr: o.callErr, refuse: o.refuse, loraPath: o.loraPath,
		onRoute: o.onRoute},
		clock: newFakeClock()}
	stalled := map[int]bool{} // by the stall timers, armed on the goroutine calling Recv
	accepts := 0              // accept timers armed, on the stream's goroutine
	h.clock.atOnce = func(what timerPurpose) bool {
		switch what {
		case timerTerminatedGrace:
			return true
		case timerAccept:
			accepts++
			return slices.Contains(o.acceptFires, accepts-1)
		case timerStall:
			k := int(h.stream.index)
			if slices.Contains(o.stallAfter, k) && !stalled[k] {
				stalled[k] = true
				return true
			}
		}
		return false
	}
	for i, w := range workers {
		id := fmt.Sprintf("w%d", i)
		pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
		h.pids = append(h.pids, pid)
		h.router.ids = append(h.router.ids, id)
		h.router.pids[id] = pid
	}
	if o.prefill != nil {
		h.router.prefillIDs = []string{}
	}
	for i, w := range o.prefill {
		id := fmt.Sprintf("p%d", i)
		h.router.prefillIDs = append(h.router.prefillIDs, id)
		h.router.pids[id] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
	}
	seq := 0
	newID := func(c string) string { seq++; return fmt.Sprintf("%s#%d", c, seq) }
	cfg := Config{Credits: 4, MigrationLimit: o.limit, StallTimeout: o.stall, AcceptTimeout: time.Second, PrefillReleaseWait: 200 * time.Millisecond,
		clock: h.clock, LoraOnDemand: o.onDemand}
	req := &gateway.GenerateRequest{Model: "m", RequestID: "req", TokenIDs: []uint32{1, 2, 3, 4, 5},
		Sampling: &messages.SamplingParams{MaxTokens: 8, MinTokens: 6, IgnoreEos: true, Seed: proto.Int64(7),
			Structured: o.structured, LoraName: o.lora}}
	h.rec = &fakeRecorder{h: h}
	h.stream = newStream(sys.Root, h.router, cfg, req, newID, h.rec)
	h.startErr = h.stream.start(req.TokenIDs, req.Sampling)
	t.Cleanup(h.stream.Close)
	return h
}

// drain reads the stream to its end and returns its chunks.
func (h *harness) drain(t *testing.T) []*messages.TokenChunk { return h.drainPolling(t, false) }

// drainPolling is drain; with poll, it takes every chunk Ready has before each Recv, as
// the gateway does for a streaming answer (gateway.ChunkPoller).
func (h *harness) drainPolling(t *testing.T, poll bool) []*messages.TokenChunk {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*messages.TokenChunk
	for {
		if poll {
			if ch := h.stream.Ready(); ch != nil {
				out = append(out, ch)
				continue
			}
		}
		ch, err := h.stream.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv after %d chunks: %v", len(out), err)
		}
		out = append(out, ch)
	}
}

// wantTokens is the undisturbed output of the 5-token prompt with max_tokens 8.
var wantTokens = []uint32{1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012}

func TestStreamMigration(t *testing.T) {
	const stall = 200 * time.Millisecond
	cases := []struct {
		name    string
		limit   int
		workers []*scriptedWorker
		// want: the tokens delivered, the last chunk's finish reason, its error's
		// substring, and the migration reasons counted.
		tokens   []uint32
		finish   string
		errPart  string
		migrated []string
		routes   int
		lost     bool // the stream ends with a migratable fault that was not migrated
		// stallAfter: the waits that run out (harnessOpts.stallAfter); nil: none, the
		// stall timeout never fires however slowly a healthy worker answers.
		stallAfter []int
	}{
		{"undisturbed", 3, []*scriptedWorker{{failAfter: -1}}, wantTokens, "length", "", nil, 1, false, nil},
		{"engine error migrates", 3, []*scriptedWorker{{failAfter: 3, fault: "error"}, {failAfter: -1}},
			wantTokens, "length", "", []string{"m/engine_error"}, 2, false, nil},
		{"worker terminated migrates", 3, []*scriptedWorker{{failAfter: 2, fault: "stop"}, {failAfter: -1}},
			wantTokens, "length", "", []string{"m/worker_terminated"}, 2, false, nil},
		{"stall migrates", 3, []*scriptedWorker{{failAfter: 4, fault: "stall"}, {failAfter: -1}},
			wantTokens, "length", "", []string{"m/stalled"}, 2, false, []int{4}},
		{"two faults in a row", 3, []*scriptedWorker{{failAfter: 1, fault: "error"}, {failAfter: 2, fault: "stop"}, {failAfter: -1}},
			wantTokens, "length", "", []string{"m/engine_error", "m/worker_terminated"}, 3, false, nil},
		{"limit 0 disables", 0, []*scriptedWorker{{failAfter: 3, fault: "error"}, {failAfter: -1}},
			wantTokens[:3], "error", "migration is disabled", nil, 1, true, nil},
		{"limit reached", 1, []*scriptedWorker{{failAfter: 2, fault: "error"}, {failAfter: 2, fault: "error"}, {failAfter: -1}},
			wantTokens[:4], "error", "migration limit (1) is reached", []string{"m/engine_error"}, 2, true, nil},
		{"non-migratable error", 3, []*scriptedWorker{{failAfter: 3, fault: "fatal"}, {failAfter: -1}},
			wantTokens[:3], "error", "engine: bad request", nil, 1, false, nil},
		{"fault after the last token", 3, []*scriptedWorker{{failAfter: 8, fault: "error"}},
			wantTokens, "length", "", nil, 1, false, nil},
	}
	for _, c := range cases {
		for _, poll := range []bool{false, true} {
			name := c.name
			if poll {
				name += ", polled"
			}
			t.Run(name, func(t *testing.T) {
				// Fresh workers for each run: they record what they were sent.
				ws := make([]*scriptedWorker, len(c.workers))
				for i, w := range c.workers {
					ws[i] = &scriptedWorker{failAfter: w.failAfter, fault: w.fault, cached: w.cached}
				}
				h := buildHarness(t, harnessOpts{limit: c.limit, stall: stall, stallAfter: c.stallAfter}, ws...)
				if h.startErr != nil {
					t.Fatal(h.startErr)
				}
				chunks := h.drainPolling(t, poll)
				var got []uint32
				for i, ch := range chunks {
					if ch.Index != uint32(i) {
						t.Fatalf("chunk %d has index %d", i, ch.Index)
					}
					if (ch.FinishReason != "") != (i == len(chunks)-1) {
						t.Fatalf("chunk %d of %d has finish reason %q", i, len(chunks), ch.FinishReason)
					}
					got = append(got, ch.TokenIds...)
				}
				if !slices.Equal(got, c.tokens) {
					t.Errorf("tokens %v, want %v", got, c.tokens)
				}
				last := chunks[len(chunks)-1]
				if last.FinishReason != c.finish || !strings.Contains(last.Error, c.errPart) || (c.errPart == "") != (last.Error == "") {
					t.Errorf("last chunk: finish %q error %q, want %q with %q", last.FinishReason, last.Error, c.finish, c.errPart)
				}
				if (last.Fault != messages.Fault_FAULT_NONE) != c.lost {
					t.Errorf("last chunk fault %v, want one: %v: %+v", last.Fault, c.lost, last)
				}
				if c.finish == "length" && (last.PromptTokens != 5 || last.CompletionTokens != 8 || last.CachedTokens > 5) {
					t.Errorf("usage prompt %d completion %d cached %d, want 5, 8, ≤ 5", last.PromptTokens, last.CompletionTokens, last.CachedTokens)
				}
				if !slices.Equal(h.migrated, c.migrated) {
					t.Errorf("migrations counted %v, want %v", h.migrated, c.migrated)
				}
				// Polled, Recv may never wait, so never arm the timer: it is checked unpolled.
				if !poll {
					if tm := h.clock.await(t, timerStall, 0); tm.d != stall {
						t.Errorf("stall timer of %v, want Config.StallTimeout (%v)", tm.d, stall)
					}
				}
				h.stream.Close()
				h.checkRouter(t, c.routes)
			})
		}
	}
}

// checkRouter checks the continuation requests (prompt plus produced, budgets reduced,
// failed workers excluded; worker i serves attempt i) and checkRoutes.
func (h *harness) checkRouter(t *testing.T, routes int) {
	t.Helper()
	h.checkRoutes(t, routes)
	r := h.router
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rr := range r.routes {
		if i < len(h.workers) && !slices.Equal(rr.ExcludeWorkers, h.router.ids[:i]) {
			t.Errorf("route %d excludes %v, want %v", i, rr.ExcludeWorkers, h.router.ids[:i])
		}
		if i >= len(h.workers) {
			continue
		}
		gens, _ := h.workers[i].calls()
		if len(gens) != 1 {
			t.Fatalf("worker %d got %d Generate, want 1", i, len(gens))
		}
		g := gens[0]
		produced := len(g.TokenIds) - 5
		if g.RequestId != rr.RequestId || !slices.Equal(g.TokenIds[5:], wantTokens[:produced]) ||
			g.Sampling.MaxTokens != int32(8-produced) || g.Sampling.MinTokens != int32(max(6-produced, 0)) ||
			!g.Sampling.IgnoreEos || g.Sampling.GetSeed() != 7 {
			t.Errorf("attempt %d: Generate %v, want the prompt plus %d produced tokens, max_tokens %d, min_tokens %d",
				i, g, produced, 8-produced, max(6-produced, 0))
		}
	}
}

// checkRoutes checks that the router was asked routes times, each route freed once and
// acknowledged once it got a worker.
func (h *harness) checkRoutes(t *testing.T, routes int) {
	t.Helper()
	r := h.router
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.routes) != routes {
		t.Fatalf("%d routes, want %d", len(r.routes), routes)
	}
	ids := slices.Clone(r.routed)
	freed := slices.Clone(r.freed)
	slices.Sort(freed)
	slices.Sort(ids)
	if !slices.Equal(freed, ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Errorf("freed %v, want every routed id once: %v", r.freed, ids)
	}
	for _, rr := range r.routes {
		if !rr.WillAck {
			t.Errorf("route %s without will_ack", rr.RequestId)
		}
	}
	if !slices.Equal(r.acked, r.granted) {
		t.Errorf("acknowledged %v, want every route that got a worker once, in order: %v", r.acked, r.granted)
	}
}

// TestStreamLegNeverAccepted: for a Generate that never reached its worker (no
// acknowledgement within the accept timeout) another worker is asked for; the router
// names one, so the lost leg is cancelled there, its id freed, and the request migrates
// without that worker; an acknowledgement stops its leg's timer; the next leg is
// bounded again.
func TestStreamLegNeverAccepted(t *testing.T) {
	cases := []struct {
		name     string
		faults   []string // the workers in routing order: "" undisturbed, "error" after 3 tokens, "lost"
		fires    []int
		migrated []string
	}{
		{"lost at once", []string{"lost", ""}, []int{0}, []string{"m/stalled"}},
		{"lost after a migration", []string{"error", "lost", ""}, []int{1}, []string{"m/engine_error", "m/stalled"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var workers []*scriptedWorker
			var lost *scriptedWorker
			for _, f := range c.faults {
				w := &scriptedWorker{failAfter: -1}
				switch f {
				case "error":
					w.failAfter, w.fault = 3, "error"
				case "lost":
					w.failAfter, w.fault, lost = 0, "lost", w
				}
				workers = append(workers, w)
			}
			h := buildHarness(t, harnessOpts{limit: 3, acceptFires: c.fires}, workers...)
			h.wantUndisturbed(t)
			if !slices.Equal(h.migrated, c.migrated) {
				t.Errorf("migrations counted %v, want %v", h.migrated, c.migrated)
			}
			for i := range workers {
				if tm := h.clock.await(t, timerAccept, i); tm.d != time.Second {
					t.Errorf("accept timer %d of %v, want Config.AcceptTimeout (1s)", i, tm.d)
				}
			}
			h.stream.Close()
			// The lost leg's Generate and then its Cancel reach the worker's mailbox in order.
			eventually(t, "the lost leg's Cancel", func() bool { _, cancels := lost.calls(); return len(cancels) > 0 })
			h.checkRouter(t, len(workers))
			if gens, cancels := lost.calls(); len(gens) != 1 || !slices.Equal(cancels, []string{gens[0].RequestId}) {
				t.Errorf("the lost leg's worker got cancels %v, want its Generate's id cancelled once", cancels)
			}
		})
	}
}

// wantUndisturbed reads the started stream to its end and checks it delivered the
// undisturbed output (wantTokens, finishing with "length").
func (h *harness) wantUndisturbed(t *testing.T) {
	t.Helper()
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	chunks := h.drain(t)
	var got []uint32
	for _, ch := range chunks {
		got = append(got, ch.TokenIds...)
	}
	if last := chunks[len(chunks)-1]; !slices.Equal(got, wantTokens) || last.FinishReason != "length" {
		t.Fatalf("tokens %v finish %q (%s), want %v and length", got, last.FinishReason, last.Error, wantTokens)
	}
}

// TestStreamLegNotMovedWaits: a leg not acknowledged within the accept timeout, with no
// other worker to name, waits on (counted as such, not as a migration) and finishes on
// its worker once its Generate gets through.
func TestStreamLegNotMovedWaits(t *testing.T) {
	late := &scriptedWorker{failAfter: -1, fault: "late", held: make(chan struct{})}
	h := buildHarness(t, harnessOpts{limit: 3, acceptFires: []int{0}}, late)
	rec := h.stream.rec.(*fakeRecorder)
	go func() { // the Generate gets through once the leg is left waiting (or after 10 s)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !slices.Contains(rec.list(), "not_moved:m"); {
			time.Sleep(time.Millisecond)
		}
		close(late.held)
	}()
	h.wantUndisturbed(t)
	if !slices.Contains(rec.list(), "not_moved:m") {
		t.Errorf("recorded %v, want the leg counted as left waiting", rec.list())
	}
	if len(h.migrated) != 0 {
		t.Errorf("migrations counted %v, want none", h.migrated)
	}
	h.stream.Close()
	h.checkRoutes(t, 2) // the first, and the move's that named no worker
}

// lateGenerate is a Generate a "late" scripted worker gets once it is let through.
type lateGenerate struct{ g *messages.Generate }

// TestStreamLegAcceptedWhileMoving: a Generate held on the way (a partition that heals)
// is acknowledged while another worker is asked for: the acknowledgement, which came
// before the router's answer, keeps the leg, the answer is freed unsent, and the
// request finishes on its first worker.
func TestStreamLegAcceptedWhileMoving(t *testing.T) {
	late, other := &scriptedWorker{failAfter: -1, fault: "late", held: make(chan struct{})}, &scriptedWorker{failAfter: -1}
	var h *harness
	h = buildHarness(t, harnessOpts{limit: 3, acceptFires: []int{0}, onRoute: func(n int) {
		if n == 1 { // the move's route: the Generate arrives, and its acknowledgement waits for the stream
			close(late.held)
			eventually(t, "the acknowledgement in the stream's channel", func() bool { return len(h.stream.events) > 0 })
		}
	}}, late, other)
	h.wantUndisturbed(t)
	if len(h.migrated) != 0 {
		t.Errorf("migrations counted %v, want none", h.migrated)
	}
	if gens, _ := other.calls(); len(gens) != 0 {
		t.Errorf("the other worker got %d Generate, want none", len(gens))
	}
	if gens, cancels := late.calls(); len(gens) != 1 || len(cancels) != 0 {
		t.Errorf("the first worker got %d Generate and cancels %v, want 1 and none", len(gens), cancels)
	}
	h.stream.Close()
	r := h.router
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.routes) != 2 || !slices.Equal(r.routes[1].ExcludeWorkers, []string{"w0"}) {
		t.Fatalf("routes %v, want the first and the move's (w0 excluded)", r.routes)
	}
	freed := slices.Clone(r.freed)
	slices.Sort(freed)
	if want := []string{r.routes[0].RequestId, r.routes[1].RequestId}; !slices.Equal(freed, want) {
		t.Errorf("freed %v, want both routes once: %v", r.freed, want)
	}
}

// TestStreamCloseCancelsCurrentAttempt closes a stream after a migration: the engine
// request cancelled is the continuation's, on the worker serving it now.
func TestStreamCloseCancelsCurrentAttempt(t *testing.T) {
	h := newHarness(t, 3, 0, &scriptedWorker{failAfter: 2, fault: "error"}, &scriptedWorker{failAfter: 4, fault: "stall"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 6; i++ { // two tokens from w0, four from w1, which then goes silent
		if _, err := h.stream.Recv(ctx); err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
	}
	if h.stream.WorkerID() != "w1" {
		t.Fatalf("serving worker %q, want w1", h.stream.WorkerID())
	}
	h.stream.Close()
	h.stream.Close()
	h.router.mu.Lock()
	current := h.router.routes[1].RequestId
	h.router.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, cancels := h.workers[1].calls()
		if slices.Equal(cancels, []string{current}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("w1 cancels %v, want [%s]", cancels, current)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.checkRouter(t, 2)
}

// TestStreamRouteCallFailure: a Route call that fails after the router recorded the
// request (it timed out while the router was busy) frees the request id, since the
// router would otherwise count it as load for good, and the client is answered 503 with
// Retry-After: the request could not be routed now, which a retry may mend.
func TestStreamRouteCallFailure(t *testing.T) {
	for _, callErr := range []error{
		fmt.Errorf("error request: request failed: %w", context.DeadlineExceeded),
		errors.New("error request: have reached max retries: 3"),
	} {
		t.Run(callErr.Error(), func(t *testing.T) {
			h := buildHarness(t, harnessOpts{limit: 3, callErr: callErr}, &scriptedWorker{failAfter: -1})
			if h.startErr == nil {
				t.Fatal("start succeeded although the Route call failed")
			}
			var ae *gateway.APIError
			if !errors.As(h.startErr, &ae) || ae.Status() != 503 || !ae.Kind.Entry().RetryAfter {
				t.Fatalf("start error %v: want a 503 API error with Retry-After", h.startErr)
			}
			h.router.mu.Lock()
			routed, freed := slices.Clone(h.router.routed), slices.Clone(h.router.freed)
			h.router.mu.Unlock()
			if len(routed) != 1 || !slices.Equal(freed, routed) {
				t.Fatalf("freed %v, want the id of the failed Route call %v", freed, routed)
			}
			if gens, _ := h.workers[0].calls(); len(gens) != 0 {
				t.Fatalf("the worker got %d Generate for a request that was not routed", len(gens))
			}
		})
	}
}

// TestStreamStallCountsOnlyWhileRecvWaits: the stall timeout bounds the consumer's wait
// for a chunk, not the time the consumer takes between two Recv calls: the stall timer
// is armed when Recv starts waiting, with the flow's duration, and stopped when it
// returns.
func TestStreamStallCountsOnlyWhileRecvWaits(t *testing.T) {
	const stall = 200 * time.Millisecond
	h := buildHarness(t, harnessOpts{limit: 3, stall: stall}, &scriptedWorker{failAfter: -1})
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	// stallTimers returns how many stall timers were armed, and whether one still runs.
	stallTimers := func() (n int, running bool) {
		h.clock.mu.Lock()
		defer h.clock.mu.Unlock()
		for _, tm := range h.clock.timers {
			if tm.what == timerStall {
				n++
				tm.mu.Lock()
				running = running || !tm.done
				tm.mu.Unlock()
			}
		}
		return n, running
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		if n, running := stallTimers(); n != i || running {
			t.Fatalf("before Recv %d: %d stall timers armed (running: %v), want %d, none running", i, n, running, i)
		}
		ch, err := h.stream.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if tm := h.clock.await(t, timerStall, i); tm.d != stall {
			t.Fatalf("stall timer of %v, want Config.StallTimeout (%v)", tm.d, stall)
		}
		if ch.FinishReason != "" {
			break
		}
	}
}

// TestStreamRouteRefused: a request its router refuses reaches the client as
// gateway.RouteError says: no worker and every worker busy are retryable (503), an
// unknown model is 404, and a request the router cannot route at all (ROUTE_BAD_REQUEST)
// is the client's fault (400), not an outage to retry. Nothing is sent.
func TestStreamRouteRefused(t *testing.T) {
	for _, c := range []struct {
		outcome messages.RouteOutcome
		is      error // the gateway sentinel wrapped; nil: an *APIError of status
		status  int
	}{
		{messages.RouteOutcome_ROUTE_NO_WORKERS, gateway.ErrNoWorkers, 0},
		{messages.RouteOutcome_ROUTE_ALL_BUSY, gateway.ErrAllBusy, 0},
		{messages.RouteOutcome_ROUTE_UNKNOWN_MODEL, gateway.ErrUnknownModel, 0},
		{messages.RouteOutcome_ROUTE_BAD_REQUEST, nil, 400},
	} {
		t.Run(c.outcome.Label(), func(t *testing.T) {
			w := &scriptedWorker{failAfter: -1}
			h := buildHarness(t, harnessOpts{refuse: c.outcome}, w)
			err := h.startErr
			var ae *gateway.APIError
			switch {
			case err == nil:
				t.Fatal("start succeeded although the router refused the request")
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("start error %v, want %v", err, c.is)
			case c.is == nil && (!errors.As(err, &ae) || ae.Status() != c.status):
				t.Errorf("start error %v, want an API error of status %d", err, c.status)
			}
			if !strings.Contains(err.Error(), "refused: "+c.outcome.Label()) {
				t.Errorf("start error %q without the router's reason", err)
			}
			if gens, _ := w.calls(); len(gens) != 0 {
				t.Errorf("the worker got %d Generate for a refused request", len(gens))
			}
		})
	}
}

// TestStreamMigrationFindsNoWorker: the worker of a running request fails and the router
// has no other worker for it (the only engine is restarting, the workers re-register):
// Recv fails with gateway.ErrNoWorkers, which the client gets as 503 with Retry-After (an
// error frame of that code once a stream has begun), not as a worker failure (502); the
// failed attempt is cancelled and freed.
func TestStreamMigrationFindsNoWorker(t *testing.T) {
	h := newHarness(t, 3, 0, &scriptedWorker{failAfter: 2, fault: "error"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []uint32
	var err error
	for {
		var ch *messages.TokenChunk
		if ch, err = h.stream.Recv(ctx); err != nil {
			break
		}
		if ch.FinishReason != "" {
			t.Fatalf("the stream finished (%q, %q) although no worker could take it", ch.FinishReason, ch.Error)
		}
		got = append(got, ch.TokenIds...)
	}
	if !errors.Is(err, gateway.ErrNoWorkers) || !strings.Contains(err.Error(), "every worker is excluded") {
		t.Fatalf("Recv error %v: want gateway.ErrNoWorkers with the router's reason", err)
	}
	if _, err2 := h.stream.Recv(ctx); !errors.Is(err2, gateway.ErrNoWorkers) {
		t.Fatalf("Recv after the failure: %v, want the same error", err2)
	}
	if !slices.Equal(got, wantTokens[:2]) {
		t.Errorf("tokens %v, want %v", got, wantTokens[:2])
	}
	h.stream.Close()
	h.checkRouter(t, 2)
}

// A frontend whose cluster member is replaced (the cluster dropped it: docs/reference.md
// §10) loses its legs' chunks with the old member's receivers; the stream moves to the
// new member, counts each leg as its worker's termination and migrates the request —
// without excluding the worker, which is not at fault — and it ends with exactly the
// undisturbed tokens. Before the move the request waited for the stall timeout (2
// minutes by default) and then some.
func TestStreamMovesWithItsMember(t *testing.T) {
	// One worker: excluded, as a terminated worker is, it would leave the request none.
	h := buildHarness(t, harnessOpts{limit: 3}, &scriptedWorker{failAfter: 3, fault: "stall-once"})
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	lost := make(chan struct{})
	moved := 0
	h.stream.lost = lost
	h.stream.moveTo = func() (*actor.RootContext, <-chan struct{}) {
		moved++
		return h.stream.root, nil // the same actor system: the workers are local to it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []uint32
	for len(got) < 3 {
		ch, err := h.stream.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv after %d tokens: %v", len(got), err)
		}
		got = append(got, ch.TokenIds...)
	}
	close(lost) // the first worker's chunks would go to the old member: it seems silent
	for _, ch := range h.drain(t) {
		got = append(got, ch.TokenIds...)
	}
	if !slices.Equal(got, wantTokens) {
		t.Errorf("tokens %v, want %v", got, wantTokens)
	}
	if moved != 1 || !slices.Equal(h.migrated, []string{"m/worker_terminated"}) {
		t.Errorf("moved %d times, migrations %v; want 1 and [m/worker_terminated]", moved, h.migrated)
	}
	// The worker was lost only to the old member's receiver: it is not excluded, and
	// serves the rest.
	if ex := h.router.routes[1].ExcludeWorkers; len(ex) != 0 {
		t.Errorf("the route after the move excludes %v, want none", ex)
	}
	if n := len(h.workers[0].generated()); n != 2 {
		t.Errorf("the first worker took %d Generates, want 2 (the rest of the request came back to it)", n)
	}
	h.stream.Close()
	h.checkRoutes(t, 2)
	deadline := time.Now().Add(10 * time.Second) // the Cancel is a message: it arrives when it does
	for {
		_, cancels := h.workers[0].calls()
		if slices.Contains(cancels, h.router.routes[0].RequestId) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first worker's leg was not cancelled: %v", cancels)
		}
		time.Sleep(time.Millisecond)
	}
}
