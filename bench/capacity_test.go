package bench

import (
	"errors"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseSLO(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // SLO.String(); "" for an error
		err  string // in the error
	}{
		{spec: "ttft-p99=3s", want: "ttft-p99=3s"},
		{spec: " TTFT-P99 = 3s , itl-p50=20ms,", want: "ttft-p99=3s,itl-p50=20ms"},
		{spec: "e2e-max=1m,ttft-mean=250ms,itl-p90=1.5ms", want: "e2e-max=1m0s,ttft-mean=250ms,itl-p90=1.5ms"},
		{spec: "", err: `SLO "": no target`},
		{spec: " , ", err: "no target"},
		{spec: "ttft=3s", err: `"ttft=3s": want METRIC-STAT=DURATION`},
		{spec: "ttft-p99", err: `"ttft-p99": want METRIC-STAT=DURATION`},
		{spec: "ttft-p95=3s", err: `"ttft-p95": want a metric of ttft, itl, e2e and a statistic of p50, p90, p99, mean, max`},
		{spec: "latency-p99=3s", err: `"latency-p99": want a metric of`},
		{spec: "ttft-p99=3", err: "ttft-p99=3: want a duration above 0"},
		{spec: "ttft-p99=0s", err: "ttft-p99=0s: want a duration above 0"},
		{spec: "ttft-p99=-1s", err: "want a duration above 0"},
		{spec: "ttft-p99=1s,itl-p99=9ms,ttft-p99=2s", err: "ttft-p99 given twice"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			slo, err := ParseSLO(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), strconv.Quote(tc.spec)) {
					t.Fatalf("error %v: want one quoting the spec and saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := slo.String(); got != tc.want {
				t.Fatalf("SLO %q, want %q", got, tc.want)
			}
			again, err := ParseSLO(slo.String())
			if err != nil || again.String() != tc.want {
				t.Fatalf("the SLO written does not read back: %v %v", again, err)
			}
		})
	}
}

func TestSLOCheck(t *testing.T) {
	ok := Summary{Requests: 10, Succeeded: 10, Errors: map[string]int{},
		TTFT: Dist{Count: 10, P50: 400, P90: 900, P99: 2999, Mean: 500, Max: 3100},
		ITL:  Dist{Count: 90, P50: 6, P90: 8, P99: 12, Mean: 7, Max: 20},
		E2E:  Dist{Count: 10, P50: 2000, P90: 4000, P99: 9000, Mean: 2500, Max: 9500}}
	failed := ok
	failed.Succeeded, failed.Failed, failed.Errors = 8, 2, map[string]int{"timeout": 1, "http_503": 1}
	noITL := ok
	noITL.ITL = Dist{}
	for _, tc := range []struct {
		name, slo string
		s         Summary
		why       string // "" passes
	}{
		{"under the limit", "ttft-p99=3s", ok, ""},
		{"at the limit", "ttft-p99=2999ms", ok, ""},
		{"over the limit", "ttft-p99=2.5s", ok, "TTFT p99 2999.0 ms > 2500.0 ms"},
		{"every target must hold", "ttft-p99=3s,itl-p99=10ms", ok, "ITL p99 12.0 ms > 10.0 ms"},
		{"each statistic", "ttft-max=3s", ok, "TTFT max 3100.0 ms > 3000.0 ms"},
		{"e2e", "e2e-p50=1s", ok, "E2E p50 2000.0 ms > 1000.0 ms"},
		{"any failure fails", "ttft-p99=1h", failed, "2 of 10 requests failed (http_503 1, timeout 1)"},
		{"no request", "ttft-p99=1h", Summary{}, "no request"},
		{"a distribution without samples holds", "itl-p99=1ms", noITL, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slo, err := ParseSLO(tc.slo)
			if err != nil {
				t.Fatal(err)
			}
			pass, why := slo.Check(tc.s)
			if pass != (tc.why == "") || why != tc.why {
				t.Fatalf("Check = %v, %q; want %v, %q", pass, why, tc.why == "", tc.why)
			}
		})
	}
}

// TestCapacitySearch runs searches against probes that pass at and above a threshold
// scale (the SLO holds at every lower rate).
func TestCapacitySearch(t *testing.T) {
	search := CapacitySearch{Start: 1, Precision: 0.02, MaxScale: math.Inf(1), MaxSteps: 16}
	for _, tc := range []struct {
		name      string
		search    CapacitySearch
		threshold float64 // the smallest passing scale
		outcome   string
		scale     float64 // the result's Scale, FailScale; to 1e-9 relative
		failScale float64
		probes    string // pass (P) or fail (F) of each probe, in order
	}{
		// 1 P, 0.5 P, 0.25 F, then geometric midpoints: 0.354 P, 0.297 F, 0.324 P,
		// 0.310 P, 0.304 P, 0.3005 P (0.3005 / 0.2973 ≤ 1.02).
		{"capacity below the start's rate", search, 0.3, CapacityFound,
			math.Pow(2, -1-47.0/64), math.Pow(2, -1.75), "PPFPFPPPP"},
		// 1 F, 2 F, 4 P, then 2.83 P, 2.38 F, 2.59 F, 2.70 F, 2.76 F, 2.80 F (2.83 / 2.80 ≤ 1.02).
		{"capacity above the start's rate", search, 2.81, CapacityFound,
			math.Pow(2, 1.5), math.Pow(2, 1+31.0/64), "FFPPFFFFF"},
		{"capacity exactly at the start", search, 1, CapacityFound, 1, math.Pow(2, -1.0/64), "PFFFFFFF"},
		{"every probe passes", search, 1e-9, CapacityNoneFailed, math.Pow(2, -16), 0, "P" + strings.Repeat("P", 16)},
		{"every probe fails", search, 1e9, CapacityNonePassed, 0, math.Pow(2, 16), "F" + strings.Repeat("F", 16)},
		{"halving stops at the smallest scale", CapacitySearch{Start: 1, Precision: 0.02, MinScale: 0.1, MaxScale: 10, MaxSteps: 16},
			1e-3, CapacityNoneFailed, 0.1, 0, "PPPPP"},
		{"doubling stops at the largest scale", CapacitySearch{Start: 1, Precision: 0.02, MinScale: 0.1, MaxScale: 10, MaxSteps: 16},
			100, CapacityNonePassed, 0, 10, "FFFFF"},
		{"no step: the start alone", CapacitySearch{Start: 1, Precision: 0.02, MaxScale: 1, MaxSteps: 0}, 0.5,
			CapacityNoneFailed, 1, 0, "P"},
		{"a coarse precision stops at the bracket", CapacitySearch{Start: 1, Precision: 1, MaxScale: math.Inf(1), MaxSteps: 16}, 0.3,
			CapacityFound, 0.5, 0.25, "PPF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got strings.Builder
			res, err := tc.search.Run(func(s float64) (bool, error) {
				pass := s >= tc.threshold
				got.WriteString(map[bool]string{true: "P", false: "F"}[pass])
				return pass, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.outcome || !near(res.Scale, tc.scale) || !near(res.FailScale, tc.failScale) || got.String() != tc.probes {
				t.Fatalf("outcome %s, scale %v, fail scale %v, probes %s (%v); want %s, %v, %v, %s",
					res.Outcome, res.Scale, res.FailScale, got.String(), res.Probes, tc.outcome, tc.scale, tc.failScale, tc.probes)
			}
			checkSearch(t, tc.search, res)
			if res.Outcome == CapacityFound && !(res.FailScale < tc.threshold && tc.threshold <= res.Scale) {
				t.Fatalf("the threshold %v is not in (%v, %v]", tc.threshold, res.FailScale, res.Scale)
			}
		})
	}
}

// TestCapacitySearchNoisy: probes that pass or fail at random near their threshold (a
// real fleet's p99 is noisy) still end in a passing scale with a failing one within the
// precision below it, within the bound on probes.
func TestCapacitySearchNoisy(t *testing.T) {
	for _, precision := range []float64{0.02, 0.1, 0.005} {
		for seed := range 200 {
			threshold := math.Pow(2, float64(seed%13-6)) * 0.77
			search := CapacitySearch{Start: 1, Precision: precision, MaxScale: math.Inf(1), MaxSteps: 16}
			res, err := search.Run(func(s float64) (bool, error) {
				h := fnv.New64a()
				h.Write([]byte(strconv.Itoa(seed) + "/" + strconv.FormatFloat(s, 'g', -1, 64)))
				flip := h.Sum64()%4 == 0 // one probe in four comes out wrong within a factor 2 of the threshold
				pass := s >= threshold
				if flip && s > threshold/2 && s < threshold*2 {
					pass = !pass
				}
				return pass, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != CapacityFound {
				t.Fatalf("seed %d: outcome %s (%v)", seed, res.Outcome, res.Probes)
			}
			checkSearch(t, search, res)
		}
	}
}

// checkSearch checks what every search result promises: no scale probed twice, at most
// MaxCapacityProbes probes, Scale passed and FailScale failed, within the precision when
// found.
func checkSearch(t *testing.T, c CapacitySearch, res CapacityResult) {
	t.Helper()
	if n := len(res.Probes); n > MaxCapacityProbes(c.Precision, c.MaxSteps) {
		t.Fatalf("%d probes: want at most %d", n, MaxCapacityProbes(c.Precision, c.MaxSteps))
	}
	seen := map[float64]bool{}
	for _, p := range res.Probes {
		if _, ok := seen[p.Scale]; ok {
			t.Fatalf("scale %v probed twice: %v", p.Scale, res.Probes)
		}
		seen[p.Scale] = p.Pass
		if p.Scale < c.MinScale || p.Scale > c.MaxScale {
			t.Fatalf("scale %v probed outside [%v, %v]", p.Scale, c.MinScale, c.MaxScale)
		}
	}
	if pass, ok := seen[res.Scale]; res.Scale != 0 && (!ok || !pass) {
		t.Fatalf("result scale %v did not pass: %v", res.Scale, res.Probes)
	}
	if pass, ok := seen[res.FailScale]; res.FailScale != 0 && (!ok || pass) {
		t.Fatalf("fail scale %v did not fail: %v", res.FailScale, res.Probes)
	}
	if res.Outcome == CapacityFound && !(res.FailScale < res.Scale && res.Scale/res.FailScale <= 1+c.Precision) {
		t.Fatalf("scale %v, fail scale %v: want within a factor %v", res.Scale, res.FailScale, 1+c.Precision)
	}
}

func near(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Abs(b) }

func TestCapacitySearchErrors(t *testing.T) {
	for _, tc := range []struct {
		c   CapacitySearch
		err string
	}{
		{CapacitySearch{Start: 0, Precision: 0.02, MaxScale: 1}, "start scale 0"},
		{CapacitySearch{Start: 1, Precision: 0, MaxScale: 1}, "precision 0"},
		{CapacitySearch{Start: 1, Precision: math.NaN(), MaxScale: 1}, "precision NaN"},
		{CapacitySearch{Start: 1, Precision: 0.02, MinScale: 2, MaxScale: 3}, "want 0 ≤ min ≤ start (1) ≤ max"},
		{CapacitySearch{Start: 1, Precision: 0.02, MaxScale: 0.5}, "want 0 ≤ min ≤ start (1) ≤ max"},
		{CapacitySearch{Start: 1, Precision: 0.02, MaxScale: 1, MaxSteps: -1}, "-1 steps"},
	} {
		if _, err := tc.c.Run(func(float64) (bool, error) { return true, nil }); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.err)
		}
	}
	// A probe's error ends the search, with the probes before it.
	boom := errors.New("serve failed")
	res, err := CapacitySearch{Start: 1, Precision: 0.02, MaxScale: math.Inf(1), MaxSteps: 16}.Run(func(s float64) (bool, error) {
		if s < 0.3 {
			return false, boom
		}
		return true, nil
	})
	if !errors.Is(err, boom) || len(res.Probes) != 2 {
		t.Fatalf("error %v after %v: want the probe's, after 2 probes", err, res.Probes)
	}
}

func TestArrivalSpan(t *testing.T) {
	at := func(ms ...int) []Request {
		var reqs []Request
		for _, m := range ms {
			reqs = append(reqs, Request{Arrival: time.Duration(m) * time.Millisecond})
		}
		return reqs
	}
	for _, tc := range []struct {
		reqs []Request
		want time.Duration
	}{
		{nil, 0}, {at(5), 0}, {at(0, 0, 0), 0}, {at(100, 400, 1100), time.Second}, {at(0, 3537000), 3537 * time.Second},
	} {
		if got := ArrivalSpan(tc.reqs); got != tc.want {
			t.Errorf("ArrivalSpan(%v) = %v, want %v", tc.reqs, got, tc.want)
		}
	}
}
