package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Per-interval latency targets (docs/reference.md §27.8): a planner is judged by how many
// intervals of a run met its TTFT and ITL p90 targets, not by the run's overall
// percentiles, which a long quiet tail can hide a bad peak in.

// MaxIntervals bounds the intervals of an IntervalReport (a run of 30 days cut in
// seconds would have 2.6 million).
const MaxIntervals = 100_000

// IntervalReport is a run cut into intervals of IntervalS seconds from its start, each
// with the p90 TTFT and ITL of the samples that fell in it against the targets. A TTFT
// falls in the interval of its first token (the request's start + TTFT), an ITL gap in
// that of the token that ends it, a failed request in that of its end (start + E2E, or
// its start when it has none): where the frontend, and so the planner, sees them.
type IntervalReport struct {
	IntervalS    float64    `json:"interval_s"`
	TTFTTargetMs float64    `json:"ttft_target_ms"`
	ITLTargetMs  float64    `json:"itl_target_ms"`
	Intervals    []Interval `json:"intervals"`
	// Measured counts the intervals with at least one sample or failure; Within those of
	// them that met both targets without a failure. WithinFraction is Within/Measured
	// (0 when none was measured).
	Measured       int     `json:"measured"`
	Within         int     `json:"within"`
	WithinFraction float64 `json:"within_fraction"`
}

// Interval is one interval of a run.
type Interval struct {
	StartS float64 `json:"start_s"` // from the start of the run
	// TTFTs, ITLs: the samples in it; Failed: the requests that failed in it.
	TTFTs  int `json:"ttfts"`
	ITLs   int `json:"itls"`
	Failed int `json:"failed"`
	// TTFTP90Ms, ITLP90Ms: the p90s of its samples in ms (0 without samples).
	TTFTP90Ms float64 `json:"ttft_p90_ms"`
	ITLP90Ms  float64 `json:"itl_p90_ms"`
	// Within: it has samples, no failure, and each p90 it has is at most its target.
	Within bool `json:"within"`
}

// Intervals cuts o into intervals of length interval from its start (the last one ends
// at o's last sample or failure) and checks each against the p90 targets (ms). Errors: an
// interval that is not positive or would cut the run into more than MaxIntervals, or a
// target that is not a positive finite number.
func Intervals(o Outcome, interval time.Duration, ttftTargetMs, itlTargetMs float64) (IntervalReport, error) {
	rep := IntervalReport{IntervalS: interval.Seconds(), TTFTTargetMs: ttftTargetMs, ITLTargetMs: itlTargetMs}
	if interval <= 0 {
		return rep, fmt.Errorf("bench: interval %v: want above 0", interval)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"TTFT target", ttftTargetMs}, {"ITL target", itlTargetMs}} {
		if !(t.v > 0) || t.v > MaxSummaryMillis {
			return rep, fmt.Errorf("bench: %s %v ms: want above 0 and at most %g", t.name, t.v, float64(MaxSummaryMillis))
		}
	}
	var end time.Duration
	for _, r := range o.Results {
		end = max(end, r.Start+r.E2E, r.Start+r.TTFT)
		t := r.Start + r.TTFT
		for _, g := range r.ITL {
			t += g
			end = max(end, t)
		}
	}
	if n := int64(end/interval) + 1; n > MaxIntervals {
		return rep, fmt.Errorf("bench: interval %v cuts a run of %v into %d intervals: want at most %d (a longer interval)", interval, end, n, MaxIntervals)
	}
	n := int(end/interval) + 1
	ttft, itl := make([][]float64, n), make([][]float64, n)
	failed := make([]int, n)
	at := func(t time.Duration) int { return min(max(int(t/interval), 0), n-1) }
	for _, r := range o.Results {
		if r.Error != "" {
			failed[at(r.Start+r.E2E)]++
			continue
		}
		if r.TTFT <= 0 {
			continue
		}
		t := r.Start + r.TTFT
		ttft[at(t)] = append(ttft[at(t)], ms(r.TTFT))
		for _, g := range r.ITL {
			t += g
			itl[at(t)] = append(itl[at(t)], ms(g))
		}
	}
	rep.Intervals = make([]Interval, n)
	for k := range rep.Intervals {
		iv := Interval{StartS: (time.Duration(k) * interval).Seconds(), TTFTs: len(ttft[k]), ITLs: len(itl[k]), Failed: failed[k]}
		if iv.TTFTs > 0 {
			iv.TTFTP90Ms = Describe(ttft[k]).P90
		}
		if iv.ITLs > 0 {
			iv.ITLP90Ms = Describe(itl[k]).P90
		}
		if iv.TTFTs+iv.ITLs+iv.Failed > 0 {
			rep.Measured++
			iv.Within = iv.Failed == 0 && iv.TTFTP90Ms <= ttftTargetMs && iv.ITLP90Ms <= itlTargetMs
			if iv.Within {
				rep.Within++
			}
		}
		rep.Intervals[k] = iv
	}
	if rep.Measured > 0 {
		rep.WithinFraction = float64(rep.Within) / float64(rep.Measured)
	}
	return rep, nil
}

// check checks a report as Intervals makes it (ReadSummary).
func (r *IntervalReport) check() error {
	switch {
	case !(r.IntervalS > 0) || r.IntervalS > MaxArrival.Seconds():
		return fmt.Errorf("intervals.interval_s %v: want above 0, at most %v", r.IntervalS, MaxArrival.Seconds())
	case !(r.TTFTTargetMs > 0 && r.TTFTTargetMs <= MaxSummaryMillis) || !(r.ITLTargetMs > 0 && r.ITLTargetMs <= MaxSummaryMillis):
		return fmt.Errorf("intervals: targets %v and %v ms: want above 0, at most %g", r.TTFTTargetMs, r.ITLTargetMs, float64(MaxSummaryMillis))
	case len(r.Intervals) > MaxIntervals:
		return fmt.Errorf("intervals: %d of them: want at most %d", len(r.Intervals), MaxIntervals)
	}
	measured, within := 0, 0
	for k, iv := range r.Intervals {
		if iv.TTFTs < 0 || iv.ITLs < 0 || iv.Failed < 0 {
			return fmt.Errorf("intervals[%d]: negative counts", k)
		}
		if err := checkValues(fmt.Sprintf("intervals[%d] (start_s, ttft_p90_ms, itl_p90_ms)", k), []float64{iv.StartS, iv.TTFTP90Ms, iv.ITLP90Ms}, MaxSummaryMillis); err != nil {
			return err
		}
		if iv.TTFTs+iv.ITLs+iv.Failed > 0 {
			measured++
		}
		if iv.Within {
			within++
		}
	}
	if measured != r.Measured || within != r.Within || within > measured {
		return fmt.Errorf("intervals: measured %d and within %d do not match the intervals (%d, %d)", r.Measured, r.Within, measured, within)
	}
	if want := float64(within) / math.Max(float64(measured), 1); math.Abs(r.WithinFraction-want) > 1e-9 {
		return fmt.Errorf("intervals.within_fraction %v: want within/measured = %v", r.WithinFraction, want)
	}
	return nil
}

// IntervalsCSVHeader is the header of WriteIntervalsCSV.
var IntervalsCSVHeader = []string{"start_s", "ttfts", "itls", "failed", "ttft_p90_ms", "itl_p90_ms", "within"}

// WriteIntervalsCSV writes one row per interval; a p90 without samples is empty, and an
// interval without any sample has an empty within.
func WriteIntervalsCSV(w io.Writer, r IntervalReport) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(IntervalsCSVHeader); err != nil {
		return err
	}
	f := func(x float64, n int) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	for _, iv := range r.Intervals {
		within := ""
		if iv.TTFTs+iv.ITLs+iv.Failed > 0 {
			within = strconv.FormatBool(iv.Within)
		}
		if err := cw.Write([]string{strconv.FormatFloat(iv.StartS, 'f', 3, 64), strconv.Itoa(iv.TTFTs), strconv.Itoa(iv.ITLs),
			strconv.Itoa(iv.Failed), f(iv.TTFTP90Ms, iv.TTFTs), f(iv.ITLP90Ms, iv.ITLs), within}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
