package worker

import (
	"context"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/messages"
)

// Parking keeps a node's engine processes across a change of its cluster member
// (docs/reference.md §10, "A node whose member is lost keeps its engines"). A lost member
// can never come back under its id, so the node starts a new member; without parking,
// every engine would be stopped with the old member's workers and started again, losing
// its loaded model (minutes for a real engine) and its KV cache. While parking is open,
// a worker that stops with a ready engine and no LoRA operation under way parks it here
// instead of stopping it: the process, its client, its KV event subscription and the
// relay that numbers its events and keeps its block list. The node's next member starts
// the same workers (Placements) and each adopts its parked engine (Config.Adopt).
//
// Safe for concurrent use. The zero value is not usable: NewParking.
type Parking struct {
	mu      sync.Mutex
	open    bool
	engines map[string]*Parked // by worker id, parked and not taken
	// claimed: taken for a worker (Take) that has not adopted them yet.
	claimed map[string]*Parked
	placed  []Placement
}

// adoptReadyTimeout bounds the health check of an adopted engine: it was ready when
// parked, so a longer silence means it is not serving (it is then stopped and started
// again, as any engine that does not become ready).
const adoptReadyTimeout = 30 * time.Second

// Placement is one worker as its node agent placed it: what the next member starts again
// with the same id on the same GPUs.
type Placement struct {
	WorkerID string
	Req      *messages.StartWorker // completed (node.Config.Defaults applied)
	GPUs     []int                 // NVML indices; nil for none
}

// Parked is an engine a stopped worker left running for the next worker with its id.
type Parked struct {
	workerID      string
	epoch         uint64
	proc          *supervise.Process
	engine        engines.Engine
	engCtx        context.Context // the engine's KV subscription lives as long as it
	engineStop    context.CancelFunc
	engineURL     string
	bootstrapHost string
	bootstrapPort int
	relay         *relay
	relayStop     context.CancelFunc
	launcher      engines.Launcher // the one that started it; closed at adoption or stop
	loras         *loraTable
	pinned        map[string]pinnedLeg
	grace         time.Duration // StopGrace of the worker that parked it
	parkedAt      time.Time
	loraLoadCount int
	loraLoadTotal time.Duration
	parking       *Parking
	adopted       atomic.Bool // a worker adopted it: no other may
}

// NewParking returns a closed Parking holding nothing.
func NewParking() *Parking {
	return &Parking{engines: map[string]*Parked{}, claimed: map[string]*Parked{}}
}

// Open makes workers that stop from now on park their engines; Close ends that. A nil
// Parking is never open.
func (p *Parking) Open() { p.setOpen(true) }

// Close stops taking engines; those parked stay until taken or stopped.
func (p *Parking) Close() { p.setOpen(false) }

func (p *Parking) setOpen(open bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.open = open
	p.mu.Unlock()
}

// IsOpen reports whether stopping workers park their engines now.
func (p *Parking) IsOpen() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// park keeps e under its worker's id; false (e not kept) while closed. A worker id
// parked twice stops the older engine.
func (p *Parking) park(e *Parked) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	if !p.open {
		p.mu.Unlock()
		return false
	}
	old := p.engines[e.workerID]
	e.parking = p
	p.engines[e.workerID] = e
	p.mu.Unlock()
	if old != nil {
		old.stop()
	}
	return true
}

// Remember records a placement for the next member (node agents stopping while parking
// is open call it for each of their workers).
func (p *Parking) Remember(pl Placement) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.placed = append(p.placed, pl)
	p.mu.Unlock()
}

// Placements returns the placements remembered since the last call, and forgets them.
func (p *Parking) Placements() []Placement {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.placed
	p.placed = nil
	return out
}

// Take claims the engine parked for workerID for the worker being built with that id
// (Config.Adopt); nil when there is none. Until that worker adopts it, StopAll and Drop
// still stop it.
func (p *Parking) Take(workerID string) *Parked {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.engines[workerID]
	if e != nil {
		delete(p.engines, workerID)
		p.claimed[workerID] = e
	}
	return e
}

// adopted tells p that e's worker owns it now.
func (p *Parking) adopted(e *Parked) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.claimed[e.workerID] == e {
		delete(p.claimed, e.workerID)
	}
	p.mu.Unlock()
}

// Drop stops the engine parked or claimed for workerID (its worker will not start), and
// returns once it is gone; nothing when there is none.
func (p *Parking) Drop(workerID string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	e := p.engines[workerID]
	if e == nil {
		e = p.claimed[workerID]
	}
	delete(p.engines, workerID)
	delete(p.claimed, workerID)
	p.mu.Unlock()
	if e != nil {
		e.stop()
	}
}

// Holds reports whether an engine is parked for workerID.
func (p *Parking) Holds(workerID string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.engines[workerID] != nil
}

// StopUnclaimed stops every parked engine no worker has claimed (SIGTERM, then SIGKILL
// after its worker's StopGrace; all at once) and returns their worker ids, sorted, once
// they are gone.
func (p *Parking) StopUnclaimed() []string { return p.stop(false) }

// StopAll stops every parked engine, claimed or not (the node is stopping), as
// StopUnclaimed does.
func (p *Parking) StopAll() []string { return p.stop(true) }

func (p *Parking) stop(claimed bool) []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	all := p.engines
	p.engines = map[string]*Parked{}
	if claimed {
		maps.Copy(all, p.claimed)
		p.claimed = map[string]*Parked{}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.stop()
		}()
	}
	wg.Wait()
	return slices.Sorted(maps.Keys(all))
}

// stop ends the engine process and what serves it.
func (e *Parked) stop() {
	e.proc.Stop(e.grace)
	e.release()
}

// release ends the engine's subscription, client, relay and launcher (the process is
// stopped or gone).
func (e *Parked) release() {
	e.engineStop()
	if c, ok := e.engine.(io.Closer); ok {
		_ = c.Close()
	}
	e.relayStop()
	closeLauncher(e.launcher)
}

// closeLauncher closes l when it is an io.Closer (its files: the engine has read them).
func closeLauncher(l engines.Launcher) error {
	if c, ok := l.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// park hands the worker's engine to Config.Parking as the worker stops, when parking is
// open, the engine was ready and runs, and no LoRA adapter is being loaded or unloaded
// (their outcome would reach no one). The requests were cancelled; the blocks the engine
// pinned for prefill legs go with it, released after Config.PinnedReleaseGrace by its
// next worker, which cannot tell whether their decode legs still read them. false: the
// worker stops the engine as usual.
func (w *workerActor) park() bool {
	if !w.cfg.Parking.IsOpen() || w.proc == nil || w.draining || w.failedScrapes > 0 || w.canary.failed ||
		len(w.loraLoads) > 0 || len(w.loraUnloads) > 0 || !w.loras.settled() {
		return false
	}
	select {
	case <-w.proc.Done():
		return false
	default:
	}
	// Prefill legs that finished while their requestDone waits behind the stop: their
	// blocks are pinned too.
	pinned := maps.Clone(w.pinned)
	for id, r := range w.requests {
		if kvp := r.kvParams.Load(); kvp != nil && *kvp != "" && pinned[id].kvParams == "" {
			pinned[id] = pinnedLeg{replyTo: r.replyTo, kvParams: *kvp, at: w.cfg.Now()}
		}
	}
	e := &Parked{workerID: w.cfg.WorkerID, epoch: w.epoch, proc: w.proc, engine: w.engine,
		engCtx: w.engCtx, engineStop: w.engineStop, engineURL: w.engineURL,
		bootstrapHost: w.bootstrapHost, bootstrapPort: w.bootstrapPort,
		relay: w.relay, relayStop: w.relayStop, launcher: w.cfg.Launcher, loras: w.loras, pinned: pinned,
		grace: w.cfg.StopGrace, parkedAt: time.Now(), loraLoadCount: w.loraLoadCount, loraLoadTotal: w.loraLoadTotal}
	if !w.cfg.Parking.park(e) {
		return false
	}
	w.log.Info().Int("pid", w.proc.Pid()).Uint64("epoch", w.epoch).
		Msg("engine parked for the node's next cluster member: it keeps its model and KV cache")
	w.proc, w.engine, w.engineStop, w.relayStop = nil, nil, nil, nil
	return true
}

// adopt serves e, an engine its previous worker parked, in place of starting one: the
// relay goes on with its block list and event numbering and sends to this worker's
// Router grain; the worker reports ready once the engine answers its health check.
// false, with e stopped, when there is none to adopt (nil, or its process has exited).
func (w *workerActor) adopt(c actor.Context, e *Parked) bool {
	if e == nil || !e.adopted.CompareAndSwap(false, true) {
		return false
	}
	e.parking.adopted(e)
	select {
	case <-e.proc.Done():
		w.log.Warn().Err(e.proc.Err()).Msg("the parked engine exited: starting a new one")
		e.release()
		return false
	default:
	}
	if e.loras.max != w.cfg.MaxLoras {
		w.log.Warn().Int("max_loras", w.cfg.MaxLoras).Int("parked_max_loras", e.loras.max).
			Msg("the parked engine was started for another number of LoRA adapters: stopping it, starting a new one")
		e.stop()
		return false
	}
	w.epoch, w.proc, w.engine, w.engineStop, w.engCtx, w.engineURL = e.epoch, e.proc, e.engine, e.engineStop, e.engCtx, e.engineURL
	w.bootstrapHost, w.bootstrapPort = e.bootstrapHost, e.bootstrapPort
	w.relay, w.relayStop = e.relay, e.relayStop
	w.relay.in <- relayAdopt{router: w.cfg.Router, owner: &messages.ActorRef{Address: w.self.Address, Id: w.self.Id}}
	e.loras.idle()
	w.loras, w.loraLoadCount, w.loraLoadTotal = e.loras, e.loraLoadCount, e.loraLoadTotal
	// Their receivers are not watched from here: released after the grace.
	now := w.cfg.Now()
	for id, p := range e.pinned {
		if p.lostAt.IsZero() {
			p.lostAt = now
		}
		w.pinned[id] = p
	}
	if err := closeLauncher(e.launcher); err != nil {
		w.log.Warn().Err(err).Msg("the parked engine's launcher close failed")
	}
	w.log.Info().Int("pid", e.proc.Pid()).Uint64("epoch", e.epoch).Str("engine_url", e.engineURL).
		Dur("parked_for", time.Since(e.parkedAt).Round(time.Millisecond)).
		Msg("engine adopted from the node's previous cluster member: its model and KV cache kept")
	w.awaitReady(c, e.epoch, e.proc, e.engine, e.engCtx, true)
	return true
}

// settled reports whether every adapter of the table is held by the engine: none is
// being checked, loaded, unloaded, evicted or restored, or waits for a slot.
func (t *loraTable) settled() bool {
	for _, e := range t.entries {
		if e.state != loraHeld {
			return false
		}
	}
	return true
}

// idle forgets the requests using the adapters (a parked engine's requests ended with
// the worker that parked it).
func (t *loraTable) idle() {
	for _, e := range t.entries {
		e.running = 0
	}
}

// parkedRouter is a parked relay's router: what it sends goes nowhere (its next
// worker's router asks for the whole block list).
type parkedRouter struct{}

func (parkedRouter) Register(*messages.RegisterWorker) (*messages.RegisterAck, error) {
	return &messages.RegisterAck{Accepted: true}, nil
}
func (parkedRouter) Deregister(*messages.DeregisterWorker) (*messages.Ack, error) {
	return &messages.Ack{}, nil
}
func (parkedRouter) PublishEvents(*messages.KvEventBatch) (*messages.EventAck, error) {
	return &messages.EventAck{}, nil
}
func (parkedRouter) PublishDump(*messages.BlockDump) (*messages.Ack, error) {
	return &messages.Ack{}, nil
}
