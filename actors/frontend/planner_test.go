package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	plannerkind "github.com/turbine-llm/turbine/actors/planner"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/planner"
	"google.golang.org/protobuf/proto"
)

// fakePlanners stands for every Planner grain of a test cluster: it keeps the reports
// each model's grain received and answers a fixed status; failReports makes Report fail.
type fakePlanners struct {
	mu          sync.Mutex
	reports     map[string][]*messages.PlannerReport
	targets     []*messages.PlannerSetTargets
	failReports bool
}

func (f *fakePlanners) got(model string) []*messages.PlannerReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*messages.PlannerReport(nil), f.reports[model]...)
}

type fakePlannerGrain struct {
	f     *fakePlanners
	model string
}

func (g *fakePlannerGrain) Init(ctx pcluster.GrainContext)       { g.model = ctx.Identity() }
func (g *fakePlannerGrain) Terminate(pcluster.GrainContext)      {}
func (g *fakePlannerGrain) ReceiveDefault(pcluster.GrainContext) {}
func (g *fakePlannerGrain) Report(r *messages.PlannerReport, _ pcluster.GrainContext) (*messages.Ack, error) {
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	if g.f.failReports {
		return nil, errors.New("planner: report refused: the test says so")
	}
	g.f.reports[g.model] = append(g.f.reports[g.model], proto.Clone(r).(*messages.PlannerReport))
	return &messages.Ack{}, nil
}

func (g *fakePlannerGrain) status() *messages.PlannerStatus {
	return &messages.PlannerStatus{Model: g.model, Mode: "load", Connector: "local", Predictor: "kalman",
		TtftTargetMs: 500, ItlTargetMs: 50, GpuBudget: 8, MinWorkers: 1, Decisions: 7, AtUnixMs: 1767323045000,
		Frontends: 2, Requests: 40, IslMean: 100, OslMean: 20, TtftP90Ms: 120, ItlP90Ms: 12.5, PredictedRequests: 44,
		CorrectionPrefill: 1.25, Held: true, Reason: "a step in progress",
		Terms:  []*messages.PlannerTerm{{Name: "kv_usage_min", Value: 0.85}},
		Pools:  []*messages.PlannerPool{{Pool: "aggregated", Ready: 1, Starting: 1, Wanted: 3, Target: 2, GpusPerEngine: 1}},
		Clamps: []string{"aggregated: 3 → 2: one step at a time"}}
}

func (g *fakePlannerGrain) Status(*messages.PlannerStatusRequest, pcluster.GrainContext) (*messages.PlannerStatus, error) {
	return g.status(), nil
}

func (g *fakePlannerGrain) SetTargets(r *messages.PlannerSetTargets, _ pcluster.GrainContext) (*messages.PlannerStatus, error) {
	if r.GpuBudget == 3 {
		return nil, fmt.Errorf("%w: planner: GPU budget 3 is below the minimum workers' 4 GPUs", plannerkind.ErrBadTargets)
	}
	g.f.mu.Lock()
	g.f.targets = append(g.f.targets, proto.Clone(r).(*messages.PlannerSetTargets))
	g.f.mu.Unlock()
	st := g.status()
	st.GpuBudget = r.GpuBudget
	return st, nil
}

// plannerBackend starts a one-member cluster (hosting fake Planner grains when f is not
// nil) and a Backend over it serving models (the catalog's answer, fixed for the test).
func plannerBackend(t *testing.T, f *fakePlanners, reports PlannerReports, models ...string) *Backend {
	t.Helper()
	var kinds []*pcluster.Kind
	if f != nil {
		f.reports = map[string][]*messages.PlannerReport{}
		kinds = append(kinds, messages.NewPlannerKind(func() messages.Planner { return &fakePlannerGrain{f: f} }, 0))
	}
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("planner-reports-%d", time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop(), Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	b := New(member.Cluster, Config{PlannerReports: reports, FrontendID: "fe-1", ModelsTTL: time.Hour,
		RouteTimeout: 5 * time.Second, Logger: zerolog.Nop()})
	var cards []*messages.ModelCard
	for _, m := range models {
		cards = append(cards, &messages.ModelCard{Model: m})
	}
	cards = append(cards, &messages.ModelCard{Model: "sql", Lora: &messages.LoraAdapter{Name: "sql", Parent: models[0]}})
	b.mu.Lock()
	b.listed(cards, time.Now())
	b.mu.Unlock()
	return b
}

// Each served base model gets one report per period — its measurements since the last,
// or an empty one when it had no traffic — and the next period starts empty.
func TestPlannerReports(t *testing.T) {
	f := &fakePlanners{}
	b := plannerBackend(t, f, PlannerReportsOn, "m", "idle")
	if !b.PlannerRunning() {
		t.Fatal("the member hosts the Planner kind, and PlannerRunning says no")
	}
	obs := b.PlannerObserver()
	obs.ObserveQueue("m", 5*time.Millisecond)
	obs.ObserveTTFT("m", 100*time.Millisecond)
	obs.ObserveITL("m", 30*time.Millisecond, 3) // three gaps of 10 ms
	obs.ObserveRequest("m", 120, 4)
	obs.ObserveQueue("m", 5*time.Millisecond)
	obs.ObserveTTFT("m", 300*time.Millisecond)
	obs.ObserveRequest("m", 80, 2)

	t0 := time.Unix(1000, 0)
	b.plan.since = t0
	if n := b.ReportPlanner(context.Background(), t0.Add(2*time.Second)); n != 2 {
		t.Fatalf("%d reports sent, want 2 (m and idle; the adapter is served by m's planner)", n)
	}
	if got := f.got("sql"); len(got) != 0 {
		t.Errorf("a LoRA adapter got a report of its own: %v", got)
	}
	m := f.got("m")
	if len(m) != 1 {
		t.Fatalf("m got %d reports", len(m))
	}
	r := m[0]
	if r.FrontendId != "fe-1" || r.Model != "m" || r.StartUnixMs != 1000_000 || r.DurationMs != 2000 ||
		r.Requests != 2 || r.IslSum != 200 || r.OslSum != 6 {
		t.Errorf("report %v", r)
	}
	w := windowOf(t, r)
	if w.TTFT.N != 2 || w.ITL.N != 3 || w.Queue.N != 2 {
		t.Errorf("latency counts TTFT %d ITL %d queue %d, want 2, 3, 2", w.TTFT.N, w.ITL.N, w.Queue.N)
	}
	if p90, _ := w.TTFT.Quantile(0.9); p90 < 300 || p90 > 300*planner.BucketGrowth {
		t.Errorf("TTFT p90 %v ms, want 300 within a bucket", p90)
	}
	if p50, _ := w.ITL.Quantile(0.5); p50 < 10 || p50 > 10*planner.BucketGrowth {
		t.Errorf("ITL p50 %v ms, want 10 within a bucket (a 30 ms gap over 3 tokens)", p50)
	}
	idle := f.got("idle")
	if len(idle) != 1 || idle[0].Requests != 0 || len(idle[0].TtftBuckets) != 0 || idle[0].DurationMs != 2000 {
		t.Errorf("idle model's report %v, want one empty report of the period", idle)
	}

	// The next period starts where this one ended, empty.
	b.ReportPlanner(context.Background(), t0.Add(3*time.Second))
	m = f.got("m")
	if len(m) != 2 || m[1].Requests != 0 || len(m[1].TtftBuckets) != 0 || m[1].StartUnixMs != 1002_000 || m[1].DurationMs != 1000 {
		t.Errorf("second report %v, want an empty one from 1002 s", m[len(m)-1])
	}
	var metrics bytes.Buffer
	b.metrics.WritePrometheus(&metrics)
	if !strings.Contains(metrics.String(), `turbine_frontend_planner_reports_total{model="m",outcome="sent"} 2`) {
		t.Errorf("no sent reports counted:\n%s", metrics.String())
	}
}

// windowOf reads a report's latency counts back (as the grain does).
func windowOf(t *testing.T, r *messages.PlannerReport) planner.Window {
	t.Helper()
	var w planner.Window
	var err error
	for _, h := range []struct {
		counts []uint64
		into   *planner.Histogram
	}{{r.TtftBuckets, &w.TTFT}, {r.ItlBuckets, &w.ITL}, {r.QueueBuckets, &w.Queue}} {
		if *h.into, err = planner.FromCounts(h.counts); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// A report the grain refuses (or that cannot reach it) is kept: the next report carries
// its measurements, from its start.
func TestPlannerReportFailureKeepsMeasurements(t *testing.T) {
	f := &fakePlanners{failReports: true}
	b := plannerBackend(t, f, PlannerReportsOn, "m")
	var logs bytes.Buffer
	b.cfg.Logger = zerolog.New(&logs)
	t0 := time.Unix(1000, 0)
	b.plan.since = t0
	b.PlannerObserver().ObserveRequest("m", 10, 5)
	b.PlannerObserver().ObserveTTFT("m", time.Second)
	for range 2 {
		if n := b.ReportPlanner(context.Background(), t0.Add(time.Second)); n != 0 {
			t.Fatalf("%d reports sent while the grain refuses them", n)
		}
	}
	if n := strings.Count(logs.String(), "planner report failed"); n != 1 {
		t.Errorf("%d warnings for two failed reports, want 1:\n%s", n, logs.String())
	}
	b.PlannerObserver().ObserveRequest("m", 20, 5)
	f.mu.Lock()
	f.failReports = false
	f.mu.Unlock()
	if n := b.ReportPlanner(context.Background(), t0.Add(2*time.Second)); n != 1 {
		t.Fatalf("%d reports sent", n)
	}
	r := f.got("m")[0]
	if r.Requests != 2 || r.IslSum != 30 || r.OslSum != 10 || windowOf(t, r).TTFT.N != 1 || r.StartUnixMs != 1000_000 || r.DurationMs != 2000 {
		t.Errorf("report after a failure %v, want both periods' measurements from 1000 s", r)
	}
	if !strings.Contains(logs.String(), "planner reports go through again") {
		t.Errorf("no word of the reports' recovery:\n%s", logs.String())
	}
	var metrics bytes.Buffer
	b.metrics.WritePrometheus(&metrics)
	if !strings.Contains(metrics.String(), `turbine_frontend_planner_reports_total{model="m",outcome="failed"} 2`) {
		t.Errorf("the failed reports are not counted:\n%s", metrics.String())
	}
}

// Reports off: no Observer, nothing sent. Auto without a planner in the cluster: the
// measurements are dropped and nothing is tried; /admin/planner says no planner runs.
func TestPlannerReportsOffAndAuto(t *testing.T) {
	if b := New(nil, Config{Logger: zerolog.Nop()}); b.PlannerObserver() != nil || b.ReportPlanner(context.Background(), time.Now()) != 0 {
		t.Fatal("reports off, and the backend observes or reports")
	}
	b := plannerBackend(t, nil, PlannerReportsAuto, "m")
	b.PlannerObserver().ObserveRequest("m", 1, 1)
	if b.PlannerRunning() || b.ReportPlanner(context.Background(), time.Now()) != 0 {
		t.Fatal("no planner in the cluster, and reports went out")
	}
	if len(b.plan.windows) != 0 {
		t.Errorf("measurements kept without a planner: %v", b.plan.windows)
	}
	if _, err := b.PlannerStatus(context.Background(), "m"); !errors.Is(err, gateway.ErrNoPlanner) {
		t.Errorf("status without a planner: %v, want ErrNoPlanner", err)
	}
	if _, err := b.SetPlannerTargets(context.Background(), "m", gateway.PlannerTargets{GPUBudget: 2}); !errors.Is(err, gateway.ErrNoPlanner) {
		t.Errorf("targets without a planner: %v, want ErrNoPlanner", err)
	}
}

func TestPlannerAdmin(t *testing.T) {
	f := &fakePlanners{}
	b := plannerBackend(t, f, PlannerReportsAuto, "m")
	ctx := context.Background()
	st, err := b.PlannerStatus(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if st.Model != "m" || st.Mode != "load" || st.Decisions != 7 || st.At != "2026-01-02T03:04:05Z" || st.Requests != 40 ||
		len(st.Pools) != 1 || st.Pools[0] != (gateway.PlannerPool{Pool: "aggregated", Ready: 1, Starting: 1, Wanted: 3, Target: 2, GPUsPerEngine: 1}) ||
		len(st.Terms) != 1 || st.Terms[0].Name != "kv_usage_min" || !st.Held || st.Reason != "a step in progress" || len(st.Clamps) != 1 {
		t.Errorf("status %+v", st)
	}
	for _, model := range []string{"nope", "sql"} {
		if _, err := b.PlannerStatus(ctx, model); !errors.Is(err, gateway.ErrUnknownModel) {
			t.Errorf("status of %q: %v, want ErrUnknownModel (the planner plans served base models)", model, err)
		}
	}
	st, err = b.SetPlannerTargets(ctx, "m", gateway.PlannerTargets{TTFTTargetMs: 300, GPUBudget: 4})
	if err != nil || st.GPUBudget != 4 {
		t.Fatalf("set targets: %+v %v", st, err)
	}
	if len(f.targets) != 1 || f.targets[0].TtftTargetMs != 300 || f.targets[0].GpuBudget != 4 || f.targets[0].ItlTargetMs != 0 {
		t.Errorf("the grain got %v", f.targets)
	}
	_, err = b.SetPlannerTargets(ctx, "m", gateway.PlannerTargets{GPUBudget: 3})
	if !errors.Is(err, gateway.ErrPlannerRefused) || !strings.HasSuffix(err.Error(), ": planner: GPU budget 3 is below the minimum workers' 4 GPUs") {
		t.Errorf("refused targets: %v, want ErrPlannerRefused with the planner's reason", err)
	}
}

// The grain's refusal crosses members as text: the frontend finds it by the text of
// actors/planner.ErrBadTargets.
func TestPlannerRefusalText(t *testing.T) {
	if plannerTargetsRefused != plannerkind.ErrBadTargets.Error() {
		t.Fatalf("plannerTargetsRefused %q, actors/planner.ErrBadTargets says %q", plannerTargetsRefused, plannerkind.ErrBadTargets.Error())
	}
	for _, err := range []error{
		errors.New("error request: " + plannerTargetsRefused + ": planner: itl target 0"),
		fmt.Errorf("error request: %w", pcluster.NewGrainErrorResponse("", plannerTargetsRefused+": planner: itl target 0")),
	} {
		why, ok := plannerRefusal(err)
		if !ok || why != "planner: itl target 0" {
			t.Errorf("%v: %q %v", err, why, ok)
		}
	}
	if _, ok := plannerRefusal(errors.New("error request: timeout")); ok {
		t.Error("a timeout taken for a refusal")
	}
}

// /metrics gets the planner's figures per model and pool, and none without a planner.
func TestPlannerMetrics(t *testing.T) {
	b := plannerBackend(t, &fakePlanners{}, PlannerReportsAuto, "m")
	var out bytes.Buffer
	b.writePlannerMetrics(context.Background(), &out, []*messages.ModelCard{{Model: "m"}, {Model: "sql", Lora: &messages.LoraAdapter{Name: "sql"}}})
	for _, line := range []string{
		`turbine_planner_target_workers{model="m",pool="aggregated"} 2`,
		`turbine_planner_wanted_workers{model="m",pool="aggregated"} 3`,
		`turbine_planner_ready_workers{model="m",pool="aggregated"} 1`,
		`turbine_planner_starting_workers{model="m",pool="aggregated"} 1`,
		`turbine_planner_stopping_workers{model="m",pool="aggregated"} 0`,
		`turbine_planner_decisions_total{model="m"} 7`,
		`turbine_planner_held{model="m"} 1`,
		`turbine_planner_predicted_requests{model="m"} 44`,
		`turbine_planner_observed_itl_p90_seconds{model="m"} 0.0125`,
		`turbine_planner_ttft_target_seconds{model="m"} 0.5`,
		`turbine_planner_gpu_budget{model="m"} 8`,
		`turbine_planner_connector_error{model="m"} 0`,
		`turbine_planner_correction_factor{model="m",phase="prefill"} 1.25`,
		`turbine_planner_correction_factor{model="m",phase="decode"} 0`,
		"# TYPE turbine_planner_decisions_total counter",
		"# TYPE turbine_planner_target_workers gauge",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("no line %q in:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), `model="sql"`) {
		t.Errorf("a LoRA adapter has planner figures:\n%s", out.String())
	}
}

func TestPlannerMetricsWithoutPlanner(t *testing.T) {
	var out bytes.Buffer
	plannerBackend(t, nil, PlannerReportsAuto, "m").writePlannerMetrics(context.Background(), &out, []*messages.ModelCard{{Model: "m"}})
	if out.Len() != 0 {
		t.Errorf("planner figures without a planner:\n%s", out.String())
	}
}

func TestParsePlannerReports(t *testing.T) {
	for _, s := range []string{"off", "auto", "on"} {
		r, err := ParsePlannerReports(s)
		if err != nil || r.String() != s {
			t.Errorf("%q: %v %v", s, r, err)
		}
	}
	if _, err := ParsePlannerReports("yes"); err == nil || !strings.Contains(err.Error(), "off, auto or on") {
		t.Errorf("yes: %v", err)
	}
}
