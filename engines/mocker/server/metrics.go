package server

import (
	"fmt"
	"strconv"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
)

// vLLM v1 metric names (vllm/v1/metrics/loggers.py), labelled model_name and engine as
// vLLM does. Counters carry the _total suffix that prometheus_client adds on exposition.
const (
	MetricRunning          = "vllm:num_requests_running"
	MetricWaiting          = "vllm:num_requests_waiting"
	MetricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	MetricGPUCacheUsage    = "vllm:gpu_cache_usage_perc" // deprecated name, kept for older scrapers
	MetricPrefixQueries    = "vllm:prefix_cache_queries_total"
	MetricPrefixHits       = "vllm:prefix_cache_hits_total"
	MetricPreemptions      = "vllm:num_preemptions_total"
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricCacheConfigInfo  = "vllm:cache_config_info"
)

// The mock engine's own block counts: blocks with a hash (a sequence's full blocks, or
// cached for reuse) are what its KV events have told the router, so once no request
// runs, MetricCachedBlocks is the number of blocks the router's index should hold for
// this worker (the chaos soak checks it: docs/chaos.md).
const (
	MetricActiveBlocks = "turbine_mocker_kv_active_blocks" // blocks of running or pinned sequences
	MetricCachedBlocks = "turbine_mocker_kv_cached_blocks" // blocks no sequence holds, kept for prefix hits
)

type serverMetrics struct {
	queries, hits, preemptions, prompt, generation *metrics.Counter
	success                                        map[mocker.FinishReason]*metrics.Counter
}

func newServerMetrics(set *metrics.Set, model string, cfg mocker.Config, stats func() *mocker.Stats) serverMetrics {
	labels := fmt.Sprintf(`model_name=%s,engine="0"`, strconv.Quote(model))
	name := func(n string) string { return n + "{" + labels + "}" }
	set.NewGauge(name(MetricRunning), func() float64 { return float64(stats().Running) })
	set.NewGauge(name(MetricWaiting), func() float64 { return float64(stats().Waiting) })
	set.NewGauge(name(MetricKVCacheUsage), func() float64 { return stats().KVUsage })
	set.NewGauge(name(MetricGPUCacheUsage), func() float64 { return stats().KVUsage })
	set.NewGauge(MetricActiveBlocks, func() float64 { return float64(stats().ActiveBlocks) })
	set.NewGauge(MetricCachedBlocks, func() float64 { return float64(stats().CachedBlocks) })
	set.NewGauge(fmt.Sprintf(`%s{%s,block_size="%d",num_gpu_blocks="%d",enable_prefix_caching="%t"}`,
		MetricCacheConfigInfo, labels, cfg.BlockSize, cfg.NumGPUBlocks, cfg.EnablePrefixCaching), func() float64 { return 1 })
	m := serverMetrics{
		queries:     set.NewCounter(name(MetricPrefixQueries)),
		hits:        set.NewCounter(name(MetricPrefixHits)),
		preemptions: set.NewCounter(name(MetricPreemptions)),
		prompt:      set.NewCounter(name(MetricPromptTokens)),
		generation:  set.NewCounter(name(MetricGenerationTokens)),
		success:     map[mocker.FinishReason]*metrics.Counter{},
	}
	for _, r := range []mocker.FinishReason{mocker.FinishStop, mocker.FinishLength} {
		m.success[r] = set.NewCounter(fmt.Sprintf(`%s{%s,finished_reason=%q}`, MetricRequestSuccess, labels, string(r)))
	}
	return m
}

// update copies the engine's counters (the engine is their single source).
func (m serverMetrics) update(st *mocker.Stats) {
	m.queries.Set(st.PrefixQueries)
	m.hits.Set(st.PrefixHits)
	m.preemptions.Set(st.Preemptions)
	m.prompt.Set(st.PromptTokens)
	m.generation.Set(st.GenerationTokens)
}

func (m serverMetrics) finished(r mocker.FinishReason) {
	if c := m.success[r]; c != nil {
		c.Inc()
	}
}
