package pool

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/vllm"
)

// ErrNoLoadMetrics is returned by ParseLoad for a page with neither vLLM's nor SGLang's
// request gauges.
var ErrNoLoadMetrics = errors.New("pool: /metrics has neither vllm:num_requests_running/waiting nor sglang:num_running_reqs/num_queue_reqs")

// ParseLoad reads a /metrics page in Prometheus' text format (at most MaxMetricsBytes)
// and returns the load it reports, At set to at. Pure.
//
// vLLM's names are tried first (the mock engine speaks them): vllm:num_requests_waiting
// and vllm:num_requests_running summed over their label sets (one per engine, that is per
// data-parallel rank), KV use the mean of vllm:kv_cache_usage_perc, or of the older
// vllm:gpu_cache_usage_perc. Then SGLang's: sglang:num_queue_reqs, sglang:num_running_reqs
// summed over data-parallel ranks (tensor-parallel replicas counted once), KV use the mean
// of sglang:token_usage. The reduction is the engines packages' (engines/vllm,
// engines/sglang), so the picker reads a page the way a Turbine worker does.
//
// Errors: unparsable text, ErrNoLoadMetrics, or a value that is negative, NaN or
// infinite. A KV use above 1 is read as 1.
func ParseLoad(r io.Reader, at time.Time) (Load, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, MaxMetricsBytes))
	if err != nil {
		return Load{}, fmt.Errorf("pool: /metrics: %w", err)
	}
	var l Load
	if v, err := vllm.LoadFromFamilies(fams, at); err == nil {
		l = Load{Waiting: v.Waiting, Running: v.Running, KVUsage: v.KVCacheUsage, At: at}
	} else if s, err := sglang.LoadFromFamilies(fams, at); err == nil {
		l = Load{Waiting: s.Queued, Running: s.Running, KVUsage: s.TokenUsage, At: at}
	} else {
		return Load{}, ErrNoLoadMetrics
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"waiting", l.Waiting}, {"running", l.Running}, {"KV usage", l.KVUsage}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return Load{}, fmt.Errorf("pool: /metrics: %s is %v", f.name, f.v)
		}
	}
	l.KVUsage = min(l.KVUsage, 1)
	return l, nil
}
