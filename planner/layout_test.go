package planner

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// naiveLayouts lists the layouts EnumerateLayouts should, by trying every combination.
func naiveLayouts(tps []int, gpus int, kinds LayoutKinds) map[Layout]bool {
	out := map[Layout]bool{}
	for _, tp := range tps {
		for w := 1; w <= gpus; w++ {
			if kinds.Aggregated && w*tp <= gpus {
				out[Layout{Workers: w, TP: tp}] = true
			}
			for _, ptp := range tps {
				for x := 1; x <= gpus; x++ {
					if kinds.Disaggregated && w*tp+x*ptp <= gpus {
						out[Layout{Workers: w, TP: tp, PrefillWorkers: x, PrefillTP: ptp}] = true
					}
				}
			}
		}
	}
	return out
}

func TestEnumerateLayouts(t *testing.T) {
	both := LayoutKinds{Aggregated: true, Disaggregated: true}
	for _, tc := range []struct {
		name  string
		tps   []int
		gpus  int
		kinds LayoutKinds
		want  int
	}{
		// Aggregated: 8 + 4 + 2. Disaggregated (prefill TP, decode TP): (1,1) 28, (1,2) and
		// (2,1) 12 each, (1,4) and (4,1) 4 each, (2,2) 6, (2,4) and (4,2) 2 each, (4,4) 1.
		{"8 GPUs, TP 1 2 4", []int{1, 2, 4}, 8, both, 14 + 71},
		{"8 GPUs, aggregated", []int{1, 2, 4}, 8, LayoutKinds{Aggregated: true}, 14},
		{"8 GPUs, disaggregated", []int{4, 1, 2}, 8, LayoutKinds{Disaggregated: true}, 71},
		{"4 GPUs, TP 1", []int{1}, 4, both, 4 + 6},
		{"1 GPU", []int{1, 2}, 1, both, 1},
		{"TP larger than the GPUs", []int{8}, 4, both, 0},
		{"2 GPUs, TP 2", []int{2}, 2, both, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnumerateLayouts(tc.tps, tc.gpus, tc.kinds)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Errorf("%d layouts, want %d: %v", len(got), tc.want, got)
			}
			want := naiveLayouts(tc.tps, tc.gpus, tc.kinds)
			seen := map[Layout]bool{}
			for i, l := range got {
				if seen[l] || !want[l] {
					t.Errorf("layout %s: listed twice or not wanted", l)
				}
				seen[l] = true
				if err := l.Validate(); err != nil || l.GPUs() > tc.gpus || !slices.Contains(tc.tps, l.TP) ||
					(l.Disaggregated() && !slices.Contains(tc.tps, l.PrefillTP)) {
					t.Errorf("layout %s: %v, %d GPUs", l, err, l.GPUs())
				}
				if i > 0 && compareLayouts(got[i-1], l) >= 0 {
					t.Errorf("layouts %s, %s out of order", got[i-1], l)
				}
			}
			if len(seen) != len(want) {
				t.Errorf("%d distinct layouts, want %d", len(seen), len(want))
			}
		})
	}
	t.Run("order", func(t *testing.T) {
		got, _ := EnumerateLayouts([]int{1, 2}, 3, both)
		var names []string
		for _, l := range got {
			names = append(names, l.String())
		}
		want := []string{"1×TP1", "2×TP1", "1×TP2", "1P×TP1+1D×TP1", "3×TP1", "1P×TP1+2D×TP1", "2P×TP1+1D×TP1", "1P×TP2+1D×TP1", "1P×TP1+1D×TP2"}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("order %v\nwant      %v", names, want)
		}
	})
	for _, tc := range []struct {
		name  string
		tps   []int
		gpus  int
		kinds LayoutKinds
		want  string
	}{
		{"no GPU", []int{1}, 0, both, "layouts of 0 GPUs"},
		{"no TP", nil, 8, both, "no tensor-parallel size"},
		{"TP 0", []int{0}, 8, both, "want distinct sizes"},
		{"TP twice", []int{2, 2}, 8, both, "want distinct sizes"},
		{"TP 65", []int{65}, 80, both, "want distinct sizes"},
		{"no kind", []int{1}, 8, LayoutKinds{}, "neither aggregated nor disaggregated"},
		{"too many", []int{1}, 400, both, "more than 20000 layouts"},
	} {
		t.Run("error "+tc.name, func(t *testing.T) {
			_, err := EnumerateLayouts(tc.tps, tc.gpus, tc.kinds)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseLayout(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Layout
	}{
		{"4×TP2", Layout{Workers: 4, TP: 2}},
		{"4xtp2", Layout{Workers: 4, TP: 2}},
		{" 1P×TP2+3D×TP1 ", Layout{Workers: 3, TP: 1, PrefillWorkers: 1, PrefillTP: 2}},
		{"2pxtp1+2dxtp4", Layout{Workers: 2, TP: 4, PrefillWorkers: 2, PrefillTP: 1}},
	} {
		got, err := ParseLayout(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLayout(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseLayout(got.String()); err != nil || back != got {
			t.Errorf("%s does not read back: %+v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "4", "TP2", "4×TP", "0×TP1", "4×TP0", "1P×TP1", "1P×TP1+", "1D×TP1+1P×TP1", "1P×TP1+2×TP1",
		"-1×TP1", "4×TP2+", "1P×TP65+1D×TP1", "2000×TP1"} {
		if l, err := ParseLayout(bad); err == nil {
			t.Errorf("ParseLayout(%q) = %+v: want an error", bad, l)
		}
	}
}

func TestLayoutValidate(t *testing.T) {
	for _, l := range []Layout{{}, {Workers: 1}, {Workers: 1, TP: 1, PrefillTP: 1}, {Workers: 1, TP: 1, PrefillWorkers: 1},
		{Workers: 1, TP: 1, PrefillWorkers: -1}, {Workers: MaxLayoutWorkers + 1, TP: 1}} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v: want an error", l)
		}
	}
	if l := (Layout{Workers: 3, TP: 2, PrefillWorkers: 2, PrefillTP: 1}); l.GPUs() != 8 || !l.Disaggregated() || l.Validate() != nil {
		t.Errorf("%s: %d GPUs, %v", l, l.GPUs(), l.Validate())
	}
}

// outcomes builds request outcomes from (TTFT, mean ITL) pairs; a negative TTFT is a
// failure, a negative ITL a request with no gap.
func outcomes(pairs ...[2]float64) []RequestOutcome {
	out := make([]RequestOutcome, len(pairs))
	for i, p := range pairs {
		switch {
		case p[0] < 0:
			out[i] = RequestOutcome{Failed: true}
		case p[1] < 0:
			out[i] = RequestOutcome{TTFTMs: p[0]}
		default:
			out[i] = RequestOutcome{TTFTMs: p[0], MeanITLMs: p[1], HasITL: true}
		}
	}
	return out
}

func TestScoreLayout(t *testing.T) {
	targets := LayoutTargets{TTFTMs: 500, ITLMs: 50, Percentile: 90}
	l := Layout{Workers: 2, TP: 2} // 4 GPUs
	// Ten requests: six meet both targets, one misses TTFT (600), one ITL (60), one both,
	// one has no gap (meets ITL).
	got := ScoreLayout(l, outcomes(
		[2]float64{100, 10}, [2]float64{200, 20}, [2]float64{300, 30}, [2]float64{400, 40}, [2]float64{500, 50},
		[2]float64{150, 15}, [2]float64{600, 20}, [2]float64{100, 60}, [2]float64{700, 70}, [2]float64{50, -1},
	), 100, 20*time.Second, targets)
	want := LayoutScore{Layout: l, Requests: 10, MetTTFT: 8, MetITL: 8, Met: 7, Attainment: 0.7, WorkloadRequests: 100, DurationS: 20,
		// TTFT sorted: 50 100 100 150 200 300 400 500 600 700: p50 between 200 and 300,
		// p90 at rank 8.1: 600 + 0.1 × 100. ITL (nine): 10 15 20 20 30 40 50 60 70: p50 30,
		// p90 at rank 7.2: 60 + 0.2 × 10.
		TTFT: Latencies{P50: 250, At: 610}, ITL: Latencies{P50: 30, At: 62},
		// 0.7 × 100 requests / 20 s / 4 GPUs.
		Goodput: 0.875}
	if !approxScore(got, want) {
		t.Errorf("score\n%+v\nwant\n%+v", got, want)
	}
	if got.MeetsTargets(targets) {
		t.Error("meets the targets with TTFT p90 610 ms and ITL p90 62 ms")
	}
	loose := LayoutTargets{TTFTMs: 700, ITLMs: 70, Percentile: 90}
	if !ScoreLayout(l, outcomes([2]float64{100, 10}), 1, time.Second, loose).MeetsTargets(loose) {
		t.Error("one request on target does not meet the targets")
	}

	t.Run("failures", func(t *testing.T) {
		s := ScoreLayout(l, outcomes([2]float64{100, 10}, [2]float64{-1, 0}), 2, 2*time.Second, targets)
		if s.Failed != 1 || s.Met != 1 || s.Attainment != 0.5 || s.TTFT.At != 100 || s.MeetsTargets(targets) {
			t.Errorf("%+v: want 1 failed of 2, the failure outside the latencies, not meeting the targets", s)
		}
		all := ScoreLayout(l, outcomes([2]float64{-1, 0}), 1, time.Second, targets)
		if !math.IsNaN(all.TTFT.P50) || all.Goodput != 0 || all.MeetsTargets(targets) {
			t.Errorf("%+v: want NaN latencies, no goodput", all)
		}
	})
	t.Run("no gaps meet the ITL target", func(t *testing.T) {
		s := ScoreLayout(l, outcomes([2]float64{100, -1}), 1, time.Second, targets)
		if !math.IsNaN(s.ITL.At) || !s.MeetsTargets(targets) || s.Met != 1 {
			t.Errorf("%+v", s)
		}
	})
	t.Run("zero duration", func(t *testing.T) {
		if s := ScoreLayout(l, outcomes([2]float64{100, 10}), 1, 0, targets); s.Goodput != 0 {
			t.Errorf("goodput %v over no time", s.Goodput)
		}
	})
	t.Run("the whole run's goodput is met per second per GPU", func(t *testing.T) {
		s := ScoreLayout(Layout{Workers: 1, TP: 1, PrefillWorkers: 1, PrefillTP: 2}, outcomes([2]float64{1, 1}, [2]float64{1, 1},
			[2]float64{900, 1}), 3, 4*time.Second, targets)
		if want := 2.0 / 4 / 3; math.Abs(s.Goodput-want) > 1e-12 {
			t.Errorf("goodput %v, want %v", s.Goodput, want)
		}
	})
}

func approxScore(a, b LayoutScore) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return a.Layout == b.Layout && a.Requests == b.Requests && a.Failed == b.Failed && a.MetTTFT == b.MetTTFT &&
		a.MetITL == b.MetITL && a.Met == b.Met && a.WorkloadRequests == b.WorkloadRequests && near(a.Attainment, b.Attainment) &&
		near(a.DurationS, b.DurationS) && near(a.Goodput, b.Goodput) && near(a.TTFT.P50, b.TTFT.P50) &&
		near(a.TTFT.At, b.TTFT.At) && near(a.ITL.P50, b.ITL.P50) && near(a.ITL.At, b.ITL.At)
}

func TestLayoutTargetsValidate(t *testing.T) {
	for _, tc := range []struct {
		t    LayoutTargets
		want string
	}{
		{LayoutTargets{TTFTMs: 0, ITLMs: 1, Percentile: 90}, "TTFT target"},
		{LayoutTargets{TTFTMs: math.Inf(1), ITLMs: 1, Percentile: 90}, "TTFT target"},
		{LayoutTargets{TTFTMs: 1, ITLMs: math.NaN(), Percentile: 90}, "ITL target"},
		{LayoutTargets{TTFTMs: 1, ITLMs: 1, Percentile: 0}, "percentile"},
		{LayoutTargets{TTFTMs: 1, ITLMs: 1, Percentile: 100.5}, "percentile"},
	} {
		if err := tc.t.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.t, err, tc.want)
		}
	}
	if err := (LayoutTargets{TTFTMs: 1, ITLMs: 1, Percentile: 100}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestPredictDurationAndBound(t *testing.T) {
	if d := PredictDuration(100*time.Second, []time.Duration{2 * time.Second, 4 * time.Second, -time.Second}); d != 102*time.Second {
		t.Errorf("predicted %v, want 100 s + mean tail (2 + 4 + 0) / 3", d)
	}
	if d := PredictDuration(time.Second, nil); d != time.Second {
		t.Errorf("predicted %v without samples", d)
	}
	if b := GoodputBound(100, 10*time.Second, 4); b != 2.5 {
		t.Errorf("bound %v, want 100 / 10 s / 4 GPUs", b)
	}
	if b := GoodputBound(100, 0, 4); !math.IsInf(b, 1) {
		t.Errorf("bound %v of arrivals all at once, want +Inf", b)
	}
}

// score makes a score of layout s with the given latencies at the percentile and goodput.
func score(s string, ttftAt, itlAt, goodput float64, failed int) LayoutScore {
	l, err := ParseLayout(s)
	if err != nil {
		panic(err)
	}
	return LayoutScore{Layout: l, Requests: 100, Failed: failed, TTFT: Latencies{P50: ttftAt / 2, At: ttftAt},
		ITL: Latencies{P50: itlAt / 2, At: itlAt}, Goodput: goodput}
}

func TestRankLayouts(t *testing.T) {
	targets := LayoutTargets{TTFTMs: 500, ITLMs: 50, Percentile: 90}
	scores := []LayoutScore{
		score("4×TP1", 450, 40, 0.8, 0),
		score("1P×TP1+1D×TP1", 900, 30, 1.5, 0),        // most goodput, misses TTFT
		score("2×TP1", 400, 45, 0.9, 0),                // best: meets, most goodput of those
		score("1×TP2", 400, 45, 0.9, 0),                // ties 2×TP1 on goodput and GPUs: by name
		score("8×TP1", 100, 60, 0.5, 0),                // misses ITL
		score("1P×TP2+1D×TP2", 800, 80, 0.2, 0),        // misses both
		score("2P×TP1+2D×TP1", 100, 10, 0.45, 3),       // failed requests
		score("1×TP1", math.NaN(), math.NaN(), 0, 100), // nothing succeeded
	}
	pruned := []NotEvaluated{{Layout: Layout{Workers: 8, TP: 2}, Verdict: VerdictPruned, Reason: "bound"}}
	got := RankLayouts(scores, targets, pruned)
	type row struct {
		layout  string
		rank    int
		verdict Verdict
		meets   bool
		reason  string
	}
	want := []row{
		{"1×TP2", 1, VerdictBest, true, ""},
		{"2×TP1", 2, VerdictLowerGoodput, true, "goodput 0.9 requests/s per GPU, tied with 1×TP2 (ranked first: fewer GPUs, or by name)"},
		{"4×TP1", 3, VerdictLowerGoodput, true, "goodput 0.8 < 0.9 requests/s per GPU of 1×TP2"},
		{"1P×TP1+1D×TP1", 4, VerdictMissesTTFT, false, "TTFT p90 900 ms > 500 ms"},
		{"8×TP1", 5, VerdictMissesITL, false, "ITL p90 60 ms > 50 ms"},
		{"2P×TP1+2D×TP1", 6, VerdictFailedRequests, false, "3 of 100 requests failed"},
		{"1P×TP2+1D×TP2", 7, VerdictMissesBoth, false, "TTFT p90 800 ms > 500 ms; ITL p90 80 ms > 50 ms"},
		{"1×TP1", 8, VerdictFailedRequests, false, "100 of 100 requests failed"},
		{"8×TP2", 0, VerdictPruned, false, "bound"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d ranked, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if gr := (row{g.Layout.String(), g.Rank, g.Verdict, g.MeetsTargets, g.Reason}); gr != w {
			t.Errorf("place %d: %+v\nwant     %+v", i, gr, w)
		}
	}
	counts := CountVerdicts(got)
	if counts[VerdictLowerGoodput] != 2 || counts[VerdictFailedRequests] != 2 || counts[VerdictPruned] != 1 || counts[VerdictBest] != 1 {
		t.Errorf("counts %v", counts)
	}

	t.Run("a best layout that misses says why", func(t *testing.T) {
		r := RankLayouts([]LayoutScore{score("1×TP1", 900, 10, 1, 0)}, targets, nil)
		if r[0].Verdict != VerdictBest || r[0].MeetsTargets || r[0].Reason != "TTFT p90 900 ms > 500 ms" {
			t.Errorf("%+v", r[0])
		}
	})
}

func TestVerdictNames(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range Verdicts {
		name := v.String()
		if seen[name] || strings.HasPrefix(name, "Verdict(") {
			t.Errorf("verdict %d: name %q", int(v), name)
		}
		seen[name] = true
		var back Verdict
		if b, _ := v.MarshalText(); string(b) != name || back.UnmarshalText(b) != nil || back != v {
			t.Errorf("verdict %s marshals as %s, reads back as %v", name, b, back)
		}
	}
	var v Verdict
	if err := v.UnmarshalText([]byte("worst")); err == nil {
		t.Error("verdict worst read")
	}
	if len(seen) != len(verdictNames)-1 || Verdict(0).String() != "Verdict(0)" {
		t.Errorf("%d names for %d verdicts", len(seen), len(verdictNames)-1)
	}
}

func TestLayoutSearch(t *testing.T) {
	targets := LayoutTargets{TTFTMs: 500, ITLMs: 50, Percentile: 90}
	layouts, err := EnumerateLayouts([]int{1, 2}, 4, LayoutKinds{Aggregated: true, Disaggregated: true})
	if err != nil {
		t.Fatal(err)
	}
	// 100 requests over 10 s: a layout of g GPUs reaches at most 10/g requests/s per GPU.
	bound := func(g int) float64 { return GoodputBound(100, 10*time.Second, g) }

	t.Run("waves by GPUs, pruned once enough layouts meet the targets", func(t *testing.T) {
		s := NewLayoutSearch(layouts, 2, bound, targets)
		var waves [][]Layout
		for wave := s.Next(); wave != nil; wave = s.Next() {
			waves = append(waves, wave)
			for _, l := range wave {
				// One-GPU and two-GPU layouts miss; a three-GPU aggregated layout meets
				// the targets with goodput 3 (of a bound 3.33), a disaggregated one with 2.5.
				sc := score(l.String(), 900, 10, 1, 0)
				if l.GPUs() == 3 {
					sc = score(l.String(), 100, 10, 3, 0)
					if l.Disaggregated() {
						sc.Goodput = 2.5
					}
				}
				s.Record(sc)
			}
		}
		// Four-GPU layouts are bounded by 2.5, which is not below the second best (2.5):
		// kept; with a third best they would not be, see below.
		if len(waves) != 4 || waves[0][0].GPUs() != 1 || waves[3][0].GPUs() != 4 {
			t.Fatalf("waves %v", waves)
		}
		for _, w := range waves {
			for _, l := range w {
				if l.GPUs() != w[0].GPUs() {
					t.Errorf("wave %v mixes GPU counts", w)
				}
			}
		}
		if len(s.Pruned()) != 0 || len(s.Scores()) != len(layouts) {
			t.Errorf("%d pruned, %d scored of %d", len(s.Pruned()), len(s.Scores()), len(layouts))
		}
	})
	t.Run("pruned", func(t *testing.T) {
		s := NewLayoutSearch(layouts, 1, bound, targets)
		var evaluated int
		for wave := s.Next(); wave != nil; wave = s.Next() {
			for _, l := range wave {
				evaluated++
				g := 1.0
				if l == (Layout{Workers: 2, TP: 1}) {
					g = 4 // meets, and beats the bound of every layout of 3 or more GPUs (3.33)
				}
				s.Record(score(l.String(), 100, 10, g, 0))
			}
		}
		var pruned []string
		for _, p := range s.Pruned() {
			if p.Verdict != VerdictPruned || p.Layout.GPUs() < 3 || !strings.Contains(p.Reason, "below the 1st best 4") {
				t.Errorf("pruned %+v", p)
			}
			pruned = append(pruned, p.Layout.String())
		}
		if evaluated+len(pruned) != len(layouts) || evaluated != 4 { // 1×TP1, 2×TP1, 1×TP2, 1P×TP1+1D×TP1
			t.Errorf("%d evaluated, pruned %v", evaluated, pruned)
		}
	})
	t.Run("layouts that miss prune nothing", func(t *testing.T) {
		s := NewLayoutSearch(layouts, 1, bound, targets)
		n := 0
		for wave := s.Next(); wave != nil; wave = s.Next() {
			for _, l := range wave {
				n++
				s.Record(score(l.String(), 900, 10, 100, 0)) // huge goodput, misses TTFT
			}
		}
		if n != len(layouts) || len(s.Pruned()) != 0 {
			t.Errorf("%d evaluated, %d pruned: want all evaluated", n, len(s.Pruned()))
		}
	})
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %s, want %s", n, got, want)
		}
	}
}

// FuzzParseLayout: whatever --layout is given, ParseLayout either refuses it or returns
// a valid layout that its String reads back as.
func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{"4×TP2", "1P×TP2+3D×TP1", "2pxtp1+2dxtp4", "", "+", "1P×TP1+", "×TP", "99999999999999999999×TP1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLayout(s)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid layout %+v: %v", s, l, err)
		}
		if back, err := ParseLayout(l.String()); err != nil || back != l {
			t.Fatalf("%q: %+v writes as %q, which reads back as %+v, %v", s, l, l.String(), back, err)
		}
	})
}
