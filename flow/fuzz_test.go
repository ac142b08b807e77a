package flow

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// FuzzFlow drives a flow with random events from a seed — routes answered every way,
// chunks, faults, terminations, timers firing (stale ones too), the busy queue's
// answers (unparked, queue full), drains, deadlines, the consumer leaving — as a shell
// and its workers could, then ends it as a shell does (the consumer leaves, the timers
// left fire) and checks the flow's invariants on every run:
//
//   - every request id routed (answered with a worker, or by a failed call) is freed
//     exactly once by the time Done();
//   - every leg sent is forgotten exactly once;
//   - a leg's Cancel comes before the Free of its request id;
//   - emitted chunks are numbered 0, 1, 2 ... without gaps;
//   - nothing is emitted, sent or failed after the finishing chunk, a Fail, or the
//     consumer leaving; at most one Fail;
//   - Done() holds once the consumer left and the timers left fired, and nothing
//     happens after it;
//   - a request parked (Park not answered QueueFull) leaves the queue exactly once
//     (Unpark) by Done(); it is never routed or sent while it waits for Unparked, and
//     Park comes only from a route's answer or the start.
func FuzzFlow(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1234, 99991} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		if err := runRandomFlow(seed, false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFlowInvariants runs FuzzFlow's check over many seeds in every test run.
func TestFlowInvariants(t *testing.T) {
	for seed := uint64(0); seed < 3000; seed++ {
		if err := runRandomFlow(seed, false); err != nil {
			// Replay the failing run with its events written out.
			t.Fatalf("%v\n%v", err, runRandomFlow(seed, true))
		}
	}
}

// worldLeg is what the random shell knows of a leg.
type worldLeg struct {
	id      LegID
	prefill bool
	next    uint32
	done    bool // the world sent its last chunk
}

type randomWorld struct {
	rng  *rand.Rand
	f    *Flow
	now  time.Time
	log  []string // events and effects, for a failure's report
	keep bool

	pendingID string              // the Route awaited ("" none)
	legs      map[LegID]*worldLeg // sent and not forgotten
	timers    map[timerKey]Timer  // armed
	stale     []Timer             // replaced, stopped or fired

	// The busy queue: queued from a Park the world took to the Unpark; waiting from a
	// Park to the Unparked (or QueueFull) answering it; fullNext: the world answers the
	// next Park with QueueFull.
	queued, waiting, fullNext bool
	routedNow                 bool // the event being stepped is a Routed or the Start
	unparks                   int

	// The checks' state.
	mustFree  map[string]bool // ids the router may have recorded
	freed     map[string]int
	sent      map[LegID]string // leg -> request id
	forgotten map[LegID]int
	index     uint32
	ended     bool // finishing chunk emitted, or Fail
	gone      bool
	fails     int
}

func runRandomFlow(seed uint64, keep bool) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := Config{Credits: []int32{1, 2, 4, 64}[rng.IntN(4)], MigrationLimit: rng.IntN(4),
		StallTimeout:  []time.Duration{0, 200 * time.Millisecond}[rng.IntN(2)],
		AcceptTimeout: []time.Duration{0, 150 * time.Millisecond}[rng.IntN(2)], PrefillReleaseWait: 200 * time.Millisecond,
		TerminatedGrace: 100 * time.Millisecond, QueueTimeout: []time.Duration{0, 300 * time.Millisecond}[rng.IntN(2)]}
	sp := &messages.SamplingParams{MaxTokens: int32(1 + rng.IntN(10)), MinTokens: int32(rng.IntN(3))}
	if rng.IntN(8) == 0 {
		sp.Structured = &messages.StructuredOutput{JsonObject: true}
	}
	w := &randomWorld{rng: rng, now: t0, keep: keep, f: New(Request{ID: "r", Model: "m", Tokens: []uint32{1, 2, 3}, Sampling: sp}, cfg),
		legs: map[LegID]*worldLeg{}, timers: map[timerKey]Timer{}, mustFree: map[string]bool{}, freed: map[string]int{},
		sent: map[LegID]string{}, forgotten: map[LegID]int{}}
	w.logf("config %+v sampling max=%d min=%d structured=%v", cfg, sp.MaxTokens, sp.MinTokens, sp.Structured != nil)
	err := w.run()
	if keep {
		return errors.New(strings.Join(w.log, "\n"))
	}
	if err != nil {
		return fmt.Errorf("seed %d: %w", seed, err)
	}
	return nil
}

func (w *randomWorld) logf(format string, args ...any) {
	if w.keep {
		w.log = append(w.log, fmt.Sprintf(format, args...))
	}
}

func (w *randomWorld) run() error {
	if err := w.step(Start{Behind: w.rng.IntN(4) == 0}); err != nil {
		return err
	}
	for n := w.rng.IntN(60); n > 0 && !w.f.Done(); n-- {
		if err := w.step(w.randomEvent()); err != nil {
			return err
		}
	}
	// The shell's end: the consumer leaves; routes are answered and the timers left
	// fire until the flow is done.
	if err := w.step(ClientGone{}); err != nil {
		return err
	}
	for i := 0; !w.f.Done(); i++ {
		if i > 100 {
			return errors.New("not done after the consumer left and every timer fired")
		}
		var ev Event
		switch {
		case w.pendingID != "":
			ev = w.routed()
		default:
			if armed := w.armed(); len(armed) > 0 {
				ev = TimerFired{Timer: armed[0]}
			}
		}
		if ev == nil {
			return fmt.Errorf("not done, and nothing left to happen: legs %v", w.legs)
		}
		if err := w.step(ev); err != nil {
			return err
		}
	}
	// Nothing happens after Done.
	for range 5 {
		ev := w.randomEvent()
		if out := w.f.Step(ev, w.now); len(out) != 0 {
			return fmt.Errorf("after Done, %#v gave %d effects, first %s", ev, len(out), formatEffect(out[0]))
		}
	}
	for id := range w.mustFree {
		if w.freed[id] != 1 {
			return fmt.Errorf("routed id %s freed %d times", id, w.freed[id])
		}
	}
	for id, n := range w.freed {
		if !w.mustFree[id] && n > 1 {
			return fmt.Errorf("id %s freed %d times", id, n)
		}
	}
	for leg := range w.sent {
		if w.forgotten[leg] != 1 {
			return fmt.Errorf("leg %d forgotten %d times", leg, w.forgotten[leg])
		}
	}
	if w.queued {
		return errors.New("done while still in the busy queue")
	}
	return nil
}

func (w *randomWorld) randomEvent() Event {
	w.now = w.now.Add(time.Duration(w.rng.IntN(50)) * time.Millisecond)
	var live []*worldLeg
	for _, l := range w.legs {
		if !l.done {
			live = append(live, l)
		}
	}
	// Map order is random: sort for a run that depends on the seed only.
	slices.SortFunc(live, func(a, b *worldLeg) int { return cmp.Compare(a.id, b.id) })
	r := w.rng.IntN(100)
	switch {
	case w.pendingID != "" && r < 50:
		return w.routed()
	case w.waiting && r >= 18 && r < 45:
		return Unparked{}
	case r < 2:
		return Deadline{}
	case r < 4:
		return Drain{}
	case r < 6 && w.rng.IntN(3) == 0:
		return Unparked{} // spurious: not waiting, or a second wake
	case r < 3:
		return ClientGone{}
	case r < 8 && len(live) > 0:
		if w.rng.IntN(3) == 0 {
			return Accepted{Leg: live[w.rng.IntN(len(live))].id}
		}
		return WorkerTerminated{Leg: live[w.rng.IntN(len(live))].id, ReceiverLost: w.rng.IntN(4) == 0}
	case r < 18 && (len(w.timers) > 0 || len(w.stale) > 0):
		if len(w.stale) > 0 && w.rng.IntN(3) == 0 {
			return TimerFired{Timer: w.stale[w.rng.IntN(len(w.stale))]}
		}
		if armed := w.armed(); len(armed) > 0 {
			return TimerFired{Timer: armed[w.rng.IntN(len(armed))]}
		}
	case len(live) > 0:
		return w.chunk(live[w.rng.IntN(len(live))])
	}
	// Something the flow does not use: a chunk of a leg never sent.
	return Chunk{Leg: 99, Chunk: &messages.TokenChunk{TokenIds: []uint32{1}}}
}

// armed returns the armed timers in a stable order.
func (w *randomWorld) armed() []Timer {
	var out []Timer
	for _, tm := range w.timers {
		out = append(out, tm)
	}
	slices.SortFunc(out, func(a, b Timer) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Leg, b.Leg)) })
	return out
}

func (w *randomWorld) routed() Event {
	rng := w.rng
	r := rng.IntN(100)
	switch {
	case r < 10:
		return Routed{Err: errors.New("route call timed out")}
	case r < 40 && w.f.cfg.QueueTimeout > 0:
		return Routed{Response: &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_ALL_BUSY, Error: "busy"}}
	case r < 22:
		o := []messages.RouteOutcome{messages.RouteOutcome_ROUTE_NO_WORKERS, messages.RouteOutcome_ROUTE_ALL_BUSY,
			messages.RouteOutcome_ROUTE_UNKNOWN_MODEL, messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS,
			messages.RouteOutcome_ROUTE_BAD_REQUEST}[rng.IntN(5)]
		return Routed{Response: &messages.RouteResponse{Outcome: o, Error: "no"}}
	}
	wid := fmt.Sprintf("w%d", rng.IntN(4))
	resp := &messages.RouteResponse{WorkerId: wid, Worker: ref(wid), Router: ref("router"),
		WorkerAcknowledges: rng.IntN(4) > 0, PrefillWorkerAcknowledges: rng.IntN(4) > 0}
	if rng.IntN(20) == 0 {
		resp.Worker = nil
	}
	switch rng.IntN(4) {
	case 0:
	case 1:
		resp.DisaggDecision = messages.DisaggDecision(2 + rng.IntN(4))
	default:
		pid := fmt.Sprintf("p%d", rng.IntN(3))
		resp.DisaggDecision = messages.DisaggDecision_DISAGG_REMOTE
		resp.PrefillWorkerId, resp.PrefillWorker, resp.PrefillRequestId = pid, ref(pid), w.pendingID+"/p"
		if rng.IntN(10) == 0 {
			resp.PrefillWorker = nil
		}
		if rng.IntN(2) == 0 {
			resp.PrefillBootstrapHost, resp.PrefillBootstrapPort = "10.0.0.7", 8998
		}
	}
	return Routed{Response: resp, Room: rng.Uint64()}
}

func (w *randomWorld) chunk(l *worldLeg) Event {
	ch := &messages.TokenChunk{Index: l.next}
	r := w.rng.IntN(100)
	switch {
	case r < 8:
		ch.FinishReason, ch.Error, ch.Fault = "error", "engine: process died", messages.Fault_FAULT_ENGINE_ERROR
	case r < 14:
		ch.FinishReason, ch.Error, ch.Fault = "error", "engine: KV transfer failed", messages.Fault_FAULT_KV_TRANSFER
	case r < 16:
		ch.FinishReason, ch.Error = "error", "engine: bad request"
	case r < 18:
		ch.FinishReason, ch.Error, ch.Fault = "error", "bad value", messages.Fault_FAULT_INVALID_REQUEST
	case r < 20:
		ch.FinishReason = "abort"
	case l.prefill || r < 35:
		ch.TokenIds, ch.FinishReason, ch.CachedTokens = []uint32{7}, "length", int32(w.rng.IntN(4))
		if l.prefill && w.rng.IntN(4) != 0 {
			ch.KvTransferParams = fmt.Sprintf("kv%d", l.id)
		}
	default:
		for range 1 + w.rng.IntN(3) {
			ch.TokenIds = append(ch.TokenIds, uint32(100+w.rng.IntN(100)))
		}
	}
	return Chunk{Leg: l.id, Chunk: ch}
}

// step feeds ev to the flow, checks its effects and keeps what they tell.
func (w *randomWorld) step(ev Event) error {
	switch e := ev.(type) {
	case Routed:
		if w.pendingID != "" {
			if e.Err != nil || e.Response.GetOutcome() == messages.RouteOutcome_ROUTE_OK {
				w.mustFree[w.pendingID] = true
				if e.Err == nil && e.Response.PrefillRequestId != "" {
					w.mustFree[e.Response.PrefillRequestId] = true
				}
			}
			w.pendingID = ""
		}
	case Chunk:
		if l := w.legs[e.Leg]; l != nil {
			l.next++
			l.done = e.Chunk.FinishReason != ""
		}
	case TimerFired:
		for k, tm := range w.timers {
			if tm == e.Timer {
				delete(w.timers, k)
				w.stale = append(w.stale, tm)
			}
		}
	case ClientGone, Deadline:
		w.gone = true
	case Unparked, QueueFull:
		w.waiting = false
	}
	_, w.routedNow = ev.(Routed)
	if _, ok := ev.(Start); ok {
		w.routedNow = true
	}
	w.logf("> %T %+v", ev, ev)
	for _, eff := range w.f.Step(ev, w.now) {
		w.logf("  %s", formatEffect(eff))
		if err := w.effect(eff); err != nil {
			return fmt.Errorf("%s (after %T %+v)", err, ev, ev)
		}
	}
	if w.waiting && w.fullNext {
		// A shell answers a Park its queue has no room for at once.
		w.fullNext = false
		return w.step(QueueFull{Message: "the queue is full"})
	}
	return nil
}

func (w *randomWorld) effect(eff Effect) error {
	switch e := eff.(type) {
	case Route:
		if w.pendingID != "" {
			return errors.New("a second Route while one is awaited")
		}
		if w.waiting {
			return errors.New("a Route while parked, before Unparked")
		}
		w.pendingID = e.Request.RequestId
	case Park:
		if !w.routedNow {
			return errors.New("a Park not answering a route or the start")
		}
		if w.ended || w.gone {
			return errors.New("a Park after the request ended")
		}
		w.waiting = true
		if !w.queued {
			// A request outside the queue: the world may have no room.
			w.fullNext = w.rng.IntN(4) == 0
			w.queued = !w.fullNext
		} else {
			w.fullNext = false // it keeps its place
		}
	case Unpark:
		if !w.queued {
			return errors.New("an Unpark of a request not in the queue")
		}
		w.queued = false
		w.unparks++
	case Send:
		if w.ended || w.gone {
			return fmt.Errorf("send of leg %d after the request ended", e.Leg)
		}
		if w.waiting {
			return fmt.Errorf("send of leg %d while parked", e.Leg)
		}
		if _, ok := w.sent[e.Leg]; ok {
			return fmt.Errorf("leg %d sent twice", e.Leg)
		}
		if w.freed[e.Generate.RequestId] > 0 {
			return fmt.Errorf("leg %d sent under %s, already freed", e.Leg, e.Generate.RequestId)
		}
		w.sent[e.Leg] = e.Generate.RequestId
		w.legs[e.Leg] = &worldLeg{id: e.Leg, prefill: e.Generate.Sampling.GetDisagg().GetLeg() == messages.Leg_LEG_PREFILL}
	case Cancel:
		if w.freed[e.Cancel.RequestId] > 0 {
			return fmt.Errorf("cancel of leg %d after the free of %s", e.Leg, e.Cancel.RequestId)
		}
		if w.sent[e.Leg] != e.Cancel.RequestId {
			return fmt.Errorf("cancel of leg %d (%s), sent as %q", e.Leg, e.Cancel.RequestId, w.sent[e.Leg])
		}
	case Credit:
		if w.legs[e.Leg] == nil {
			return fmt.Errorf("credit for leg %d, not running", e.Leg)
		}
	case Forget:
		if _, ok := w.sent[e.Leg]; !ok {
			return fmt.Errorf("forget of leg %d, never sent", e.Leg)
		}
		w.forgotten[e.Leg]++
		delete(w.legs, e.Leg)
		for k, tm := range w.timers {
			if k.kind != TimerStall && k.leg == e.Leg {
				delete(w.timers, k)
				w.stale = append(w.stale, tm)
			}
		}
	case Free:
		w.freed[e.RequestID]++
		if w.mustFree[e.RequestID] && w.freed[e.RequestID] > 1 {
			return fmt.Errorf("%s freed twice", e.RequestID)
		}
	case Emit:
		if w.ended || w.gone {
			return fmt.Errorf("emit of chunk %d after the request ended", e.Chunk.Index)
		}
		if e.Chunk.Index != w.index {
			return fmt.Errorf("emitted chunk %d, want %d", e.Chunk.Index, w.index)
		}
		w.index++
		w.ended = e.Chunk.FinishReason != ""
	case Fail:
		if w.ended || w.gone {
			return errors.New("fail after the request ended")
		}
		w.fails++
		w.ended = true
	case SetTimer:
		k := timerKey{e.Timer.Kind, e.Timer.Leg}
		if k.kind == TimerStall {
			k.leg = 0
		}
		if old, ok := w.timers[k]; ok {
			w.stale = append(w.stale, old)
		}
		w.timers[k] = e.Timer
	case StopTimer:
		for k, tm := range w.timers {
			if tm == e.Timer {
				delete(w.timers, k)
				w.stale = append(w.stale, tm)
			}
		}
	}
	return nil
}
