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
// prompts). Errors reaching a Router grain leave that model out of this scrape.
func (b *Backend) WritePrometheus(ctx context.Context, w io.Writer) {
	models, err := b.Models(ctx)
	if err != nil {
		return
	}
	type family struct{ name, help, typ string }
	fams := []family{
		{"turbine_router_worker_ready", "1 when the worker's engine is healthy and takes requests", "gauge"},
		{"turbine_router_worker_busy", "1 when the worker is over a busy threshold", "gauge"},
		{"turbine_router_worker_indexed_blocks", "KV blocks of the worker's engine in the router's index", "gauge"},
		{"turbine_router_worker_active_decode_blocks", "KV blocks of requests routed to the worker and not yet freed", "gauge"},
		{"turbine_router_worker_active_prefill_tokens", "prompt tokens routed to the worker still to prefill", "gauge"},
		{"turbine_router_worker_active_requests", "requests routed to the worker and not yet freed", "gauge"},
		{"turbine_router_worker_engine_running", "requests running in the worker's engine (last heartbeat)", "gauge"},
		{"turbine_router_worker_engine_waiting", "requests waiting in the worker's engine (last heartbeat)", "gauge"},
		{"turbine_router_worker_engine_kv_usage", "the engine's KV cache usage fraction (last heartbeat)", "gauge"},
		{"turbine_router_requests_routed_total", "requests routed by the model's router", "counter"},
		{"turbine_router_prompt_blocks_total", "full KV blocks in routed prompts", "counter"},
		{"turbine_router_prefix_hit_blocks_total", "routed prompt blocks already cached on the chosen worker", "counter"},
	}
	lines := make([][]string, len(fams))
	for _, m := range models {
		st, err := b.router(m.Model).Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(b.cfg.RouteTimeout))
		if err != nil {
			continue
		}
		model := escapeLabel(m.Model)
		for _, ws := range st.Workers {
			lbl := fmt.Sprintf(`{model="%s",worker="%s"}`, model, escapeLabel(ws.WorkerId))
			vals := []float64{b2f(ws.Ready), b2f(ws.Busy), float64(ws.IndexedBlocks), float64(ws.ActiveBlocks),
				float64(ws.ActivePrefillTokens), float64(ws.ActiveRequests), float64(ws.EngineRunning),
				float64(ws.EngineWaiting), ws.EngineKvUsage}
			for i, v := range vals {
				lines[i] = append(lines[i], fams[i].name+lbl+" "+strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
		lbl := fmt.Sprintf(`{model="%s"}`, model)
		for i, v := range []int64{st.Routed, st.PromptBlocks, st.OverlapBlocks} {
			j := 9 + i
			lines[j] = append(lines[j], fams[j].name+lbl+" "+strconv.FormatInt(v, 10))
		}
	}
	for i, f := range fams {
		if len(lines[i]) == 0 {
			continue
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s\n", f.name, f.help, f.name, f.typ, strings.Join(lines[i], "\n"))
	}
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
