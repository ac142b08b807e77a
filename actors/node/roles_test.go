package node

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// roles renders a status's workers as "id/role/gpus" (gpus comma-separated) with "!"
// after a stopping one and "?" after one that has no actor yet (a replacement waiting
// for its GPUs).
func roles(st *messages.NodeStatus) string {
	var out []string
	for _, w := range st.Workers {
		gpus := make([]string, len(w.Gpus))
		for i, g := range w.Gpus {
			gpus[i] = strconv.Itoa(int(g))
		}
		s := w.WorkerId + "/" + w.Role + "/" + strings.Join(gpus, ",")
		if w.Stopping {
			s += "!"
		}
		if w.Worker == nil {
			s += "?"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (h *harness) wantRoles(want string) {
	h.t.Helper()
	if got := roles(h.status()); got != want {
		h.t.Fatalf("workers %q, want %q", got, want)
	}
}

func (f *fleet) roleOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.roles[id]
}

// TestDefaultsCompleteAStart: a StartWorker without engine and card starts the node's own
// kind of worker; a role, given or not, reaches NewWorker and the status.
func TestDefaultsCompleteAStart(t *testing.T) {
	h := newHarnessWith(t, 4, false, func(c *Config) {
		c.Defaults = &messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: card("m"), EngineArgs: []string{"--x"}, Role: "decode"}
	})
	r := h.mustStart(&messages.StartWorker{})
	if !slices.Equal(r.Gpus, []int32{0}) {
		t.Fatalf("reply %v, want GPU 0 (the default tensor-parallel size 1)", r)
	}
	h.mustStart(&messages.StartWorker{Role: "prefill", TensorParallelSize: 2})
	if h.f.roleOf("n1-0") != "decode" || h.f.roleOf("n1-1") != "prefill" {
		t.Fatalf("NewWorker roles %v", h.f.roles)
	}
	st := h.status()
	if st.DefaultModel != "m" || st.DefaultEngine != "vllm" {
		t.Fatalf("status defaults %q %q", st.DefaultModel, st.DefaultEngine)
	}
	h.wantRoles("n1-0/decode/0 n1-1/prefill/1,2")
	if r := h.start(&messages.StartWorker{Role: "chef"}); !strings.Contains(r.Error, `role "chef", want aggregated, prefill or decode`) {
		t.Fatalf("bad role: reply %v", r)
	}
	h.wantRoles("n1-0/decode/0 n1-1/prefill/1,2")
}

func TestNoDefaultsMeansAggregatedAndNamedEngine(t *testing.T) {
	h := newHarness(t, 1, false)
	h.mustStart(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.wantRoles("n1-0/aggregated/0")
	if r := h.start(&messages.StartWorker{Role: "decode"}); !strings.Contains(r.Error, "missing engine") {
		t.Fatalf("no defaults, no engine: reply %v", r)
	}
	if _, err := Props(Config{NodeID: "n", NewWorker: h.f.newWorker, Defaults: &messages.StartWorker{Role: "chef"}}); err == nil ||
		!strings.Contains(err.Error(), `default role "chef"`) {
		t.Fatalf("Props with a bad default role: %v", err)
	}
}

// TestDrainThenStop: StopWorker with drain_ms drains the worker (worker.Drain with that
// grace), reports it stopping with its GPUs still pinned meanwhile, stops it once it is
// drained, and answers then.
func TestDrainThenStop(t *testing.T) {
	h := newHarness(t, 2, false)
	h.f.drainHold = make(chan struct{})
	h.f.drainSeen = make(chan string, 1)
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 2, Card: card("m"), Role: "decode"})
	acked := h.sys.Root.RequestFuture(h.node, &messages.StopWorker{WorkerId: "w", DrainMs: 1500}, timeout)
	h.logs.wait(t, "draining worker, then stopping it", "w")
	select { // the node logs the drain before its worker gets it
	case <-h.f.drainSeen:
	case <-time.After(timeout):
		t.Fatal("the worker got no drain")
	}
	h.wantRoles("w/decode/0,1!")
	h.wantPins("0:w 1:w", "w/m/[0 1]")
	h.f.mu.Lock()
	grace := h.f.drains["w"]
	h.f.mu.Unlock()
	if grace != 1500*time.Millisecond {
		t.Fatalf("drain grace %v, want 1.5s", grace)
	}
	close(h.f.drainHold)
	if res, err := acked.Result(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*messages.Ack); !ok {
		t.Fatalf("StopWorker answered %T", res)
	}
	h.wantPins("0:- 1:-", "")
}

// TestDrainOverrunStopsAnyway: a worker that never reports drained is stopped after its
// grace plus the overrun.
func TestDrainOverrunStopsAnyway(t *testing.T) {
	h := newHarnessWith(t, 0, true, func(c *Config) { c.DrainOverrun = time.Millisecond })
	h.f.drainHold = make(chan struct{}) // never closed
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: MockerEngine, Card: card("m")})
	h.sys.Root.Send(h.node, &messages.StopWorker{WorkerId: "w", DrainMs: 1})
	h.logs.wait(t, "worker stopped", "w")
	h.wantRoles("")
}

// TestStopAtOnceWhileDraining: a StopWorker without drain_ms stops a draining worker at
// once; a second drain changes nothing.
func TestStopAtOnceWhileDraining(t *testing.T) {
	h := newHarness(t, 0, true)
	h.f.drainHold = make(chan struct{})
	defer close(h.f.drainHold)
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: MockerEngine, Card: card("m")})
	h.sys.Root.Send(h.node, &messages.StopWorker{WorkerId: "w", DrainMs: int64(time.Hour / time.Millisecond)})
	h.sys.Root.Send(h.node, &messages.StopWorker{WorkerId: "w", DrainMs: int64(time.Hour / time.Millisecond)})
	h.wantRoles("w/aggregated/!")
	h.stop("w")
	h.wantRoles("")
}

// TestReplaceChangesRoleOnTheSameGPUs: a StartWorker with replace_worker_id drains the
// old worker, keeps its GPUs from anyone else meanwhile (the replacement is listed,
// without an actor), then starts the new role on exactly those GPUs.
func TestReplaceChangesRoleOnTheSameGPUs(t *testing.T) {
	h := newHarness(t, 4, false)
	h.f.drainHold = make(chan struct{})
	h.mustStart(&messages.StartWorker{WorkerId: "w1", Engine: "vllm", TensorParallelSize: 1, Card: card("m"), Role: "prefill"})
	h.mustStart(&messages.StartWorker{WorkerId: "w2", Engine: "vllm", TensorParallelSize: 2, Card: card("m"), Role: "prefill"})
	h.mustStart(&messages.StartWorker{WorkerId: "w3", Engine: "vllm", TensorParallelSize: 1, Card: card("m"), Role: "decode"})
	h.stop("w1") // GPU 0 free: a replacement that took any free GPUs could land there
	r := h.mustStart(&messages.StartWorker{WorkerId: "w4", Engine: "vllm", Card: card("m"), Role: "decode",
		ReplaceWorkerId: "w2", DrainMs: 2000})
	if r.WorkerId != "w4" || !slices.Equal(r.Gpus, []int32{1, 2}) || r.Worker != nil {
		t.Fatalf("replace reply %v, want w4 on GPUs 1,2 with no actor yet", r)
	}
	h.logs.wait(t, "draining worker, then stopping it", "w2")
	h.wantRoles("w2/prefill/1,2! w3/decode/3 w4/decode/1,2?")
	if r := h.start(&messages.StartWorker{WorkerId: "w4", Engine: "vllm", TensorParallelSize: 1, Card: card("m")}); !strings.Contains(r.Error, "w4 is already in use") {
		t.Fatalf("start with the waiting replacement's id: %v", r)
	}
	if r := h.start(&messages.StartWorker{Engine: "vllm", TensorParallelSize: 2, Card: card("m")}); !strings.Contains(r.Error, "needs 2 GPUs, 1 free (0)") {
		t.Fatalf("the old worker's GPUs must stay pinned while it drains: %v", r)
	}
	close(h.f.drainHold)
	h.logs.wait(t, "worker started", "w4")
	h.wantRoles("w3/decode/3 w4/decode/1,2")
	h.wantPins("0:- 1:w4 2:w4 3:w3", "w3/m/[3] w4/m/[1 2]")
	h.f.mu.Lock()
	built := h.f.built["w4"]
	h.f.mu.Unlock()
	if !slices.Equal(built, []int{1, 2}) || h.f.roleOf("w4") != "decode" {
		t.Fatalf("NewWorker built w4 on %v as %q", built, h.f.roleOf("w4"))
	}
	if st := h.status(); st.Workers[1].Worker.GetId() != "node/worker/w4" {
		t.Fatalf("replacement ref %v", st.Workers[1].Worker)
	}
}

// TestReplaceRefusals: a replacement that cannot happen is refused before anything
// changes: the old worker keeps running, not stopping.
func TestReplaceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *messages.StartWorker
		err  string
	}{
		{"unknown worker", &messages.StartWorker{Engine: "vllm", Card: card("m"), ReplaceWorkerId: "nobody"}, "replace worker nobody: no such worker"},
		{"same id", &messages.StartWorker{WorkerId: "w", Engine: "vllm", Card: card("m"), ReplaceWorkerId: "w"}, "needs another id"},
		{"bad role", &messages.StartWorker{Engine: "vllm", Card: card("m"), Role: "chef", ReplaceWorkerId: "w"}, `role "chef"`},
		{"negative drain", &messages.StartWorker{Engine: "vllm", Card: card("m"), DrainMs: -1, ReplaceWorkerId: "w"}, "drain_ms -1 < 0"},
		{"no engine", &messages.StartWorker{Card: card("m"), ReplaceWorkerId: "w"}, "missing engine"},
		{"builder error", &messages.StartWorker{Engine: "broken", Card: card("m"), ReplaceWorkerId: "w"}, "no launcher for engine broken"},
		{"id in use", &messages.StartWorker{WorkerId: "v", Engine: "vllm", Card: card("m"), ReplaceWorkerId: "w"}, "v is already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 2, false)
			h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
			h.mustStart(&messages.StartWorker{WorkerId: "v", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
			if r := h.start(tc.req); !strings.Contains(r.Error, tc.err) {
				t.Fatalf("reply %v, want error containing %q", r, tc.err)
			}
			h.wantRoles("v/aggregated/1 w/aggregated/0")
		})
	}
	t.Run("already stopping", func(t *testing.T) {
		h := newHarness(t, 1, false)
		h.f.drainHold = make(chan struct{})
		defer close(h.f.drainHold)
		h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
		h.sys.Root.Send(h.node, &messages.StopWorker{WorkerId: "w", DrainMs: 60000})
		if r := h.start(&messages.StartWorker{Engine: "vllm", Card: card("m"), ReplaceWorkerId: "w"}); !strings.Contains(r.Error, "already stopping") {
			t.Fatalf("reply %v", r)
		}
	})
}

// TestStopCancelsAWaitingReplacement: stopping a replacement before its GPUs are free
// cancels it; the old worker still leaves and its GPUs are free afterwards.
func TestStopCancelsAWaitingReplacement(t *testing.T) {
	h := newHarness(t, 1, false)
	h.f.drainHold = make(chan struct{})
	h.mustStart(&messages.StartWorker{WorkerId: "w", Engine: "vllm", TensorParallelSize: 1, Card: card("m")})
	h.mustStart(&messages.StartWorker{WorkerId: "r", Engine: "vllm", Card: card("m"), Role: "decode", ReplaceWorkerId: "w", DrainMs: 1000})
	h.stop("r")
	h.wantRoles("w/aggregated/0!")
	close(h.f.drainHold)
	h.logs.wait(t, "worker stopped", "w")
	h.wantPins("0:-", "")
}

func TestAllocateExact(t *testing.T) {
	a := NewAllocator([]GPU{{Index: 0}, {Index: 1}, {Index: 2}})
	if _, err := a.Allocate("x", 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		gpus []int
		err  string
	}{
		{"", []int{1}, "empty worker id"},
		{"x", []int{1}, "x is already in use"},
		{"y", []int{0}, "GPU 0, pinned to x"},
		{"y", []int{7}, "GPU 7, which this node does not have"},
		{"y", []int{1, 1}, "GPU 1 twice"},
	} {
		if err := a.AllocateExact(tc.id, tc.gpus); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Fatalf("AllocateExact(%q, %v) = %v, want %q", tc.id, tc.gpus, err, tc.err)
		}
	}
	if !slices.Equal(a.Free(), []int{1, 2}) {
		t.Fatalf("refusals pinned GPUs: free %v", a.Free())
	}
	if err := a.AllocateExact("y", []int{2, 1}); err != nil || a.Owner(1) != "y" || a.Owner(2) != "y" || len(a.Free()) != 0 {
		t.Fatalf("AllocateExact: %v, owners %q %q", err, a.Owner(1), a.Owner(2))
	}
	if err := a.AllocateExact("z", nil); err != nil {
		t.Fatalf("no GPU: %v", err)
	}
	if _, err := a.Allocate("z", 0); err == nil {
		t.Fatal("z's id must be taken by its empty allocation")
	}
}
