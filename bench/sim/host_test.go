package sim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
)

// hostEngine is a small engine: 16-token blocks, 256 of them, 512 tokens per step, twice
// the reference speed.
func hostEngine() mocker.Config {
	c := mocker.DefaultConfig()
	c.BlockSize, c.NumGPUBlocks, c.MaxModelLen, c.MaxNumBatchedTokens, c.SpeedupRatio = 16, 256, 4096, 512, 2
	return c
}

func TestTimerWait(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		d, res, want time.Duration
	}{
		{300 * us, 0, 300 * us}, // exact timer
		{300 * us, time.Millisecond, time.Millisecond},
		{574 * us, time.Millisecond, time.Millisecond}, // a decode step at speedup 10
		{time.Millisecond, time.Millisecond, time.Millisecond},
		{time.Millisecond + 1, time.Millisecond, 2 * time.Millisecond},
		{1200 * us, time.Millisecond, 2 * time.Millisecond},
		{16501 * us, time.Millisecond, 17 * time.Millisecond},
		{0, time.Millisecond, 0},
		{-5, time.Millisecond, -5},
		{MaxSimulatedTime + 1, MaxEventDelay, MaxSimulatedTime + MaxEventDelay}, // a multiple of an hour, and 1 ns
	} {
		if got := TimerWait(tc.d, tc.res); got != tc.want {
			t.Errorf("TimerWait(%v, %v) = %v, want %v", tc.d, tc.res, got, tc.want)
		}
	}
}

// TestHostTiming checks a request alone on its engine against the timing model with the
// host's figures, computed by hand: every step rounded up to the timer's resolution plus
// the step overhead, and the request's cost added to its TTFT and E2E.
func TestHostTiming(t *testing.T) {
	eng := hostEngine()
	step := func(prefill int, decode bool, blocks int) time.Duration {
		return mocker.StepDuration(prefill, decode, float64(blocks)/256, eng.SpeedupRatio)
	}
	// 1000 prompt tokens: chunks of 512 and 488 tokens, then a decode step per token
	// at the sequence's blocks (ceil(1001/16) = 63 ...).
	one := bench.Request{Arrival: time.Second, InputLength: 1000, OutputLength: 4, HashIDs: []int64{7, 8}}
	for _, tc := range []struct {
		name string
		host Host
		ttft time.Duration
		itl  []time.Duration
	}{
		{
			name: "none",
			ttft: step(512, false, 32) + step(488, false, 63),
			itl:  []time.Duration{step(0, true, 63), step(0, true, 63), step(0, true, 63)},
		},
		{
			// Every step lasts whole milliseconds, then 0.3 ms more.
			name: "timer resolution and step overhead",
			host: Host{TimerResolution: time.Millisecond, StepOverhead: 300 * time.Microsecond},
			ttft: TimerWait(step(512, false, 32), time.Millisecond) + TimerWait(step(488, false, 63), time.Millisecond) + 600*time.Microsecond,
			itl: []time.Duration{
				TimerWait(step(0, true, 63), time.Millisecond) + 300*time.Microsecond,
				TimerWait(step(0, true, 63), time.Millisecond) + 300*time.Microsecond,
				TimerWait(step(0, true, 63), time.Millisecond) + 300*time.Microsecond,
			},
		},
		{
			// 2 ms + 1000 × 1 µs on the first token (and on the last), none between.
			name: "request cost",
			host: Host{RequestOverhead: 2 * time.Millisecond, RequestTokenOverhead: time.Microsecond},
			ttft: step(512, false, 32) + step(488, false, 63) + 3*time.Millisecond,
			itl:  []time.Duration{step(0, true, 63), step(0, true, 63), step(0, true, 63)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 1, Engine: eng, Seed: 1}
			tc.host.Apply(&cfg)
			out, _, err := Run(context.Background(), cfg, []bench.Request{one})
			if err != nil {
				t.Fatal(err)
			}
			r := out.Results[0]
			if r.Error != "" {
				t.Fatalf("%s: %s", r.Error, r.Detail)
			}
			if r.TTFT != tc.ttft || !reflect.DeepEqual(r.ITL, tc.itl) {
				t.Errorf("TTFT %v, ITL %v: want %v, %v", r.TTFT, r.ITL, tc.ttft, tc.itl)
			}
			e2e := tc.ttft
			for _, g := range tc.itl {
				e2e += g
			}
			if r.E2E != e2e || out.Duration != e2e {
				t.Errorf("E2E %v, run %v: want both %v", r.E2E, out.Duration, e2e)
			}
		})
	}
}

// TestFitHost simulates calibration requests alone on an engine under known host
// figures and wants FitHost to find them again from the simulated latencies.
func TestFitHost(t *testing.T) {
	eng := hostEngine()
	lengths := []int{16, 700, 2000} // one, two and four prefill steps
	for _, h := range []Host{
		{},
		{StepOverhead: 250 * time.Microsecond},
		{TimerResolution: time.Millisecond, StepOverhead: 120 * time.Microsecond, RequestOverhead: 2 * time.Millisecond,
			RequestTokenOverhead: 800 * time.Nanosecond},
		{TimerResolution: 5 * time.Millisecond, RequestOverhead: 40 * time.Millisecond},
		{RequestTokenOverhead: 3 * time.Microsecond},
	} {
		t.Run(fmt.Sprintf("%+v", h), func(t *testing.T) {
			var samples []HostSample
			for k, l := range lengths {
				for rep := range 2 {
					ids := make([]int64, (l+511)/512)
					for j := range ids {
						ids[j] = int64(1000*k + 100*rep + j)
					}
					cfg := Config{Workers: 1, Engine: eng, Seed: 1}
					h.Apply(&cfg)
					out, _, err := Run(context.Background(), cfg, []bench.Request{{InputLength: l, OutputLength: 8, HashIDs: ids}})
					if err != nil || out.Results[0].Error != "" {
						t.Fatalf("length %d: %v %+v", l, err, out.Results[0])
					}
					r := out.Results[0]
					samples = append(samples, HostSample{PromptTokens: l, OutputTokens: r.OutputTokens, TTFT: r.TTFT, E2E: r.E2E})
				}
			}
			got, err := FitHost(eng, h.TimerResolution, samples)
			if err != nil {
				t.Fatal(err)
			}
			// The per-token cost is a slope through nanosecond-rounded points.
			near := func(a, b, tol time.Duration) bool { return a-b <= tol && b-a <= tol }
			if got.TimerResolution != h.TimerResolution || !near(got.StepOverhead, h.StepOverhead, 1) ||
				!near(got.RequestOverhead, h.RequestOverhead, 10) || !near(got.RequestTokenOverhead, h.RequestTokenOverhead, 1) {
				t.Errorf("FitHost = %+v, want %+v", got, h)
			}
		})
	}
}

func TestFitHostErrors(t *testing.T) {
	good := HostSample{PromptTokens: 100, OutputTokens: 4, TTFT: 10 * time.Millisecond, E2E: 30 * time.Millisecond}
	for _, tc := range []struct {
		name    string
		eng     func(*mocker.Config)
		res     time.Duration
		samples []HostSample
		want    string
	}{
		{"no sample", nil, 0, nil, "no sample"},
		{"one output token", nil, 0, []HostSample{{PromptTokens: 100, OutputTokens: 1, TTFT: 1, E2E: 1}}, "sample 0: 100 prompt and 1 output tokens"},
		{"no prompt", nil, 0, []HostSample{good, {OutputTokens: 4, TTFT: 1, E2E: 1}}, "sample 1: 0 prompt"},
		{"too long", nil, 0, []HostSample{{PromptTokens: 4094, OutputTokens: 4, TTFT: 1, E2E: 1}}, "exceed MaxModelLen 4096"},
		{"E2E before TTFT", nil, 0, []HostSample{{PromptTokens: 10, OutputTokens: 4, TTFT: 2, E2E: 1}}, "want 0 < TTFT <= E2E"},
		{"no TTFT", nil, 0, []HostSample{{PromptTokens: 10, OutputTokens: 4}}, "want 0 < TTFT <= E2E"},
		{"negative resolution", nil, -1, []HostSample{good}, "timer resolution -1ns"},
		{"engine", func(c *mocker.Config) { c.BlockSize = 0 }, 0, []HostSample{good}, "--block-size 0"},
		{"speedup", func(c *mocker.Config) { c.SpeedupRatio = 1e8 }, 0, []HostSample{good}, "SpeedupRatio 1e+08"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := hostEngine()
			if tc.eng != nil {
				tc.eng(&eng)
			}
			_, err := FitHost(eng, tc.res, tc.samples)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one with %q", err, tc.want)
			}
		})
	}
}

func TestFitLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		a, b   float64
	}{
		{"through two points", []float64{100, 300}, []float64{3, 7}, 1, 0.02},
		{"one length: its value", []float64{100}, []float64{5}, 5, 0},
		{"falling: the mean", []float64{100, 300}, []float64{7, 3}, 5, 0},
		{"negative intercept: through the origin", []float64{100, 200}, []float64{1, 4}, 0, 0.018},
		{"nothing positive", []float64{100, 200}, []float64{-3, -3}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := fitLine(tc.xs, tc.ys)
			if d := a - tc.a; d > 1e-9 || d < -1e-9 {
				t.Errorf("a = %v, want %v", a, tc.a)
			}
			if d := b - tc.b; d > 1e-12 || d < -1e-12 {
				t.Errorf("b = %v, want %v", b, tc.b)
			}
		})
	}
}

func TestHostConfigErrors(t *testing.T) {
	good := Config{Workers: 1, Engine: hostEngine()}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative resolution", func(c *Config) { c.TimerResolution = -1 }, "TimerResolution -1ns: want 0 to 1h0m0s"},
		{"resolution of a day", func(c *Config) { c.TimerResolution = 24 * time.Hour }, "TimerResolution 24h0m0s"},
		{"negative request overhead", func(c *Config) { c.RequestOverhead = -1 }, "RequestOverhead -1ns"},
		{"request overhead of a day", func(c *Config) { c.RequestOverhead = 24 * time.Hour }, "RequestOverhead 24h0m0s"},
		{"negative token overhead", func(c *Config) { c.RequestTokenOverhead = -1 }, "RequestTokenOverhead -1ns: want 0 to 1ms per prompt token"},
		{"token overhead above 1 ms", func(c *Config) { c.RequestTokenOverhead = time.Millisecond + 1 }, "RequestTokenOverhead 1.000001ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, _, err := Run(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one with %q", err, tc.want)
			}
		})
	}
}

// TestFitHostRefusesFasterSamples: samples that came faster than the timing model of
// the engine configuration given lets them (an engine faster than its SpeedupRatio, or
// one prefilling more tokens per step) are refused, whatever host figures would fit
// them; samples from the configuration given are fitted.
func TestFitHostRefusesFasterSamples(t *testing.T) {
	measure := func(t *testing.T, served mocker.Config, h Host) []HostSample {
		t.Helper()
		var samples []HostSample
		for k, l := range []int{16, 700, 2000} {
			for rep := range 3 {
				cfg := Config{Workers: 1, Engine: served, Seed: 1}
				h.Apply(&cfg)
				ids := make([]int64, (l+511)/512)
				for j := range ids {
					ids[j] = int64(1000*k + 100*rep + j)
				}
				out, _, err := Run(context.Background(), cfg, []bench.Request{{InputLength: l, OutputLength: 8, HashIDs: ids}})
				if err != nil || out.Results[0].Error != "" {
					t.Fatalf("length %d: %v %+v", l, err, out.Results[0])
				}
				r := out.Results[0]
				samples = append(samples, HostSample{PromptTokens: l, OutputTokens: r.OutputTokens, TTFT: r.TTFT, E2E: r.E2E})
			}
		}
		return samples
	}
	host := Host{TimerResolution: time.Millisecond, StepOverhead: 200 * time.Microsecond, RequestOverhead: time.Millisecond}
	for _, tc := range []struct {
		name   string
		served func(*mocker.Config)
		host   Host
		want   string // "": fitted
	}{
		{"as given", nil, Host{}, ""},
		{"as given, with a host", nil, host, ""},
		{"ten times faster", func(c *mocker.Config) { c.SpeedupRatio *= 10 }, Host{}, "before the timing model"},
		{"ten times faster, with a host", func(c *mocker.Config) { c.SpeedupRatio *= 10 }, host, "before the timing model"},
		{"twice as fast", func(c *mocker.Config) { c.SpeedupRatio *= 2 }, Host{}, "before the timing model"},
		{"longer prefill steps", func(c *mocker.Config) { c.MaxNumBatchedTokens = 4096 }, Host{}, "first token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := hostEngine()
			served := given
			if tc.served != nil {
				tc.served(&served)
			}
			_, err := FitHost(given, tc.host.TimerResolution, measure(t, served, tc.host))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("FitHost: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v: want one with %q", err, tc.want)
			}
			var fe *FasterError
			if tc.want != "" && (!errors.As(err, &fe) || fe.Share >= MinModelShare || fe.Measured >= fe.Modelled) {
				t.Errorf("error %#v: want a *FasterError with a share below %v", err, MinModelShare)
			}
		})
	}
}
