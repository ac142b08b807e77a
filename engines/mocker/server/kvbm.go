package server

import (
	"context"
	"fmt"
	"strconv"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvbmtier"
	"github.com/turbine-llm/turbine/kv"
)

// The node's KV block manager (docs/reference.md §9): with Params.KvbmURL the engine
// offloads the KV blocks its GPU cache evicts to it, as real bytes (--block-size ×
// --kv-bytes-per-token per block, written by one goroutine from a bounded queue so that
// steps never wait for the network; a full queue drops the block; a block manager that
// is not reachable yet, or no longer, leaves the engine serving without its lower tier
// while the client reconnects), and a prefix it holds
// is onboarded (read back, checked) at the modelled host-tier bandwidth instead of
// computed (engines/mocker tier.go). The usage's cached_tokens counts GPU and onboarded
// tokens, as vLLM's num_cached_tokens counts a KV connector's.

// Metric names of the lower KV tiers. vLLM's names for its KV connector's prefix hits,
// then the mock engine's own, in tokens, blocks and bytes by tier.
const (
	MetricExternalPrefixQueries = "vllm:external_prefix_cache_queries_total"
	MetricExternalPrefixHits    = "vllm:external_prefix_cache_hits_total"
	// MetricTierPrefixHits: prompt tokens found at admission, by tier (gpu, host,
	// disk, remote): the GPU's are vllm:prefix_cache_hits_total's.
	MetricTierPrefixHits = "turbine_mocker_kv_tier_prefix_hits_total"
	MetricOffloadBlocks  = "turbine_mocker_kv_offloaded_blocks_total"
	MetricOffloadBytes   = "turbine_mocker_kv_offloaded_bytes_total"
	MetricOnboardBlocks  = "turbine_mocker_kv_onboarded_blocks_total"
	MetricOnboardBytes   = "turbine_mocker_kv_onboarded_bytes_total"
	MetricOnboardSeconds = "turbine_mocker_kv_onboard_seconds_total" // modelled
	// MetricKvbmOffloads: blocks the block manager client wrote (result="ok"), dropped
	// on a full queue ("dropped"), dropped while the block manager was unreachable
	// ("unreachable") or failed to write ("error"); MetricKvbmReadErrors: pipelines that
	// failed and blocks that did not check; MetricKvbmUp: 1 while the block manager
	// answers, 0 while the client reconnects.
	MetricKvbmOffloads   = "turbine_mocker_kvbm_offloads_total"
	MetricKvbmReadErrors = "turbine_mocker_kvbm_read_errors_total"
	MetricKvbmUp         = "turbine_mocker_kvbm_up"
)

// lowerTiers are the tiers a block manager serves, in metric order.
var lowerTiers = []kv.Tier{kv.TierHost, kv.TierDisk, kv.TierRemote}

// dialKvbm makes the client of opts.KvbmURL (nil when empty) the engine's lower tier. A
// block manager that does not answer is no error: the client reconnects in the
// background (kvbmtier.Dial). Errors: a bad URL, no prefix caching.
func dialKvbm(opts *Options) (*kvbmtier.Tier, error) {
	if opts.KvbmURL == "" {
		return nil, nil
	}
	if !opts.Engine.EnablePrefixCaching {
		return nil, fmt.Errorf("server: --kvbm-url needs prefix caching (blocks are offloaded by their prefix hash)")
	}
	t, err := kvbmtier.Dial(context.Background(), kvbmtier.Options{URL: opts.KvbmURL, Model: opts.ServedModelName,
		BlockBytes: opts.Engine.BlockBytes(), Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	opts.Engine.Tiers = t
	return t, nil
}

func closeKvbm(t *kvbmtier.Tier) {
	if t != nil {
		_ = t.Close()
	}
}

// tierMetrics are the lower tiers' metrics, copied from the engine's and the block
// manager client's counters after every step.
type tierMetrics struct {
	queries, hits                    *metrics.Counter
	tierHits                         [kv.NumTiers]*metrics.Counter // TierNone: the GPU's
	offBlocks, offBytes              *metrics.Counter
	onBlocks, onBytes                [kv.NumTiers]*metrics.Counter
	onSeconds                        *metrics.FloatCounter
	written, dropped, failed, rerror *metrics.Counter
	unreachable                      *metrics.Counter
}

func newTierMetrics(set *metrics.Set, model string, t *kvbmtier.Tier) tierMetrics {
	labels := fmt.Sprintf(`model_name=%s,engine="0"`, strconv.Quote(model))
	m := tierMetrics{
		queries:     set.NewCounter(MetricExternalPrefixQueries + "{" + labels + "}"),
		hits:        set.NewCounter(MetricExternalPrefixHits + "{" + labels + "}"),
		offBlocks:   set.NewCounter(MetricOffloadBlocks),
		offBytes:    set.NewCounter(MetricOffloadBytes),
		onSeconds:   set.NewFloatCounter(MetricOnboardSeconds),
		written:     set.NewCounter(MetricKvbmOffloads + `{result="ok"}`),
		dropped:     set.NewCounter(MetricKvbmOffloads + `{result="dropped"}`),
		failed:      set.NewCounter(MetricKvbmOffloads + `{result="error"}`),
		rerror:      set.NewCounter(MetricKvbmReadErrors),
		unreachable: set.NewCounter(MetricKvbmOffloads + `{result="unreachable"}`),
	}
	if t != nil {
		set.NewGauge(MetricKvbmUp, func() float64 {
			if t.Stats().Up {
				return 1
			}
			return 0
		})
	}
	m.tierHits[kv.TierNone] = set.NewCounter(MetricTierPrefixHits + `{tier="gpu"}`)
	for _, t := range lowerTiers {
		m.tierHits[t] = set.NewCounter(fmt.Sprintf(`%s{tier=%q}`, MetricTierPrefixHits, t))
		m.onBlocks[t] = set.NewCounter(fmt.Sprintf(`%s{tier=%q}`, MetricOnboardBlocks, t))
		m.onBytes[t] = set.NewCounter(fmt.Sprintf(`%s{tier=%q}`, MetricOnboardBytes, t))
	}
	return m
}

// update copies the counters (the engine and the client are their single sources).
func (m *tierMetrics) update(st *mocker.Stats, t *kvbmtier.Tier) {
	if m.queries == nil {
		return // before New registered them
	}
	ts := &st.Tiers
	var lower uint64
	for _, t := range lowerTiers {
		lower += ts.PrefixHits[t]
		m.tierHits[t].Set(ts.PrefixHits[t])
		m.onBlocks[t].Set(ts.OnboardedBlocks[t])
		m.onBytes[t].Set(ts.OnboardedBytes[t])
	}
	m.tierHits[kv.TierNone].Set(st.PrefixHits)
	m.queries.Set(st.PrefixQueries)
	m.hits.Set(lower)
	m.offBlocks.Set(ts.OffloadedBlocks)
	m.offBytes.Set(ts.OffloadedBytes)
	m.onSeconds.Set(ts.OnboardTime.Seconds())
	if t != nil {
		c := t.Stats()
		m.written.Set(c.Offloaded)
		m.dropped.Set(c.Dropped)
		m.failed.Set(c.WriteErrors)
		m.rerror.Set(c.ReadErrors)
		m.unreachable.Set(c.Unreachable)
	}
}
