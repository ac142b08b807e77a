package node

import (
	"errors"
	"fmt"
	"sort"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/messages"
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
	Logger    zerolog.Logger
}

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
	return actor.PropsFromProducer(func() actor.Actor { return newAgent(cfg, log) }, actor.WithSupervisor(stop)), nil
}

// placed is one worker the agent runs.
type placed struct {
	pid      *actor.PID
	model    string
	gpus     []int
	stopping bool
	waiters  []*actor.PID // StopWorker requesters, answered once the worker is gone
}

type agent struct {
	cfg     Config
	log     zerolog.Logger
	alloc   *Allocator
	workers map[string]*placed // worker id -> worker
	byPID   map[string]string  // child PID id -> worker id
	next    int                // next n of "<node id>-<n>"
}

func newAgent(cfg Config, log zerolog.Logger) *agent {
	return &agent{cfg: cfg, log: log, alloc: NewAllocator(cfg.GPUs), workers: map[string]*placed{}, byPID: map[string]string{}}
}

func (a *agent) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.log.Info().Int("gpus", len(a.cfg.GPUs)).Bool("cpu_only", a.cfg.CPUOnly).Msg("node agent started")
	case *messages.StartWorker:
		c.Respond(a.start(c, m))
	case *messages.StopWorker:
		a.stop(c, m.GetWorkerId())
	case *messages.NodeStatusRequest:
		c.Respond(a.status())
	case *actor.Terminated:
		a.gone(c, m.Who)
	}
}

// start places, builds and spawns one worker. Every failure is answered in the reply and
// leaves nothing pinned.
func (a *agent) start(c actor.Context, req *messages.StartWorker) *messages.StartWorkerReply {
	id := req.GetWorkerId()
	fail := func(err error) *messages.StartWorkerReply {
		a.log.Warn().Err(err).Str("worker", id).Msg("start worker refused")
		return &messages.StartWorkerReply{WorkerId: id, Error: err.Error()}
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
	gpus, err := a.alloc.Allocate(id, int(req.GetTensorParallelSize()))
	if err != nil {
		return fail(err)
	}
	pid, err := a.spawn(c, id, req, gpus)
	if err != nil {
		a.alloc.Release(id)
		return fail(err)
	}
	a.workers[id] = &placed{pid: pid, model: req.GetCard().GetModel(), gpus: gpus}
	a.byPID[pid.Id] = id
	a.log.Info().Str("worker", id).Str("engine", req.GetEngine()).Str("model", req.GetCard().GetModel()).
		Ints("gpus", gpus).Str("pid", pid.Id).Msg("worker started")
	return &messages.StartWorkerReply{WorkerId: id, Gpus: int32s(gpus), Worker: ref(pid)}
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
		if _, used := a.workers[id]; !used {
			return id
		}
	}
}

// stop stops a worker; the requester gets its Ack once the worker is gone and its GPUs
// are free. Unknown ids are answered at once (stopping is idempotent).
func (a *agent) stop(c actor.Context, id string) {
	w := a.workers[id]
	if w == nil {
		a.log.Info().Str("worker", id).Msg("stop worker: no such worker on this node")
		c.Respond(&messages.Ack{})
		return
	}
	if c.Sender() != nil {
		w.waiters = append(w.waiters, c.Sender())
	}
	if !w.stopping {
		w.stopping = true
		a.log.Info().Str("worker", id).Msg("stopping worker")
		c.Stop(w.pid)
	}
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
	a.alloc.Release(id)
	if w.stopping {
		a.log.Info().Str("worker", id).Ints("gpus_freed", w.gpus).Msg("worker stopped")
	} else {
		a.log.Warn().Str("worker", id).Ints("gpus_freed", w.gpus).Msg("worker stopped on its own")
	}
	for _, p := range w.waiters {
		c.Send(p, &messages.Ack{})
	}
}

// status lists the GPUs, each with the worker pinned to it, and the workers by id.
func (a *agent) status() *messages.NodeStatus {
	st := &messages.NodeStatus{NodeId: a.cfg.NodeID, CpuOnly: a.cfg.CPUOnly}
	for _, g := range a.alloc.GPUs() {
		st.Gpus = append(st.Gpus, &messages.GpuInfo{Index: int32(g.Index), Uuid: g.UUID, Name: g.Name,
			MemoryTotalBytes: g.MemoryTotalBytes, WorkerId: a.alloc.Owner(g.Index)})
	}
	ids := make([]string, 0, len(a.workers))
	for id := range a.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		w := a.workers[id]
		st.Workers = append(st.Workers, &messages.NodeWorker{WorkerId: id, Model: w.model, Gpus: int32s(w.gpus), Worker: ref(w.pid)})
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
