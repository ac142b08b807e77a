package node

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// ActorName is the name the node agent is spawned under on its member; remote members
// reach it as PID{Address: <member address>, Id: "node"}.
const ActorName = "node"

// Config of the node agent actor.
type Config struct {
	NodeID string // names workers started without an id: "<node id>-<n>"
	// GPUs the node may pin to workers (DiscoverGPUs); empty, with CPUOnly set, in CPU
	// mode.
	GPUs []GPU
	// CPUOnly marks a node without an NVML driver: only the mock engine, without GPUs,
	// is placed on it.
	CPUOnly bool
	// NewWorker builds the props of one worker actor for req, pinned to gpus (NVML
	// indices, ascending; nil when the worker gets no GPU). The agent spawns it as a
	// child named worker.ActorName(workerID). An error is returned to the requester.
	NewWorker func(workerID string, req *messages.StartWorker, gpus []int) (*actor.Props, error)
	// Defaults completes the StartWorker requests that leave fields empty, so that a
	// planner may ask for "one more of this node's workers" (docs/reference.md §27.5):
	// without engine, the engine, engine_args and (when 0) tensor_parallel_size come
	// from it; without card, its card; without role, its role (else "aggregated").
	// NewWorker sees the completed request. nil: requests must name engine and card.
	Defaults *messages.StartWorker
	// DrainOverrun: a worker drained by StopWorker.drain_ms that has not reported
	// drained within drain_ms plus this is stopped anyway (0: DefaultDrainOverrun).
	DrainOverrun time.Duration
	// Released, when set, is called with a worker's id each time the agent frees what
	// NewWorker was given for it (its GPUs): the worker stopped or never started.
	Released func(workerID string)
	// Parking: when open as the agent stops, it remembers where each of its workers is
	// placed (worker.Parking.Remember) for the node's next cluster member, whose agent
	// starts them again from Restore; the workers park their engines there themselves.
	Parking *worker.Parking
	// Restore are workers to start as the agent starts, with their ids, requests and
	// GPUs (a previous agent's, worker.Parking.Placements). One that cannot have its GPUs
	// or be spawned has its parked engine stopped (Parking.Drop) and is started as a
	// StartWorker with its id would be.
	Restore []worker.Placement
	Logger  zerolog.Logger
}

// DefaultDrainOverrun is Config.DrainOverrun's default.
const DefaultDrainOverrun = 10 * time.Second

// Roles are the worker roles a StartWorker may ask for.
var Roles = []string{"aggregated", "prefill", "decode"}

// Props returns the props of a node agent. Errors: an empty node id, no NewWorker, GPUs
// on a CPU-only node, and negative or repeated GPU indices.
//
// Supervision of the workers: a worker actor that fails (panics) is stopped, not
// restarted. Its Stopping handler stops its engine process, which a restart would skip
// (leaving the old engine running on the GPUs the new one is given); the engine itself is
// restarted by the worker with a capped backoff (docs/actor-library.md §11). A stopped worker's GPUs are freed when
// its Terminated arrives, and whoever placed it may start it again.
func Props(cfg Config) (*actor.Props, error) {
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("node: empty node id")
	case cfg.NewWorker == nil:
		return nil, errors.New("node: missing NewWorker (worker props builder)")
	case cfg.CPUOnly && len(cfg.GPUs) > 0:
		return nil, fmt.Errorf("node: CPU-only node given %d GPUs", len(cfg.GPUs))
	}
	seen := map[int]bool{}
	for _, g := range cfg.GPUs {
		if g.Index < 0 || seen[g.Index] {
			return nil, fmt.Errorf("node: GPU index %d negative or repeated", g.Index)
		}
		seen[g.Index] = true
	}
	log := cfg.Logger.With().Str("node", cfg.NodeID).Logger()
	stop := actor.NewOneForOneStrategy(0, 0, func(reason any) actor.Directive {
		log.Error().Interface("reason", reason).Msg("worker actor failed: stopping it (its GPUs are freed when it is gone)")
		return actor.StopDirective
	})
	if d := cfg.Defaults; d != nil && d.GetRole() != "" && !slices.Contains(Roles, d.GetRole()) {
		return nil, fmt.Errorf("node: default role %q, want aggregated, prefill or decode", d.GetRole())
	}
	if cfg.DrainOverrun <= 0 {
		cfg.DrainOverrun = DefaultDrainOverrun
	}
	return actor.PropsFromProducer(func() actor.Actor { return newAgent(cfg, log) }, actor.WithSupervisor(stop)), nil
}

// placed is one worker the agent runs.
type placed struct {
	pid      *actor.PID
	req      *messages.StartWorker // completed
	model    string
	role     string
	gpus     []int
	stopping bool
	draining bool
	// drainEnd: when a draining worker is stopped at the latest (its grace plus the
	// overrun, wall clock).
	drainEnd time.Time
	waiters  []*actor.PID // StopWorker requesters, answered once the worker is gone
	// replacement starts on this worker's GPUs once it is gone (a role change).
	replacement *pending
}

// pending is a worker accepted to replace another on its GPUs, waiting for it to go.
type pending struct {
	id       string
	replaces string
	req      *messages.StartWorker // completed
	props    *actor.Props
	gpus     []int
}

// drainOver tells the agent that a worker it drains has no request left, or that its
// grace and the overrun are over: it is stopped now.
type drainOver struct {
	id  string
	pid *actor.PID
}

type agent struct {
	cfg     Config
	log     zerolog.Logger
	alloc   *Allocator
	workers map[string]*placed  // worker id -> worker
	pending map[string]*pending // replacement id -> replacement waiting for its GPUs
	byPID   map[string]string   // child PID id -> worker id
	next    int                 // next n of "<node id>-<n>"
	quit    chan struct{}       // closed when the agent stops: drain watchers end
	// quitting: the agent itself is stopping (poisoned or stopped, with its process), so
	// the workers it has not been asked to stop end because it stops them.
	quitting bool
}

func newAgent(cfg Config, log zerolog.Logger) *agent {
	return &agent{cfg: cfg, log: log, alloc: NewAllocator(cfg.GPUs), workers: map[string]*placed{},
		pending: map[string]*pending{}, byPID: map[string]string{}, quit: make(chan struct{})}
}

func (a *agent) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.log.Info().Int("gpus", len(a.cfg.GPUs)).Bool("cpu_only", a.cfg.CPUOnly).Msg("node agent started")
		for _, pl := range a.cfg.Restore {
			a.restore(c, pl)
		}
	case *messages.StartWorker:
		if m.GetReplaceWorkerId() != "" {
			c.Respond(a.replace(c, m))
			return
		}
		c.Respond(a.start(c, m))
	case *messages.StopWorker:
		a.stop(c, m.GetWorkerId(), time.Duration(m.GetDrainMs())*time.Millisecond)
	case *messages.NodeStatusRequest:
		c.Respond(a.status())
	case drainOver:
		if w := a.workers[m.id]; w != nil && w.pid.Equal(m.pid) {
			a.log.Info().Str("worker", m.id).Msg("drained: stopping worker")
			c.Stop(w.pid)
		}
	case *actor.Terminated:
		a.gone(c, m.Who)
	case *actor.Stopping:
		a.quitting = true
		if a.cfg.Parking.IsOpen() {
			for id, w := range a.workers {
				if !w.stopping {
					a.cfg.Parking.Remember(worker.Placement{WorkerID: id, Req: w.req, GPUs: slices.Clone(w.gpus)})
				}
			}
		}
		if len(a.workers) > 0 {
			a.log.Info().Int("workers", len(a.workers)).Msg("node agent stopping: stopping its workers")
		}
		close(a.quit)
	}
}

// complete returns req with the fields it leaves empty taken from Config.Defaults (see
// there), or an error naming a role that is not one of Roles.
func (a *agent) complete(req *messages.StartWorker) (*messages.StartWorker, error) {
	out := proto.Clone(req).(*messages.StartWorker)
	if d := a.cfg.Defaults; d != nil {
		if out.Engine == "" {
			out.Engine, out.EngineArgs = d.GetEngine(), slices.Clone(d.GetEngineArgs())
			if out.TensorParallelSize == 0 {
				out.TensorParallelSize = d.GetTensorParallelSize()
			}
		}
		if out.Card == nil {
			out.Card = d.GetCard()
		}
		if out.Role == "" {
			out.Role = d.GetRole()
		}
	}
	if out.Role == "" {
		out.Role = Roles[0]
	}
	if !slices.Contains(Roles, out.Role) {
		return nil, fmt.Errorf("node: start worker: role %q, want aggregated, prefill or decode", out.Role)
	}
	return out, nil
}

// inUse says whether id names a running worker or a replacement waiting for its GPUs.
func (a *agent) inUse(id string) bool {
	_, running := a.workers[id]
	_, waiting := a.pending[id]
	return running || waiting
}

// start places, builds and spawns one worker. Every failure is answered in the reply and
// leaves nothing pinned.
func (a *agent) start(c actor.Context, req *messages.StartWorker) *messages.StartWorkerReply {
	id := req.GetWorkerId()
	fail := func(err error) *messages.StartWorkerReply {
		a.log.Warn().Err(err).Str("worker", id).Msg("start worker refused")
		return &messages.StartWorkerReply{WorkerId: id, Error: err.Error()}
	}
	req, err := a.complete(req)
	if err != nil {
		return fail(err)
	}
	if err := checkStart(req, a.cfg.CPUOnly); err != nil {
		return fail(err)
	}
	if id == "" {
		id = a.newID()
	}
	if w := a.workers[id]; w != nil && w.stopping {
		return fail(fmt.Errorf("node: worker %s is still stopping; start it again once it is gone", id))
	}
	if _, waiting := a.pending[id]; waiting {
		return fail(fmt.Errorf("node: worker id %s is already in use on this node (a replacement waiting for its GPUs)", id))
	}
	gpus, err := a.alloc.Allocate(id, int(req.GetTensorParallelSize()))
	if err != nil {
		return fail(err)
	}
	pid, err := a.spawn(c, id, req, gpus)
	if err != nil {
		a.release(id)
		return fail(err)
	}
	a.workers[id] = &placed{pid: pid, req: req, model: req.GetCard().GetModel(), role: req.GetRole(), gpus: gpus}
	a.byPID[pid.Id] = id
	a.log.Info().Str("worker", id).Str("engine", req.GetEngine()).Str("model", req.GetCard().GetModel()).
		Str("role", req.GetRole()).Ints("gpus", gpus).Str("pid", pid.Id).Msg("worker started")
	return &messages.StartWorkerReply{WorkerId: id, Gpus: int32s(gpus), Worker: ref(pid)}
}

// restore starts pl, a worker of the node's previous member, with its id on its GPUs.
func (a *agent) restore(c actor.Context, pl worker.Placement) {
	req := pl.Req
	err := a.alloc.AllocateExact(pl.WorkerID, pl.GPUs)
	var pid *actor.PID
	if err == nil {
		if pid, err = a.spawn(c, pl.WorkerID, req, slices.Clone(pl.GPUs)); err != nil {
			a.release(pl.WorkerID)
		}
	}
	if err != nil {
		a.log.Error().Err(err).Str("worker", pl.WorkerID).Msg("worker of the previous member not started again on its GPUs: starting it anew")
		a.cfg.Parking.Drop(pl.WorkerID)
		fresh := proto.Clone(req).(*messages.StartWorker)
		fresh.WorkerId = pl.WorkerID
		a.start(c, fresh)
		return
	}
	a.workers[pl.WorkerID] = &placed{pid: pid, req: req, model: req.GetCard().GetModel(), role: req.GetRole(), gpus: slices.Clone(pl.GPUs)}
	a.byPID[pid.Id] = pl.WorkerID
	a.log.Info().Str("worker", pl.WorkerID).Str("engine", req.GetEngine()).Str("model", req.GetCard().GetModel()).
		Str("role", req.GetRole()).Ints("gpus", pl.GPUs).Str("pid", pid.Id).Msg("worker of the previous member started again")
}

// replace accepts req, a worker that takes over the GPUs of req.replace_worker_id (a
// role change): everything that can fail is checked and its props are built now; then
// the old worker is drained (req.drain_ms) and stopped, and the new one is spawned on
// its GPUs when it is gone (gone). The reply names the new worker and its GPUs (no
// ActorRef yet). Errors leave both workers as they were.
func (a *agent) replace(c actor.Context, req *messages.StartWorker) *messages.StartWorkerReply {
	oldID := req.GetReplaceWorkerId()
	fail := func(err error) *messages.StartWorkerReply {
		a.log.Warn().Err(err).Str("worker", req.GetWorkerId()).Str("replaces", oldID).Msg("replace worker refused")
		return &messages.StartWorkerReply{WorkerId: req.GetWorkerId(), Error: err.Error()}
	}
	old := a.workers[oldID]
	switch {
	case old == nil:
		return fail(fmt.Errorf("node: replace worker %s: no such worker on this node", oldID))
	case old.stopping:
		return fail(fmt.Errorf("node: replace worker %s: it is already stopping", oldID))
	case req.GetWorkerId() == oldID:
		return fail(fmt.Errorf("node: replace worker %s: the replacement needs another id", oldID))
	case req.GetDrainMs() < 0:
		return fail(fmt.Errorf("node: replace worker %s: drain_ms %d < 0", oldID, req.GetDrainMs()))
	}
	full, err := a.complete(req)
	if err != nil {
		return fail(err)
	}
	full.TensorParallelSize = int32(len(old.gpus))
	if err := checkStart(full, a.cfg.CPUOnly); err != nil {
		return fail(err)
	}
	id := full.GetWorkerId()
	if id == "" {
		id = a.newID()
	} else if a.inUse(id) {
		return fail(fmt.Errorf("node: worker id %s is already in use on this node", id))
	}
	props, err := a.cfg.NewWorker(id, full, slices.Clone(old.gpus))
	switch {
	case err != nil:
		return fail(fmt.Errorf("node: worker %s: %w", id, err))
	case props == nil:
		return fail(fmt.Errorf("node: worker %s: NewWorker returned no props", id))
	}
	p := &pending{id: id, replaces: oldID, req: full, props: props, gpus: slices.Clone(old.gpus)}
	a.pending[id] = p
	old.replacement = p
	a.log.Info().Str("worker", id).Str("replaces", oldID).Str("role", full.GetRole()).Str("old_role", old.role).
		Ints("gpus", old.gpus).Msg("replacing worker: draining the old one first")
	a.stopWorker(c, oldID, old, time.Duration(req.GetDrainMs())*time.Millisecond)
	return &messages.StartWorkerReply{WorkerId: id, Gpus: int32s(old.gpus)}
}

// startReplacement spawns p on the GPUs its predecessor freed.
func (a *agent) startReplacement(c actor.Context, p *pending) {
	delete(a.pending, p.id)
	if err := a.alloc.AllocateExact(p.id, p.gpus); err != nil {
		a.log.Error().Err(err).Str("worker", p.id).Msg("replacement not started")
		return
	}
	pid, err := c.SpawnNamed(p.props, worker.ActorName(p.id))
	if err != nil {
		a.release(p.id)
		a.log.Error().Err(err).Str("worker", p.id).Msg("replacement not started")
		return
	}
	a.workers[p.id] = &placed{pid: pid, req: p.req, model: p.req.GetCard().GetModel(), role: p.req.GetRole(), gpus: p.gpus}
	a.byPID[pid.Id] = p.id
	a.log.Info().Str("worker", p.id).Str("replaces", p.replaces).Str("role", p.req.GetRole()).
		Ints("gpus", p.gpus).Str("pid", pid.Id).Msg("worker started")
}

func (a *agent) spawn(c actor.Context, id string, req *messages.StartWorker, gpus []int) (*actor.PID, error) {
	props, err := a.cfg.NewWorker(id, req, gpus)
	if err != nil {
		return nil, fmt.Errorf("node: worker %s: %w", id, err)
	}
	if props == nil {
		return nil, fmt.Errorf("node: worker %s: NewWorker returned no props", id)
	}
	pid, err := c.SpawnNamed(props, worker.ActorName(id))
	if err != nil {
		return nil, fmt.Errorf("node: spawn worker %s: %w", id, err)
	}
	return pid, nil
}

// newID names a worker started without an id: "<node id>-<n>", skipping ids in use.
func (a *agent) newID() string {
	for {
		id := fmt.Sprintf("%s-%d", a.cfg.NodeID, a.next)
		a.next++
		if !a.inUse(id) {
			return id
		}
	}
}

// stop stops a worker, draining it first for drain > 0; the requester gets its Ack once
// the worker is gone and its GPUs are free. Unknown ids are answered at once (stopping
// is idempotent); a replacement still waiting for its GPUs is cancelled at once.
func (a *agent) stop(c actor.Context, id string, drain time.Duration) {
	w := a.workers[id]
	if w == nil {
		if p := a.pending[id]; p != nil {
			delete(a.pending, id)
			if old := a.workers[p.replaces]; old != nil && old.replacement == p {
				old.replacement = nil
			}
			a.log.Info().Str("worker", id).Msg("stop worker: replacement cancelled before it started")
		} else {
			a.log.Info().Str("worker", id).Msg("stop worker: no such worker on this node")
		}
		c.Respond(&messages.Ack{})
		return
	}
	if c.Sender() != nil {
		w.waiters = append(w.waiters, c.Sender())
	}
	a.stopWorker(c, id, w, drain)
}

// stopWorker marks w stopping and drains it (drain > 0: worker.Drain, then a drainOver
// stops it) or stops it. A worker being drained is stopped at once by a stop without
// drain; a second drain that ends sooner than the first drains it again with its shorter
// grace (the worker ends its requests then, and the agent stops it by the new end); a
// second drain that ends later changes nothing.
func (a *agent) stopWorker(c actor.Context, id string, w *placed, drain time.Duration) {
	limit := drain + a.cfg.DrainOverrun
	switch {
	case w.stopping && w.draining && drain > 0 && time.Now().Add(limit).Before(w.drainEnd):
		a.log.Info().Str("worker", id).Dur("grace", drain).Msg("draining worker: grace shortened")
	case w.stopping && (!w.draining || drain > 0):
		return
	case w.stopping: // draining, and now asked to stop at once
		a.log.Info().Str("worker", id).Msg("stopping worker without waiting for its drain")
		c.Stop(w.pid)
		return
	default:
		w.stopping = true
		if drain <= 0 {
			a.log.Info().Str("worker", id).Msg("stopping worker")
			c.Stop(w.pid)
			return
		}
		w.draining = true
		a.log.Info().Str("worker", id).Dur("grace", drain).Msg("draining worker, then stopping it")
	}
	w.drainEnd = time.Now().Add(limit)
	done := make(chan struct{})
	c.Send(w.pid, &worker.Drain{Grace: drain, Done: done})
	self, root, pid, quit := c.Self(), c.ActorSystem().Root, w.pid, a.quit
	go func() {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		case <-quit:
			return
		}
		root.Send(self, drainOver{id: id, pid: pid})
	}()
}

// gone handles a child's Terminated: asked to stop or not, its GPUs are freed.
func (a *agent) gone(c actor.Context, who *actor.PID) {
	id, ok := a.byPID[who.GetId()]
	if !ok {
		return
	}
	w := a.workers[id]
	delete(a.byPID, who.GetId())
	delete(a.workers, id)
	a.release(id)
	switch {
	case w.stopping:
		a.log.Info().Str("worker", id).Ints("gpus_freed", w.gpus).Msg("worker stopped")
	case a.quitting:
		a.log.Info().Str("worker", id).Ints("gpus_freed", w.gpus).Msg("worker stopped: the node agent is stopping")
	default:
		a.log.Warn().Str("worker", id).Ints("gpus_freed", w.gpus).Msg("worker stopped on its own")
	}
	for _, p := range w.waiters {
		c.Send(p, &messages.Ack{})
	}
	if w.replacement != nil {
		a.startReplacement(c, w.replacement)
	}
}

// status lists the GPUs, each with the worker pinned to it, and the workers by id.
func (a *agent) status() *messages.NodeStatus {
	st := &messages.NodeStatus{NodeId: a.cfg.NodeID, CpuOnly: a.cfg.CPUOnly,
		DefaultModel: a.cfg.Defaults.GetCard().GetModel(), DefaultEngine: a.cfg.Defaults.GetEngine()}
	for _, g := range a.alloc.GPUs() {
		st.Gpus = append(st.Gpus, &messages.GpuInfo{Index: int32(g.Index), Uuid: g.UUID, Name: g.Name,
			MemoryTotalBytes: g.MemoryTotalBytes, WorkerId: a.alloc.Owner(g.Index)})
	}
	ids := make([]string, 0, len(a.workers)+len(a.pending))
	for id := range a.workers {
		ids = append(ids, id)
	}
	for id := range a.pending {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if w := a.workers[id]; w != nil {
			st.Workers = append(st.Workers, &messages.NodeWorker{WorkerId: id, Model: w.model, Gpus: int32s(w.gpus),
				Worker: ref(w.pid), Role: w.role, Stopping: w.stopping})
			continue
		}
		// A replacement waiting for its GPUs: listed, without an ActorRef yet.
		p := a.pending[id]
		st.Workers = append(st.Workers, &messages.NodeWorker{WorkerId: id, Model: p.req.GetCard().GetModel(),
			Gpus: int32s(p.gpus), Role: p.req.GetRole()})
	}
	return st
}

func ref(pid *actor.PID) *messages.ActorRef {
	return &messages.ActorRef{Address: pid.GetAddress(), Id: pid.GetId()}
}

func int32s(v []int) []int32 {
	if v == nil {
		return nil
	}
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// StopWorkers has the node agent at pid stop every worker it runs (and cancel the
// replacements waiting), each drained for drain first (StopWorker.drain_ms: it leaves
// routing, its requests run that long, then the rest end as migratable), all at once,
// and returns once the agent has answered for every one or limit has passed. The agent
// asked the stop, so it logs each worker's end as expected (info), not as a worker that
// stopped on its own. Errors: the status or a stop not answered within limit (the
// workers named).
func StopWorkers(root *actor.RootContext, pid *actor.PID, drain, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	res, err := root.RequestFuture(pid, &messages.NodeStatusRequest{}, limit).Result()
	st, _ := res.(*messages.NodeStatus)
	if err != nil || st == nil {
		return fmt.Errorf("node: stop workers: no status from the node agent: %v", err)
	}
	type result struct {
		id  string
		err error
	}
	done := make(chan result, len(st.Workers))
	for _, w := range st.Workers {
		id := w.GetWorkerId()
		f := root.RequestFuture(pid, &messages.StopWorker{WorkerId: id, DrainMs: drain.Milliseconds()}, max(time.Until(deadline), time.Millisecond))
		go func() {
			_, err := f.Result()
			done <- result{id, err}
		}()
	}
	var late []string
	for range st.Workers {
		if r := <-done; r.err != nil {
			late = append(late, r.id)
		}
	}
	if len(late) > 0 {
		sort.Strings(late)
		return fmt.Errorf("node: stop workers: %v not stopped within %v", late, limit)
	}
	return nil
}

// release frees worker id's GPUs and tells Config.Released.
func (a *agent) release(id string) {
	a.alloc.Release(id)
	if a.cfg.Released != nil {
		a.cfg.Released(id)
	}
}
