package sglang

import (
	"context"
	"fmt"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

// SGLang's scheduler gauges (python/sglang/srt/metrics/collector.py).
const (
	MetricRunning        = "sglang:num_running_reqs"
	MetricQueued         = "sglang:num_queue_reqs"
	MetricTokenUsage     = "sglang:token_usage"
	MetricUsedTokens     = "sglang:num_used_tokens"
	MetricMaxTotalTokens = "sglang:max_total_num_tokens"
	MetricCacheHitRate   = "sglang:cache_hit_rate"
)

// Load is a server's load as /metrics reports it, summed over its data-parallel ranks
// (TokenUsage and CacheHitRate: their mean).
type Load struct {
	Running, Queued float64
	// TokenUsage is the fraction of KV cache tokens in use, 0..1.
	TokenUsage float64
	// UsedTokens and MaxTotalTokens count KV cache token slots (0 when absent: older
	// servers do not export sglang:max_total_num_tokens).
	UsedTokens, MaxTotalTokens float64
	CacheHitRate               float64
	// At is when the scrape was answered.
	At time.Time
}

// Load scrapes GET /metrics (the server needs --enable-metrics). Errors: transport,
// non-200 (404 without --enable-metrics), unparsable text, or neither the running nor
// the queue gauge present.
func (c *Client) Load(ctx context.Context) (Load, error) {
	fams, err := c.h.Metrics(ctx, "/metrics")
	if err != nil {
		return Load{}, err
	}
	return LoadFromFamilies(fams, time.Now())
}

// LoadFromFamilies extracts a Load from parsed metric families.
//
// Series are reduced as SGLang labels them: among the replicas of one data-parallel rank
// (tp_rank, pp_rank, moe_ep_rank, attn_tp_rank, attn_cp_rank) only the lowest rank is
// read, since only rank 0 reports by default and the others repeat it; with priority
// scheduling the aggregate series (priority="") is read when present, else the buckets
// are summed; data-parallel ranks (dp_rank) and engine types are summed.
func LoadFromFamilies(fams map[string]*dto.MetricFamily, at time.Time) (Load, error) {
	running, okR := reduce(fams[MetricRunning], false)
	queued, okQ := reduce(fams[MetricQueued], false)
	if !okR && !okQ {
		return Load{}, fmt.Errorf("sglang: /metrics has neither %s nor %s (is the server started with --enable-metrics?)", MetricRunning, MetricQueued)
	}
	l := Load{Running: running, Queued: queued, At: at}
	l.TokenUsage, _ = reduce(fams[MetricTokenUsage], true)
	l.UsedTokens, _ = reduce(fams[MetricUsedTokens], false)
	l.MaxTotalTokens, _ = reduce(fams[MetricMaxTotalTokens], false)
	l.CacheHitRate, _ = reduce(fams[MetricCacheHitRate], true)
	return l, nil
}

// replicaLabels name ranks that repeat one scheduler's numbers.
var replicaLabels = []string{"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"}

// reduce sums (or, with mean, averages) a gauge over its data-parallel ranks.
func reduce(f *dto.MetricFamily, mean bool) (float64, bool) {
	if f == nil || len(f.Metric) == 0 {
		return 0, false
	}
	// Lowest value of each replica label present.
	lowest := map[string]int{}
	for _, m := range f.Metric {
		for _, lp := range m.Label {
			if !isReplica(lp.GetName()) {
				continue
			}
			n, err := strconv.Atoi(lp.GetValue())
			if err != nil {
				continue
			}
			if cur, ok := lowest[lp.GetName()]; !ok || n < cur {
				lowest[lp.GetName()] = n
			}
		}
	}
	hasAggregate := false
	for _, m := range f.Metric {
		if v, ok := label(m, "priority"); ok && v == "" {
			hasAggregate = true
		}
	}
	var sum float64
	n := 0
	for _, m := range f.Metric {
		if !lowestReplica(m, lowest) {
			continue
		}
		if p, ok := label(m, "priority"); ok && hasAggregate && p != "" {
			continue
		}
		sum += enginehttp.MetricValue(m)
		n++
	}
	if n == 0 {
		return 0, false
	}
	if mean {
		return sum / float64(n), true
	}
	return sum, true
}

func isReplica(name string) bool {
	for _, r := range replicaLabels {
		if r == name {
			return true
		}
	}
	return false
}

func lowestReplica(m *dto.Metric, lowest map[string]int) bool {
	for _, lp := range m.Label {
		want, ok := lowest[lp.GetName()]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(lp.GetValue()); err == nil && n != want {
			return false
		}
	}
	return true
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.Label {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}
