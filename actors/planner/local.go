package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
)

// Defaults of the local connector (LocalConfig's zero fields).
const (
	// DefaultMaxWorkersPerNode caps the mock workers of a CPU-only node: each is an engine
	// process, and a laptop runs a few dozen at most without its timing model drifting.
	DefaultMaxWorkersPerNode = 16
	// DefaultDrainGrace: requests of a worker being removed run this long before the rest
	// end migratable and move to other workers (the gateway resumes them).
	DefaultDrainGrace = 30 * time.Second
	// DefaultNodeTimeout bounds a request to one node agent or the Router grain; a member
	// without a node agent answers with a dead letter at once, one that does not answer
	// in this long is left out of the fleet for this decision.
	DefaultNodeTimeout = 2 * time.Second
	// nodeAgentID is the node agent's actor name (actors/node.ActorName).
	nodeAgentID = "node"
	// mockerEngine is the one engine a CPU-only node runs (actors/node.MockerEngine).
	mockerEngine = "mocker"
)

// LocalConfig configures the local connector (docs/reference.md §27.5).
type LocalConfig struct {
	// Router returns the Router grain client of a model: the workers' readiness and
	// active requests. Required.
	Router func(model string) *messages.RouterGrainClient
	// GPUsPerEngine is each pool's tensor-parallel size on nodes with GPUs (missing or 0:
	// 1). CPU-only nodes take mock workers without GPUs.
	GPUsPerEngine map[core.Pool]int
	// MaxWorkersPerNode caps the workers one node agent runs, of every model (0:
	// DefaultMaxWorkersPerNode on CPU-only nodes; a GPU node is bounded by its free GPUs).
	MaxWorkersPerNode int
	// Engine, Card and EngineArgs of the workers started. Empty Engine: the node's own
	// engine, card and arguments (turbine node's --engine and model), and only nodes
	// whose own model is the planned one are used.
	Engine     string
	Card       *messages.ModelCard
	EngineArgs []string
	// DrainGrace is how long the requests of a worker being removed run before the rest
	// end migratable and move (0: DefaultDrainGrace).
	DrainGrace time.Duration
	// NoRoleChange turns role changes off: a pool shrinking while another grows stops
	// one worker and starts another instead of re-roling one on its GPUs.
	NoRoleChange bool
	// Timeout bounds each request to a node agent or Router grain (0: DefaultNodeTimeout).
	// Members that run no node agent simply do not answer within it.
	Timeout time.Duration
	// Nodes lists the node agents to ask; nil: PID{Address: a member's address, Id:
	// "node"} of every cluster member (members without one answer with a dead letter).
	Nodes  func() []*actor.PID
	Logger zerolog.Logger
}

// Local is the connector for node agents (actors/node) on the cluster's members: it
// starts workers on the node with the most free GPUs, drains the least loaded worker of
// a shrinking pool before stopping it, and moves a worker between pools on its GPUs
// when one pool shrinks while another grows.
type Local struct {
	c   *cluster.Cluster
	cfg LocalConfig
}

// NewLocal returns the local connector of cluster c. Errors: nil cluster, no Router, a
// negative cap, grace or timeout, a card without model with an engine given.
func NewLocal(c *cluster.Cluster, cfg LocalConfig) (*Local, error) {
	switch {
	case c == nil:
		return nil, errors.New("planner: local connector: nil cluster")
	case cfg.Router == nil:
		return nil, errors.New("planner: local connector: missing Router (the Router grain client of a model)")
	case cfg.MaxWorkersPerNode < 0 || cfg.DrainGrace < 0 || cfg.Timeout < 0:
		return nil, errors.New("planner: local connector: MaxWorkersPerNode, DrainGrace and Timeout must be ≥ 0")
	case cfg.Engine != "" && cfg.Card.GetModel() == "":
		return nil, fmt.Errorf("planner: local connector: engine %s given without a model card", cfg.Engine)
	}
	for p, n := range cfg.GPUsPerEngine {
		if n < 0 {
			return nil, fmt.Errorf("planner: local connector: %s GPUs per engine %d < 0", p, n)
		}
	}
	if cfg.DrainGrace == 0 {
		cfg.DrainGrace = DefaultDrainGrace
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultNodeTimeout
	}
	return &Local{c: c, cfg: cfg}, nil
}

// Name is "local".
func (l *Local) Name() string { return "local" }

// Fleet lists model's workers on every node agent, joined with the Router grain's stats:
// a worker the node reports stopping is stopping; one registered and ready with the
// Router grain is ready; one on a node and not ready yet is starting. A ready worker
// that no node agent reports (started by hand, or on a node that did not answer in
// time) counts as ready. Errors: the Router grain's stats cannot be read.
func (l *Local) Fleet(ctx context.Context, model string) (core.Fleet, error) {
	s, err := l.snapshot(ctx, model)
	if err != nil {
		return core.Fleet{}, err
	}
	return s.fleet(), nil
}

// Scale starts, drains or re-roles model's workers so that each pool in target reaches
// its size (ready + starting), and returns once every node agent has accepted its step
// (workers start and drain meanwhile). Errors: the snapshot's, a pool no node can take
// a worker of, each refused step (the others are still asked for).
func (l *Local) Scale(ctx context.Context, model string, target map[core.Pool]int) error {
	s, err := l.snapshot(ctx, model)
	if err != nil {
		return err
	}
	ops, errs := plan(s, target, l.cfg)
	for _, op := range ops {
		if err := l.do(ctx, s, op); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// snapshot is what a Fleet or a Scale starts from: the node agents' statuses and the
// Router grain's view of model's workers.
type snapshot struct {
	model string
	nodes []nodeState
	stats map[string]*messages.WorkerStats // worker id -> the Router grain's stats
}

// nodeState is one node agent as a snapshot sees it.
type nodeState struct {
	pid *actor.PID
	st  *messages.NodeStatus
}

func (l *Local) snapshot(ctx context.Context, model string) (*snapshot, error) {
	timeout := l.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("planner: local connector: %w", context.DeadlineExceeded)
	}
	s := &snapshot{model: model, stats: map[string]*messages.WorkerStats{}}
	var statsErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rc := l.cfg.Router(model)
		if rc == nil {
			statsErr = fmt.Errorf("planner: local connector: no Router grain client for %q", model)
			return
		}
		st, err := rc.Stats(&messages.RouterStatsRequest{}, cluster.WithTimeout(timeout))
		if err != nil {
			statsErr = fmt.Errorf("planner: local connector: router stats of %q: %w", model, err)
			return
		}
		for _, w := range st.GetWorkers() {
			s.stats[w.GetWorkerId()] = w
		}
	}()
	pids := l.nodePIDs()
	found := make([]*messages.NodeStatus, len(pids))
	root := l.c.ActorSystem.Root
	for i, pid := range pids {
		wg.Add(1)
		go func(i int, pid *actor.PID) {
			defer wg.Done()
			res, err := root.RequestFuture(pid, &messages.NodeStatusRequest{}, timeout).Result()
			if st, ok := res.(*messages.NodeStatus); ok && err == nil {
				found[i] = st
			} else if err != nil && !errors.Is(err, actor.ErrDeadLetter) {
				l.cfg.Logger.Debug().Err(err).Str("node", pid.String()).Msg("planner: no node status")
			}
		}(i, pid)
	}
	wg.Wait()
	if statsErr != nil {
		return nil, statsErr
	}
	for i, st := range found {
		if st != nil {
			s.nodes = append(s.nodes, nodeState{pid: pids[i], st: st})
		}
	}
	slices.SortFunc(s.nodes, func(a, b nodeState) int { return cmp.Compare(a.st.GetNodeId(), b.st.GetNodeId()) })
	return s, nil
}

// nodePIDs lists the node agents to ask (LocalConfig.Nodes).
func (l *Local) nodePIDs() []*actor.PID {
	if l.cfg.Nodes != nil {
		return l.cfg.Nodes()
	}
	var pids []*actor.PID
	for _, m := range l.c.MemberList.Members().Members() {
		pids = append(pids, actor.NewPID(m.Address(), nodeAgentID))
	}
	return pids
}

// localWorker is one of the model's workers on a node.
type localWorker struct {
	id       string
	node     int // index in snapshot.nodes
	pool     core.Pool
	gpus     int
	ready    bool
	stopping bool
	active   int32 // requests routed to it and not freed (the Router grain's count)
}

// workers lists the model's workers the node agents run.
func (s *snapshot) workers() []localWorker {
	var out []localWorker
	for i, n := range s.nodes {
		for _, w := range n.st.GetWorkers() {
			if w.GetModel() != s.model {
				continue
			}
			pool, err := core.ParsePool(w.GetRole())
			if err != nil {
				pool = core.PoolAggregated // a node that predates roles runs aggregated workers
			}
			st := s.stats[w.GetWorkerId()]
			out = append(out, localWorker{id: w.GetWorkerId(), node: i, pool: pool, gpus: len(w.GetGpus()),
				ready: st.GetReady(), stopping: w.GetStopping(), active: st.GetActiveRequests()})
		}
	}
	return out
}

// fleet counts the snapshot's workers per pool.
func (s *snapshot) fleet() core.Fleet {
	f := core.Fleet{Ready: map[core.Pool]int{}, Starting: map[core.Pool]int{}, Stopping: map[core.Pool]int{}}
	onNode := map[string]bool{}
	for _, w := range s.workers() {
		onNode[w.id] = true
		switch {
		case w.stopping:
			f.Stopping[w.pool]++
		case w.ready:
			f.Ready[w.pool]++
		default:
			f.Starting[w.pool]++
		}
	}
	for id, st := range s.stats {
		if !onNode[id] && st.GetReady() {
			f.Ready[poolOfRole(st.GetRole())]++
		}
	}
	return f
}

// opKind is what one step of a Scale does.
type opKind int

const (
	opStart   opKind = iota + 1 // StartWorker{role} on a node
	opStop                      // StopWorker{drain_ms}
	opReplace                   // StartWorker{role, replace_worker_id}: drain, stop, start on the same GPUs
)

func (k opKind) String() string {
	switch k {
	case opStart:
		return "start"
	case opStop:
		return "drain and stop"
	case opReplace:
		return "change role"
	}
	return fmt.Sprintf("opKind(%d)", int(k))
}

// op is one step of a Scale.
type op struct {
	kind   opKind
	node   int       // index in snapshot.nodes
	pool   core.Pool // the role started (opStart, opReplace)
	tp     int       // GPUs of a started worker (opStart)
	worker string    // the worker stopped or replaced (opStop, opReplace)
}

// plan turns target into steps (pure): per pool, the difference between target and
// ready + starting. When one pool shrinks while another grows, a worker of the
// shrinking pool whose GPUs fit the growing one changes role on its node (unless
// cfg.NoRoleChange); the rest grow by starts on the node with the most free GPUs that
// can hold the pool's tensor-parallel size (CPU-only nodes: mock workers, up to the
// per-node cap) and shrink by draining the least loaded workers (ones still starting
// first, then the fewest active requests). Errors: growth no node can take.
func plan(s *snapshot, target map[core.Pool]int, cfg LocalConfig) ([]op, []error) {
	f := s.fleet()
	workers := s.workers()
	delta := map[core.Pool]int{}
	for _, pool := range core.Pools {
		if n, ok := target[pool]; ok {
			delta[pool] = n - f.Ready[pool] - f.Starting[pool]
		}
	}
	// Victims of each shrinking pool, the cheapest to remove first.
	victims := map[core.Pool][]localWorker{}
	for _, w := range workers {
		if !w.stopping && delta[w.pool] < 0 {
			victims[w.pool] = append(victims[w.pool], w)
		}
	}
	for _, v := range victims {
		slices.SortFunc(v, func(a, b localWorker) int {
			if a.ready != b.ready {
				if a.ready {
					return 1
				}
				return -1
			}
			return cmp.Or(cmp.Compare(a.active, b.active), cmp.Compare(b.id, a.id))
		})
	}
	var ops []op
	var errs []error
	take := func(pool core.Pool, i int) localWorker {
		w := victims[pool][i]
		victims[pool] = slices.Delete(victims[pool], i, i+1)
		delta[pool]++
		return w
	}
	// Role changes first: each saves a placement and keeps the GPUs for the new role.
	if !cfg.NoRoleChange {
		for _, grow := range core.Pools {
			for _, shrink := range core.Pools {
				for delta[grow] > 0 && delta[shrink] < 0 && shrink != grow {
					i := slices.IndexFunc(victims[shrink], func(w localWorker) bool {
						return s.serves(w.node, cfg) && w.gpus == s.tpOn(w.node, grow, cfg)
					})
					if i < 0 {
						break
					}
					w := take(shrink, i)
					delta[grow]--
					ops = append(ops, op{kind: opReplace, node: w.node, pool: grow, worker: w.id})
				}
			}
		}
	}
	// Free GPUs and workers per node, as the starts below use them.
	free := make([]int, len(s.nodes))
	count := make([]int, len(s.nodes))
	for i, n := range s.nodes {
		for _, g := range n.st.GetGpus() {
			if g.GetWorkerId() == "" {
				free[i]++
			}
		}
		count[i] = len(n.st.GetWorkers())
	}
	for _, pool := range core.Pools {
		for ; delta[pool] > 0; delta[pool]-- {
			best := -1
			for i := range s.nodes {
				if !s.canStart(i, pool, free[i], count[i], cfg) {
					continue
				}
				if best < 0 || free[i] > free[best] || (free[i] == free[best] && count[i] < count[best]) {
					best = i
				}
			}
			if best < 0 {
				errs = append(errs, fmt.Errorf("planner: local connector: no node can take %d more %s worker(s) of %s (%s)",
					delta[pool], pool, s.model, s.why(pool, cfg)))
				break
			}
			tp := s.tpOn(best, pool, cfg)
			free[best] -= tp
			count[best]++
			ops = append(ops, op{kind: opStart, node: best, pool: pool, tp: tp})
		}
		for ; delta[pool] < 0 && len(victims[pool]) > 0; delta[pool]++ {
			w := victims[pool][0]
			victims[pool] = victims[pool][1:]
			ops = append(ops, op{kind: opStop, node: w.node, worker: w.id})
		}
		if delta[pool] < 0 {
			errs = append(errs, fmt.Errorf("planner: local connector: %d %s worker(s) of %s to remove run on no node agent that answered",
				-delta[pool], pool, s.model))
		}
	}
	return ops, errs
}

// tpOn is the GPUs a worker of pool gets on node i: none on a CPU-only node, else the
// pool's tensor-parallel size.
func (s *snapshot) tpOn(i int, pool core.Pool, cfg LocalConfig) int {
	if s.nodes[i].st.GetCpuOnly() {
		return 0
	}
	return max(cfg.GPUsPerEngine[pool], 1)
}

// serves says whether node i may start workers of the snapshot's model with cfg's
// engine (or its own).
func (s *snapshot) serves(i int, cfg LocalConfig) bool {
	st := s.nodes[i].st
	engine := cfg.Engine
	if engine == "" {
		if st.GetDefaultModel() != s.model || st.GetDefaultEngine() == "" {
			return false
		}
		engine = st.GetDefaultEngine()
	}
	return !st.GetCpuOnly() || engine == mockerEngine
}

// canStart says whether node i can take one more worker of pool.
func (s *snapshot) canStart(i int, pool core.Pool, free, count int, cfg LocalConfig) bool {
	if !s.serves(i, cfg) {
		return false
	}
	limit := cfg.MaxWorkersPerNode
	if limit == 0 && s.nodes[i].st.GetCpuOnly() {
		limit = DefaultMaxWorkersPerNode
	}
	if limit > 0 && count >= limit {
		return false
	}
	return free >= s.tpOn(i, pool, cfg)
}

// why says, for an error, what the nodes lack.
func (s *snapshot) why(pool core.Pool, cfg LocalConfig) string {
	if len(s.nodes) == 0 {
		return "no node agent answered"
	}
	serving := 0
	for i := range s.nodes {
		if s.serves(i, cfg) {
			serving++
		}
	}
	if serving == 0 {
		return fmt.Sprintf("%d node agent(s), none serving this model with its own engine", len(s.nodes))
	}
	return fmt.Sprintf("%d node(s) serve it; each is full: %d GPU(s) per worker, or the per-node worker cap",
		serving, max(cfg.GPUsPerEngine[pool], 1))
}

// do asks a node agent for one step.
func (l *Local) do(ctx context.Context, s *snapshot, o op) error {
	n := s.nodes[o.node]
	pid := n.pid
	root := l.c.ActorSystem.Root
	drainMs := l.cfg.DrainGrace.Milliseconds()
	log := l.cfg.Logger.Info().Str("model", s.model).Str("node", n.st.GetNodeId()).Str("step", o.kind.String())
	switch o.kind {
	case opStop:
		// The Ack comes once the worker is gone (after its drain): not waited for. The
		// node marks it stopping before it answers any later request of ours.
		root.Send(pid, &messages.StopWorker{WorkerId: o.worker, DrainMs: drainMs})
		log.Str("worker", o.worker).Dur("grace", l.cfg.DrainGrace).Msg("planner: worker draining")
		return nil
	case opStart, opReplace:
		req := &messages.StartWorker{Role: o.pool.String(), Engine: l.cfg.Engine, Card: l.cfg.Card,
			EngineArgs: l.cfg.EngineArgs, TensorParallelSize: int32(o.tp)}
		if o.kind == opReplace {
			req.ReplaceWorkerId, req.DrainMs, req.TensorParallelSize = o.worker, drainMs, 0
		}
		timeout := l.cfg.Timeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
		}
		res, err := root.RequestFuture(pid, req, timeout).Result()
		reply, _ := res.(*messages.StartWorkerReply)
		switch {
		case err != nil:
			return fmt.Errorf("planner: local connector: %s %s worker on node %s: %w", o.kind, o.pool, n.st.GetNodeId(), err)
		case reply == nil:
			return fmt.Errorf("planner: local connector: %s %s worker on node %s: answered %T", o.kind, o.pool, n.st.GetNodeId(), res)
		case reply.GetError() != "":
			return fmt.Errorf("planner: local connector: %s %s worker on node %s: %s", o.kind, o.pool, n.st.GetNodeId(), reply.GetError())
		}
		if o.kind == opReplace {
			log = log.Str("replaces", o.worker)
		}
		log.Str("worker", reply.GetWorkerId()).Str("role", o.pool.String()).Ints32("gpus", reply.GetGpus()).
			Msg("planner: worker starting")
		return nil
	}
	return fmt.Errorf("planner: local connector: unknown step %v", o.kind)
}
