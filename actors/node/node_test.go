package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

const timeout = 10 * time.Second

// crash makes a test worker panic.
type crash struct{}

// fleet records what the node asked of NewWorker and what its test workers went
// through.
type fleet struct {
	mu       sync.Mutex
	built    map[string][]int // worker id -> GPUs it was built with
	restarts int
	hold     chan struct{} // when set, stopping workers wait for it to close
	// drains records each worker.Drain a worker got (its grace); a drained worker reports
	// drained at once, or once drainHold closes when that is set.
	drains    map[string]time.Duration
	drainHold chan struct{}
	drainSeen chan string       // when set, gets each drained worker's id once its drain is recorded
	roles     map[string]string // worker id -> the role NewWorker was asked for
}

func (f *fleet) newWorker(id string, req *messages.StartWorker, gpus []int) (*actor.Props, error) {
	switch req.Engine {
	case "broken":
		return nil, errors.New("no launcher for engine broken")
	case "unspawnable":
		return actor.PropsFromFunc(func(actor.Context) {}, actor.WithSpawnFunc(
			func(*actor.ActorSystem, string, *actor.Props, actor.SpawnerContext) (*actor.PID, error) {
				return nil, errors.New("spawner refused")
			})), nil
	}
	f.mu.Lock()
	f.built[id] = gpus
	if f.roles == nil {
		f.roles = map[string]string{}
	}
	f.roles[id] = req.Role
	hold := f.hold
	f.mu.Unlock()
	return actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *worker.Drain:
			f.mu.Lock()
			if f.drains == nil {
				f.drains = map[string]time.Duration{}
			}
			f.drains[id] = m.Grace
			dh, seen := f.drainHold, f.drainSeen
			f.mu.Unlock()
			if seen != nil {
				seen <- id
			}
			go func() {
				if dh != nil {
					<-dh
				}
				close(m.Done)
			}()
		case crash:
			panic("test worker crashed")
		case *actor.Restarting:
			f.mu.Lock()
			f.restarts++
			f.mu.Unlock()
		case *actor.Stopping:
			if hold != nil {
				<-hold
			}
		}
	}), nil
}

// logEvents is a zerolog writer keeping every event, so that a test can wait for one.
type logEvents struct {
	mu      sync.Mutex
	events  []map[string]any
	changed chan struct{}
}

func (l *logEvents) Write(p []byte) (int, error) {
	var ev map[string]any
	if err := json.Unmarshal(p, &ev); err == nil {
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// wait returns once an event with message msg about worker has been logged.
func (l *logEvents) wait(t *testing.T, msg, worker string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		found := slices.ContainsFunc(l.events, func(ev map[string]any) bool { return ev["message"] == msg && ev["worker"] == worker })
		l.mu.Unlock()
		if found {
			return
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("no %q log event for worker %s within %v", msg, worker, timeout)
		}
	}
}

type harness struct {
	t    *testing.T
	sys  *actor.ActorSystem
	node *actor.PID
	f    *fleet
	logs *logEvents
}

func newHarness(t *testing.T, gpus int, cpuOnly bool) *harness {
	t.Helper()
	return newHarnessWith(t, gpus, cpuOnly, func(*Config) {})
}

// newHarnessWith is newHarness with the node's Config changed by edit before it starts.
func newHarnessWith(t *testing.T, gpus int, cpuOnly bool, edit func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, sys: actor.NewActorSystem(), f: &fleet{built: map[string][]int{}},
		logs: &logEvents{changed: make(chan struct{}, 1)}}
	var list []GPU
	for i := 0; i < gpus; i++ {
		list = append(list, GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H200", MemoryTotalBytes: 141 << 30})
	}
	cfg := Config{NodeID: "n1", GPUs: list, CPUOnly: cpuOnly, NewWorker: h.f.newWorker, Logger: zerolog.New(h.logs)}
	edit(&cfg)
	props, err := Props(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if h.node, err = h.sys.Root.SpawnNamed(props, ActorName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.sys.Root.StopFuture(h.node).Wait()
		h.sys.Shutdown()
	})
	return h
}

func (h *harness) ask(msg proto.Message) any {
	h.t.Helper()
	res, err := h.sys.Root.RequestFuture(h.node, msg, timeout).Result()
	if err != nil {
		h.t.Fatalf("%T: %v", msg, err)
	}
	return res
}

func (h *harness) start(req *messages.StartWorker) *messages.StartWorkerReply {
	h.t.Helper()
	return h.ask(req).(*messages.StartWorkerReply)
}

func (h *harness) mustStart(req *messages.StartWorker) *messages.StartWorkerReply {
	h.t.Helper()
	r := h.start(req)
	if r.Error != "" {
		h.t.Fatalf("start %v: %s", req, r.Error)
	}
	return r
}

func (h *harness) stop(id string) {
	h.t.Helper()
	if _, ok := h.ask(&messages.StopWorker{WorkerId: id}).(*messages.Ack); !ok {
		h.t.Fatalf("stop %s: no Ack", id)
	}
}

func (h *harness) status() *messages.NodeStatus {
	h.t.Helper()
	return h.ask(&messages.NodeStatusRequest{}).(*messages.NodeStatus)
}

// pins renders a status's GPUs as "index:worker" (worker "-" when free) and its
// workers as "id/model/gpus".
func pins(st *messages.NodeStatus) (gpus, workers string) {
	var g, w []string
	for _, x := range st.Gpus {
		owner := x.WorkerId
		if owner == "" {
			owner = "-"
		}
		g = append(g, fmt.Sprintf("%d:%s", x.Index, owner))
	}
	for _, x := range st.Workers {
		w = append(w, fmt.Sprintf("%s/%s/%v", x.WorkerId, x.Model, x.Gpus))
	}
	return strings.Join(g, " "), strings.Join(w, " ")
}

func (h *harness) wantPins(gpus, workers string) {
	h.t.Helper()
	g, w := pins(h.status())
	if g != gpus || w != workers {
		h.t.Fatalf("status:\n gpus    %q\n workers %q\nwant:\n gpus    %q\n workers %q", g, w, gpus, workers)
	}
}

func card(model string) *messages.ModelCard { return &messages.ModelCard{Model: model} }

func TestStartStopStatus(t *testing.T) {
	h := newHarness(t, 4, false)
	r := h.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 2, Card: card("m1")})
	if r.WorkerId != "n1-0" || !slices.Equal(r.Gpus, []int32{0, 1}) ||
		r.Worker.GetAddress() != h.sys.Address() || r.Worker.GetId() != "node/worker/n1-0" {
		t.Fatalf("reply = %v", r)
	}
	h.f.mu.Lock()
	built := h.f.built["n1-0"]
	h.f.mu.Unlock()
	if !slices.Equal(built, []int{0, 1}) {
		t.Fatalf("NewWorker got GPUs %v, want [0 1]", built)
	}
	r = h.mustStart(&messages.StartWorker{WorkerId: "w-mock", Engine: MockerEngine, Card: card("m2")})
	if r.WorkerId != "w-mock" || len(r.Gpus) != 0 || r.Worker.GetId() != "node/worker/w-mock" {
		t.Fatalf("reply = %v", r)
	}
	if r := h.start(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 4, Card: card("m3")}); !strings.Contains(r.Error, "needs 4 GPUs, 2 free (2,3)") {
		t.Fatalf("tp 4 with 2 free: reply %v", r)
	}
	if r := h.start(&messages.StartWorker{WorkerId: "w-mock", Engine: MockerEngine, Card: card("m2")}); !strings.Contains(r.Error, "w-mock is already in use") {
		t.Fatalf("duplicate id: reply %v", r)
	}
	h.wantPins("0:n1-0 1:n1-0 2:- 3:-", "n1-0/m1/[0 1] w-mock/m2/[]")
	st := h.status()
	if st.NodeId != "n1" || st.CpuOnly || st.Gpus[2].Uuid != "GPU-2" || st.Gpus[2].Name != "NVIDIA H200" ||
		st.Gpus[2].MemoryTotalBytes != 141<<30 || st.Workers[1].Worker.GetId() != "node/worker/w-mock" {
		t.Fatalf("status = %v", st)
	}

	h.stop("n1-0")
	h.wantPins("0:- 1:- 2:- 3:-", "w-mock/m2/[]")
	h.stop("n1-0") // already gone: idempotent
	h.stop("nobody")
	r = h.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 4, Card: card("m3")})
	if r.WorkerId != "n1-2" || !slices.Equal(r.Gpus, []int32{0, 1, 2, 3}) {
		t.Fatalf("tp 4 after the stop: reply %v", r)
	}
}

func TestStartRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cpuOnly bool
		req     *messages.StartWorker
		err     string
	}{
		{"no engine", false, &messages.StartWorker{TensorParallelSize: 1, Card: card("m")}, "missing engine"},
		{"no card", false, &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1}, "missing model card"},
		{"no model", false, &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: &messages.ModelCard{}}, "missing model card"},
		{"negative tp", false, &messages.StartWorker{Engine: "vllm", TensorParallelSize: -1, Card: card("m")}, "tensor_parallel_size -1 < 0"},
		{"GPU engine without GPUs", false, &messages.StartWorker{Engine: "vllm", Card: card("m")}, "engine vllm needs tensor_parallel_size ≥ 1"},
		{"slash in id", false, &messages.StartWorker{WorkerId: "a/b", Engine: "vllm", TensorParallelSize: 1, Card: card("m")}, `worker id "a/b"`},
		{"space in id", false, &messages.StartWorker{WorkerId: "a b", Engine: "vllm", TensorParallelSize: 1, Card: card("m")}, `worker id "a b"`},
		{"too many GPUs", false, &messages.StartWorker{Engine: "vllm", TensorParallelSize: 3, Card: card("m")}, "needs 3 GPUs, 2 free (0,1)"},
		{"builder error", false, &messages.StartWorker{Engine: "broken", TensorParallelSize: 1, Card: card("m")}, "worker n1-0: no launcher for engine broken"},
		{"spawn error", false, &messages.StartWorker{Engine: "unspawnable", TensorParallelSize: 2, Card: card("m")}, "spawn worker n1-0: spawner refused"},
		{"CPU node, GPU engine", true, &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: card("m")},
			"engine vllm needs GPUs; this node has none (no NVML driver)"},
		{"CPU node, mocker on GPUs", true, &messages.StartWorker{Engine: MockerEngine, TensorParallelSize: 1, Card: card("m")},
			"tensor_parallel_size 1 needs GPUs; this node has none (no NVML driver)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus := 2
			if tc.cpuOnly {
				gpus = 0
			}
			h := newHarness(t, gpus, tc.cpuOnly)
			if r := h.start(tc.req); !strings.Contains(r.Error, tc.err) || len(r.Gpus) != 0 || r.Worker != nil {
				t.Fatalf("reply = %v, want error containing %q", r, tc.err)
			}
			// Nothing stays pinned: the whole node is still free.
			if tc.cpuOnly {
				h.wantPins("", "")
				h.mustStart(&messages.StartWorker{Engine: MockerEngine, Card: card("m")})
				return
			}
			h.wantPins("0:- 1:-", "")
			h.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 2, Card: card("m")})
		})
	}
}

func TestCPUNodeRunsMockers(t *testing.T) {
	h := newHarness(t, 0, true)
	r := h.mustStart(&messages.StartWorker{Engine: MockerEngine, Card: card("m")})
	if r.WorkerId != "n1-0" || r.Gpus != nil || r.Worker.GetId() != "node/worker/n1-0" {
		t.Fatalf("reply = %v", r)
	}
	h.f.mu.Lock()
	built, ok := h.f.built["n1-0"]
	h.f.mu.Unlock()
	if !ok || built != nil {
		t.Fatalf("NewWorker got GPUs %v (called %v), want nil", built, ok)
	}
	if st := h.status(); !st.CpuOnly || len(st.Gpus) != 0 || len(st.Workers) != 1 {
		t.Fatalf("status = %v", st)
	}
}

func TestCrashedWorkerFreesGPUs(t *testing.T) {
	h := newHarness(t, 4, false)
	r := h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 3, Card: card("m")})
	h.wantPins("0:w 1:w 2:w 3:-", "w/m/[0 1 2]")
	h.sys.Root.Send(&actor.PID{Address: r.Worker.Address, Id: r.Worker.Id}, crash{})
	h.logs.wait(t, "worker stopped on its own", "w")
	h.wantPins("0:- 1:- 2:- 3:-", "")
	h.f.mu.Lock()
	restarts := h.f.restarts
	h.f.mu.Unlock()
	if restarts != 0 {
		t.Fatalf("crashed worker restarted %d times, want stopped", restarts)
	}
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 4, Card: card("m")})
}

// TestStopAnswersWhenGone: the Ack of StopWorker comes once the worker has stopped; until
// then its GPUs stay pinned and its id cannot be reused.
func TestStopAnswersWhenGone(t *testing.T) {
	h := newHarness(t, 2, false)
	h.f.hold = make(chan struct{})
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 2, Card: card("m")})
	stopped := h.sys.Root.RequestFuture(h.node, &messages.StopWorker{WorkerId: "w"}, timeout)
	again := h.sys.Root.RequestFuture(h.node, &messages.StopWorker{WorkerId: "w"}, timeout)
	h.wantPins("0:w 1:w", "w/m/[0 1]")
	if r := h.start(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 1, Card: card("m")}); !strings.Contains(r.Error, "worker w is still stopping") {
		t.Fatalf("start while stopping: reply %v", r)
	}
	close(h.f.hold)
	for _, f := range []*actor.Future{stopped, again} {
		if res, err := f.Result(); err != nil {
			t.Fatal(err)
		} else if _, ok := res.(*messages.Ack); !ok {
			t.Fatalf("StopWorker answered %T, want *messages.Ack", res)
		}
	}
	h.wantPins("0:- 1:-", "")
}

func TestProps(t *testing.T) {
	nw := (&fleet{}).newWorker
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"ok", Config{NodeID: "n", GPUs: []GPU{{Index: 1}, {Index: 0}}, NewWorker: nw}, ""},
		{"CPU mode", Config{NodeID: "n", CPUOnly: true, NewWorker: nw}, ""},
		{"no id", Config{NewWorker: nw}, "empty node id"},
		{"no builder", Config{NodeID: "n"}, "missing NewWorker"},
		{"CPU mode with GPUs", Config{NodeID: "n", CPUOnly: true, GPUs: []GPU{{}}, NewWorker: nw}, "CPU-only node given 1 GPUs"},
		{"repeated index", Config{NodeID: "n", GPUs: []GPU{{Index: 1}, {Index: 1}}, NewWorker: nw}, "GPU index 1 negative or repeated"},
		{"negative index", Config{NodeID: "n", GPUs: []GPU{{Index: -1}}, NewWorker: nw}, "GPU index -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Props(tc.cfg)
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Props: %v, want error containing %q", err, tc.err)
			}
		})
	}
}

// warnings lists the warn-level events logged so far.
func (l *logEvents) warnings() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, ev := range l.events {
		if ev["level"] == "warn" {
			out = append(out, ev)
		}
	}
	return out
}

// A node agent stopped with its process (poisoned, as serve and turbine node do at the
// end) stops its workers itself: each end is logged at info, none as a worker that
// stopped on its own.
func TestStoppingAgentLogsItsWorkersAtInfo(t *testing.T) {
	h := newHarness(t, 2, false)
	h.mustStart(&messages.StartWorker{WorkerId: "a", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.mustStart(&messages.StartWorker{WorkerId: "b", Engine: MockerEngine, Card: card("m")})
	if err := h.sys.Root.PoisonFuture(h.node).Wait(); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, "worker stopped: the node agent is stopping", "a")
	h.logs.wait(t, "worker stopped: the node agent is stopping", "b")
	if w := h.logs.warnings(); len(w) > 0 {
		t.Fatalf("warnings on a normal stop: %v", w)
	}
}

// StopWorkers drains every worker through the agent (so that it knows the stop is
// asked for), waits until they are gone and leaves their GPUs free; a worker that
// really stops on its own is still a warning.
func TestStopWorkersDrainsThroughTheAgent(t *testing.T) {
	h := newHarness(t, 2, false)
	h.mustStart(&messages.StartWorker{WorkerId: "a", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.mustStart(&messages.StartWorker{WorkerId: "b", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	if err := StopWorkers(h.sys.Root, h.node, 1500*time.Millisecond, timeout); err != nil {
		t.Fatal(err)
	}
	h.wantPins("0:- 1:-", "")
	h.f.mu.Lock()
	drains := fmt.Sprint(h.f.drains)
	h.f.mu.Unlock()
	if drains != "map[a:1.5s b:1.5s]" {
		t.Fatalf("drains %s, want both workers drained for 1.5s", drains)
	}
	h.logs.wait(t, "worker stopped", "a")
	h.logs.wait(t, "worker stopped", "b")
	if w := h.logs.warnings(); len(w) > 0 {
		t.Fatalf("warnings on a drained stop: %v", w)
	}
	// A worker stopped behind the agent's back is still reported.
	r := h.mustStart(&messages.StartWorker{WorkerId: "c", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	if err := h.sys.Root.StopFuture(actor.NewPID(r.Worker.GetAddress(), r.Worker.GetId())).Wait(); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, "worker stopped on its own", "c")
	if err := StopWorkers(h.sys.Root, h.node, 0, timeout); err != nil { // nothing left
		t.Fatal(err)
	}
}

// A worker the agent already drains with a long grace (a planner's scale-down) gets the
// shorter grace of a later stop (shutdown): it is drained again with that grace and
// stopped once it and the overrun are over, not after the first grace.
func TestShorterDrainShortensADrainingWorker(t *testing.T) {
	h := newHarnessWith(t, 1, false, func(c *Config) { c.DrainOverrun = 200 * time.Millisecond })
	h.f.drainHold = make(chan struct{}) // the worker never reports drained
	t.Cleanup(func() { close(h.f.drainHold) })
	h.mustStart(&messages.StartWorker{WorkerId: "a", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.sys.Root.Send(h.node, &messages.StopWorker{WorkerId: "a", DrainMs: time.Hour.Milliseconds()})
	h.logs.wait(t, "draining worker, then stopping it", "a")
	if err := StopWorkers(h.sys.Root, h.node, 100*time.Millisecond, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPins("0:-", "")
	h.f.mu.Lock()
	drains := fmt.Sprint(h.f.drains)
	h.f.mu.Unlock()
	if drains != "map[a:100ms]" {
		t.Fatalf("drains %s, want the worker drained again for 100ms", drains)
	}
}

// An agent stopping while parking is open remembers each running worker's id, request
// and GPUs (not one it was stopping); the next agent starts them again as it starts, on
// the same GPUs, and later workers get ids and GPUs around them.
func TestPlacementsRestoredByTheNextAgent(t *testing.T) {
	p := worker.NewParking()
	h := newHarnessWith(t, 4, false, func(c *Config) { c.Parking = p })
	h.mustStart(&messages.StartWorker{WorkerId: "a", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 2, Card: card("m2"), Role: "decode"})
	h.mustStart(&messages.StartWorker{WorkerId: "gone", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.stop("gone")
	h.wantPins("0:a 1:n1-0 2:n1-0 3:-", "a/m/[0] n1-0/m2/[1 2]")
	if got := p.Placements(); len(got) != 0 {
		t.Fatalf("placements remembered while parking is closed: %v", got)
	}
	p.Open()
	if err := h.sys.Root.PoisonFuture(h.node).Wait(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	restore := p.Placements()
	slices.SortFunc(restore, func(x, y worker.Placement) int { return strings.Compare(x.WorkerID, y.WorkerID) })
	var got []string
	for _, pl := range restore {
		got = append(got, fmt.Sprintf("%s/%s/%s/%v", pl.WorkerID, pl.Req.GetCard().GetModel(), pl.Req.GetRole(), pl.GPUs))
	}
	if want := []string{"a/m/aggregated/[0]", "n1-0/m2/decode/[1 2]"}; !slices.Equal(got, want) {
		t.Fatalf("remembered %v, want %v", got, want)
	}

	next := newHarnessWith(t, 4, false, func(c *Config) { c.Restore = restore })
	next.wantPins("0:a 1:n1-0 2:n1-0 3:-", "a/m/[0] n1-0/m2/[1 2]")
	if r := next.f.roles["n1-0"]; r != "decode" {
		t.Fatalf("restored worker built for role %q, want decode", r)
	}
	r := next.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	if r.WorkerId != "n1-1" || !slices.Equal(r.Gpus, []int32{3}) {
		t.Fatalf("a later worker got %s on %v, want n1-1 on [3]", r.WorkerId, r.Gpus)
	}
}

// A placement whose GPUs the next agent cannot give (here: no such GPU) starts its
// worker anew under its id, on GPUs the allocator picks.
func TestRestoreFallsBackToANewStart(t *testing.T) {
	restore := []worker.Placement{{WorkerID: "n1-3", GPUs: []int{7},
		Req: &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: card("m"), Role: "aggregated"}}}
	h := newHarnessWith(t, 2, false, func(c *Config) { c.Restore = restore })
	h.wantPins("0:n1-3 1:-", "n1-3/m/[0]")
}
