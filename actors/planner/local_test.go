package planner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/node"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
)

// workers records what the test node agents' workers went through: each worker.Drain
// (its grace) and whether drained workers may report drained yet.
type workers struct {
	mu      sync.Mutex
	drains  map[string]time.Duration
	release chan struct{} // closed: drained workers report drained
}

func (w *workers) newWorker(id string, req *messages.StartWorker, gpus []int) (*actor.Props, error) {
	return actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*worker.Drain); ok {
			w.mu.Lock()
			w.drains[id] = m.Grace
			release := w.release
			w.mu.Unlock()
			go func() {
				<-release
				close(m.Done)
			}()
		}
	}), nil
}

func (w *workers) drained(id string) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.drains[id]
	return g, ok
}

// localCluster is one in-process cluster member hosting the Router kind and node
// agents. Several members in one process race inside the actor library under -race, so
// the agents are spawned side by side on this member ("node-<id>", given to the
// connector through LocalConfig.Nodes); TestLocalFindsNodeAgentsOnMembers covers the
// default, the member's "node".
type localCluster struct {
	t     *testing.T
	front *cluster.Member
	nodes map[string]*actor.PID // node id -> agent
	order []string
	w     *workers
}

func newLocalCluster(t *testing.T) *localCluster {
	t.Helper()
	lc := &localCluster{t: t, nodes: map[string]*actor.PID{},
		w: &workers{drains: map[string]time.Duration{}, release: make(chan struct{})}}
	rk := router.Kind(router.Config{BlockSize: 4, WorkerTTL: time.Hour, Logger: zerolog.Nop()})
	m, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("local-%s-%d", t.Name(), time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop(), Kinds: []*pcluster.Kind{rk}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	lc.front = m
	t.Cleanup(lc.releaseDrains)
	return lc
}

func (lc *localCluster) releaseDrains() {
	lc.w.mu.Lock()
	defer lc.w.mu.Unlock()
	select {
	case <-lc.w.release:
	default:
		close(lc.w.release)
	}
}

// addNode starts a node agent with gpus GPUs (0: CPU-only) whose own workers are of
// model, engine "vllm" (the mocker on a CPU-only node), spawned as name ("" for
// "node-<id>").
func (lc *localCluster) addNode(id string, gpus int, model string, name ...string) {
	lc.t.Helper()
	var list []node.GPU
	for i := 0; i < gpus; i++ {
		list = append(list, node.GPU{Index: i, UUID: id + "-gpu-" + strconv.Itoa(i)})
	}
	engine, tp := "vllm", int32(1)
	if gpus == 0 {
		engine, tp = node.MockerEngine, 0
	}
	props, err := node.Props(node.Config{NodeID: id, GPUs: list, CPUOnly: gpus == 0, NewWorker: lc.w.newWorker,
		Logger: zerolog.Nop(), Defaults: &messages.StartWorker{Engine: engine, TensorParallelSize: tp,
			Card: &messages.ModelCard{Model: model}}})
	if err != nil {
		lc.t.Fatal(err)
	}
	actorName := "node-" + id
	if len(name) > 0 {
		actorName = name[0]
	}
	pid, err := lc.front.System.Root.SpawnNamed(props, actorName)
	if err != nil {
		lc.t.Fatal(err)
	}
	lc.nodes[id] = pid
	lc.order = append(lc.order, id)
}

func (lc *localCluster) status(id string) *messages.NodeStatus {
	lc.t.Helper()
	res, err := lc.front.System.Root.RequestFuture(lc.nodes[id], &messages.NodeStatusRequest{}, waitFor).Result()
	if err != nil {
		lc.t.Fatal(err)
	}
	return res.(*messages.NodeStatus)
}

// start starts a worker on node id directly (as turbine node does at boot).
func (lc *localCluster) start(id string, req *messages.StartWorker) string {
	lc.t.Helper()
	res, err := lc.front.System.Root.RequestFuture(lc.nodes[id], req, waitFor).Result()
	r, _ := res.(*messages.StartWorkerReply)
	if err != nil || r.GetError() != "" {
		lc.t.Fatalf("start on %s: %v %v", id, err, r.GetError())
	}
	return r.WorkerId
}

// waitGone returns once worker id of node is gone: a StopWorker with a drain joins the
// one in progress without changing it and is answered when the worker has stopped.
func (lc *localCluster) waitGone(node, id string) {
	lc.t.Helper()
	res, err := lc.front.System.Root.RequestFuture(lc.nodes[node], &messages.StopWorker{WorkerId: id, DrainMs: 1}, waitFor).Result()
	if _, ok := res.(*messages.Ack); err != nil || !ok {
		lc.t.Fatalf("waiting for %s to go: %v %T", id, err, res)
	}
}

// ready registers worker id as ready with the Router grain of model.
func (lc *localCluster) ready(model, id string, role messages.Role) {
	lc.t.Helper()
	ack, err := messages.GetRouterGrainClient(lc.front.Cluster, model).Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "nowhere", Id: "worker/" + id},
			Card: &messages.ModelCard{Model: model, KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1, Role: role},
		Load: &messages.WorkerLoad{TotalBlocks: 100}}, pcluster.WithTimeout(waitFor))
	if err != nil || !ack.Accepted {
		lc.t.Fatalf("register %s: %v %v", id, ack, err)
	}
}

func (lc *localCluster) connector(cfg LocalConfig) *Local {
	lc.t.Helper()
	c := lc.front.Cluster
	cfg.Router = func(model string) *messages.RouterGrainClient { return messages.GetRouterGrainClient(c, model) }
	cfg.Logger = zerolog.Nop()
	if cfg.Nodes == nil {
		var pids []*actor.PID
		for _, id := range lc.order {
			pids = append(pids, lc.nodes[id])
		}
		cfg.Nodes = func() []*actor.PID { return pids }
	}
	l, err := NewLocal(c, cfg)
	if err != nil {
		lc.t.Fatal(err)
	}
	return l
}

// workersOf renders a node's workers as "role/gpus" in id order, "!" after stopping ones.
func workersOf(st *messages.NodeStatus) string {
	var out []string
	for _, w := range st.Workers {
		g := make([]string, len(w.Gpus))
		for i, x := range w.Gpus {
			g[i] = strconv.Itoa(int(x))
		}
		s := w.Role + "/" + strings.Join(g, ",")
		if w.Stopping {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func wantFleet(t *testing.T, f core.Fleet, pool core.Pool, ready, starting, stopping int) {
	t.Helper()
	if f.Ready[pool] != ready || f.Starting[pool] != starting || f.Stopping[pool] != stopping {
		t.Fatalf("%s: ready %d starting %d stopping %d, want %d %d %d", pool, f.Ready[pool], f.Starting[pool],
			f.Stopping[pool], ready, starting, stopping)
	}
}

// TestLocalStartsWhereGPUsAreFree: starts go to the node with the most free GPUs that
// can hold the pool's tensor-parallel size; nodes of another model and members without a
// node agent are left alone; growth no node can take is an error.
func TestLocalStartsWhereGPUsAreFree(t *testing.T) {
	lc := newLocalCluster(t)
	lc.addNode("a", 4, "m")
	lc.addNode("b", 2, "m")
	lc.addNode("c", 8, "other")
	boot := lc.start("a", &messages.StartWorker{Role: "decode"})
	lc.ready("m", boot, messages.Role_ROLE_DECODE)
	l := lc.connector(LocalConfig{GPUsPerEngine: map[core.Pool]int{core.PoolDecode: 2}})
	ctx := context.Background()
	f, err := l.Fleet(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	wantFleet(t, f, core.PoolDecode, 1, 0, 0)
	if err := l.Scale(ctx, "m", map[core.Pool]int{core.PoolDecode: 3}); err != nil {
		t.Fatal(err)
	}
	// a had 3 free GPUs, b 2: the first start goes to a (1 left), the second to b.
	if got := workersOf(lc.status("a")); got != "decode/0 decode/1,2" {
		t.Fatalf("node a: %s", got)
	}
	if got := workersOf(lc.status("b")); got != "decode/0,1" {
		t.Fatalf("node b: %s", got)
	}
	if got := workersOf(lc.status("c")); got != "" {
		t.Fatalf("node c (another model) got %s", got)
	}
	f, _ = l.Fleet(ctx, "m")
	wantFleet(t, f, core.PoolDecode, 1, 2, 0)
	err = l.Scale(ctx, "m", map[core.Pool]int{core.PoolDecode: 4})
	if err == nil || !strings.Contains(err.Error(), "no node can take 1 more decode worker(s) of m") {
		t.Fatalf("Scale past the GPUs: %v", err)
	}
}

// TestLocalDrainsThenStops: a shrinking pool loses a worker still starting before a
// ready one; each is drained with the configured grace and counted stopping until it is
// gone; nothing else is touched.
func TestLocalDrainsThenStops(t *testing.T) {
	lc := newLocalCluster(t)
	lc.addNode("a", 0, "m")
	var ids []string
	for range 3 {
		ids = append(ids, lc.start("a", &messages.StartWorker{}))
	}
	lc.ready("m", ids[0], messages.Role_ROLE_AGGREGATED)
	lc.ready("m", ids[1], messages.Role_ROLE_AGGREGATED)
	l := lc.connector(LocalConfig{DrainGrace: 7 * time.Second})
	ctx := context.Background()
	f, _ := l.Fleet(ctx, "m")
	wantFleet(t, f, core.PoolAggregated, 2, 1, 0)
	if err := l.Scale(ctx, "m", map[core.Pool]int{core.PoolAggregated: 1}); err != nil {
		t.Fatal(err)
	}
	f, _ = l.Fleet(ctx, "m")
	wantFleet(t, f, core.PoolAggregated, 1, 0, 2)
	// The node agents pass the drains on to their workers after answering: wait for them.
	deadline := time.Now().Add(waitFor)
	drained := 0
	for {
		drained = 0
		for _, id := range ids[:2] {
			if _, ok := lc.w.drained(id); ok {
				drained++
			}
		}
		if _, ok := lc.w.drained(ids[2]); (ok && drained >= 1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g, ok := lc.w.drained(ids[2]); !ok || g != 7*time.Second {
		t.Fatalf("the starting worker %s: drain %v %v", ids[2], g, ok)
	}
	if drained != 1 {
		t.Fatalf("%d ready workers drained, want 1", drained)
	}
	// A second Scale to the same size asks for nothing more: the stopping ones count.
	if err := l.Scale(ctx, "m", map[core.Pool]int{core.PoolAggregated: 1}); err != nil {
		t.Fatal(err)
	}
	lc.releaseDrains()
	// A real worker leaves routing when its drain starts; these test workers do not.
	for _, id := range ids {
		if _, ok := lc.w.drained(id); ok {
			if _, err := messages.GetRouterGrainClient(lc.front.Cluster, "m").Deregister(
				&messages.DeregisterWorker{WorkerId: id}, pcluster.WithTimeout(waitFor)); err != nil {
				t.Fatal(err)
			}
			lc.waitGone("a", id)
		}
	}
	if got := workersOf(lc.status("a")); got != "aggregated/" {
		t.Fatalf("node a after the drains: %s", got)
	}
	f, _ = l.Fleet(ctx, "m")
	wantFleet(t, f, core.PoolAggregated, 1, 0, 0)
}

// TestLocalChangesRoles: prefill shrinks while decode grows: a prefill worker is
// re-roled on its own GPU (drained, then replaced by a decode worker there) instead of
// stopping it and starting a decode worker elsewhere.
func TestLocalChangesRoles(t *testing.T) {
	lc := newLocalCluster(t)
	lc.addNode("a", 3, "m")
	p0 := lc.start("a", &messages.StartWorker{Role: "prefill"})
	p1 := lc.start("a", &messages.StartWorker{Role: "prefill"})
	lc.ready("m", p0, messages.Role_ROLE_PREFILL)
	lc.ready("m", p1, messages.Role_ROLE_PREFILL)
	l := lc.connector(LocalConfig{})
	ctx := context.Background()
	if err := l.Scale(ctx, "m", map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 1}); err != nil {
		t.Fatal(err)
	}
	st := lc.status("a")
	if got := workersOf(st); got != "prefill/0 prefill/1! decode/1" {
		t.Fatalf("node a: %s", got)
	}
	if st.Gpus[2].WorkerId != "" {
		t.Fatalf("GPU 2 taken by %s: the new role must reuse the old worker's GPU", st.Gpus[2].WorkerId)
	}
	f, _ := l.Fleet(ctx, "m")
	wantFleet(t, f, core.PoolPrefill, 1, 0, 1)
	wantFleet(t, f, core.PoolDecode, 0, 1, 0)
	lc.releaseDrains()
	lc.waitGone("a", p1)
	if got := workersOf(lc.status("a")); got != "prefill/0 decode/1" {
		t.Fatalf("node a after the role change: %s", got)
	}
}

// TestLocalCPUNodeCap: a CPU-only node takes mock workers without GPUs, up to the
// per-node cap.
func TestLocalCPUNodeCap(t *testing.T) {
	lc := newLocalCluster(t)
	lc.addNode("a", 0, "m")
	l := lc.connector(LocalConfig{MaxWorkersPerNode: 2})
	err := l.Scale(context.Background(), "m", map[core.Pool]int{core.PoolAggregated: 3})
	if err == nil || !strings.Contains(err.Error(), "no node can take 1 more aggregated worker(s)") {
		t.Fatalf("Scale past the cap: %v", err)
	}
	if got := workersOf(lc.status("a")); got != "aggregated/ aggregated/" {
		t.Fatalf("node a: %s", got)
	}
}

// TestLocalFindsNodeAgentsOnMembers: without LocalConfig.Nodes the connector asks the
// "node" actor of every member.
func TestLocalFindsNodeAgentsOnMembers(t *testing.T) {
	lc := newLocalCluster(t)
	lc.addNode("a", 0, "m", node.ActorName)
	lc.start("a", &messages.StartWorker{})
	c := lc.front.Cluster
	l, err := NewLocal(c, LocalConfig{Logger: zerolog.Nop(),
		Router: func(model string) *messages.RouterGrainClient { return messages.GetRouterGrainClient(c, model) }})
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.Fleet(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	wantFleet(t, f, core.PoolAggregated, 0, 1, 0)
}

// TestLocalCountsWorkersOutsideNodes: a ready worker no node agent reports still serves:
// it counts ready, but cannot be stopped.
func TestLocalCountsWorkersOutsideNodes(t *testing.T) {
	lc := newLocalCluster(t)
	lc.ready("m", "by-hand", messages.Role_ROLE_DECODE)
	l := lc.connector(LocalConfig{})
	f, err := l.Fleet(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	wantFleet(t, f, core.PoolDecode, 1, 0, 0)
	err = l.Scale(context.Background(), "m", map[core.Pool]int{core.PoolDecode: 0})
	if err == nil || !strings.Contains(err.Error(), "run on no node agent that answered") {
		t.Fatalf("Scale: %v", err)
	}
}

func TestNewLocalRefusals(t *testing.T) {
	lc := newLocalCluster(t)
	r := func(string) *messages.RouterGrainClient { return nil }
	for _, tc := range []struct {
		name string
		c    *pcluster.Cluster
		cfg  LocalConfig
		err  string
	}{
		{"no cluster", nil, LocalConfig{Router: r}, "nil cluster"},
		{"no router", lc.front.Cluster, LocalConfig{}, "missing Router"},
		{"negative cap", lc.front.Cluster, LocalConfig{Router: r, MaxWorkersPerNode: -1}, "must be ≥ 0"},
		{"engine without card", lc.front.Cluster, LocalConfig{Router: r, Engine: "vllm"}, "without a model card"},
		{"negative GPUs", lc.front.Cluster, LocalConfig{Router: r, GPUsPerEngine: map[core.Pool]int{core.PoolDecode: -1}}, "decode GPUs per engine -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewLocal(tc.c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("NewLocal: %v, want %q", err, tc.err)
			}
		})
	}
}

// snap builds a snapshot for plan: nodes as "id:gpus" (0: CPU-only, own model m, vllm or
// mocker) with workers "node/id/role/gpus/ready/active".
func snap(nodes []string, ws ...string) *snapshot {
	s := &snapshot{model: "m", stats: map[string]*messages.WorkerStats{}}
	idx := map[string]int{}
	for i, n := range nodes {
		id, g, _ := strings.Cut(n, ":")
		gpus, _ := strconv.Atoi(g)
		st := &messages.NodeStatus{NodeId: id, CpuOnly: gpus == 0, DefaultModel: "m", DefaultEngine: "vllm"}
		if gpus == 0 {
			st.DefaultEngine = mockerEngine
		}
		for j := range gpus {
			st.Gpus = append(st.Gpus, &messages.GpuInfo{Index: int32(j)})
		}
		s.nodes = append(s.nodes, nodeState{pid: actor.NewPID("nowhere", id), st: st})
		idx[id] = i
	}
	for _, w := range ws {
		f := strings.Split(w, "/")
		n := s.nodes[idx[f[0]]].st
		nw := &messages.NodeWorker{WorkerId: f[1], Model: "m", Role: f[2]}
		count, _ := strconv.Atoi(f[3])
		for _, g := range n.Gpus {
			if count > 0 && g.WorkerId == "" {
				g.WorkerId = f[1]
				nw.Gpus = append(nw.Gpus, g.Index)
				count--
			}
		}
		n.Workers = append(n.Workers, nw)
		active, _ := strconv.Atoi(f[5])
		s.stats[f[1]] = &messages.WorkerStats{WorkerId: f[1], Ready: f[4] == "ready", ActiveRequests: int32(active)}
	}
	return s
}

// render writes a plan's steps as "start node role tp", "stop worker", "replace worker role".
func render(s *snapshot, ops []op) string {
	var out []string
	for _, o := range ops {
		switch o.kind {
		case opStart:
			out = append(out, fmt.Sprintf("start %s %s %d", s.nodes[o.node].st.NodeId, o.pool, o.tp))
		case opStop:
			out = append(out, "stop "+o.worker)
		case opReplace:
			out = append(out, fmt.Sprintf("replace %s %s", o.worker, o.pool))
		}
	}
	return strings.Join(out, "; ")
}

func TestPlan(t *testing.T) {
	tp2 := map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 2, core.PoolAggregated: 1}
	for _, tc := range []struct {
		name   string
		s      *snapshot
		target map[core.Pool]int
		cfg    LocalConfig
		want   string
		err    string
	}{
		{"nothing to do", snap([]string{"a:2"}, "a/w1/aggregated/1/ready/0"), map[core.Pool]int{core.PoolAggregated: 1}, LocalConfig{}, "", ""},
		{"most free GPUs first, updated as it goes", snap([]string{"a:4", "b:3"}, "a/w1/aggregated/1/ready/0"),
			map[core.Pool]int{core.PoolAggregated: 5}, LocalConfig{},
			"start b aggregated 1; start a aggregated 1; start b aggregated 1; start a aggregated 1", ""},
		{"tensor-parallel size must fit", snap([]string{"a:3", "b:2"}, "a/w1/prefill/1/ready/0"),
			map[core.Pool]int{core.PoolDecode: 2}, LocalConfig{GPUsPerEngine: tp2},
			"start b decode 2; start a decode 2", ""},
		{"not enough GPUs", snap([]string{"a:1"}), map[core.Pool]int{core.PoolDecode: 1}, LocalConfig{GPUsPerEngine: tp2},
			"", "no node can take 1 more decode worker(s) of m (1 node(s) serve it; each is full: 2 GPU(s) per worker"},
		{"starting first, then least active", snap([]string{"a:4"}, "a/w1/aggregated/1/ready/5", "a/w2/aggregated/1/ready/1",
			"a/w3/aggregated/1/starting/0", "a/w4/aggregated/1/ready/2"),
			map[core.Pool]int{core.PoolAggregated: 1}, LocalConfig{}, "stop w3; stop w2; stop w4", ""},
		{"role change on fitting GPUs", snap([]string{"a:4"}, "a/p1/prefill/1/ready/0", "a/p2/prefill/1/ready/3", "a/d1/decode/1/ready/0"),
			map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 2}, LocalConfig{}, "replace p1 decode", ""},
		{"role change off", snap([]string{"a:4"}, "a/p1/prefill/1/ready/0", "a/p2/prefill/1/ready/3"),
			map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 1}, LocalConfig{NoRoleChange: true}, "stop p1; start a decode 1", ""},
		{"GPUs that do not fit the new role: stop and start", snap([]string{"a:4"}, "a/p1/prefill/1/ready/0", "a/p2/prefill/1/ready/0"),
			map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 1}, LocalConfig{GPUsPerEngine: tp2}, "stop p2; start a decode 2", ""},
		{"CPU node: mock workers up to the default cap", snap([]string{"c:0"}), map[core.Pool]int{core.PoolAggregated: DefaultMaxWorkersPerNode + 1},
			LocalConfig{}, strings.TrimSuffix(strings.Repeat("start c aggregated 0; ", DefaultMaxWorkersPerNode), "; "),
			"no node can take 1 more aggregated worker(s)"},
		{"CPU node and a real engine", snap([]string{"c:0"}), map[core.Pool]int{core.PoolAggregated: 1},
			LocalConfig{Engine: "vllm", Card: &messages.ModelCard{Model: "m"}}, "", "none serving this model"},
		{"no nodes", snap(nil), map[core.Pool]int{core.PoolAggregated: 1}, LocalConfig{}, "", "no node agent answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, errs := plan(tc.s, tc.target, tc.cfg)
			if got := render(tc.s, ops); got != tc.want {
				t.Fatalf("plan:\n got %s\nwant %s", got, tc.want)
			}
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if all := strings.Join(msgs, "\n"); (tc.err == "") != (all == "") || !strings.Contains(all, tc.err) {
				t.Fatalf("errors %q, want %q", all, tc.err)
			}
		})
	}
}
