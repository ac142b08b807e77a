package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The configurator's pure core (docs/reference.md §27.6): the layouts a GPU budget
// allows, the score of a layout from the outcomes of its requests, the ranking with the
// reason each loser lost, and the order in which a search evaluates layouts, pruning
// those that cannot reach the top. `turbine configure` is the shell: it simulates each
// layout and feeds the outcomes in.

// Layout is one way to serve a model on GPUs: Workers aggregated workers of TP GPUs each,
// or, with PrefillWorkers > 0, disaggregated serving xPyD: PrefillWorkers prefill workers
// of PrefillTP GPUs each and Workers decode workers of TP GPUs each.
type Layout struct {
	Workers, TP               int
	PrefillWorkers, PrefillTP int
}

// Disaggregated reports whether l has prefill and decode pools.
func (l Layout) Disaggregated() bool { return l.PrefillWorkers > 0 }

// GPUs is the GPUs l takes: Workers × TP + PrefillWorkers × PrefillTP.
func (l Layout) GPUs() int { return l.Workers*l.TP + l.PrefillWorkers*l.PrefillTP }

// String writes l as "4×TP2" (aggregated) or "1P×TP2+3D×TP1" (one prefill worker of two
// GPUs, three decode workers of one); ParseLayout reads it back.
func (l Layout) String() string {
	if !l.Disaggregated() {
		return fmt.Sprintf("%d×TP%d", l.Workers, l.TP)
	}
	return fmt.Sprintf("%dP×TP%d+%dD×TP%d", l.PrefillWorkers, l.PrefillTP, l.Workers, l.TP)
}

// MaxLayoutWorkers bounds the workers of one pool of a layout, and MaxLayoutTP a
// tensor-parallel size (a profile's bound).
const (
	MaxLayoutWorkers = 1024
	MaxLayoutTP      = 64
)

// Validate checks l: at least one worker of 1..MaxLayoutTP GPUs in each pool it has,
// at most MaxLayoutWorkers workers per pool; an aggregated layout has PrefillTP 0.
func (l Layout) Validate() error {
	switch {
	case l.Workers < 1 || l.Workers > MaxLayoutWorkers:
		return fmt.Errorf("planner: layout %s: %d workers, want 1..%d", l, l.Workers, MaxLayoutWorkers)
	case l.TP < 1 || l.TP > MaxLayoutTP:
		return fmt.Errorf("planner: layout %s: tensor-parallel size %d, want 1..%d", l, l.TP, MaxLayoutTP)
	case l.PrefillWorkers < 0 || l.PrefillWorkers > MaxLayoutWorkers:
		return fmt.Errorf("planner: layout %s: %d prefill workers, want 0..%d", l, l.PrefillWorkers, MaxLayoutWorkers)
	case l.PrefillWorkers == 0 && l.PrefillTP != 0:
		return fmt.Errorf("planner: layout %s: a prefill tensor-parallel size without prefill workers", l)
	case l.PrefillWorkers > 0 && (l.PrefillTP < 1 || l.PrefillTP > MaxLayoutTP):
		return fmt.Errorf("planner: layout %s: prefill tensor-parallel size %d, want 1..%d", l, l.PrefillTP, MaxLayoutTP)
	}
	return nil
}

// ParseLayout reads a layout written as Layout.String writes it ("4×TP2",
// "1P×TP2+3D×TP1"; "x" may stand for "×", and case does not matter).
func ParseLayout(s string) (Layout, error) {
	t := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "×", "X"))
	bad := func() (Layout, error) {
		return Layout{}, fmt.Errorf("planner: layout %q: want N×TPt (aggregated) or XP×TPp+YD×TPd (disaggregated)", s)
	}
	pool := func(part, role string) (n, tp int, ok bool) {
		count, size, found := strings.Cut(part, "XTP")
		if !found || !strings.HasSuffix(count, role) {
			return 0, 0, false
		}
		n, err1 := strconv.Atoi(strings.TrimSuffix(count, role))
		tp, err2 := strconv.Atoi(size)
		return n, tp, err1 == nil && err2 == nil
	}
	var l Layout
	if pre, dec, found := strings.Cut(t, "+"); found {
		var ok1, ok2 bool
		l.PrefillWorkers, l.PrefillTP, ok1 = pool(pre, "P")
		l.Workers, l.TP, ok2 = pool(dec, "D")
		if !ok1 || !ok2 {
			return bad()
		}
	} else {
		var ok bool
		if l.Workers, l.TP, ok = pool(t, ""); !ok {
			return bad()
		}
	}
	if err := l.Validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// LayoutKinds selects the layouts EnumerateLayouts lists.
type LayoutKinds struct {
	Aggregated, Disaggregated bool
}

// MaxLayouts bounds what EnumerateLayouts returns: a search of more layouts than this
// is refused rather than left to run for hours.
const MaxLayouts = 20000

// EnumerateLayouts lists every layout of at most gpus GPUs (≥ 1) whose engines have a
// tensor-parallel size in tps (distinct, each 1..MaxLayoutTP): with kinds.Aggregated
// N×TPt for every t and N ≥ 1; with kinds.Disaggregated XP×TPp+YD×TPd for every p, d and
// X, Y ≥ 1. Order: GPUs ascending; at equal GPUs aggregated layouts first, then by
// decode (or aggregated) TP, prefill TP, prefill workers. Errors: bad arguments, no kind
// selected, more than MaxLayouts layouts.
func EnumerateLayouts(tps []int, gpus int, kinds LayoutKinds) ([]Layout, error) {
	switch {
	case gpus < 1:
		return nil, fmt.Errorf("planner: layouts of %d GPUs: want at least 1", gpus)
	case len(tps) == 0:
		return nil, fmt.Errorf("planner: layouts: no tensor-parallel size")
	case !kinds.Aggregated && !kinds.Disaggregated:
		return nil, fmt.Errorf("planner: layouts: neither aggregated nor disaggregated")
	}
	for i, tp := range tps {
		if tp < 1 || tp > MaxLayoutTP || slices.Contains(tps[:i], tp) {
			return nil, fmt.Errorf("planner: layouts: tensor-parallel sizes %v: want distinct sizes 1..%d", tps, MaxLayoutTP)
		}
	}
	var out []Layout
	add := func(l Layout) error {
		if len(out) == MaxLayouts {
			return fmt.Errorf("planner: more than %d layouts of at most %d GPUs with tensor-parallel sizes %v: fewer GPUs, sizes or kinds", MaxLayouts, gpus, tps)
		}
		out = append(out, l)
		return nil
	}
	for _, tp := range tps {
		for n := 1; kinds.Aggregated && n*tp <= gpus && n <= MaxLayoutWorkers; n++ {
			if err := add(Layout{Workers: n, TP: tp}); err != nil {
				return nil, err
			}
		}
		for _, ptp := range tps {
			for x := 1; kinds.Disaggregated && x*ptp+tp <= gpus && x <= MaxLayoutWorkers; x++ {
				for y := 1; x*ptp+y*tp <= gpus && y <= MaxLayoutWorkers; y++ {
					if err := add(Layout{Workers: y, TP: tp, PrefillWorkers: x, PrefillTP: ptp}); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	slices.SortStableFunc(out, compareLayouts)
	return out, nil
}

// compareLayouts is EnumerateLayouts' order.
func compareLayouts(a, b Layout) int {
	return cmp.Or(cmp.Compare(a.GPUs(), b.GPUs()),
		boolOrder(a.Disaggregated(), b.Disaggregated()),
		cmp.Compare(a.TP, b.TP), cmp.Compare(a.PrefillTP, b.PrefillTP),
		cmp.Compare(a.PrefillWorkers, b.PrefillWorkers), cmp.Compare(a.Workers, b.Workers))
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// LayoutTargets are the latency targets a layout is scored against.
type LayoutTargets struct {
	// TTFTMs and ITLMs: a request meets the targets when its time to first token is at
	// most TTFTMs and the mean of its gaps between output tokens at most ITLMs (ms, > 0).
	TTFTMs, ITLMs float64
	// Percentile is where the targets hold for the layout as a whole, in (0, 100]: its
	// TTFT and mean-ITL percentiles over the requests must be within them (90: p90).
	Percentile float64
}

// Validate checks t; errors name the field.
func (t LayoutTargets) Validate() error {
	ok := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch {
	case !ok(t.TTFTMs):
		return fmt.Errorf("planner: TTFT target %v ms: want a finite number above 0", t.TTFTMs)
	case !ok(t.ITLMs):
		return fmt.Errorf("planner: ITL target %v ms: want a finite number above 0", t.ITLMs)
	case !(t.Percentile > 0 && t.Percentile <= 100):
		return fmt.Errorf("planner: target percentile %v: want above 0, at most 100", t.Percentile)
	}
	return nil
}

// RequestOutcome is what one request of a run (simulated or measured) got.
type RequestOutcome struct {
	// Failed: no valid answer; it meets no target and its latencies are not counted.
	Failed bool
	// TTFTMs is the time from its arrival to its first token, ms.
	TTFTMs float64
	// MeanITLMs is the mean of its gaps between output tokens, ms; HasITL is false for a
	// request of fewer than two output tokens, which has no gap and meets any ITL target.
	MeanITLMs float64
	HasITL    bool
}

// Met reports whether r met the TTFT target and the ITL target of t.
func (t LayoutTargets) Met(r RequestOutcome) (ttft, itl bool) {
	if r.Failed {
		return false, false
	}
	return r.TTFTMs <= t.TTFTMs, !r.HasITL || r.MeanITLMs <= t.ITLMs
}

// Latencies summarizes a latency over a run's requests, in ms: the median and the
// percentile of the targets (LayoutTargets.Percentile). NaN without a sample.
type Latencies struct {
	P50, At float64
}

// LayoutScore is a layout's result on a workload, from a run of the whole workload or of a
// sample of it (then a prediction).
type LayoutScore struct {
	Layout Layout
	// Requests: the requests scored; Failed: how many of them failed.
	Requests, Failed int
	// MetTTFT, MetITL: requests within each target; Met: within both (LayoutTargets.Met).
	MetTTFT, MetITL, Met int
	// TTFT and ITL (each request's mean gap) over the requests that did not fail.
	TTFT, ITL Latencies
	// Attainment is Met / Requests.
	Attainment float64
	// WorkloadRequests is the whole workload's request count and DurationS its run's
	// duration, from the first arrival to the last answer, in seconds (predicted, when the
	// requests scored are a sample: PredictDuration).
	WorkloadRequests int
	DurationS        float64
	// Goodput is the requests meeting both targets per second per GPU:
	// Attainment × WorkloadRequests / DurationS / GPUs. For the whole workload's run this
	// is Met / DurationS / GPUs.
	Goodput float64
}

// ScoreLayout scores l from the outcomes of its requests (the whole workload's, or a
// sample's) for a workload of workloadRequests requests whose run lasts duration (> 0;
// 0 gives a goodput of 0). Latency percentiles interpolate linearly between closest
// ranks (NumPy's default, as bench.Percentile).
func ScoreLayout(l Layout, outcomes []RequestOutcome, workloadRequests int, duration time.Duration, t LayoutTargets) LayoutScore {
	s := LayoutScore{Layout: l, Requests: len(outcomes), WorkloadRequests: workloadRequests, DurationS: duration.Seconds()}
	var ttfts, itls []float64
	for _, r := range outcomes {
		if r.Failed {
			s.Failed++
			continue
		}
		ttfts = append(ttfts, r.TTFTMs)
		if r.HasITL {
			itls = append(itls, r.MeanITLMs)
		}
		mt, mi := t.Met(r)
		if mt {
			s.MetTTFT++
		}
		if mi {
			s.MetITL++
		}
		if mt && mi {
			s.Met++
		}
	}
	s.TTFT, s.ITL = latencies(ttfts, t.Percentile), latencies(itls, t.Percentile)
	if s.Requests > 0 {
		s.Attainment = float64(s.Met) / float64(s.Requests)
	}
	if gpus := l.GPUs(); s.DurationS > 0 && gpus > 0 {
		s.Goodput = s.Attainment * float64(workloadRequests) / s.DurationS / float64(gpus)
	}
	return s
}

func latencies(xs []float64, p float64) Latencies {
	slices.Sort(xs)
	return Latencies{P50: percentile(xs, 50), At: percentile(xs, p)}
}

// percentile is the p-th percentile of sorted by linear interpolation between closest
// ranks; NaN when sorted is empty.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := min(max(p, 0), 100) / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (rank-float64(lo))*(sorted[hi]-sorted[lo])
}

// PredictDuration predicts the duration of a workload's whole run from samples of it:
// the whole workload's arrival span (first to last arrival) plus the mean of the
// samples' tails (each sample's last answer after its last arrival). A run of the
// whole workload is its own single sample: its span plus its tail is its duration.
func PredictDuration(span time.Duration, tails []time.Duration) time.Duration {
	if len(tails) == 0 {
		return span
	}
	var sum time.Duration
	for _, t := range tails {
		sum += max(t, 0)
	}
	return span + sum/time.Duration(len(tails))
}

// GoodputBound is the most goodput a layout of gpus GPUs can reach on a workload of
// requests requests arriving over span: every request on target and the run no longer
// than its arrivals (requests / span / gpus); +Inf for a span of 0 (every request at
// once), which bounds nothing.
func GoodputBound(requests int, span time.Duration, gpus int) float64 {
	if span <= 0 || gpus < 1 {
		return math.Inf(1)
	}
	return float64(requests) / span.Seconds() / float64(gpus)
}

// Verdict is why a layout ranks where it does.
type Verdict int

// The verdicts, spelled once (Verdict.String).
const (
	// VerdictBest: the top of the ranking.
	VerdictBest Verdict = iota + 1
	// VerdictLowerGoodput: it meets the targets, with less goodput per GPU than a layout
	// above it.
	VerdictLowerGoodput
	// VerdictMissesTTFT, VerdictMissesITL, VerdictMissesBoth: its TTFT, its ITL or both
	// are above their targets at the targets' percentile.
	VerdictMissesTTFT
	VerdictMissesITL
	VerdictMissesBoth
	// VerdictFailedRequests: some of its requests failed.
	VerdictFailedRequests
	// VerdictPruned: not evaluated: even with every request on target its goodput bound
	// (GoodputBound) is below the goodput of as many layouts meeting the targets as the
	// search keeps (LayoutSearch).
	VerdictPruned
	// VerdictInfeasible: not evaluated: its engines cannot serve the workload (a request
	// longer than their KV cache or context length, say).
	VerdictInfeasible
)

var verdictNames = [...]string{
	VerdictBest:           "best",
	VerdictLowerGoodput:   "lower-goodput",
	VerdictMissesTTFT:     "misses-ttft",
	VerdictMissesITL:      "misses-itl",
	VerdictMissesBoth:     "misses-ttft-itl",
	VerdictFailedRequests: "failed-requests",
	VerdictPruned:         "pruned",
	VerdictInfeasible:     "infeasible",
}

// Verdicts lists every verdict, in ranking order.
var Verdicts = []Verdict{VerdictBest, VerdictLowerGoodput, VerdictMissesTTFT, VerdictMissesITL, VerdictMissesBoth,
	VerdictFailedRequests, VerdictPruned, VerdictInfeasible}

// String is the verdict's name ("best", "misses-ttft" ...).
func (v Verdict) String() string {
	if v > 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// MarshalText writes the verdict's name (JSON).
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads a verdict's name. Errors: a name no verdict has.
func (v *Verdict) UnmarshalText(b []byte) error {
	for _, x := range Verdicts {
		if x.String() == string(b) {
			*v = x
			return nil
		}
	}
	return fmt.Errorf("planner: verdict %q: want one of %v", b, Verdicts)
}

// RankedLayout is one layout's place in a ranking.
type RankedLayout struct {
	LayoutScore
	// Rank is 1 for the best; 0 for a layout not evaluated (pruned, infeasible).
	Rank    int
	Verdict Verdict
	// MeetsTargets: no request failed and TTFT and ITL at the targets' percentile are
	// within the targets.
	MeetsTargets bool
	// Reason says in words why it lost (its misses, or the goodput it fell short of); ""
	// for the best layout when it meets the targets.
	Reason string
}

// NotEvaluated is a layout a search left out, with why (VerdictPruned or
// VerdictInfeasible).
type NotEvaluated struct {
	Layout  Layout
	Verdict Verdict
	Reason  string
}

// MeetsTargets reports whether s meets t: no failed request, TTFT and ITL at t's
// percentile within the targets (a run without ITL samples meets the ITL target).
func (s LayoutScore) MeetsTargets(t LayoutTargets) bool {
	ttft, itl := s.misses(t)
	return s.Failed == 0 && s.Requests > 0 && !ttft && !itl
}

func (s LayoutScore) misses(t LayoutTargets) (ttft, itl bool) {
	return !(s.TTFT.At <= t.TTFTMs), s.ITL.At > t.ITLMs // NaN TTFT (no success) misses; NaN ITL (no gap) does not
}

// RankLayouts ranks scored layouts: those meeting the targets first, then by goodput per
// GPU (highest first), then by fewer GPUs, then by name. The first is VerdictBest; each
// other gets the verdict and reason of its loss: failed requests, its misses, else lower
// goodput than the best. Layouts not evaluated follow, unranked, in the order given.
func RankLayouts(scores []LayoutScore, t LayoutTargets, notEvaluated []NotEvaluated) []RankedLayout {
	out := make([]RankedLayout, 0, len(scores)+len(notEvaluated))
	for _, s := range scores {
		out = append(out, RankedLayout{LayoutScore: s, MeetsTargets: s.MeetsTargets(t)})
	}
	slices.SortStableFunc(out, func(a, b RankedLayout) int {
		return cmp.Or(boolOrder(b.MeetsTargets, a.MeetsTargets), cmp.Compare(b.Goodput, a.Goodput),
			cmp.Compare(a.Layout.GPUs(), b.Layout.GPUs()), cmp.Compare(a.Layout.String(), b.Layout.String()))
	})
	pct := formatPercentile(t.Percentile)
	for i := range out {
		r := &out[i]
		r.Rank = i + 1
		mt, mi := r.misses(t)
		var why []string
		if r.Failed > 0 {
			why = append(why, fmt.Sprintf("%d of %d requests failed", r.Failed, r.Requests))
		}
		if mt && !math.IsNaN(r.TTFT.At) {
			why = append(why, fmt.Sprintf("TTFT %s %s ms > %s ms", pct, formatMs(r.TTFT.At), formatMs(t.TTFTMs)))
		}
		if mi {
			why = append(why, fmt.Sprintf("ITL %s %s ms > %s ms", pct, formatMs(r.ITL.At), formatMs(t.ITLMs)))
		}
		switch {
		case i == 0:
			r.Verdict = VerdictBest
		case r.Failed > 0:
			r.Verdict = VerdictFailedRequests
		case mt && mi:
			r.Verdict = VerdictMissesBoth
		case mt:
			r.Verdict = VerdictMissesTTFT
		case mi:
			r.Verdict = VerdictMissesITL
		default:
			r.Verdict = VerdictLowerGoodput
			if r.Goodput < out[0].Goodput {
				why = append(why, fmt.Sprintf("goodput %.3g < %.3g requests/s per GPU of %s", r.Goodput, out[0].Goodput, out[0].Layout))
			} else {
				why = append(why, fmt.Sprintf("goodput %.3g requests/s per GPU, tied with %s (ranked first: fewer GPUs, or by name)", r.Goodput, out[0].Layout))
			}
		}
		r.Reason = strings.Join(why, "; ")
	}
	for _, n := range notEvaluated {
		out = append(out, RankedLayout{LayoutScore: LayoutScore{Layout: n.Layout}, Verdict: n.Verdict, Reason: n.Reason})
	}
	return out
}

// CountVerdicts counts the ranked layouts by verdict.
func CountVerdicts(ranked []RankedLayout) map[Verdict]int {
	m := map[Verdict]int{}
	for _, r := range ranked {
		m[r.Verdict]++
	}
	return m
}

// formatMs writes a latency in ms with three significant digits, at least the units
// ("812", "61.2", "7.45").
func formatMs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// formatPercentile writes p as "p90", "p99.9".
func formatPercentile(p float64) string { return "p" + strconv.FormatFloat(p, 'f', -1, 64) }

// LayoutSearch orders a search's evaluations and prunes (docs/reference.md §27.6). It
// hands out waves of layouts of one GPU count at a time, fewest GPUs first; after each
// wave it drops every remaining layout whose goodput bound (the bound function, e.g.
// GoodputBound of the workload) is below the keep-th best goodput of the layouts already
// found to meet the targets: such a layout cannot rank among the first keep, since those
// meet the targets with more goodput than it can have. Not safe for concurrent use.
type LayoutSearch struct {
	pending []Layout // not handed out, in EnumerateLayouts' order
	keep    int
	bound   func(gpus int) float64
	targets LayoutTargets
	scores  []LayoutScore
	pruned  []NotEvaluated
}

// NewLayoutSearch searches layouts (any order; GPUs ascending is how it hands them out)
// keeping the best keep (≥ 1) exact: bound(gpus) is the most goodput per GPU a layout of
// that many GPUs can reach.
func NewLayoutSearch(layouts []Layout, keep int, bound func(gpus int) float64, t LayoutTargets) *LayoutSearch {
	pending := slices.Clone(layouts)
	slices.SortStableFunc(pending, compareLayouts)
	return &LayoutSearch{pending: pending, keep: max(keep, 1), bound: bound, targets: t}
}

// Next returns the next wave, every pending layout of the fewest GPUs left, unless the
// scores recorded so far prune them; nil once none is left. Record a wave's scores
// before asking for the next: only recorded scores prune.
func (s *LayoutSearch) Next() []Layout {
	against := s.threshold()
	for len(s.pending) > 0 {
		gpus := s.pending[0].GPUs()
		n := 0
		for n < len(s.pending) && s.pending[n].GPUs() == gpus {
			n++
		}
		wave := s.pending[:n:n]
		s.pending = s.pending[n:]
		if b := s.bound(gpus); b < against {
			for _, l := range wave {
				s.pruned = append(s.pruned, NotEvaluated{Layout: l, Verdict: VerdictPruned,
					Reason: fmt.Sprintf("at most %.3g requests/s per GPU with every request on target, below the %s best %.3g of layouts meeting the targets",
						b, ordinal(s.keep), against)})
			}
			continue
		}
		return wave
	}
	return nil
}

// Record adds the score of a layout handed out.
func (s *LayoutSearch) Record(sc LayoutScore) { s.scores = append(s.scores, sc) }

// Scores are the scores recorded; Pruned the layouts pruned so far.
func (s *LayoutSearch) Scores() []LayoutScore  { return s.scores }
func (s *LayoutSearch) Pruned() []NotEvaluated { return s.pruned }

// threshold is the keep-th best goodput among recorded layouts meeting the targets; -Inf
// while fewer meet them.
func (s *LayoutSearch) threshold() float64 {
	var g []float64
	for _, sc := range s.scores {
		if sc.MeetsTargets(s.targets) {
			g = append(g, sc.Goodput)
		}
	}
	if len(g) < s.keep {
		return math.Inf(-1)
	}
	slices.Sort(g)
	return g[len(g)-s.keep]
}

// ordinal writes n as "1st", "2nd", "3rd", "4th" ...
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
