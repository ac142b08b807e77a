package frontend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/internal/promlabel"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/planner"
)

// The frontend's side of the planner (docs/reference.md §27.7).
//
// Reports: the gateway hands every generation request's measurements to the Backend's
// Observer (gateway.Config.Observer), which adds them to one planner.Window per served
// model. Every Config.PlannerReportInterval, RunPlannerReports swaps the windows for
// empty ones and sends each model's to its Planner grain as a PlannerReport: the counts
// since this frontend's previous report, which the grain adds to its current window. A
// model served without traffic gets an empty report, so that the planner can tell an
// idle fleet (scale down) from missing measurements (hold). A report that fails is merged
// back and goes with the next one: nothing measured is lost while the grain moves.
//
// Status and targets: /admin/planner (the Backend is a gateway.PlannerAdmin) asks the
// model's Planner grain for its status, or changes its targets.
//
// Metrics: WritePrometheus adds each served model's planner figures from its grain's
// status (turbine_planner_*), and the reports' outcomes
// (turbine_frontend_planner_reports_total).
//
// Ownership: the windows belong to plannerReports and are guarded by its mutex, held only
// to add a measurement or swap the windows, never across a grain call.

// PlannerReports says when a frontend reports its measurements to the Planner grains.
type PlannerReports int

const (
	// PlannerReportsOff: no reports, no measurements kept (the zero value).
	PlannerReportsOff PlannerReports = iota
	// PlannerReportsAuto: report while a member of the cluster hosts the Planner kind
	// (`turbine frontend`'s default); measurements of a period without one are dropped.
	PlannerReportsAuto
	// PlannerReportsOn: always report (`turbine serve --planner`).
	PlannerReportsOn
)

// String is "off", "auto" or "on".
func (r PlannerReports) String() string {
	switch r {
	case PlannerReportsOff:
		return "off"
	case PlannerReportsAuto:
		return "auto"
	case PlannerReportsOn:
		return "on"
	}
	return fmt.Sprintf("PlannerReports(%d)", int(r))
}

// ParsePlannerReports reads "off", "auto" or "on".
func ParsePlannerReports(s string) (PlannerReports, error) {
	for _, r := range []PlannerReports{PlannerReportsOff, PlannerReportsAuto, PlannerReportsOn} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("frontend: planner reports %q, want off, auto or on", s)
}

// Defaults of the planner reports.
const (
	// DefaultPlannerReportInterval is Config.PlannerReportInterval's default: well under
	// the planner's shortest period (load mode's 5 s), so that each decision sees the
	// measurements of nearly its whole period.
	DefaultPlannerReportInterval = time.Second
	// plannerKind is the cluster kind of the Planner grains (messages.NewPlannerKind).
	plannerKind = "Planner"
	// plannerStatusTimeout bounds a /metrics scrape's wait for one planner's status.
	plannerStatusTimeout = 2 * time.Second
	// plannerTargetsRefused is the text of actors/planner.ErrBadTargets, which a grain's
	// refusal carries across members as its message (TestPlannerRefusalText).
	plannerTargetsRefused = "planner: targets refused"
)

// Metric family of the reports (the planner's own are written from its status).
const metricPlannerReports = "turbine_frontend_planner_reports_total" // counter {model,outcome}: sent, failed

// plannerReports keeps the windows of the measurements not yet reported.
type plannerReports struct {
	mu      sync.Mutex
	windows map[string]*planner.Window // model -> measurements since the last report
	since   time.Time                  // start of the current windows
	failing map[string]bool            // models whose latest report failed (logged once)
}

var _ gateway.Observer = (*plannerReports)(nil)

// window returns model's window; the caller holds r.mu.
func (r *plannerReports) window(model string) *planner.Window {
	w := r.windows[model]
	if w == nil {
		w = &planner.Window{}
		r.windows[model] = w
	}
	return w
}

func (r *plannerReports) ObserveTTFT(model string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.window(model).AddTTFT(d)
}

func (r *plannerReports) ObserveITL(model string, gap time.Duration, n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.window(model).AddITL(gap/time.Duration(n), n)
}

func (r *plannerReports) ObserveQueue(model string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.window(model).AddQueue(d)
}

func (r *plannerReports) ObserveRequest(model string, prompt, completion int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.window(model).AddRequest(prompt, completion)
}

// swap returns the windows and their start, and starts empty ones at now.
func (r *plannerReports) swap(now time.Time) (map[string]*planner.Window, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, since := r.windows, r.since
	r.windows, r.since = map[string]*planner.Window{}, now
	return ws, since
}

// putBack merges a window that could not be reported into model's current one, and moves
// the current windows' start back to since.
func (r *plannerReports) putBack(model string, w *planner.Window, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.window(model).Merge(w)
	if since.Before(r.since) {
		r.since = since
	}
}

// setFailing records whether model's latest report failed and reports whether that
// changed.
func (r *plannerReports) setFailing(model string, failed bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing[model] == failed {
		return false
	}
	if failed {
		r.failing[model] = true
	} else {
		delete(r.failing, model)
	}
	return true
}

// PlannerObserver returns what the gateway hands each request's measurements to
// (gateway.Config.Observer), or nil when Config.PlannerReports is off.
func (b *Backend) PlannerObserver() gateway.Observer {
	if b.plan == nil {
		return nil
	}
	return b.plan
}

// FrontendID is the name this frontend gives itself in its planner reports
// (Config.FrontendID, or the one New made).
func (b *Backend) FrontendID() string { return b.cfg.FrontendID }

// RunPlannerReports sends the planner reports every Config.PlannerReportInterval until
// ctx ends, then once more (what was measured since the last one). It returns at once
// when Config.PlannerReports is off.
func (b *Backend) RunPlannerReports(ctx context.Context) {
	if b.plan == nil {
		return
	}
	tick := time.NewTicker(b.cfg.PlannerReportInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.RouteTimeout)
			b.ReportPlanner(final, time.Now())
			cancel()
			return
		case now := <-tick.C:
			b.ReportPlanner(ctx, now)
		}
	}
}

// ReportPlanner sends one report per model — every base model the catalog lists, and
// every model measured — to its Planner grain, covering the time since the previous
// report up to now, and returns how many were sent. With Config.PlannerReports auto and
// no member hosting the Planner kind, the measurements are dropped and nothing is sent.
// A report that fails is kept for the next (and counted as failed).
func (b *Backend) ReportPlanner(ctx context.Context, now time.Time) int {
	if b.plan == nil {
		return 0
	}
	windows, since := b.plan.swap(now)
	if b.cfg.PlannerReports == PlannerReportsAuto && !b.PlannerRunning() {
		return 0
	}
	models := make([]string, 0, len(windows))
	for m := range windows {
		models = append(models, m)
	}
	if cards, err := b.Models(ctx); err == nil {
		for _, c := range cards {
			if c.GetLora() == nil && !slices.Contains(models, c.GetModel()) {
				models = append(models, c.GetModel())
			}
		}
	}
	slices.Sort(models)
	sent := 0
	c := b.c.Load()
	for _, model := range models {
		w := windows[model]
		if w == nil {
			w = &planner.Window{}
		}
		rep := plannerReport(b.cfg.FrontendID, model, since, now, w)
		_, err := messages.GetPlannerGrainClient(c, model).Report(rep, pcluster.WithTimeout(callTimeout(ctx, b.cfg.RouteTimeout)))
		if err != nil {
			b.plan.putBack(model, w, since)
			b.metrics.GetOrCreateCounter(series(metricPlannerReports, "model", model, "outcome", "failed")).Inc()
			if b.plan.setFailing(model, true) {
				b.cfg.Logger.Warn().Err(err).Str("model", model).Int("requests", w.Requests).
					Msg("planner report failed: its measurements go with the next one (logged once until a report goes through)")
			}
			continue
		}
		sent++
		b.metrics.GetOrCreateCounter(series(metricPlannerReports, "model", model, "outcome", "sent")).Inc()
		if b.plan.setFailing(model, false) {
			b.cfg.Logger.Info().Str("model", model).Msg("planner reports go through again")
		}
	}
	return sent
}

// plannerReport is the PlannerReport of window w of model, measured from since to now
// (since zero: the report covers nothing before now). Bucket counts lose their trailing
// zeros (planner.FromCounts pads them back).
func plannerReport(frontend, model string, since, now time.Time, w *planner.Window) *messages.PlannerReport {
	if since.IsZero() || since.After(now) {
		since = now
	}
	return &messages.PlannerReport{FrontendId: frontend, Model: model, StartUnixMs: since.UnixMilli(),
		DurationMs: now.Sub(since).Milliseconds(), Requests: uint32(min(max(w.Requests, 0), 1<<32-1)),
		IslSum: w.ISLSum, OslSum: w.OSLSum,
		TtftBuckets: trimCounts(w.TTFT.Counts[:]), ItlBuckets: trimCounts(w.ITL.Counts[:]),
		QueueBuckets: trimCounts(w.Queue.Counts[:])}
}

// trimCounts copies counts without their trailing zeros (nil when all are zero).
func trimCounts(counts []uint64) []uint64 {
	n := len(counts)
	for n > 0 && counts[n-1] == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	return slices.Clone(counts[:n])
}

// PlannerRunning reports whether a member of the cluster (as this member sees it) hosts
// the Planner kind.
func (b *Backend) PlannerRunning() bool {
	c := b.c.Load()
	if c == nil || c.MemberList == nil {
		return false
	}
	return slices.ContainsFunc(c.MemberList.Members().Members(), func(m *pcluster.Member) bool {
		return slices.Contains(m.Kinds, plannerKind)
	})
}

// planner returns model's Planner grain client after checking that a planner runs and
// that model is a served base model. Errors: gateway.ErrNoPlanner, gateway.ErrUnknownModel
// (wrapped), a failed Catalog call.
func (b *Backend) planner(ctx context.Context, model string) (*messages.PlannerGrainClient, error) {
	if !b.PlannerRunning() {
		return nil, fmt.Errorf("%w: no member hosts the %s kind", gateway.ErrNoPlanner, plannerKind)
	}
	cards, err := b.Models(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(cards, func(c *messages.ModelCard) bool { return c.GetModel() == model && c.GetLora() == nil }) {
		return nil, fmt.Errorf("%w: %q has no live worker (the planner plans served base models)", gateway.ErrUnknownModel, model)
	}
	return messages.GetPlannerGrainClient(b.c.Load(), model), nil
}

// PlannerStatus returns model's planner status (gateway.PlannerAdmin). Errors:
// gateway.ErrNoPlanner, gateway.ErrUnknownModel (wrapped), a failed grain call.
func (b *Backend) PlannerStatus(ctx context.Context, model string) (*gateway.PlannerStatus, error) {
	pc, err := b.planner(ctx, model)
	if err != nil {
		return nil, err
	}
	st, err := pc.Status(&messages.PlannerStatusRequest{}, pcluster.WithTimeout(callTimeout(ctx, b.cfg.RouteTimeout)))
	if err != nil {
		return nil, fmt.Errorf("frontend: planner status of %q: %w", model, err)
	}
	return PlannerStatusOf(st), nil
}

// SetPlannerTargets changes model's planner targets (gateway.PlannerAdmin). Errors: those
// of PlannerStatus, and the planner's refusal wrapped in gateway.ErrPlannerRefused.
func (b *Backend) SetPlannerTargets(ctx context.Context, model string, t gateway.PlannerTargets) (*gateway.PlannerStatus, error) {
	pc, err := b.planner(ctx, model)
	if err != nil {
		return nil, err
	}
	st, err := pc.SetTargets(&messages.PlannerSetTargets{TtftTargetMs: t.TTFTTargetMs, ItlTargetMs: t.ITLTargetMs,
		GpuBudget: int32(t.GPUBudget)}, pcluster.WithTimeout(callTimeout(ctx, b.cfg.RouteTimeout)))
	if err != nil {
		if why, ok := plannerRefusal(err); ok {
			return nil, fmt.Errorf("%w: %s", gateway.ErrPlannerRefused, why)
		}
		return nil, fmt.Errorf("frontend: planner targets of %q: %w", model, err)
	}
	return PlannerStatusOf(st), nil
}

// plannerRefusal finds the planner's reason in the error of a refused SetTargets (it
// crosses members as text).
func plannerRefusal(err error) (string, bool) {
	msg := err.Error()
	if ge := new(pcluster.GrainErrorResponse); errors.As(err, &ge) {
		msg = ge.Message
	}
	i := strings.Index(msg, plannerTargetsRefused)
	if i < 0 {
		return "", false
	}
	why := strings.TrimPrefix(msg[i+len(plannerTargetsRefused):], ": ")
	return why, true
}

// PlannerStatusOf converts a Planner grain's status to /admin/planner's answer.
func PlannerStatusOf(st *messages.PlannerStatus) *gateway.PlannerStatus {
	out := &gateway.PlannerStatus{Model: st.GetModel(), Mode: st.GetMode(), Connector: st.GetConnector(),
		Predictor: st.GetPredictor(), TTFTTarget: st.GetTtftTargetMs(), ITLTarget: st.GetItlTargetMs(),
		GPUBudget: int(st.GetGpuBudget()), MinWorkers: int(st.GetMinWorkers()), Decisions: st.GetDecisions(),
		Frontends: int(st.GetFrontends()), Requests: st.GetRequests(), ISLMean: st.GetIslMean(), OSLMean: st.GetOslMean(),
		TTFTP90Ms: st.GetTtftP90Ms(), ITLP90Ms: st.GetItlP90Ms(), QueueP90Ms: st.GetQueueP90Ms(),
		PredictedRequests: st.GetPredictedRequests(), PredictedISL: st.GetPredictedIsl(), PredictedOSL: st.GetPredictedOsl(),
		CorrectionPrefill: st.GetCorrectionPrefill(), CorrectionDecode: st.GetCorrectionDecode(),
		Terms: []gateway.PlannerTerm{}, Pools: []gateway.PlannerPool{}, Clamps: slices.Clone(st.GetClamps()),
		Held: st.GetHeld(), Reason: st.GetReason(), Error: st.GetError()}
	if out.Clamps == nil {
		out.Clamps = []string{}
	}
	if ms := st.GetAtUnixMs(); ms != 0 {
		out.At = gateway.PlannerTime(time.UnixMilli(ms))
	}
	for _, t := range st.GetTerms() {
		out.Terms = append(out.Terms, gateway.PlannerTerm{Name: t.GetName(), Value: t.GetValue(), Unit: t.GetUnit()})
	}
	for _, p := range st.GetPools() {
		out.Pools = append(out.Pools, gateway.PlannerPool{Pool: p.GetPool(), Ready: int(p.GetReady()),
			Starting: int(p.GetStarting()), Stopping: int(p.GetStopping()), Wanted: int(p.GetWanted()),
			Target: int(p.GetTarget()), GPUsPerEngine: int(p.GetGpusPerEngine())})
	}
	return out
}

// writePlannerMetrics appends the planner families of every served base model in models
// (its grain's status) to a /metrics scrape; nothing when no planner runs. A planner that
// does not answer within plannerStatusTimeout leaves its model out of this scrape.
func (b *Backend) writePlannerMetrics(ctx context.Context, w io.Writer, models []*messages.ModelCard) {
	if !b.PlannerRunning() {
		return
	}
	var statuses []*messages.PlannerStatus
	c := b.c.Load()
	for _, m := range models {
		if m.GetLora() != nil {
			continue
		}
		st, err := messages.GetPlannerGrainClient(c, m.GetModel()).Status(&messages.PlannerStatusRequest{},
			pcluster.WithTimeout(callTimeout(ctx, min(b.cfg.RouteTimeout, plannerStatusTimeout))))
		if err != nil {
			continue
		}
		statuses = append(statuses, st)
	}
	writePlannerFamilies(w, statuses)
}

// writePlannerFamilies writes the turbine_planner_* families of the planners' statuses
// (docs/reference.md §27.7): per model and pool the workers ready, starting, stopping,
// wanted by the formula and asked for (target); per model the prediction, the correction
// factors, the targets and the observed p90s (seconds), the GPU budget, the decisions
// made, whether the latest held the fleet, and whether the connector's last step failed.
func writePlannerFamilies(w io.Writer, statuses []*messages.PlannerStatus) {
	type poolFamily struct {
		name, help string
		value      func(*messages.PlannerPool) int32
	}
	type modelFamily struct {
		name, help, typ string
		value           func(*messages.PlannerStatus) float64
	}
	poolFams := []poolFamily{
		{"turbine_planner_target_workers", "workers the planner's latest decision asked the connector for, per pool", func(p *messages.PlannerPool) int32 { return p.Target }},
		{"turbine_planner_wanted_workers", "workers the planner's formula wanted, per pool, before its clamps (GPU budget, minimum, stabilisation, held steps)", func(p *messages.PlannerPool) int32 { return p.Wanted }},
		{"turbine_planner_ready_workers", "ready workers of the pool when the planner last decided", func(p *messages.PlannerPool) int32 { return p.Ready }},
		{"turbine_planner_starting_workers", "workers of the pool asked for and not ready yet when the planner last decided", func(p *messages.PlannerPool) int32 { return p.Starting }},
		{"turbine_planner_stopping_workers", "workers of the pool draining or stopping when the planner last decided", func(p *messages.PlannerPool) int32 { return p.Stopping }},
	}
	ms := func(v float64) float64 { return v / 1000 }
	modelFams := []modelFamily{
		{"turbine_planner_decisions_total", "decisions the model's planner made since it started", "counter", func(s *messages.PlannerStatus) float64 { return float64(s.Decisions) }},
		{"turbine_planner_held", "1 when the planner's latest decision held the fleet as it was (missing measurements, a step in progress), else 0", "gauge", func(s *messages.PlannerStatus) float64 { return b2f(s.Held) }},
		{"turbine_planner_predicted_requests", "requests the planner predicted for its next interval", "gauge", func(s *messages.PlannerStatus) float64 { return s.PredictedRequests }},
		{"turbine_planner_predicted_isl_tokens", "mean prompt tokens the planner predicted for its next interval", "gauge", func(s *messages.PlannerStatus) float64 { return s.PredictedIsl }},
		{"turbine_planner_predicted_osl_tokens", "mean output tokens the planner predicted for its next interval", "gauge", func(s *messages.PlannerStatus) float64 { return s.PredictedOsl }},
		{"turbine_planner_observed_requests", "requests that ended in the planner's latest observed interval, all frontends", "gauge", func(s *messages.PlannerStatus) float64 { return float64(s.Requests) }},
		{"turbine_planner_observed_ttft_p90_seconds", "p90 time to first token of the planner's latest observed interval, all frontends", "gauge", func(s *messages.PlannerStatus) float64 { return ms(s.TtftP90Ms) }},
		{"turbine_planner_observed_itl_p90_seconds", "p90 inter-token latency of the planner's latest observed interval, all frontends", "gauge", func(s *messages.PlannerStatus) float64 { return ms(s.ItlP90Ms) }},
		{"turbine_planner_ttft_target_seconds", "the planner's p90 time-to-first-token target", "gauge", func(s *messages.PlannerStatus) float64 { return ms(s.TtftTargetMs) }},
		{"turbine_planner_itl_target_seconds", "the planner's p90 inter-token latency target", "gauge", func(s *messages.PlannerStatus) float64 { return ms(s.ItlTargetMs) }},
		{"turbine_planner_gpu_budget", "GPUs the planner may give the model's pools together", "gauge", func(s *messages.PlannerStatus) float64 { return float64(s.GpuBudget) }},
		{"turbine_planner_connector_error", "1 when the connector's last step (fleet or scale) failed, else 0", "gauge", func(s *messages.PlannerStatus) float64 { return b2f(s.Error != "") }},
	}
	poolLines := make([][]string, len(poolFams))
	modelLines := make([][]string, len(modelFams))
	var corrLines []string
	for _, st := range statuses {
		model := promlabel.Escape(st.Model)
		for _, p := range st.Pools {
			lbl := fmt.Sprintf(`{model="%s",pool="%s"}`, model, promlabel.Escape(p.Pool))
			for i, f := range poolFams {
				poolLines[i] = append(poolLines[i], f.name+lbl+" "+strconv.Itoa(int(f.value(p))))
			}
		}
		lbl := fmt.Sprintf(`{model="%s"}`, model)
		for i, f := range modelFams {
			modelLines[i] = append(modelLines[i], f.name+lbl+" "+strconv.FormatFloat(f.value(st), 'g', -1, 64))
		}
		for _, c := range []struct {
			phase string
			v     float64
		}{{"prefill", st.CorrectionPrefill}, {"decode", st.CorrectionDecode}} {
			corrLines = append(corrLines, fmt.Sprintf(`turbine_planner_correction_factor{model="%s",phase="%s"} %s`,
				model, c.phase, strconv.FormatFloat(c.v, 'g', -1, 64)))
		}
	}
	for i, f := range poolFams {
		writeFamily(w, f.name, f.help, "gauge", poolLines[i])
	}
	for i, f := range modelFams {
		writeFamily(w, f.name, f.help, f.typ, modelLines[i])
	}
	writeFamily(w, "turbine_planner_correction_factor", "the correction factor the planner's latest decision used: observed over the profile's expected TTFT (phase prefill) and ITL (phase decode); 1 in sla mode until a window with requests measured it; 0 before the first decision and in load mode, which uses none", "gauge", corrLines)
}

// callTimeout is d, or less when ctx ends sooner (a grain call takes a timeout, not a
// context); at least a millisecond.
func callTimeout(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, time.Millisecond)
}

// newFrontendID names a frontend in its planner reports: "frontend-" and 8 random hex
// digits.
func newFrontendID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "frontend-" + hex.EncodeToString(b[:])
}
