package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
)

// The simulator is the shell of every request's flow.Flow, as actors/frontend is in
// the service: it feeds the flow events (its start, the router's answers, engine
// outputs as chunks, a killed worker's termination, fired timers, the client leaving)
// and carries out the effects on the virtual clock. Route calls kv.Router.Route at once
// and answers with kvpb.RouteResponse, the Router grain's own conversion; Send adds the
// leg to its worker's engine (a prefill leg with HoldBlocks; a decode leg with transfer
// parameters after the modelled KV transfer, with the prompt's full blocks imported);
// Cancel aborts it there; PrefillDone, Free and Ack go to the router; ReleaseKV
// releases the blocks a prefill engine pinned; SetTimer schedules a TimerFired on the
// event heap; Emit builds the request's bench.Result; Notes count in Stats. Credit has
// nothing to do: the engines model no flow control. Park and Unpark keep the busy queue
// (Config.QueueDepth), a FIFO on the virtual clock as the gateway's: a Park finds the
// request its place (kept when it has one) or answers QueueFull; the head is answered
// Unparked when a request frees load (a Free), when the head before it leaves, and
// every Config.QueueRetry. A client past its deadline is the flow's Deadline.

// reqState is the simulation's bookkeeping of one request.
type reqState struct {
	flow      *flow.Flow // from its arrival until the flow is done
	ended     bool       // its result is final (finished, failed, timed out)
	tokens    int        // tokens emitted so far
	last      time.Duration
	maxTokens int32
	refused   bool    // an engine refused one of its legs: an error chunk is ErrInvalidRequest
	parked    bool    // it holds a place in the busy queue (simulator.queue)
	legs      []int32 // the slot of each of its legs in simulator.legs, by LegID-1 (-1: none)
	timers    []timer
	// onboarded: the tokens of its latest finished leg's prompt loaded from a block
	// manager's tiers (Config.Kvbm), by tier, counted into Stats.Tiers if it succeeds.
	onboarded [kv.NumTiers]int
}

// legState is where a leg is.
type legState uint8

const (
	legRunning  legState = iota // in its engine
	legTransfer                 // a decode leg waiting for its KV transfer to end
	legLoraWait                 // waiting for a LoRA adapter slot on its worker (lora.go)
	legEnded                    // finished, cancelled, refused or lost: no more chunks
)

// leg is one leg of a request (one flow.Send) on one worker.
type leg struct {
	req     int32
	id      flow.LegID
	worker  int32
	state   legState
	watched bool // sent and not forgotten: its worker's termination reaches the flow
	prefill bool // a prefill leg: its blocks stay pinned for the decode leg
	pinned  bool // a prefill leg that finished: its engine holds its blocks until released
	next    uint32
	tokens  int32  // output tokens produced
	rid     string // the request id of its Generate (its chunks carry it)
	engID   string // its request id in the engine: its slot in decimal
	// A decode leg in legTransfer: its Generate, and the slot of the prefill leg whose
	// pinned blocks it reads. A leg in legLoraWait: its Generate and imported tokens.
	gen      *messages.Generate
	src      int32
	imported int32
}

// timer is one timer of a request's flow (flow.SetTimer). The heap holds one live
// entry per timer at most (queued, at queuedAt, numbered entry): re-arming it later,
// as the stall timer is after every chunk, only moves due, and the entry, when it
// comes, is pushed again for the rest.
type timer struct {
	t        flow.Timer
	due      time.Duration
	armed    bool
	queued   bool
	queuedAt time.Duration
	entry    uint32
}

// park carries out request i's flow.Park: it keeps its place in the busy queue, or
// joins its end, or, the queue being full, is answered QueueFull.
func (s *simulator) park(i int) {
	st := &s.state[i]
	switch {
	case st.parked:
	case len(s.queue) >= s.cfg.QueueDepth:
		s.stats.QueueFull++
		s.step(i, flow.QueueFull{Message: fmt.Sprintf("the queue of %d requests is full", s.cfg.QueueDepth)})
	default:
		st.parked = true
		s.queue = append(s.queue, int32(i))
		s.stats.Queued++
		s.armQueueRetry()
	}
}

// unpark carries out request i's flow.Unpark: it leaves the queue; a new head looks at
// once, as the gateway's queue wakes it.
func (s *simulator) unpark(i int) {
	st := &s.state[i]
	if !st.parked {
		return
	}
	st.parked = false
	k := slices.Index(s.queue, int32(i))
	s.queue = slices.Delete(s.queue, k, k+1)
	if k == 0 {
		s.wakeHead()
	}
}

// wakeHead answers the queue's head Unparked: load went down, it routes again (the flow
// ignores a wake while its route is awaited).
func (s *simulator) wakeHead() {
	if len(s.queue) > 0 {
		s.step(int(s.queue[0]), flow.Unparked{})
	}
}

// armQueueRetry schedules the head's next periodic look, unless one is scheduled.
func (s *simulator) armQueueRetry() {
	if !s.retrying && len(s.queue) > 0 && s.cfg.QueueRetry <= MaxSimulatedTime-s.now {
		s.retrying = true
		s.push(s.now+s.cfg.QueueRetry, evQueueRetry, 0)
	}
}

// queueRetry is the head's periodic look (Config.QueueRetry).
func (s *simulator) queueRetry() {
	s.retrying = false
	s.wakeHead()
	s.armQueueRetry()
}

// step feeds event ev to request i's flow and carries out its effects. An event that
// carrying them out raises (a Route's answer, a leg refused at once) is fed after them,
// never within: a shell answers a flow's effects with events, in order.
func (s *simulator) step(i int, ev flow.Event) {
	if s.stepping {
		s.raised = append(s.raised, raisedEvent{req: int32(i), ev: ev})
		return
	}
	s.stepping = true
	s.raised = append(s.raised[:0], raisedEvent{req: int32(i), ev: ev})
	now := simBase.Add(s.now)
	for k := 0; k < len(s.raised); k++ {
		r := s.raised[k]
		s.raised[k] = raisedEvent{}
		st := &s.state[r.req]
		if st.flow == nil { // done: it takes no more events
			continue
		}
		for _, e := range st.flow.Step(r.ev, now) {
			s.effect(int(r.req), e)
		}
		if st.flow.Done() {
			st.flow, st.legs, st.timers = nil, nil, nil
		}
	}
	s.raised, s.stepping = s.raised[:0], false
}

// raisedEvent is an event waiting for the effects in progress: request req's ev.
type raisedEvent struct {
	req int32
	ev  flow.Event
}

// effect carries out one effect of request i's flow.
func (s *simulator) effect(i int, e flow.Effect) {
	switch e := e.(type) {
	case flow.Route:
		s.route(i, e.Request)
	case flow.Send:
		s.send(i, e)
	case flow.Ack:
		s.router.Ack(e.RequestID)
	case flow.Credit:
		// The engines model no flow control.
	case flow.Cancel:
		s.cancelLeg(s.legOf(i, e.Leg))
	case flow.Forget:
		if lg := s.legOf(i, e.Leg); lg != nil {
			lg.watched = false
		}
	case flow.PrefillDone:
		s.router.PrefillDoneAt(e.RequestID, simBase.Add(s.now))
	case flow.Free:
		s.router.FreeAt(e.RequestID, simBase.Add(s.now))
		s.wakeHead()
	case flow.Park:
		s.park(i)
	case flow.Unpark:
		s.unpark(i)
	case flow.ReleaseKV:
		if src, ok := paramsLeg(e.Release.GetKvTransferParams(), len(s.legs)); ok {
			s.releasePinned(src)
		}
	case flow.Emit:
		s.emitChunk(i, e.Chunk)
	case flow.Fail:
		s.failed(i, e)
	case flow.SetTimer:
		s.setTimer(i, e.Timer, e.After)
	case flow.StopTimer:
		st := &s.state[i]
		if k := st.timer(e.Timer, false); k >= 0 && st.timers[k].t.Gen == e.Timer.Gen {
			st.timers[k].armed = false
		}
	case flow.Note:
		s.note(e)
	}
}

// route asks the router, as the Router grain does, and answers the flow at once; the
// workers' addresses are the simulator's stand-ins. The routes name no SGLang bootstrap
// address (the simulated legs use the two-phase transfer), so Routed.Room is 0.
func (s *simulator) route(i int, rr *messages.RouteRequest) {
	s.loraRoute(rr)
	d, err := s.router.Route(kvpb.RouteInput(rr), simBase.Add(s.now), s.rng)
	resp := kvpb.RouteResponse(d, err)
	if err == nil {
		// The simulated workers acknowledge each Generate (send steps Accepted).
		resp.Worker, resp.WorkerAcknowledges = s.workers[s.workerIndex(d.Worker, d.WorkerID)].ref, true
		if p := d.Prefill; p != nil {
			resp.PrefillWorker, resp.PrefillWorkerAcknowledges = s.workers[s.workerIndex(p.Worker, p.WorkerID)].ref, true
		}
	}
	s.step(i, flow.Routed{Response: resp})
}

// legOf returns the leg id of request i's flow names, or nil.
func (s *simulator) legOf(i int, id flow.LegID) *leg {
	st := &s.state[i]
	if k := int(id) - 1; k >= 0 && k < len(st.legs) && st.legs[k] >= 0 {
		return &s.legs[st.legs[k]]
	}
	return nil
}

// send starts a leg: into its worker's engine, or, for a decode leg with transfer
// parameters, first through the modelled KV transfer from its prefill engine.
func (s *simulator) send(i int, e flow.Send) {
	s.observeRouted(i)
	slot := int32(len(s.legs))
	wi, known := s.byName[e.Worker.ID]
	s.legs = append(s.legs, leg{req: int32(i), id: e.Leg, worker: wi, watched: true, rid: e.Generate.GetRequestId(),
		engID: strconv.Itoa(int(slot))})
	st := &s.state[i]
	for len(st.legs) < int(e.Leg) {
		st.legs = append(st.legs, -1)
	}
	st.legs[e.Leg-1] = slot
	lg := &s.legs[slot]
	if !known || s.workers[wi].dead {
		// A Generate to a worker that is gone: the receiver's watch reports it at once.
		lg.state = legEnded
		s.step(i, flow.WorkerTerminated{Leg: e.Leg})
		return
	}
	// A live worker takes the Generate at once and says so (messages.GenerateAccepted).
	s.step(i, flow.Accepted{Leg: e.Leg})
	dp := e.Generate.GetSampling().GetDisagg()
	switch {
	case dp.GetLeg() == messages.Leg_LEG_PREFILL:
		lg.prefill = true
	case dp.GetLeg() == messages.Leg_LEG_DECODE && dp.GetKvTransferParams() != "":
		src, ok := paramsLeg(dp.GetKvTransferParams(), int(slot))
		if !ok || !s.legs[src].pinned {
			// The blocks are not there to read (their prefill worker was killed, or they
			// were released): the decode engine answers a KV transfer failure.
			s.kvFailed(slot, "the prefill engine does not hold the blocks")
			return
		}
		lg.state, lg.gen, lg.src = legTransfer, e.Generate, src
		bs := s.cfg.Engine.BlockSize
		bytes := float64(len(e.Generate.GetTokenIds())/bs*bs) * float64(s.cfg.KVBytesPerToken)
		secs := bytes / (s.cfg.TransferBandwidth * s.cfg.Engine.SpeedupRatio)
		if !(secs <= (MaxSimulatedTime - s.now).Seconds()) {
			s.err = fmt.Errorf("sim: request %d: a KV transfer of %.4g bytes at %g bytes/s × speedup ratio %g takes %.4g s: at %v it would end beyond %v (MaxSimulatedTime)",
				i, bytes, s.cfg.TransferBandwidth, s.cfg.Engine.SpeedupRatio, secs, s.now, MaxSimulatedTime)
			return
		}
		s.pushReq(s.now+time.Duration(secs*float64(time.Second)), evTransfer, int(lg.worker), int(slot))
		return
	}
	s.add(slot, e.Generate, 0)
}

// add puts the leg in slot into its engine with imported tokens (a decode leg's
// transferred prompt), once its LoRA adapter is there (lora.go: it may wait for a slot);
// an engine that refuses it answers an error chunk.
func (s *simulator) add(slot int32, g *messages.Generate, imported int) {
	if s.loraEnter(slot, g, imported) {
		s.enter(slot, g, imported)
	}
}

// enter is add once the leg's adapter is ready.
func (s *simulator) enter(slot int32, g *messages.Generate, imported int) {
	lg := &s.legs[slot]
	w := s.workers[lg.worker]
	sp := g.GetSampling()
	req := mocker.Request{ID: lg.engID, Prompt: g.GetTokenIds(), MaxTokens: int(sp.GetMaxTokens()),
		MinTokens: int(sp.GetMinTokens()), IgnoreEOS: sp.GetIgnoreEos(), StopTokenIDs: sp.GetStopTokenIds(),
		HoldBlocks: lg.prefill, ImportedTokens: imported, LoraName: sp.GetLoraName()}
	if sp.Seed != nil {
		req.Seed, req.HasSeed = uint64(sp.GetSeed()), true
	}
	if err := w.eng.Add(req); err != nil {
		lg.state = legEnded
		s.state[lg.req].refused = true
		s.step(int(lg.req), flow.Chunk{Leg: lg.id, Chunk: &messages.TokenChunk{RequestId: lg.rid, Index: lg.next,
			FinishReason: "error", WorkerId: w.name, Error: "engine: " + err.Error()}})
		return
	}
	s.wake(w.idx)
}

// transferred runs when the KV blocks of the decode leg in slot have reached its
// worker: the prefill engine releases them and the leg enters the decode engine with
// the prompt's full blocks imported (no prefill time for them).
func (s *simulator) transferred(slot int) {
	lg := &s.legs[slot]
	if lg.state != legTransfer { // cancelled, or a worker of the transfer was killed
		return
	}
	s.releasePinned(lg.src)
	g := lg.gen
	lg.state, lg.gen = legRunning, nil
	bs := s.cfg.Engine.BlockSize
	s.add(int32(slot), g, len(g.GetTokenIds())/bs*bs)
}

// output hands one engine output of w to its leg's flow as a chunk, numbered and
// filled as a worker fills it (usage and transfer parameters on the last chunk).
func (s *simulator) output(w *worker, o *mocker.Output) {
	slot := parseIndex(o.RequestID)
	lg := &s.legs[slot]
	if lg.state != legRunning { // cancelled during the step
		return
	}
	lg.tokens += int32(len(o.TokenIDs))
	if o.Finished {
		lg.state, lg.pinned = legEnded, o.Pinned
		if !lg.watched && o.Pinned { // nobody will read or release them
			s.releasePinned(int32(slot))
		}
	}
	if !lg.watched {
		return
	}
	ch := s.newChunk()
	ch.RequestId, ch.Index, ch.TokenIds, ch.WorkerId = lg.rid, lg.next, o.TokenIDs, w.name
	lg.next++
	if o.Finished {
		ch.FinishReason = string(o.FinishReason)
		ch.PromptTokens, ch.CachedTokens, ch.CompletionTokens = int32(o.PromptTokens), int32(o.CachedTokens), lg.tokens
		s.state[lg.req].onboarded = o.OnboardedTokens
		if o.Pinned {
			ch.KvTransferParams = legParams(slot)
		}
	}
	s.step(int(lg.req), flow.Chunk{Leg: lg.id, Chunk: ch})
}

// chunkSlab is how many chunks newChunk allocates at once.
const chunkSlab = 256

// newChunk returns a zero TokenChunk for an engine output. Chunks are allocated in
// slabs (one allocation per chunkSlab outputs instead of one each: a run has one per
// output token); each is handed to a flow, which owns it from then on, and a slab is
// freed once none of its chunks is referenced.
func (s *simulator) newChunk() *messages.TokenChunk {
	if len(s.chunks) == 0 {
		s.chunks = make([]messages.TokenChunk, chunkSlab)
	}
	ch := &s.chunks[0]
	s.chunks = s.chunks[1:]
	return ch
}

// cancelLeg aborts lg in its engine; a decode leg still reading its KV leaves the
// transfer, and the prefill engine releases the blocks, as the mock engine's transfer
// port does when its reader goes. Cancelling a leg that ended is harmless.
func (s *simulator) cancelLeg(lg *leg) {
	if lg == nil {
		return
	}
	switch lg.state {
	case legRunning:
		if w := s.workers[lg.worker]; !w.dead && w.eng.Abort(lg.engID) {
			lg.state = legEnded
			s.loraRetry(w)
			s.wakeIfWork(w)
		}
	case legTransfer:
		s.releasePinned(lg.src)
		lg.gen = nil
	case legLoraWait:
		lg.gen = nil
	}
	lg.state = legEnded
}

// kvFailed ends the decode leg in slot with a KV transfer failure, as the decode engine
// answers one.
func (s *simulator) kvFailed(slot int32, why string) {
	lg := &s.legs[slot]
	lg.state, lg.gen = legEnded, nil
	s.step(int(lg.req), flow.Chunk{Leg: lg.id, Chunk: &messages.TokenChunk{RequestId: lg.rid, Index: lg.next,
		FinishReason: "error", WorkerId: s.workers[lg.worker].name, Fault: messages.Fault_FAULT_KV_TRANSFER,
		Error: "engine: KV transfer failed: " + why}})
}

// legParams are the transfer parameters of the prefill leg in slot, a JSON object as
// an engine's: they name the leg.
func legParams(slot int) string { return `{"sim_prefill_leg":` + strconv.Itoa(slot) + `}` }

// paramsLeg reads the slot of the prefill leg legParams named, below n.
func paramsLeg(params string, n int) (int32, bool) {
	const prefix = `{"sim_prefill_leg":`
	if !strings.HasPrefix(params, prefix) || !strings.HasSuffix(params, "}") {
		return 0, false
	}
	v, err := strconv.Atoi(params[len(prefix) : len(params)-1])
	if err != nil || v < 0 || v >= n {
		return 0, false
	}
	return int32(v), true
}

// releasePinned releases the blocks the prefill leg in slot pinned, if it still holds
// them (releasing twice is harmless); the engine steps again if a request waited for
// the room.
func (s *simulator) releasePinned(slot int32) {
	if lg := &s.legs[slot]; lg.pinned {
		lg.pinned = false
		w := s.workers[lg.worker]
		w.eng.Release(lg.engID)
		s.wakeIfWork(w)
	}
}

// wakeIfWork steps w's idle engine if it has work: blocks were freed, so a request it
// had no room for may fit now.
func (s *simulator) wakeIfWork(w *worker) {
	if w.eng.HasWork() {
		s.wake(w.idx)
	}
}

// emitChunk records one chunk the flow handed to request i's client.
func (s *simulator) emitChunk(i int, ch *messages.TokenChunk) {
	st := &s.state[i]
	if st.ended {
		return
	}
	res := &s.results[i]
	arrival := s.reqs[i].Arrival
	if n := len(ch.GetTokenIds()); n > 0 {
		if st.tokens == 0 {
			res.TTFT = s.now - arrival
			res.ITL = make([]time.Duration, 0, st.maxTokens-1)
		} else {
			res.ITL = append(res.ITL, s.now-st.last)
		}
		s.observeTokens(i, n, st.tokens == 0, s.now-st.last)
		st.last = s.now
		st.tokens += n
	}
	switch ch.GetFinishReason() {
	case "":
		return
	case "error", "abort":
		kind := ErrWorkerFailed
		if st.refused {
			kind = ErrInvalidRequest
		}
		res.E2E = s.now - arrival
		s.fail(i, kind, ch.GetError())
		return
	}
	res.E2E = s.now - arrival
	res.PromptTokens, res.CachedTokens, res.CachedKnown = int(ch.GetPromptTokens()), int(ch.GetCachedTokens()), true
	s.stats.Tiers.addRequest(res.PromptTokens, res.CachedTokens, st.onboarded)
	res.OutputTokens = int(ch.GetCompletionTokens())
	s.ended(i)
}

// failed ends request i: it could not be routed (again).
func (s *simulator) failed(i int, e flow.Fail) {
	if s.state[i].ended {
		return
	}
	kind := e.Outcome.Label()
	if s.state[i].tokens > 0 || e.Cause != flow.FailRouted {
		// A request that waited in the busy queue failed when it left it.
		s.results[i].E2E = s.now - s.reqs[i].Arrival
	}
	if e.Cause == flow.FailQueueTimeout {
		s.stats.QueueTimeouts++
	}
	s.fail(i, kind, e.Message)
}

// note counts what Stats counts.
func (s *simulator) note(n flow.Note) {
	switch n.Kind {
	case flow.NoteDecided:
		s.stats.Decisions[n.Decision]++
	case flow.NoteMigrated:
		s.stats.Migrations[n.Fault]++
	case flow.NotePrefillRetried:
		s.stats.PrefillRetries[n.Fault]++
	}
}

// timer returns the index in st.timers of the timer of t's kind and leg, adding it when
// add is set; -1 when there is none.
func (st *reqState) timer(t flow.Timer, add bool) int {
	for k := range st.timers {
		if tm := &st.timers[k]; tm.t.Kind == t.Kind && tm.t.Leg == t.Leg {
			return k
		}
	}
	if !add {
		return -1
	}
	st.timers = append(st.timers, timer{t: t})
	return len(st.timers) - 1
}

// setTimer (re)arms request i's timer t to fire after after.
func (s *simulator) setTimer(i int, t flow.Timer, after time.Duration) {
	st := &s.state[i]
	k := st.timer(t, true)
	tm := &st.timers[k]
	tm.t, tm.armed = t, true
	if after < 0 {
		after = 0
	}
	if after > MaxSimulatedTime-s.now { // never, within the simulation's range
		tm.armed = false
		return
	}
	tm.due = s.now + after
	if !tm.queued || tm.due < tm.queuedAt {
		s.pushTimer(i, k, tm)
	}
}

// pushTimer queues an entry of request i's timer k (tm) at its due time.
func (s *simulator) pushTimer(i, k int, tm *timer) {
	tm.entry++
	tm.queued, tm.queuedAt = true, tm.due
	s.seq++
	s.heap.push(event{at: tm.due, key: uint64(evTimer)<<kindShift | s.seq, w: int32(k), r: int32(i), x: tm.entry})
}

// timerDue takes the heap entry number entry of request i's timer k: the timer fires
// if it is armed and due, comes again later if it was re-armed for later, and an entry
// that a sooner one replaced is dropped.
func (s *simulator) timerDue(i, k int, entry uint32) {
	st := &s.state[i]
	if st.flow == nil || k >= len(st.timers) {
		return
	}
	tm := &st.timers[k]
	if tm.entry != entry || !tm.queued {
		return
	}
	tm.queued = false
	switch {
	case !tm.armed:
	case tm.due > s.now:
		s.pushTimer(i, k, tm)
	default:
		tm.armed = false
		s.last = s.now
		s.step(i, flow.TimerFired{Timer: tm.t})
	}
}

// deadline: request i's client gives up waiting (Config.RequestTimeout), as the bench
// client does at its --timeout; the flow (Deadline) cancels what still runs, or takes
// the request out of the busy queue.
func (s *simulator) deadline(i int) {
	st := &s.state[i]
	if st.ended {
		return
	}
	s.last = s.now
	s.results[i].E2E = s.now - s.reqs[i].Arrival
	s.fail(i, bench.ErrTimeout, fmt.Sprintf("no complete answer within %v", s.cfg.RequestTimeout))
	s.step(i, flow.Deadline{})
}
