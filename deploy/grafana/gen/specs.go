package main

import "fmt"

// Label filters of the template variables. Rejections refused before their body was
// read carry model="" (docs/reference.md §11), hence the "|" alternative.
const (
	m   = `model=~"$model"`
	mE  = `model=~"$model|"`
	mw  = `model=~"$model",worker=~"$worker"`
	win = `[$__rate_interval]`
)

func rate(metric, filter string) string {
	return fmt.Sprintf("rate(%s{%s}%s)", metric, filter, win)
}

// quantiles is p50, p90 and p99 of a histogram family over every series filter selects.
func quantiles(family, filter string) []target {
	var ts []target
	for _, q := range [][2]string{{"0.5", "p50"}, {"0.9", "p90"}, {"0.99", "p99"}} {
		ts = append(ts, target{
			expr:   fmt.Sprintf("histogram_quantile(%s, sum by (le) (%s))", q[0], rate(family+"_bucket", filter)),
			legend: q[1],
		})
	}
	return ts
}

func ts(title, unit string, w int, desc string, targets ...target) panel {
	return panel{kind: "timeseries", title: title, unit: unit, w: w, desc: desc, targets: targets}
}

func stat(title, unit string, desc string, t target) panel {
	return panel{kind: "stat", title: title, unit: unit, w: 6, desc: desc, targets: []target{t}}
}

func t(expr, legend string) target { return target{expr: expr, legend: legend} }

func specs() []spec {
	return []spec{fleet(), workers(), router(), disagg(), planner(), kvbm()}
}

func fleet() spec {
	return spec{
		file: "turbine-fleet.json", uid: "turbine-fleet", title: "Turbine / Fleet overview",
		desc: "Requests, latency, prefix-cache hits, errors and migrations of Turbine's frontends (docs/grafana.md).",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Requests/s", "reqps", "Requests ended per second, every status.",
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_requests_total", mE)), "")),
			stat("TTFT p90", "s", "90th percentile time to first token.",
				quantiles("turbine_frontend_time_to_first_token_seconds", m)[1]),
			stat("Prefix-cache hit rate", "percentunit", "Prompt tokens the engines found cached, over all prompt tokens.",
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_frontend_cached_tokens_sum", m), rate("turbine_frontend_input_sequence_tokens_sum", m)), "")),
			stat("In flight", "short", "Requests the frontends are handling now.",
				t(fmt.Sprintf("sum(turbine_frontend_inflight_requests{%s})", m), "")),
			ts("Requests/s by status", "reqps", 12, "Requests ended per second, by endpoint and HTTP status.",
				t(fmt.Sprintf("sum by (endpoint, status) (%s)", rate("turbine_frontend_requests_total", mE)), "{{endpoint}} {{status}}")),
			ts("Errors by kind", "reqps", 12, "Error answers per second: HTTP status of failed requests, 503 refusals by reason (all_busy, no_workers, draining, server_overloaded), clients that left, requests past --request-timeout.",
				t(fmt.Sprintf(`sum by (status) (rate(turbine_frontend_requests_total{%s,status!~"2.."}%s))`, mE, win), "HTTP {{status}}"),
				t(fmt.Sprintf("sum by (reason) (%s)", rate("turbine_frontend_rejected_requests_total", mE)), "refused: {{reason}}"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_cancelled_requests_total", m)), "client left"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_deadline_exceeded_total", m)), "deadline exceeded")),
			ts("Time to first token", "s", 12, "TTFT percentiles from the frontend's histogram.",
				quantiles("turbine_frontend_time_to_first_token_seconds", m)...),
			ts("Inter-token latency", "s", 12, "ITL percentiles from the frontend's histogram (a chunk's gap spread over its tokens).",
				quantiles("turbine_frontend_inter_token_latency_seconds", m)...),
			ts("Prefix-cache hit rate", "percentunit", 12, "Delivered: cached prompt tokens the engines reported. Predicted: the hits the router expected when it chose the worker.",
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_frontend_cached_tokens_sum", m), rate("turbine_frontend_input_sequence_tokens_sum", m)), "delivered"),
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_frontend_predicted_cached_tokens_total", m), rate("turbine_frontend_input_sequence_tokens_sum", m)), "predicted by the router")),
			ts("Migrations and prefill retries", "reqps", 12, "Streams resumed on another worker (--migration-limit), and prefill legs retried, by reason.",
				t(fmt.Sprintf("sum by (reason) (%s)", rate("turbine_frontend_migrations_total", m)), "migration: {{reason}}"),
				t(fmt.Sprintf("sum by (reason) (%s)", rate("turbine_frontend_prefill_retries_total", m)), "prefill retry: {{reason}}")),
			ts("Tokens/s", "short", 12, "Prompt, cached prompt and output tokens per second of ended requests.",
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_input_sequence_tokens_sum", m)), "prompt"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_cached_tokens_sum", m)), "cached prompt"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_output_sequence_tokens_sum", m)), "output")),
			ts("Mean prompt and output length", "short", 12, "Mean input (ISL) and output (OSL) sequence length in tokens.",
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_frontend_input_sequence_tokens_sum", m), rate("turbine_frontend_input_sequence_tokens_count", m)), "ISL"),
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_frontend_output_sequence_tokens_sum", m), rate("turbine_frontend_output_sequence_tokens_count", m)), "OSL")),
			ts("Request duration", "s", 12, "End-to-end duration percentiles, every endpoint.",
				quantiles("turbine_frontend_request_duration_seconds", m)...),
			ts("In flight and queued", "short", 12, "Requests being handled, and waiting in the --queue-depth queue.",
				t(fmt.Sprintf("sum(turbine_frontend_inflight_requests{%s})", m), "in flight"),
				t(fmt.Sprintf("sum(turbine_frontend_queue_depth{%s})", m), "queued")),
		},
	}
}

func workers() spec {
	return spec{
		file: "turbine-workers.json", uid: "turbine-workers", title: "Turbine / Workers",
		desc: "Per-worker load and KV cache as the router sees it (docs/grafana.md).",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Ready workers", "short", "Workers whose engine is healthy and takes requests.",
				t(fmt.Sprintf("sum(turbine_router_worker_ready{%s})", mw), "")),
			stat("Busy workers", "short", "Workers over a busy threshold (--busy-kv-usage, --busy-prefill-tokens).",
				t(fmt.Sprintf("sum(turbine_router_worker_busy{%s})", mw), "")),
			stat("Workers without KV events", "short", "Workers the router indexes from its own placements (approximate mode).",
				t(fmt.Sprintf(`sum(turbine_router_worker_index_mode{%s,mode="approximate"})`, mw), "")),
			stat("Workers missing predicted hits", "short", "Workers delivering under 80 % of the prefix hits the router predicted for their latest requests.",
				t(fmt.Sprintf("sum(turbine_frontend_cache_hit_gap{%s})", mw), "")),
			ts("Requests per worker", "short", 12, "Requests routed to each worker and not yet freed.",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_active_requests{%s})", mw), "{{worker}}")),
			ts("Engine running and waiting", "short", 12, "Requests running and waiting in each worker's engine (its last heartbeat).",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_engine_running{%s})", mw), "{{worker}} running"),
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_engine_waiting{%s})", mw), "{{worker}} waiting")),
			{kind: "timeseries", title: "KV cache usage", unit: "percentunit", w: 12, min: f(0), max: f(1),
				desc:    "Fraction of each engine's KV cache in use (its last heartbeat).",
				targets: []target{t(fmt.Sprintf("max by (worker) (turbine_router_worker_engine_kv_usage{%s})", mw), "{{worker}}")}},
			ts("Active decode blocks", "short", 12, "KV blocks of the requests routed to each worker and not yet freed.",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_active_decode_blocks{%s})", mw), "{{worker}}")),
			ts("Queued prefill tokens", "short", 12, "Prompt tokens routed to each worker still to prefill.",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_active_prefill_tokens{%s})", mw), "{{worker}}")),
			ts("Cached blocks in the router's index", "short", 12, "KV blocks of each engine in the router's index (from KV events), and blocks predicted on workers without them.",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_indexed_blocks{%s})", mw), "{{worker}} indexed"),
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_predicted_blocks{%s})", mw), "{{worker}} predicted")),
			ts("Cached prompt tokens per worker", "short", 12, "Per second: the prefix hits the router predicted for each worker and those its engine delivered.",
				t(fmt.Sprintf("sum by (worker) (%s)", rate("turbine_frontend_predicted_cached_tokens_total", mw)), "{{worker}} predicted"),
				t(fmt.Sprintf("sum by (worker) (%s)", rate("turbine_frontend_delivered_cached_tokens_total", mw)), "{{worker}} delivered")),
			ts("Delivered over predicted hits", "percentunit", 12, "Each worker's delivered cached tokens over the router's prediction: under 0.8 for long means index drift (docs/reference.md §3.2).",
				t(fmt.Sprintf("sum by (worker) (%s) / sum by (worker) (%s)", rate("turbine_frontend_delivered_cached_tokens_total", mw), rate("turbine_frontend_predicted_cached_tokens_total", mw)), "{{worker}}")),
		},
	}
}

func router() spec {
	return spec{
		file: "turbine-router.json", uid: "turbine-router", title: "Turbine / Router",
		desc: "Routing decisions, candidates, prefix hits, KV tiers and the router's index (docs/grafana.md).",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Routed/s", "reqps", "Requests routed per second (a migration or retry routes again).",
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_requests_routed_total", m)), "")),
			stat("Block hit rate", "percentunit", "Routed prompt blocks already cached on the chosen worker's GPU.",
				t(fmt.Sprintf("sum(%s) / sum(%s)", rate("turbine_router_prefix_hit_blocks_total", m), rate("turbine_router_prompt_blocks_total", m)), "")),
			stat("Candidate workers", "short", "Ready workers the router can choose from, less the busy ones.",
				t(fmt.Sprintf("sum(turbine_router_worker_ready{%s}) - sum(turbine_router_worker_busy{%s})", mw, mw), "")),
			stat("Index size", "short", "KV blocks in the router's index, every worker.",
				t(fmt.Sprintf("sum(turbine_router_worker_indexed_blocks{%s})", mw), "")),
			ts("Routing decisions", "reqps", 12, "Requests routed per second, those sent to the worker they were pinned to, and pinned ones routed elsewhere.",
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_requests_routed_total", m)), "routed"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_requests_pinned_total", m)), "pinned"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_pin_fallbacks_total", m)), "pin fallback")),
			ts("Candidates", "short", 12, "Workers by state: ready, busy (left out while others are free), in approximate index mode.",
				t(fmt.Sprintf("sum(turbine_router_worker_ready{%s})", mw), "ready"),
				t(fmt.Sprintf("sum(turbine_router_worker_busy{%s})", mw), "busy"),
				t(fmt.Sprintf(`sum(turbine_router_worker_index_mode{%s,mode="approximate"})`, mw), "approximate index")),
			ts("Prompt blocks and hits", "short", 12, "Full KV blocks of routed prompts per second, those cached on the chosen worker's GPU, and those in a lower tier.",
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_prompt_blocks_total", m)), "prompt blocks"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_prefix_hit_blocks_total", m)), "GPU hit blocks"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_router_tier_hit_blocks_total", m)), "lower-tier hit blocks")),
			ts("Tier hits", "short", 12, "Routed prompt blocks found per second in the block manager's tiers after the chosen worker's GPU hit.",
				t(fmt.Sprintf("sum by (tier) (%s)", rate("turbine_router_tier_hit_blocks_total", m)), "{{tier}}")),
			ts("Index size per worker", "short", 12, "KV blocks of each engine in the router's index.",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_indexed_blocks{%s})", mw), "{{worker}}")),
			ts("Tier index", "short", 12, "The model's blocks each node's block manager holds, per tier, as the router's tier index knows them.",
				t(fmt.Sprintf("sum by (node, tier) (turbine_router_tier_blocks{%s})", m), "{{node}} {{tier}}")),
			ts("Prediction shortfall", "short", 12, "Cached tokens per request the router predicted and the engine did not deliver (percentiles).",
				quantiles("turbine_frontend_cached_tokens_shortfall", m)...),
			ts("Expired requests", "reqps", 12, "Tracked requests the router expired because nobody freed them, by reason.",
				t(fmt.Sprintf("sum by (reason) (%s)", rate("turbine_router_requests_expired_total", m)), "{{reason}}")),
		},
	}
}

func disagg() spec {
	return spec{
		file: "turbine-disagg.json", uid: "turbine-disagg", title: "Turbine / Disaggregated serving",
		desc: "Prefill and decode legs, KV transfer and the router's disaggregation decisions (docs/grafana.md).",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Remote prefill share", "percentunit", "Routing decisions that sent the prompt to a prefill worker.",
				t(fmt.Sprintf(`sum(rate(turbine_frontend_disagg_decisions_total{%s,decision="remote"}%s)) / sum(%s)`, m, win, rate("turbine_frontend_disagg_decisions_total", m)), "")),
			stat("Prefill leg p90", "s", "90th percentile of a prefill leg, start to last chunk.",
				quantiles("turbine_frontend_prefill_leg_seconds", m)[1]),
			stat("KV transfer wait p90", "s", "90th percentile of a decode leg's start to first token: the KV transfer plus one decode step.",
				quantiles("turbine_frontend_kv_transfer_wait_seconds", m)[1]),
			stat("Prefill retries/s", "reqps", "Prefill legs retried per second, every reason.",
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_prefill_retries_total", m)), "")),
			ts("Disaggregation decisions", "reqps", 12, "Routing decisions per second: remote, local_short_prefill, local_prefill_queue, local_no_prefill_workers, local_requested, aggregated.",
				t(fmt.Sprintf("sum by (decision) (%s)", rate("turbine_frontend_disagg_decisions_total", m)), "{{decision}}")),
			ts("Workers by role", "short", 12, "Registered workers by role.",
				t(fmt.Sprintf("sum by (role) (turbine_router_worker_role{%s})", mw), "{{role}}")),
			ts("Prefill leg", "s", 12, "Prefill leg duration percentiles (start to its last chunk).",
				quantiles("turbine_frontend_prefill_leg_seconds", m)...),
			ts("KV transfer wait", "s", 12, "Decode leg start to first token percentiles (KV transfer plus one decode step).",
				quantiles("turbine_frontend_kv_transfer_wait_seconds", m)...),
			ts("Prefill retries and KV releases", "reqps", 12, "Prefill legs retried by reason; ReleaseKv sent to prefill workers when a decode leg ended before its first token.",
				t(fmt.Sprintf("sum by (reason) (%s)", rate("turbine_frontend_prefill_retries_total", m)), "retry: {{reason}}"),
				t(fmt.Sprintf("sum(%s)", rate("turbine_frontend_kv_releases_total", m)), "KV releases")),
			ts("Queued prefill tokens per worker", "short", 12, "Prompt tokens routed to each worker still to prefill (prefill workers carry the remote legs).",
				t(fmt.Sprintf("sum by (worker) (turbine_router_worker_active_prefill_tokens{%s})", mw), "{{worker}}")),
		},
	}
}

func planner() spec {
	return spec{
		file: "turbine-planner.json", uid: "turbine-planner", title: "Turbine / Planner",
		desc: "The planner's pools, decisions, predictions and targets (docs/grafana.md). Empty without --planner or turbine planner.",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Decisions", "short", "Decisions the planner made since it started.",
				t(fmt.Sprintf("sum(turbine_planner_decisions_total{%s})", m), "")),
			stat("Held", "short", "1 when the latest decision held the fleet as it was.",
				t(fmt.Sprintf("max(turbine_planner_held{%s})", m), "")),
			stat("GPU budget", "short", "GPUs the planner may give the model's pools together.",
				t(fmt.Sprintf("sum(turbine_planner_gpu_budget{%s})", m), "")),
			stat("Connector error", "short", "1 when the connector's last step failed.",
				t(fmt.Sprintf("max(turbine_planner_connector_error{%s})", m), "")),
			ts("Workers per pool", "short", 12, "Ready, starting and stopping workers of each pool, and the target the planner asked for.",
				t(fmt.Sprintf("sum by (pool) (turbine_planner_target_workers{%s})", m), "{{pool}} target"),
				t(fmt.Sprintf("sum by (pool) (turbine_planner_ready_workers{%s})", m), "{{pool}} ready"),
				t(fmt.Sprintf("sum by (pool) (turbine_planner_starting_workers{%s})", m), "{{pool}} starting"),
				t(fmt.Sprintf("sum by (pool) (turbine_planner_stopping_workers{%s})", m), "{{pool}} stopping")),
			ts("Wanted and target workers", "short", 12, "The formula's answer (wanted) and what the planner asked for after its clamps (target).",
				t(fmt.Sprintf("sum by (pool) (turbine_planner_wanted_workers{%s})", m), "{{pool}} wanted"),
				t(fmt.Sprintf("sum by (pool) (turbine_planner_target_workers{%s})", m), "{{pool}} target")),
			ts("TTFT p90 against target", "s", 12, "The frontends' TTFT p90 of the planner's latest observed interval, and its target.",
				t(fmt.Sprintf("max(turbine_planner_observed_ttft_p90_seconds{%s})", m), "observed"),
				t(fmt.Sprintf("max(turbine_planner_ttft_target_seconds{%s})", m), "target")),
			ts("ITL p90 against target", "s", 12, "The frontends' ITL p90 of the planner's latest observed interval, and its target.",
				t(fmt.Sprintf("max(turbine_planner_observed_itl_p90_seconds{%s})", m), "observed"),
				t(fmt.Sprintf("max(turbine_planner_itl_target_seconds{%s})", m), "target")),
			ts("Requests observed and predicted", "short", 12, "Requests of the latest observed interval, and those predicted for the next (sla mode).",
				t(fmt.Sprintf("sum(turbine_planner_observed_requests{%s})", m), "observed"),
				t(fmt.Sprintf("sum(turbine_planner_predicted_requests{%s})", m), "predicted")),
			ts("Predicted lengths", "short", 12, "Mean prompt and output tokens predicted for the next interval (sla mode).",
				t(fmt.Sprintf("max(turbine_planner_predicted_isl_tokens{%s})", m), "ISL"),
				t(fmt.Sprintf("max(turbine_planner_predicted_osl_tokens{%s})", m), "OSL")),
			ts("Correction factors", "short", 12, "Observed over the profile's expected TTFT (prefill) and ITL (decode); 0 in load mode.",
				t(fmt.Sprintf("max by (phase) (turbine_planner_correction_factor{%s})", m), "{{phase}}")),
			ts("Frontend reports", "short", 12, "Reports per second the frontends sent the planner, by outcome.",
				t(fmt.Sprintf("sum by (outcome) (%s)", rate("turbine_frontend_planner_reports_total", m)), "{{outcome}}")),
		},
	}
}

func kvbm() spec {
	return spec{
		file: "turbine-kvbm.json", uid: "turbine-kvbm", title: "Turbine / KV block manager",
		desc: "Host-memory and disk tiers of the nodes' KV block managers (docs/grafana.md). Empty without --kvbm or turbine kvbm.",
		tags: []string{"turbine"},
		panels: []panel{
			stat("Host tier used", "percentunit", "Bytes held over the host tier's cap, every node.",
				t(`sum(turbine_kvbm_bytes{tier="host"}) / sum(turbine_kvbm_capacity_bytes{tier="host"})`, "")),
			stat("Tier hit rate", "percentunit", "Reads the tiers served over reads that reached them.",
				t(fmt.Sprintf(`sum(rate(turbine_kvbm_hits_total%s)) / (sum(rate(turbine_kvbm_hits_total%s)) + sum(rate(turbine_kvbm_misses_total%s)))`, win, win, win), "")),
			stat("Offloads/s", "short", "Blocks engines put into the block managers per second.",
				t(fmt.Sprintf("sum(rate(turbine_kvbm_offloads_total%s))", win), "")),
			stat("Onboards/s", "short", "Blocks engines read back per second.",
				t(fmt.Sprintf("sum(rate(turbine_kvbm_onboards_total%s))", win), "")),
			ts("Bytes held per tier", "bytes", 12, "Bytes of blocks each node's tiers hold, and their caps.",
				t("sum by (node, tier) (turbine_kvbm_bytes)", "{{node}} {{tier}}"),
				t("sum by (node, tier) (turbine_kvbm_capacity_bytes)", "{{node}} {{tier}} cap")),
			ts("Blocks per tier", "short", 12, "Blocks each node's tiers hold, and those being read now.",
				t("sum by (node, tier) (turbine_kvbm_blocks)", "{{node}} {{tier}}"),
				t("sum by (node, tier) (turbine_kvbm_pinned_blocks)", "{{node}} {{tier}} pinned")),
			ts("Offload and onboard", "short", 12, "Blocks per second engines put into the block managers and read back.",
				t(fmt.Sprintf("sum by (node) (rate(turbine_kvbm_offloads_total%s))", win), "{{node}} offload"),
				t(fmt.Sprintf("sum by (node) (rate(turbine_kvbm_onboards_total%s))", win), "{{node}} onboard")),
			ts("Offload and onboard bandwidth", "Bps", 12, "Bytes per second engines put into the block managers and read back.",
				t(fmt.Sprintf("sum by (node) (rate(turbine_kvbm_offload_bytes_total%s))", win), "{{node}} offload"),
				t(fmt.Sprintf("sum by (node) (rate(turbine_kvbm_onboard_bytes_total%s))", win), "{{node}} onboard")),
			ts("Hits and misses per tier", "short", 12, "Reads per second each tier served, and those for a key it did not hold.",
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_hits_total%s))", win), "{{tier}} hit"),
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_misses_total%s))", win), "{{tier}} miss")),
			ts("Stored and evicted per tier", "short", 12, "Blocks per second written into each tier and evicted to keep its cap.",
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_stored_total%s))", win), "{{tier}} stored"),
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_evictions_total%s))", win), "{{tier}} evicted")),
			ts("Tier bandwidth", "Bps", 12, "Bytes per second written into and read from each tier.",
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_tier_written_bytes_total%s))", win), "{{tier}} written"),
				t(fmt.Sprintf("sum by (tier) (rate(turbine_kvbm_tier_read_bytes_total%s))", win), "{{tier}} read")),
			ts("Errors", "reqps", 12, "Requests the block managers answered with an error, per second.",
				t(fmt.Sprintf("sum by (node) (rate(turbine_kvbm_errors_total%s))", win), "{{node}}")),
		},
	}
}
