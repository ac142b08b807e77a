package planner

import "time"

// Window accumulates one frontend's measurements of one model over a reporting window:
// latency histograms (TTFT, ITL per token, queue time), requests and their token sums.
// The zero value is empty and ready. Not safe for concurrent use.
type Window struct {
	Requests         int
	ISLSum, OSLSum   float64
	TTFT, ITL, Queue Histogram
}

// AddRequest counts one request that ended after producing output: its prompt and output
// tokens.
func (w *Window) AddRequest(isl, osl int) {
	w.Requests++
	w.ISLSum += float64(isl)
	w.OSLSum += float64(osl)
}

// AddTTFT counts one time to first token.
func (w *Window) AddTTFT(d time.Duration) { w.TTFT.Add(ms(d)) }

// AddITL counts n inter-token gaps of d each (a chunk of n tokens after a gap of n·d).
func (w *Window) AddITL(d time.Duration, n int) {
	v := ms(d)
	b := bucketOf(v)
	w.ITL.Counts[b] += uint64(max(n, 0))
	w.ITL.N += uint64(max(n, 0))
}

// AddQueue counts one request's wait before its engine started it.
func (w *Window) AddQueue(d time.Duration) { w.Queue.Add(ms(d)) }

// Merge adds another window's counts (another frontend's report of the same interval).
func (w *Window) Merge(o *Window) {
	w.Requests += o.Requests
	w.ISLSum += o.ISLSum
	w.OSLSum += o.OSLSum
	w.TTFT.Merge(&o.TTFT)
	w.ITL.Merge(&o.ITL)
	w.Queue.Merge(&o.Queue)
}

// Observation turns merged windows of frontends frontends into an Observation of the
// interval [start, start+d). Percentiles of empty histograms are 0.
func (w *Window) Observation(start time.Time, d time.Duration, frontends int) Observation {
	o := Observation{Start: start, Duration: d, Frontends: frontends, Requests: w.Requests}
	if w.Requests > 0 {
		o.ISLMean = w.ISLSum / float64(w.Requests)
		o.OSLMean = w.OSLSum / float64(w.Requests)
	}
	o.TTFTP90Ms, _ = w.TTFT.Quantile(0.9)
	o.ITLP90Ms, _ = w.ITL.Quantile(0.9)
	o.QueueP90Ms, _ = w.Queue.Quantile(0.9)
	return o
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
