package frontend

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
)

// WritePrometheus appends the Router grains' view of every live model to a /metrics
// scrape: per-worker readiness, indexed KV blocks, router-tracked active decode blocks,
// prefill tokens and requests, the engine's running/waiting requests and KV usage from
// its last heartbeat, and per-model routing counters (prefix-hit blocks of routed
// prompts). Errors reaching a Router grain leave that model out of this scrape. First
// come the frontend's own counters: turbine_frontend_migrations_total{model,reason}
// (requests re-sent to another worker, by fault: worker_terminated, engine_error,
// stalled).
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
	}
	modelFams := []modelFamily{
		{"turbine_router_requests_routed_total", "requests routed by the model's router", func(s *messages.RouterStats) int64 { return s.Routed }},
		{"turbine_router_prompt_blocks_total", "full KV blocks in routed prompts", func(s *messages.RouterStats) int64 { return s.PromptBlocks }},
		{"turbine_router_prefix_hit_blocks_total", "routed prompt blocks already cached on the chosen worker", func(s *messages.RouterStats) int64 { return s.OverlapBlocks }},
	}
	workerLines := make([][]string, len(workerFams))
	modelLines := make([][]string, len(modelFams))
	for _, m := range models {
		st, err := b.router(m.Model).Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(b.cfg.RouteTimeout))
		if err != nil {
			continue
		}
		model := escapeLabel(m.Model)
		for _, ws := range st.Workers {
			lbl := fmt.Sprintf(`{model="%s",worker="%s"}`, model, escapeLabel(ws.WorkerId))
			for i, f := range workerFams {
				workerLines[i] = append(workerLines[i], f.name+lbl+" "+strconv.FormatFloat(f.value(ws), 'g', -1, 64))
			}
		}
		lbl := fmt.Sprintf(`{model="%s"}`, model)
		for i, f := range modelFams {
			modelLines[i] = append(modelLines[i], f.name+lbl+" "+strconv.FormatInt(f.value(st), 10))
		}
	}
	for i, f := range workerFams {
		writeFamily(w, f.name, f.help, "gauge", workerLines[i])
	}
	for i, f := range modelFams {
		writeFamily(w, f.name, f.help, "counter", modelLines[i])
	}
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

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
