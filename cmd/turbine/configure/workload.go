package configure

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// workload builds the requests the options describe, in arrival order, and names them.
func (o *Options) workload() ([]bench.Request, string, error) {
	var reqs []bench.Request
	var name string
	if o.Trace == "" {
		isl, _ := bench.ParseLength(o.ISL)
		osl, _ := bench.ParseLength(o.OSL)
		spec := bench.SyntheticSpec{ISL: isl, OSL: osl, Rate: o.Rate, Requests: o.Requests, BlockTokens: o.BlockTokens, Seed: o.Seed}
		var err error
		if reqs, err = spec.Generate(); err != nil {
			return nil, "", fmt.Errorf("synthetic workload: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
		name = fmt.Sprintf("synthetic: ISL %s, OSL %s, %g requests/s, %d requests", isl, osl, o.Rate, o.Requests)
	} else {
		var err error
		reqs, err = bench.ReadTraceFile(o.Trace, o.BlockTokens, o.Limit)
		if err != nil {
			return nil, "", fmt.Errorf("--trace: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
		if len(reqs) == 0 {
			return nil, "", fmt.Errorf("--trace %s: no request", o.Trace)
		}
		if err := bench.Scale(reqs, o.TimeScale); err != nil {
			return nil, "", fmt.Errorf("--time-scale %g with --trace %s: %s", o.TimeScale, o.Trace, strings.TrimPrefix(err.Error(), "bench: "))
		}
		name = fmt.Sprintf("%s (%d requests, time scale %g)", filepath.Base(o.Trace), len(reqs), o.TimeScale)
	}
	slices.SortStableFunc(reqs, func(a, b bench.Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	return reqs, name, nil
}

// window is a run of consecutive requests of the workload that one simulation replays:
// its first warm requests fill the engines' caches and queues and are not scored.
type window struct {
	reqs []bench.Request
	warm int
}

// sampleWindows splits the sample a layout's prediction simulates: the whole workload
// when sample is 0 or covers it; otherwise windows windows of sample/windows consecutive
// requests, spread evenly from the workload's start to its end, each after a warm-up of a
// quarter of its size taken from the requests before it (fewer at the workload's
// start). reqs is in arrival order.
func sampleWindows(reqs []bench.Request, sample, windows int) []window {
	n := len(reqs)
	m := sample / max(windows, 1)
	warm := m / 4
	if sample <= 0 || m < 1 || n-warm-m < 0 || windows*m >= n {
		return []window{{reqs: reqs}}
	}
	out := make([]window, windows)
	for k := range out {
		start := warm
		if windows > 1 {
			start += k * (n - warm - m) / (windows - 1)
		}
		from := start - warm
		out[k] = window{reqs: reqs[from : start+m], warm: warm}
	}
	return out
}

// whole reports whether ws is the whole workload of n requests in one window.
func whole(ws []window, n int) bool { return len(ws) == 1 && ws[0].warm == 0 && len(ws[0].reqs) == n }

// scored is the number of requests ws scores.
func scored(ws []window) int {
	n := 0
	for _, w := range ws {
		n += len(w.reqs) - w.warm
	}
	return n
}

// tail is how long after the window's last scored arrival its last scored answer came
// (an answer's end is its start plus its E2E, offsets from the window's first arrival).
func tail(w window, results []bench.Result) time.Duration {
	var lastArrival, lastEnd time.Duration
	for _, r := range results[w.warm:] {
		lastArrival = max(lastArrival, r.Start)
		lastEnd = max(lastEnd, r.Start+r.E2E)
	}
	return lastEnd - lastArrival
}
