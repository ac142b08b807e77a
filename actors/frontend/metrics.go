package frontend

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/internal/promlabel"
	"github.com/turbine-llm/turbine/messages"
)

// Metric families of the frontend's own (docs/reference.md §11), besides the gateway's:
const (
	// counter {model,reason}: requests re-sent to another worker, by fault.
	metricMigrations = "turbine_frontend_migrations_total"
	// counter {model,decision}: routing decisions by disaggregation decision (aggregated,
	// remote, local_short_prefill, local_prefill_queue, local_no_prefill_workers,
	// local_requested); every Route counts, including those of migrations and prefill retries.
	metricDisaggDecisions = "turbine_frontend_disagg_decisions_total"
	// counter {model,reason}: prefill legs that failed (worker_terminated, engine_error,
	// stalled), or whose KV the decode leg could not load (kv_transfer), and were routed
	// again.
	metricPrefillRetries = "turbine_frontend_prefill_retries_total"
	// counter {model}: ReleaseKv messages sent to prefill workers (decode leg ended before
	// its first token).
	metricKvReleases = "turbine_frontend_kv_releases_total"
	// histogram {model}, seconds: a prefill leg from its Generate to its last chunk.
	metricPrefillLeg = "turbine_frontend_prefill_leg_seconds"
	// histogram {model}, seconds: a decode leg from its Generate to its first token (the
	// KV transfer plus one decode step).
	metricTransferWait = "turbine_frontend_kv_transfer_wait_seconds"
	// counter {model}: requests whose own deadline (--request-timeout) passed before they
	// ended, running or waiting in the busy queue; what still ran was cancelled. A client
	// that leaves is not counted here.
	metricDeadlines = "turbine_frontend_deadline_exceeded_total"
	// counter {model}: legs whose worker did not acknowledge them within the accept
	// timeout and that waited on, the router naming no other worker (flow.NoteNotMoved;
	// those moved count as migrations, reason stalled).
	metricNotMoved = "turbine_frontend_unacknowledged_legs_waiting_total"
	// counters {model,worker}, tokens: the router's predicted prefix hit, and the cached
	// tokens the worker's engine reported, of the legs that computed a prompt and
	// finished (hits.go).
	metricPredictedCached = "turbine_frontend_predicted_cached_tokens_total"
	metricDeliveredCached = "turbine_frontend_delivered_cached_tokens_total"
	// histogram {model}, tokens: per leg, predicted minus delivered cached tokens (0 when
	// the engine delivered at least the prediction).
	metricCachedShortfall = "turbine_frontend_cached_tokens_shortfall"
	// gauge {model,worker}: 1 while the worker's delivered hits stay below the router's
	// prediction (hitGapDetector), else 0.
	metricCacheHitGap = "turbine_frontend_cache_hit_gap"
)

// shortfallBuckets are the upper bounds of the shortfall histogram (tokens): 0, then
// 16 .. 262144.
var shortfallBuckets = append([]float64{0}, metrics.ExponentialBuckets(16, 2, 15)...)

// legBuckets are the upper bounds of the leg histograms: 1 ms .. 131 s.
var legBuckets = metrics.ExponentialBuckets(0.001, 2, 18)

// setRecorder records the streams' events (recorder) into the Backend's metric set.
// A model's counters appear at zero with its first routing decision, every reason
// included, so that a scrape shows the series before their first event (rates and
// absent-series alerts need them).
type setRecorder struct {
	set *metrics.Set
	log zerolog.Logger // the gap detector's warnings

	mu     sync.Mutex
	models map[string]bool // models whose counters exist
	gaps   *hitGapDetector // predicted against delivered hits (hits.go); created on first use
}

// migrationReasons and prefillRetryReasons are the label values of the migration and
// prefill-retry counters.
var (
	migrationReasons = []messages.Fault{messages.Fault_FAULT_WORKER_TERMINATED, messages.Fault_FAULT_ENGINE_ERROR,
		messages.Fault_FAULT_STALLED}
	prefillRetryReasons = []messages.Fault{messages.Fault_FAULT_WORKER_TERMINATED, messages.Fault_FAULT_ENGINE_ERROR,
		messages.Fault_FAULT_STALLED, messages.Fault_FAULT_KV_TRANSFER}
)

// declare creates model's counters at zero the first time it is seen.
func (r *setRecorder) declare(model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.models[model] {
		return
	}
	if r.models == nil {
		r.models = map[string]bool{}
	}
	r.models[model] = true
	for _, reason := range migrationReasons {
		r.counter(metricMigrations, "model", model, "reason", reason.Label())
	}
	for _, reason := range prefillRetryReasons {
		r.counter(metricPrefillRetries, "model", model, "reason", reason.Label())
	}
	r.counter(metricKvReleases, "model", model)
	r.counter(metricDeadlines, "model", model)
	r.counter(metricNotMoved, "model", model)
}

func (r *setRecorder) counter(family string, kv ...string) *metrics.Counter {
	return r.set.GetOrCreateCounter(series(family, kv...))
}

func (r *setRecorder) hist(family, model string) *metrics.PrometheusHistogram {
	return r.set.GetOrCreatePrometheusHistogramExt(series(family, "model", model), legBuckets)
}

func (r *setRecorder) migrated(model string, fault messages.Fault) {
	r.counter(metricMigrations, "model", model, "reason", fault.Label()).Inc()
}
func (r *setRecorder) decided(model string, decision messages.DisaggDecision) {
	r.declare(model)
	r.counter(metricDisaggDecisions, "model", model, "decision", decision.Label()).Inc()
}
func (r *setRecorder) prefillRetried(model string, fault messages.Fault) {
	r.counter(metricPrefillRetries, "model", model, "reason", fault.Label()).Inc()
}
func (r *setRecorder) released(model string) { r.counter(metricKvReleases, "model", model).Inc() }
func (r *setRecorder) deadline(model string) { r.counter(metricDeadlines, "model", model).Inc() }
func (r *setRecorder) notMoved(model string) { r.counter(metricNotMoved, "model", model).Inc() }
func (r *setRecorder) prefillLeg(model string, d time.Duration) {
	r.hist(metricPrefillLeg, model).Update(d.Seconds())
}
func (r *setRecorder) transferWait(model string, d time.Duration) {
	r.hist(metricTransferWait, model).Update(d.Seconds())
}

// series builds `family{k1="v1",...}` with escaped label values.
func series(family string, kv ...string) string {
	var b strings.Builder
	b.WriteString(family)
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%s="%s"`, kv[i], promlabel.Escape(kv[i+1]))
	}
	b.WriteByte('}')
	return b.String()
}

// WritePrometheus appends the Router grains' view of every live model to a /metrics
// scrape: per-worker readiness, indexed KV blocks, router-tracked active decode blocks,
// prefill tokens and requests, the engine's running/waiting requests and KV usage from
// its last heartbeat, and per-model routing counters (prefix-hit blocks of routed
// prompts), each worker's disaggregation role and its index mode (events or
// approximate, with its predicted blocks). Errors reaching a Router grain leave
// that model out of this scrape. The frontend's own families (the metric* constants)
// come first; the planner's (turbine_planner_*, planner.go) last, when one runs.
func (b *Backend) WritePrometheus(ctx context.Context, w io.Writer) {
	b.metrics.WritePrometheus(w)
	models, err := b.Models(ctx)
	if err != nil {
		return
	}
	type workerFamily struct {
		name, help string
		value      func(*messages.WorkerStats) float64
	}
	type modelFamily struct {
		name, help string
		value      func(*messages.RouterStats) int64
	}
	workerFams := []workerFamily{
		{"turbine_router_worker_ready", "1 when the worker's engine is healthy and takes requests", func(w *messages.WorkerStats) float64 { return b2f(w.Ready) }},
		{"turbine_router_worker_busy", "1 when the worker is over a busy threshold", func(w *messages.WorkerStats) float64 { return b2f(w.Busy) }},
		{"turbine_router_worker_indexed_blocks", "KV blocks of the worker's engine in the router's index", func(w *messages.WorkerStats) float64 { return float64(w.IndexedBlocks) }},
		{"turbine_router_worker_active_decode_blocks", "KV blocks of requests routed to the worker and not yet freed", func(w *messages.WorkerStats) float64 { return float64(w.ActiveBlocks) }},
		{"turbine_router_worker_active_prefill_tokens", "prompt tokens routed to the worker still to prefill", func(w *messages.WorkerStats) float64 { return float64(w.ActivePrefillTokens) }},
		{"turbine_router_worker_active_requests", "requests routed to the worker and not yet freed", func(w *messages.WorkerStats) float64 { return float64(w.ActiveRequests) }},
		{"turbine_router_worker_engine_running", "requests running in the worker's engine (last heartbeat)", func(w *messages.WorkerStats) float64 { return float64(w.EngineRunning) }},
		{"turbine_router_worker_engine_waiting", "requests waiting in the worker's engine (last heartbeat)", func(w *messages.WorkerStats) float64 { return float64(w.EngineWaiting) }},
		{"turbine_router_worker_engine_kv_usage", "the engine's KV cache usage fraction (last heartbeat)", func(w *messages.WorkerStats) float64 { return w.EngineKvUsage }},
		{"turbine_router_worker_predicted_blocks", "KV blocks the router predicts on a worker without KV events from what it placed there (not in indexed_blocks)", func(w *messages.WorkerStats) float64 { return float64(w.PredictedBlocks) }},
	}
	modelFams := []modelFamily{
		{"turbine_router_requests_routed_total", "requests routed by the model's router", func(s *messages.RouterStats) int64 { return s.Routed }},
		{"turbine_router_prompt_blocks_total", "full KV blocks in routed prompts", func(s *messages.RouterStats) int64 { return s.PromptBlocks }},
		{"turbine_router_prefix_hit_blocks_total", "routed prompt blocks already cached on the chosen worker", func(s *messages.RouterStats) int64 { return s.OverlapBlocks }},
		{"turbine_router_requests_pinned_total", "requests routed to the worker they were pinned to (the choices after the first of an n > 1 request)", func(s *messages.RouterStats) int64 { return s.Pinned }},
		{"turbine_router_pin_fallbacks_total", "pinned requests whose worker could not take them (gone, not ready, excluded), routed by the policy instead", func(s *messages.RouterStats) int64 { return s.PinFallbacks }},
	}
	// Lower-tier hits of routed prompts (docs/reference.md §9.2), one family labelled by tier.
	tierHits := []struct {
		tier  string
		value func(*messages.RouterStats) int64
	}{
		{"host", func(s *messages.RouterStats) int64 { return s.HostHitBlocks }},
		{"disk", func(s *messages.RouterStats) int64 { return s.DiskHitBlocks }},
		{"remote", func(s *messages.RouterStats) int64 { return s.RemoteHitBlocks }},
	}
	workerLines := make([][]string, len(workerFams))
	modelLines := make([][]string, len(modelFams))
	var roleLines, expiredLines, modeLines, tierHitLines, tierBlockLines []string
	for _, m := range models {
		if m.GetLora() != nil {
			continue // a LoRA adapter is served by its base model's router
		}
		st, err := b.router(m.Model).Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(b.cfg.RouteTimeout))
		if err != nil {
			continue
		}
		model := promlabel.Escape(m.Model)
		for _, ws := range st.Workers {
			lbl := fmt.Sprintf(`{model="%s",worker="%s"}`, model, promlabel.Escape(ws.WorkerId))
			for i, f := range workerFams {
				workerLines[i] = append(workerLines[i], f.name+lbl+" "+strconv.FormatFloat(f.value(ws), 'g', -1, 64))
			}
			role := ws.Role.Label()
			roleLines = append(roleLines, fmt.Sprintf(`turbine_router_worker_role{model="%s",worker="%s",role="%s"} 1`,
				model, promlabel.Escape(ws.WorkerId), promlabel.Escape(role)))
			for _, mode := range []string{"events", "approximate"} {
				modeLines = append(modeLines, fmt.Sprintf(`turbine_router_worker_index_mode{model="%s",worker="%s",mode="%s"} %d`,
					model, promlabel.Escape(ws.WorkerId), mode, b2i(ws.IndexMode == mode || ws.IndexMode == "" && mode == "events")))
			}
		}
		lbl := fmt.Sprintf(`{model="%s"}`, model)
		for i, f := range modelFams {
			modelLines[i] = append(modelLines[i], f.name+lbl+" "+strconv.FormatInt(f.value(st), 10))
		}
		for _, th := range tierHits {
			tierHitLines = append(tierHitLines, fmt.Sprintf(`turbine_router_tier_hit_blocks_total{model="%s",tier="%s"} %d`, model, th.tier, th.value(st)))
		}
		for _, tn := range st.TierNodes {
			for _, tb := range []struct {
				tier string
				n    int64
			}{{"host", tn.HostBlocks}, {"disk", tn.DiskBlocks}, {"remote", tn.RemoteBlocks}} {
				tierBlockLines = append(tierBlockLines, fmt.Sprintf(`turbine_router_tier_blocks{model="%s",node="%s",tier="%s"} %d`,
					model, promlabel.Escape(tn.NodeId), tb.tier, tb.n))
			}
		}
		expiredLines = append(expiredLines,
			fmt.Sprintf(`turbine_router_requests_expired_total{model="%s",reason="unacknowledged"} %d`, model, st.ExpiredUnacked),
			fmt.Sprintf(`turbine_router_requests_expired_total{model="%s",reason="stale"} %d`, model, st.ExpiredStale))
	}
	for i, f := range workerFams {
		writeFamily(w, f.name, f.help, "gauge", workerLines[i])
	}
	writeFamily(w, "turbine_router_worker_role", "1 for the worker's role in disaggregated serving (aggregated, prefill or decode)", "gauge", roleLines)
	writeFamily(w, "turbine_router_worker_index_mode", "1 for what the router reads the worker's cached prefixes from: its engine's KV events (events), or its own record of what it placed there, the engine publishing none (approximate); 0 for the other", "gauge", modeLines)
	for i, f := range modelFams {
		writeFamily(w, f.name, f.help, "counter", modelLines[i])
	}
	writeFamily(w, "turbine_router_tier_hit_blocks_total", "routed prompt blocks found in a lower tier (host memory, disk, another node's block manager) after the chosen worker's GPU hit", "counter", tierHitLines)
	writeFamily(w, "turbine_router_tier_blocks", "the model's KV blocks a node's block manager holds per tier, as the router's tier index knows them", "gauge", tierBlockLines)
	writeFamily(w, "turbine_router_requests_expired_total", "tracked requests (a prefill leg counts apart) the router expired because nobody freed them: routed and never acknowledged (unacknowledged), or older than the maximum sequence age (stale)", "counter", expiredLines)
	b.writePlannerMetrics(ctx, w, models)
}

// writeFamily writes one metric family in Prometheus text format; nothing without lines.
func writeFamily(w io.Writer, name, help, typ string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s\n", name, help, name, typ, strings.Join(lines, "\n"))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
