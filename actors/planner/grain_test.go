package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
)

const waitFor = 10 * time.Second

// fakeConn is a Connector whose fleet a test sets and whose Scale calls it reads.
type fakeConn struct {
	mu       sync.Mutex
	fleet    core.Fleet
	fleetErr error
	scaleErr error
	scales   chan map[core.Pool]int
}

func newFakeConn(ready map[core.Pool]int) *fakeConn {
	return &fakeConn{fleet: core.Fleet{Ready: ready, Starting: map[core.Pool]int{}, Stopping: map[core.Pool]int{}},
		scales: make(chan map[core.Pool]int, 16)}
}

func (f *fakeConn) Name() string { return "fake" }

func (f *fakeConn) Fleet(context.Context, string) (core.Fleet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fleet, f.fleetErr
}

func (f *fakeConn) Scale(_ context.Context, _ string, target map[core.Pool]int) error {
	f.mu.Lock()
	err := f.scaleErr
	f.mu.Unlock()
	f.scales <- target
	return err
}

func (f *fakeConn) set(fn func(*fakeConn)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// decided is one Config.Decided call.
type decided struct {
	model string
	d     core.Decision
	err   error
}

// clock is the grain's virtual clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// grainHarness is an in-process cluster hosting the Planner kind (with a fake
// connector, a virtual clock and ticks the test sends) and the Router kind.
type grainHarness struct {
	t       *testing.T
	member  *cluster.Member
	conn    Connector
	clock   *clock
	mu      sync.Mutex
	ticks   map[string]chan time.Time
	decided chan decided
}

func newGrainHarness(t *testing.T, pc core.Config, conn Connector) *grainHarness {
	t.Helper()
	return newGrainHarnessLog(t, pc, conn, zerolog.Nop())
}

// newGrainHarnessLog is newGrainHarness with the grain logging to log.
func newGrainHarnessLog(t *testing.T, pc core.Config, conn Connector, log zerolog.Logger) *grainHarness {
	t.Helper()
	h := &grainHarness{t: t, conn: conn, clock: &clock{t: time.Unix(10_000, 0)}, ticks: map[string]chan time.Time{},
		decided: make(chan decided, 16)}
	var cl atomic.Pointer[pcluster.Cluster]
	cfg := Config{Planner: pc, Connector: conn, Logger: log, Now: h.clock.now,
		Router: func(model string) *messages.RouterGrainClient { return messages.GetRouterGrainClient(cl.Load(), model) },
		Ticker: func(model string, _ time.Duration) (<-chan time.Time, func()) {
			h.mu.Lock()
			defer h.mu.Unlock()
			c := make(chan time.Time)
			h.ticks[model] = c
			return c, func() {}
		},
		Decided: func(model string, d core.Decision, err error) { h.decided <- decided{model, d, err} },
	}
	rk := router.Kind(router.Config{BlockSize: 4, WorkerTTL: time.Hour, Logger: zerolog.Nop()})
	m, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("planner-%s-%d", t.Name(), time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop(), Kinds: []*pcluster.Kind{Kind(cfg), rk}})
	if err != nil {
		t.Fatal(err)
	}
	cl.Store(m.Cluster)
	t.Cleanup(m.Stop)
	h.member = m
	return h
}

func (h *grainHarness) client(model string) *messages.PlannerGrainClient {
	return messages.GetPlannerGrainClient(h.member.Cluster, model)
}

func (h *grainHarness) status(model string) *messages.PlannerStatus {
	h.t.Helper()
	st, err := h.client(model).Status(&messages.PlannerStatusRequest{}, pcluster.WithTimeout(waitFor))
	if err != nil {
		h.t.Fatalf("status: %v", err)
	}
	return st
}

// tick makes model's grain decide (activating it first) and returns what Decided got.
func (h *grainHarness) tick(model string) decided {
	h.t.Helper()
	h.status(model) // the grain is active: its ticker exists
	h.mu.Lock()
	c := h.ticks[model]
	h.mu.Unlock()
	select {
	case c <- h.clock.now():
	case <-time.After(waitFor):
		h.t.Fatal("the grain's timer goroutine took no tick")
	}
	select {
	case d := <-h.decided:
		return d
	case <-time.After(waitFor):
		h.t.Fatal("no decision after the tick")
	}
	return decided{}
}

// register makes a worker of model ready with the Router grain, at a KV usage.
func (h *grainHarness) register(model, id string, role messages.Role, kvUsage float64) {
	h.t.Helper()
	ack, err := messages.GetRouterGrainClient(h.member.Cluster, model).Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "nowhere", Id: "worker/" + id},
			Card: &messages.ModelCard{Model: model, KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1, Role: role},
		Load: &messages.WorkerLoad{TotalBlocks: 100, KvUsage: kvUsage}}, pcluster.WithTimeout(waitFor))
	if err != nil || !ack.Accepted {
		h.t.Fatalf("register %s: %v %v", id, ack, err)
	}
}

func loadConfig() core.Config {
	c := core.DefaultConfig()
	c.Mode = core.ModeLoad
	return c
}

func noScale(t *testing.T, c *fakeConn) {
	t.Helper()
	select {
	case target := <-c.scales:
		t.Fatalf("Scale called with %v, want no call", target)
	default:
	}
}

// syncBuffer is a log sink safe for the grain's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGrainScalesOnTheTick: load mode, two aggregated workers over the KV target: the
// tick's decision asks the connector for a third, and the status and the decision's log
// line explain it with the same reason; load mode shows no predictor and no correction
// factor.
func TestGrainScalesOnTheTick(t *testing.T) {
	conn := newFakeConn(map[core.Pool]int{core.PoolAggregated: 2})
	var logs syncBuffer
	h := newGrainHarnessLog(t, loadConfig(), conn, zerolog.New(&logs))
	h.register("m", "w0", messages.Role_ROLE_AGGREGATED, 0.95)
	h.register("m", "w1", messages.Role_ROLE_AGGREGATED, 0.9)
	if st := h.status("m"); st.Decisions != 0 || st.AtUnixMs != 0 || st.Mode != "load" || st.Connector != "fake" {
		t.Fatalf("status before the first tick: %v", st)
	}
	got := h.tick("m")
	if got.err != nil || got.model != "m" || got.d.Target[core.PoolAggregated] != 3 {
		t.Fatalf("decision %+v (err %v), want target 3", got.d, got.err)
	}
	select {
	case target := <-conn.scales:
		if len(target) != 1 || target[core.PoolAggregated] != 3 {
			t.Fatalf("Scale(%v), want aggregated=3", target)
		}
	default:
		t.Fatal("Scale not called")
	}
	st := h.status("m")
	if st.Decisions != 1 || st.AtUnixMs != h.clock.now().UnixMilli() || st.Error != "" || st.Held || st.Predictor != "" ||
		st.CorrectionPrefill != 0 || st.CorrectionDecode != 0 ||
		st.TtftTargetMs != core.DefaultTTFTTargetMs || st.ItlTargetMs != core.DefaultITLTargetMs ||
		st.GpuBudget != core.DefaultGPUBudget || st.MinWorkers != core.DefaultMinWorkers {
		t.Fatalf("status %v", st)
	}
	if len(st.Pools) != 1 || st.Pools[0].Pool != "aggregated" || st.Pools[0].Ready != 2 || st.Pools[0].Wanted != 3 ||
		st.Pools[0].Target != 3 || st.Pools[0].GpusPerEngine != 1 {
		t.Fatalf("pools %v", st.Pools)
	}
	terms := map[string]float64{}
	for _, term := range st.Terms {
		terms[term.Name] = term.Value
	}
	if terms["aggregated_over"] != 2 || terms["aggregated_kv_usage_max"] != 0.95 {
		t.Fatalf("terms %v", st.Terms)
	}
	started := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"planner started"`) {
			started++
			if strings.Contains(l, `"predictor"`) {
				t.Errorf("load mode's start line names a predictor: %s", l)
			}
		}
	}
	if started != 1 {
		t.Errorf("%d \"planner started\" lines, want 1:\n%s", started, logs.String())
	}
	const why = "aggregated 2 → 3: every worker at or over the KV-usage threshold (0.8)"
	if st.Reason != why {
		t.Fatalf("status reason %q, want %q", st.Reason, why)
	}
	var line struct {
		Message, Reason string
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"planner decision"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.Reason != why {
		t.Fatalf("the decision's log line has reason %q, want %q (logs: %s)", line.Reason, why, logs.String())
	}
}

// TestGrainStartsFromTheFleetAsItIs: a new grain (activated anew, no data) holds every
// pool at its size and asks nothing of the connector: no scale to zero on activation.
func TestGrainStartsFromTheFleetAsItIs(t *testing.T) {
	conn := newFakeConn(map[core.Pool]int{core.PoolAggregated: 3})
	h := newGrainHarness(t, loadConfig(), conn)
	got := h.tick("m")
	if !got.d.Held || got.d.Target[core.PoolAggregated] != 3 {
		t.Fatalf("decision %+v, want held at 3", got.d)
	}
	noScale(t, conn)
	if st := h.status("m"); !st.Held || st.Reason == "" || st.Pools[0].Target != 3 {
		t.Fatalf("status %v", st)
	}
}

func report(frontend string, requests uint32, isl, osl float64, ttftMs ...float64) *messages.PlannerReport {
	var h core.Histogram
	for _, v := range ttftMs {
		h.Add(v)
	}
	return &messages.PlannerReport{FrontendId: frontend, Model: "m", DurationMs: 5000, Requests: requests,
		IslSum: isl, OslSum: osl, TtftBuckets: h.Counts[:]}
}

// TestGrainMergesReports: reports of two frontends (one twice) are merged into the
// window the next decision observes; the window starts empty again after it.
func TestGrainMergesReports(t *testing.T) {
	conn := newFakeConn(map[core.Pool]int{core.PoolAggregated: 1})
	h := newGrainHarness(t, loadConfig(), conn)
	c := h.client("m")
	for _, r := range []*messages.PlannerReport{
		report("f1", 2, 200, 20, 100, 100),
		report("f1", 1, 100, 10, 100),
		report("f2", 7, 700, 70, 100, 100, 100, 100, 100, 100, 900),
	} {
		if _, err := c.Report(r, pcluster.WithTimeout(waitFor)); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.advance(5 * time.Second)
	h.tick("m")
	st := h.status("m")
	// 10 TTFTs: nine of 100 ms, one of 900: the p90 is the ninth, in 100 ms's bucket.
	if st.Frontends != 2 || st.Requests != 10 || st.IslMean != 100 || st.OslMean != 10 ||
		st.TtftP90Ms < 100 || st.TtftP90Ms > 106 {
		t.Fatalf("observation: frontends %d requests %d isl %v osl %v ttft p90 %v", st.Frontends, st.Requests,
			st.IslMean, st.OslMean, st.TtftP90Ms)
	}
	h.tick("m")
	if st := h.status("m"); st.Frontends != 0 || st.Requests != 0 || st.Decisions != 2 {
		t.Fatalf("second window: frontends %d requests %d decisions %d", st.Frontends, st.Requests, st.Decisions)
	}
}

// TestGrainRefusesBadReports: each bad report is refused with an error naming what is
// wrong, and merges nothing: the window holds the good report alone.
func TestGrainRefusesBadReports(t *testing.T) {
	conn := newFakeConn(map[core.Pool]int{core.PoolAggregated: 1})
	h := newGrainHarness(t, loadConfig(), conn)
	c := h.client("m")
	withBuckets := func(n int) *messages.PlannerReport {
		r := report("f", 1, 1, 1)
		r.ItlBuckets = make([]uint64, n)
		return r
	}
	edit := func(f func(*messages.PlannerReport)) *messages.PlannerReport {
		r := report("f", 1, 10, 10, 50)
		f(r)
		return r
	}
	for _, tc := range []struct {
		name string
		r    *messages.PlannerReport
		err  string
	}{
		{"another model", edit(func(r *messages.PlannerReport) { r.Model = "other" }), `of model "other", this planner plans "m"`},
		{"no frontend", edit(func(r *messages.PlannerReport) { r.FrontendId = "" }), "missing frontend_id"},
		{"too many buckets", withBuckets(core.NumBuckets + 1), "itl_buckets: planner: 301 latency buckets, want at most 300"},
		{"NaN sum", edit(func(r *messages.PlannerReport) { r.IslSum = math.NaN() }), "isl_sum NaN, want finite and ≥ 0"},
		{"infinite sum", edit(func(r *messages.PlannerReport) { r.OslSum = math.Inf(1) }), "osl_sum +Inf"},
		{"negative sum", edit(func(r *messages.PlannerReport) { r.IslSum = -5 }), "isl_sum -5"},
		{"negative duration", edit(func(r *messages.PlannerReport) { r.DurationMs = -1 }), "duration_ms -1 < 0"},
		// A count of -1 sent as a signed integer arrives as 2^64-1.
		{"negative count", edit(func(r *messages.PlannerReport) { r.QueueBuckets = []uint64{math.MaxUint64, 2} }), "queue_buckets: counts add up past 2^64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Report(tc.r, pcluster.WithTimeout(waitFor))
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "report refused") {
				t.Fatalf("Report: %v, want an error containing %q", err, tc.err)
			}
		})
	}
	if _, err := c.Report(report("good", 4, 40, 8, 10), pcluster.WithTimeout(waitFor)); err != nil {
		t.Fatal(err)
	}
	h.tick("m")
	if st := h.status("m"); st.Frontends != 1 || st.Requests != 4 || st.IslMean != 10 || st.OslMean != 2 {
		t.Fatalf("window after the refusals: %v", st)
	}
}

func TestWindowOfChecksLocally(t *testing.T) {
	_, err := windowOf("m", &messages.PlannerReport{Model: "x", FrontendId: "f"})
	if !errors.Is(err, ErrBadReport) {
		t.Fatalf("windowOf: %v, want ErrBadReport", err)
	}
	cur := &core.Window{}
	cur.TTFT.N = math.MaxUint64
	w := &core.Window{}
	w.TTFT.N = 1
	if err := checkMerge(cur, w); !errors.Is(err, ErrBadReport) {
		t.Fatalf("checkMerge overflow: %v", err)
	}
}

// TestGrainSetTargets: valid targets change the status at once; bad ones are refused
// and change nothing.
func TestGrainSetTargets(t *testing.T) {
	h := newGrainHarness(t, loadConfig(), newFakeConn(map[core.Pool]int{core.PoolAggregated: 1}))
	c := h.client("m")
	st, err := c.SetTargets(&messages.PlannerSetTargets{TtftTargetMs: 300, GpuBudget: 4}, pcluster.WithTimeout(waitFor))
	if err != nil || st.TtftTargetMs != 300 || st.ItlTargetMs != core.DefaultITLTargetMs || st.GpuBudget != 4 {
		t.Fatalf("SetTargets: %v %v", st, err)
	}
	for _, tc := range []struct {
		name string
		r    *messages.PlannerSetTargets
		err  string
	}{
		{"NaN TTFT", &messages.PlannerSetTargets{TtftTargetMs: math.NaN()}, "TTFT target"},
		{"negative ITL", &messages.PlannerSetTargets{ItlTargetMs: -1}, "ITL target"},
		{"negative budget", &messages.PlannerSetTargets{GpuBudget: -2}, "GPU budget -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SetTargets(tc.r, pcluster.WithTimeout(waitFor))
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "targets refused") {
				t.Fatalf("SetTargets: %v, want an error containing %q", err, tc.err)
			}
		})
	}
	if st := h.status("m"); st.TtftTargetMs != 300 || st.ItlTargetMs != core.DefaultITLTargetMs || st.GpuBudget != 4 {
		t.Fatalf("after the refusals: %v", st)
	}
}

// A refusal names the admin API's fields, not the core's Go fields.
func TestGrainSetTargetsNamesAPIFields(t *testing.T) {
	cfg := loadConfig()
	cfg.MinWorkers = 2
	h := newGrainHarness(t, cfg, newFakeConn(map[core.Pool]int{core.PoolAggregated: 2}))
	_, err := h.client("m").SetTargets(&messages.PlannerSetTargets{GpuBudget: 1}, pcluster.WithTimeout(waitFor))
	if err == nil || !strings.Contains(err.Error(), "gpu_budget 1 holds fewer than min_workers 2") ||
		strings.Contains(err.Error(), "GPUBudget") || strings.Contains(err.Error(), "MinWorkers") {
		t.Fatalf("SetTargets: %v, want the refusal in the API's field names", err)
	}
}

// TestGrainKeepsTheConnectorError: a failed Fleet means no decision and an error in the
// status; a failed Scale keeps its error until a decision goes through.
func TestGrainKeepsTheConnectorError(t *testing.T) {
	conn := newFakeConn(map[core.Pool]int{core.PoolAggregated: 1})
	h := newGrainHarness(t, loadConfig(), conn)
	conn.set(func(c *fakeConn) { c.fleetErr = errors.New("nodes unreachable") })
	if got := h.tick("m"); got.err == nil {
		t.Fatal("Decided got no error for a failed Fleet")
	}
	if st := h.status("m"); st.Decisions != 0 || st.Error != "fleet: nodes unreachable" {
		t.Fatalf("status %v", st)
	}
	conn.set(func(c *fakeConn) { c.fleetErr, c.scaleErr = nil, errors.New("node full") })
	h.register("m", "w0", messages.Role_ROLE_AGGREGATED, 0.99)
	if got := h.tick("m"); got.err == nil || got.d.Target[core.PoolAggregated] != 2 {
		t.Fatalf("decided %+v", got)
	}
	<-conn.scales
	if st := h.status("m"); st.Decisions != 1 || st.Error != "scale: node full" {
		t.Fatalf("status %v", st)
	}
	conn.set(func(c *fakeConn) { c.scaleErr = nil })
	h.tick("m")
	<-conn.scales
	if st := h.status("m"); st.Error != "" || st.Decisions != 2 {
		t.Fatalf("status after a good decision %v", st)
	}
}

// TestGrainWritesEveryDecision: a DecisionWriter connector (the virtual one) gets every
// decision, held ones included, with its reason; SLA mode ticks on its own interval.
func TestGrainWritesEveryDecision(t *testing.T) {
	file := filepath.Join(t.TempDir(), "decisions.jsonl")
	v, err := NewVirtual(VirtualConfig{File: file, Initial: map[core.Pool]int{core.PoolPrefill: 1, core.PoolDecode: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	pc := core.DefaultConfig()
	pc.Mode, pc.Disaggregated = core.ModeSLA, true
	if pc.Profile, err = core.LoadProfile(filepath.Join("..", "..", "planner", "testdata", "profile-small.json")); err != nil {
		t.Fatal(err)
	}
	h := newGrainHarness(t, pc, v)
	got := h.tick("m")
	if got.err != nil || !got.d.Held || got.d.Target[core.PoolDecode] != 2 {
		t.Fatalf("decision %+v (%v), want held at prefill 1, decode 2", got.d, got.err)
	}
	recs := readRecords(t, file)
	if len(recs) != 1 || recs[0].Model != "m" || recs[0].Targets["prefill"] != 1 || recs[0].Targets["decode"] != 2 ||
		!recs[0].Held || recs[0].Reason == "" || !recs[0].Time.Equal(h.clock.now()) {
		t.Fatalf("records %+v", recs)
	}
	if st := h.status("m"); st.Mode != "sla" || st.Connector != "virtual" || len(st.Pools) != 2 || st.Predictor != core.DefaultPredictor {
		t.Fatalf("status %v", st)
	}
}

// TestGrainRefusesABadConfiguration: a planner configuration the core refuses leaves the
// grain without decisions, its status saying why.
func TestGrainRefusesABadConfiguration(t *testing.T) {
	pc := loadConfig()
	pc.MinWorkers = -1
	h := newGrainHarness(t, pc, newFakeConn(nil))
	st := h.status("m")
	if !strings.Contains(st.Error, "not configured") || st.Decisions != 0 {
		t.Fatalf("status %v", st)
	}
	if _, err := h.client("m").SetTargets(&messages.PlannerSetTargets{TtftTargetMs: 1}, pcluster.WithTimeout(waitFor)); err == nil {
		t.Fatal("SetTargets on an unconfigured planner succeeded")
	}
}
