package planner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
)

// DefaultCallTimeout bounds each connector and Router grain call of a decision
// (Config.CallTimeout's default). Scale returns once the steps are asked for, so this
// is about reaching node agents or the API server, not about workers starting.
const DefaultCallTimeout = 30 * time.Second

// DecisionWriter is a Connector that takes every decision with its explanation, not only
// the targets that change the fleet (the virtual connector). The grain calls
// WriteDecision after each decision instead of Scale.
type DecisionWriter interface {
	WriteDecision(ctx context.Context, model string, d core.Decision) error
}

// Errors of the Planner grain's methods, wrapped with detail; callers on the same
// member test them with errors.Is, remote callers see the message.
var (
	// ErrBadReport: a PlannerReport that cannot be merged (another model, too many
	// buckets, a sum that is negative or not finite, counts that overflow). Nothing of it
	// is merged.
	ErrBadReport = errors.New("planner: report refused")
	// ErrBadTargets: a PlannerSetTargets the planner refuses; nothing changed.
	ErrBadTargets = errors.New("planner: targets refused")
	// ErrNotConfigured: the grain's planner configuration was refused at activation.
	ErrNotConfigured = errors.New("planner: not configured")
)

// Kind returns the cluster kind hosting Planner grains. Grains are never passivated:
// the planner's history (predictors, stabilisation window) is worth keeping while the
// member lives. A grain activated again elsewhere starts from the fleet as its connector
// finds it (its first decision holds every pool at its current size until data comes).
func Kind(cfg Config) *cluster.Kind {
	return messages.NewPlannerKind(func() messages.Planner { return newGrain(cfg) }, 0)
}

// tick asks the grain for a decision; gathered, decided and scaled carry the results of
// the calls made off the grain's goroutine back to it.
type (
	tick     struct{}
	gathered struct {
		now   time.Time
		fleet core.Fleet
		loads []core.WorkerLoad
		err   error // the connector's Fleet failed: no decision
		note  string
	}
	scaled struct {
		d   core.Decision
		err error
	}
)

// grain implements messages.Planner for one model.
type grain struct {
	cfg     Config
	model   string
	log     zerolog.Logger
	p       *core.Planner
	initErr error
	self    *actor.PID
	system  *actor.ActorSystem
	stop    context.CancelFunc

	// The window of reports since the latest decision.
	window    core.Window
	frontends map[string]bool
	start     time.Time

	busy      bool // a decision's connector calls are in flight
	decisions int64
	last      core.Decision
	fleet     core.Fleet // the fleet the latest decision saw
	lastErr   string     // the latest connector error ("" once a decision went through)
	skipped   int64      // ticks that found the previous decision still in flight
}

func newGrain(cfg Config) *grain {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	return &grain{cfg: cfg, log: cfg.Logger, frontends: map[string]bool{}}
}

// Init builds the planner and starts the timer.
func (g *grain) Init(ctx cluster.GrainContext) {
	g.model = ctx.Identity()
	g.log = g.cfg.Logger.With().Str("planner", g.model).Logger()
	g.self, g.system = ctx.Self(), ctx.ActorSystem()
	g.start = g.cfg.Now()
	switch {
	case g.cfg.Connector == nil:
		g.initErr = fmt.Errorf("%w: no connector", ErrNotConfigured)
	default:
		var err error
		if g.p, err = core.New(g.cfg.Planner); err != nil {
			g.initErr = fmt.Errorf("%w: %w", ErrNotConfigured, err)
		}
	}
	if g.initErr != nil {
		g.log.Error().Err(g.initErr).Msg("planner configuration refused: no decisions")
		return
	}
	pc := g.p.Config()
	period := pc.LoadInterval
	if pc.Mode == core.ModeSLA {
		period = pc.Interval
	}
	ticks, stopTicks := g.ticker(period)
	tctx, cancel := context.WithCancel(context.Background())
	g.stop = func() { cancel(); stopTicks() }
	self, root := g.self, g.system.Root
	go func() {
		for {
			select {
			case <-tctx.Done():
				return
			case <-ticks:
				root.Send(self, tick{})
			}
		}
	}()
	ev := g.log.Info().Str("mode", pc.Mode.String()).Dur("period", period).Str("connector", g.cfg.Connector.Name())
	if pc.Mode == core.ModeSLA { // load mode predicts nothing
		ev = ev.Str("predictor", pc.Predictor)
	}
	ev.Float64("ttft_target_ms", pc.TTFTTargetMs).Float64("itl_target_ms", pc.ITLTargetMs).
		Int("gpu_budget", pc.GPUBudget).Int("min_workers", pc.MinWorkers).Bool("disaggregated", pc.Disaggregated).
		Msg("planner started")
}

func (g *grain) ticker(period time.Duration) (<-chan time.Time, func()) {
	if g.cfg.Ticker != nil {
		return g.cfg.Ticker(g.model, period)
	}
	t := time.NewTicker(period)
	return t.C, t.Stop
}

// Terminate stops the timer.
func (g *grain) Terminate(cluster.GrainContext) {
	if g.stop != nil {
		g.stop()
	}
}

// ReceiveDefault handles the timer's ticks and the results of the connector calls.
func (g *grain) ReceiveDefault(ctx cluster.GrainContext) {
	switch m := ctx.Message().(type) {
	case tick:
		g.onTick()
	case gathered:
		g.onGathered(m)
	case scaled:
		g.onScaled(m)
	}
}

// Report merges one frontend's window into the current one.
func (g *grain) Report(r *messages.PlannerReport, _ cluster.GrainContext) (*messages.Ack, error) {
	w, err := windowOf(g.model, r)
	if err != nil {
		g.log.Warn().Err(err).Str("frontend", r.GetFrontendId()).Msg("planner report refused")
		return nil, err
	}
	if err := checkMerge(&g.window, w); err != nil {
		g.log.Warn().Err(err).Str("frontend", r.GetFrontendId()).Msg("planner report refused")
		return nil, err
	}
	g.window.Merge(w)
	g.frontends[r.GetFrontendId()] = true
	return &messages.Ack{}, nil
}

// windowOf checks a report of model and returns its window. Errors wrap ErrBadReport.
func windowOf(model string, r *messages.PlannerReport) (*core.Window, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadReport}, a...)...)
	}
	switch {
	case r.GetModel() != model:
		return nil, bad("it is of model %q, this planner plans %q", r.GetModel(), model)
	case r.GetFrontendId() == "":
		return nil, bad("missing frontend_id")
	case r.GetDurationMs() < 0:
		return nil, bad("duration_ms %d < 0", r.GetDurationMs())
	}
	for _, s := range []struct {
		name string
		v    float64
	}{{"isl_sum", r.GetIslSum()}, {"osl_sum", r.GetOslSum()}} {
		if !(s.v >= 0) || math.IsInf(s.v, 0) {
			return nil, bad("%s %v, want finite and ≥ 0", s.name, s.v)
		}
	}
	w := &core.Window{Requests: int(r.GetRequests()), ISLSum: r.GetIslSum(), OSLSum: r.GetOslSum()}
	for _, h := range []struct {
		name   string
		counts []uint64
		into   *core.Histogram
	}{{"ttft_buckets", r.GetTtftBuckets(), &w.TTFT}, {"itl_buckets", r.GetItlBuckets(), &w.ITL}, {"queue_buckets", r.GetQueueBuckets(), &w.Queue}} {
		if !sumFits(h.counts) {
			return nil, bad("%s: counts add up past 2^64", h.name)
		}
		hist, err := core.FromCounts(h.counts)
		if err != nil {
			return nil, bad("%s: %v", h.name, err)
		}
		*h.into = hist
	}
	return w, nil
}

// sumFits says whether counts add up without overflowing a uint64 (a negative count
// sent as a signed integer arrives as a count near 2^64).
func sumFits(counts []uint64) bool {
	var n uint64
	for _, c := range counts {
		if n+c < n {
			return false
		}
		n += c
	}
	return true
}

// checkMerge refuses a window whose counts would overflow the current one's.
func checkMerge(cur, w *core.Window) error {
	for _, p := range [][2]*core.Histogram{{&cur.TTFT, &w.TTFT}, {&cur.ITL, &w.ITL}, {&cur.Queue, &w.Queue}} {
		if p[0].N+p[1].N < p[0].N {
			return fmt.Errorf("%w: latency counts add up past 2^64 with this window's", ErrBadReport)
		}
	}
	if cur.Requests+w.Requests < cur.Requests || math.IsInf(cur.ISLSum+w.ISLSum, 0) || math.IsInf(cur.OSLSum+w.OSLSum, 0) {
		return fmt.Errorf("%w: requests or token sums overflow with this window's", ErrBadReport)
	}
	return nil
}

// Status answers the latest decision, explained.
func (g *grain) Status(_ *messages.PlannerStatusRequest, _ cluster.GrainContext) (*messages.PlannerStatus, error) {
	return g.status(), nil
}

// targetFields names the core's configuration fields in a refusal as the admin API's
// fields (POST /admin/planner), for the client who sent them.
var targetFields = strings.NewReplacer("GPUBudget", "gpu_budget", "MinWorkers", "min_workers",
	"TTFTTargetMs", "ttft_target_ms", "ITLTargetMs", "itl_target_ms")

// SetTargets changes the targets and the GPU budget (0 keeps a value) and answers the
// status. Errors wrap ErrBadTargets; nothing changes then.
func (g *grain) SetTargets(r *messages.PlannerSetTargets, _ cluster.GrainContext) (*messages.PlannerStatus, error) {
	if g.p == nil {
		return nil, g.initErr
	}
	if err := g.p.SetTargets(r.GetTtftTargetMs(), r.GetItlTargetMs(), int(r.GetGpuBudget())); err != nil {
		err = fmt.Errorf("%w: %s", ErrBadTargets, targetFields.Replace(err.Error()))
		g.log.Warn().Err(err).Msg("planner targets refused")
		return nil, err
	}
	c := g.p.Config()
	g.log.Info().Float64("ttft_target_ms", c.TTFTTargetMs).Float64("itl_target_ms", c.ITLTargetMs).
		Int("gpu_budget", c.GPUBudget).Msg("planner targets changed")
	return g.status(), nil
}

// onTick closes the window and asks the connector for the fleet (and the Router grain
// for the workers' loads), off the grain's goroutine.
func (g *grain) onTick() {
	if g.p == nil {
		return
	}
	if g.busy {
		g.skipped++
		g.log.Warn().Int64("skipped", g.skipped).Msg("planner tick skipped: the previous decision's connector calls are still running")
		return
	}
	now := g.cfg.Now()
	obs := g.window.Observation(g.start, max(now.Sub(g.start), 0), len(g.frontends))
	g.window, g.frontends, g.start = core.Window{}, map[string]bool{}, now
	g.p.Observe(obs)
	g.busy = true
	conn, model, timeout, routerFor := g.cfg.Connector, g.model, g.cfg.CallTimeout, g.cfg.Router
	self, root := g.self, g.system.Root
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res := gathered{now: now}
		res.fleet, res.err = conn.Fleet(ctx, model)
		if res.err == nil && routerFor != nil { // loads: load mode decides from them, SLA mode bounds its sizes by them
			if rc := routerFor(model); rc != nil {
				st, err := rc.Stats(&messages.RouterStatsRequest{}, cluster.WithTimeout(timeout))
				if err != nil {
					res.note = "router stats: " + err.Error()
				} else {
					res.loads = LoadsOf(st)
				}
			}
		}
		root.Send(self, res)
	}()
}

// LoadsOf turns a Router grain's stats into the planner core's worker loads.
func LoadsOf(st *messages.RouterStats) []core.WorkerLoad {
	loads := make([]core.WorkerLoad, 0, len(st.GetWorkers()))
	for _, w := range st.GetWorkers() {
		loads = append(loads, core.WorkerLoad{WorkerID: w.GetWorkerId(), Pool: poolOfRole(w.GetRole()), Ready: w.GetReady(),
			KVUsage: w.GetEngineKvUsage(), ActivePrefillTokens: int(w.GetActivePrefillTokens()),
			Running: int(w.GetEngineRunning()), Waiting: int(w.GetEngineWaiting())})
	}
	return loads
}

func poolOfRole(r messages.Role) core.Pool {
	switch r {
	case messages.Role_ROLE_PREFILL:
		return core.PoolPrefill
	case messages.Role_ROLE_DECODE:
		return core.PoolDecode
	}
	return core.PoolAggregated
}

// onGathered decides and, when the target differs from the fleet, asks the connector to
// scale.
func (g *grain) onGathered(m gathered) {
	if m.err != nil {
		g.busy = false
		g.lastErr = "fleet: " + m.err.Error()
		g.log.Error().Err(m.err).Str("connector", g.cfg.Connector.Name()).Msg("planner: the fleet is unknown; no decision this period")
		g.notify(core.Decision{}, m.err)
		return
	}
	d := g.p.Decide(m.now, m.fleet, m.loads)
	g.decisions++
	g.last, g.fleet = d, m.fleet
	g.logDecision(d, m.fleet, m.note)
	conn, model, timeout := g.cfg.Connector, g.model, g.cfg.CallTimeout
	dw, writes := conn.(DecisionWriter)
	if !writes && !changes(d.Target, m.fleet) {
		g.busy = false
		g.lastErr = ""
		g.notify(d, nil)
		return
	}
	self, root := g.self, g.system.Root
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var err error
		if writes {
			err = dw.WriteDecision(ctx, model, d)
		} else {
			err = conn.Scale(ctx, model, d.Target)
		}
		root.Send(self, scaled{d: d, err: err})
	}()
}

// changes says whether target asks any pool for another size than ready + starting.
func changes(target map[core.Pool]int, f core.Fleet) bool {
	for pool, n := range target {
		if n != f.Ready[pool]+f.Starting[pool] {
			return true
		}
	}
	return false
}

func (g *grain) onScaled(m scaled) {
	g.busy = false
	if m.err != nil {
		g.lastErr = "scale: " + m.err.Error()
		g.log.Error().Err(m.err).Str("connector", g.cfg.Connector.Name()).Interface("target", poolMap(m.d.Target)).
			Msg("planner: scaling failed")
	} else {
		g.lastErr = ""
	}
	g.notify(m.d, m.err)
}

func (g *grain) notify(d core.Decision, err error) {
	if g.cfg.Decided != nil {
		g.cfg.Decided(g.model, d, err)
	}
}

// logDecision writes one line with everything the decision used and did.
func (g *grain) logDecision(d core.Decision, f core.Fleet, note string) {
	o := d.Observation
	terms := zerolog.Dict()
	for _, t := range d.Terms {
		terms.Float64(t.Name, t.Value)
	}
	ev := g.log.Info().Str("reason", d.Reason)
	if d.Held {
		ev = ev.Bool("held", true)
	}
	if note != "" {
		ev = ev.Str("note", note)
	}
	ev.Str("mode", d.Mode.String()).
		Int("frontends", o.Frontends).Int("requests", o.Requests).Float64("isl_mean", o.ISLMean).Float64("osl_mean", o.OSLMean).
		Float64("ttft_p90_ms", o.TTFTP90Ms).Float64("itl_p90_ms", o.ITLP90Ms).Float64("queue_p90_ms", o.QueueP90Ms).
		Float64("predicted_requests", d.PredictedRequests).Float64("predicted_isl", d.PredictedISL).Float64("predicted_osl", d.PredictedOSL).
		Float64("correction_prefill", d.CorrectionPrefill).Float64("correction_decode", d.CorrectionDecode).
		Dict("terms", terms).Interface("ready", poolMap(f.Ready)).Interface("starting", poolMap(f.Starting)).
		Interface("stopping", poolMap(f.Stopping)).Interface("wanted", poolMap(d.Wanted)).Interface("target", poolMap(d.Target)).
		Strs("clamps", d.Clamps).Msg("planner decision")
}

// poolMap names a per-pool map's keys (for logs and JSON).
func poolMap(m map[core.Pool]int) map[string]int {
	out := make(map[string]int, len(m))
	for p, n := range m {
		out[p.String()] = n
	}
	return out
}

// status renders the configuration and the latest decision.
func (g *grain) status() *messages.PlannerStatus {
	st := &messages.PlannerStatus{Model: g.model, Error: g.lastErr}
	if g.cfg.Connector != nil {
		st.Connector = g.cfg.Connector.Name()
	}
	if g.p == nil {
		if g.initErr != nil {
			st.Error = g.initErr.Error()
		}
		return st
	}
	c := g.p.Config()
	st.Mode = c.Mode.String()
	if c.Mode == core.ModeSLA { // load mode predicts nothing
		st.Predictor = c.Predictor
	}
	st.TtftTargetMs, st.ItlTargetMs, st.GpuBudget, st.MinWorkers = c.TTFTTargetMs, c.ITLTargetMs, int32(c.GPUBudget), int32(c.MinWorkers)
	st.Decisions = g.decisions
	if g.decisions == 0 {
		return st
	}
	d, o := g.last, g.last.Observation
	st.AtUnixMs = d.At.UnixMilli()
	st.Frontends, st.Requests = int32(o.Frontends), uint32(max(o.Requests, 0))
	st.IslMean, st.OslMean = o.ISLMean, o.OSLMean
	st.TtftP90Ms, st.ItlP90Ms, st.QueueP90Ms = o.TTFTP90Ms, o.ITLP90Ms, o.QueueP90Ms
	st.PredictedRequests, st.PredictedIsl, st.PredictedOsl = d.PredictedRequests, d.PredictedISL, d.PredictedOSL
	st.CorrectionPrefill, st.CorrectionDecode = d.CorrectionPrefill, d.CorrectionDecode
	for _, t := range d.Terms {
		st.Terms = append(st.Terms, &messages.PlannerTerm{Name: t.Name, Value: t.Value, Unit: t.Unit})
	}
	pools := c.PoolsInUse()
	for p := range d.Target {
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	for _, p := range pools {
		gpe := c.GPUsPerEngine[p]
		if gpe == 0 {
			gpe = 1
		}
		st.Pools = append(st.Pools, &messages.PlannerPool{Pool: p.String(), Ready: int32(g.fleet.Ready[p]),
			Starting: int32(g.fleet.Starting[p]), Stopping: int32(g.fleet.Stopping[p]), Wanted: int32(d.Wanted[p]),
			Target: int32(d.Target[p]), GpusPerEngine: int32(gpe)})
	}
	st.Clamps = slices.Clone(d.Clamps)
	st.Held, st.Reason = d.Held, d.Reason
	return st
}
