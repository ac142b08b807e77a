package main

import (
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// Agreement scenario: 4 aggregated workers with kv routing and the reference engine at
// the reference timing (speedup 1), 80 requests of the Mooncake conversation trace:
// from request 5280 on (the part of the trace with the most prefix reuse among
// neighbours: an infinite cache would serve 10.6 % of these prompts' tokens, against
// 3 % for the trace's first requests), the first 80 whose prompt plus output fit in
// 16,384 tokens (mean ISL 4,778, OSL 275; the longer ones, up to 85 K tokens, hold an
// engine for seconds and make the TTFT median swing with a few milliseconds of arrival
// jitter). Their 30 s of arrivals are compressed 5×, so the real run takes about 16 s.
const (
	agreeFirst     = 5280
	agreeRequests  = 80
	agreeMaxTokens = 16384 // prompt + output of a request kept
	agreeTimeScale = 0.2
	agreeSpeedup   = 1
	agreeWorkers   = 4
	agreeMaxLen    = 32768
)

// Tolerances of TestSimulationAgreement, measured on a 2-core machine shared with other
// work (7 real runs of this scenario; the test logs every figure):
//
//   - TTFT p50 within 30 %: the informed simulation (see the test) was 2–17 % off the
//     real median. The median of 80 TTFTs of mixed prompt lengths is unsteady: the real
//     runs themselves gave 144–188 ms (31 % apart), and the simulator alone, with the
//     arrivals jittered by 0–10 ms (what the real client's goroutines add), spreads its
//     TTFT p50 over 16 %.
//   - E2E mean within 10 %: the informed simulation was 1.9–6.0 % below the real run,
//     always below: the probe measures a timer's lateness, not the real engine loop's own
//     work between steps (publishing KV events and outputs), about 0.4 ms more per step
//     (ITL mean 10.0–10.2 ms real, 9.6–9.7 ms simulated).
//   - Prefix-cache hit rate within 0.01 (absolute): the informed simulation matched the
//     real rate exactly (0.1018) every time. With the trace's own arrivals the simulation
//     gets 0.0978: requests that arrive at the same instant share one engine step there
//     and cannot hit each other's blocks, while the real client sends them milliseconds
//     apart and the later ones hit the earlier ones' first block.
//
// The plain simulation (trace arrivals, no step overhead) is logged too: its E2E mean
// was 8–12 % below the real run's, the engine steps' lateness, and its TTFT p50 within
// 24 % of the real one.
const (
	agreeTTFTRel = 0.30
	agreeE2ERel  = 0.10
	agreeHitAbs  = 0.01
)

// agreeMaxLateness is the timer lateness (per agreeProbePeriod sleep, measured during
// the real run) up to which the time tolerances above hold: they were measured at
// 0.5–1.2 ms, and held at 1.5 ms (TTFT p50 0.2 %, E2E mean 1.6 % apart). A machine busier
// than that runs the real engines and the gateway slower than the timing model: with 6
// to 9 runnable processes per core, timers fired 2.0 and 3.4 ms late, the real TTFT p50
// was 2 to 2.6 times the informed simulation's and the real E2E mean up to 30 % above
// it. The test then logs its figures, compares the hit rates (which agreed all the same)
// and skips the comparison of times: on such a machine it would measure the load, not
// the simulator.
const agreeMaxLateness = 1500 * time.Microsecond

// TestSimulationAgreement runs the same scenario for real (turbine serve, the bench
// runner, the wall clock) and simulated (bench/sim, a virtual clock) and wants their
// reports to agree on TTFT p50, mean E2E and the prefix-cache hit rate.
//
// A real engine loop sleeps until each step's modelled end; on a busy machine the
// timer fires late (0.5–1.2 ms per sleep on the 2-core machine the tolerances come
// from), and over the ~275 decode steps of a request that lateness adds up to 5–10 % of
// its E2E. The simulated engines are never late. So the test measures the lateness
// while the real run goes (a goroutine sleeping 5 ms again and again) and compares the
// real run with an informed simulation: that lateness as Config.StepOverhead, and every
// request arriving when the real client sent it (Result.Start), so that the client's
// own jitter is not counted as disagreement. Timers later than agreeMaxLateness skip the
// comparison of times.
func TestSimulationAgreement(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	data := sharedDataDir(t)
	if data == "" {
		t.Skip("../shared/data (the production traces) is not beside the repository")
	}
	path := filepath.Join(data, "mooncake_fast25_conversation_trace.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	all, err := bench.ReadMooncake(f, path, bench.DefaultBlockTokens, agreeFirst+2*agreeRequests)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var reqs []bench.Request
	for _, r := range all[min(agreeFirst, len(all)):] {
		if r.InputLength+r.OutputLength <= agreeMaxTokens && len(reqs) < agreeRequests {
			reqs = append(reqs, r)
		}
	}
	if len(reqs) < agreeRequests {
		t.Skipf("%s: %d requests fit the scenario, want %d", path, len(reqs), agreeRequests)
	}
	origin := reqs[0].Arrival
	for i := range reqs {
		reqs[i].Arrival -= origin
	}
	bench.Scale(reqs, agreeTimeScale)

	eng := mocker.DefaultConfig()
	eng.SpeedupRatio = agreeSpeedup
	eng.MaxModelLen = agreeMaxLen
	cfg := sim.Config{Workers: agreeWorkers, Engine: eng, Router: kv.DefaultConfig(eng.BlockSize), Seed: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv := startServe(t, agreeWorkers, "--router-mode", kv.PolicyKV, "--speedup-ratio", strconv.Itoa(agreeSpeedup),
		"--max-model-len", strconv.Itoa(agreeMaxLen), "--block-size", strconv.Itoa(eng.BlockSize),
		"--num-gpu-blocks", strconv.Itoa(eng.NumGPUBlocks), "--max-num-seqs", strconv.Itoa(eng.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(eng.MaxNumBatchedTokens))
	runner := &bench.Runner{
		Client: &bench.Client{URL: srv.url, Model: model,
			HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: agreeRequests}}},
		BlockTokens: bench.DefaultBlockTokens,
	}
	probe := startLatenessProbe(agreeProbePeriod)
	realOut := runner.Run(ctx, reqs)
	lateness := probe.stop()
	t.Logf("timer lateness during the real run: %v per %v sleep", lateness, agreeProbePeriod)

	plainOut, st, err := sim.Run(ctx, cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plain simulation: %v of virtual time in %v", st.SimulatedTime, st.WallTime)
	sent := append([]bench.Request(nil), reqs...)
	for i := range sent {
		sent[i].Arrival = realOut.Results[i].Start
	}
	informedCfg := cfg
	informedCfg.StepOverhead = lateness
	informedOut, _, err := sim.Run(ctx, informedCfg, sent)
	if err != nil {
		t.Fatal(err)
	}

	real, plain, informed := bench.Summarize(realOut), bench.Summarize(plainOut), bench.Summarize(informedOut)
	for _, r := range []struct {
		name string
		s    bench.Summary
	}{{"real", real}, {"plain sim", plain}, {"informed sim", informed}} {
		if r.s.Succeeded != agreeRequests || r.s.PrefixCacheHitRate == nil {
			t.Fatalf("%s run: %d of %d requests succeeded (%v), hit rate %v", r.name, r.s.Succeeded, agreeRequests, r.s.Errors, r.s.PrefixCacheHitRate)
		}
		t.Logf("%-12s TTFT p50 %6.1f ms mean %6.1f | ITL p50 %5.2f ms mean %5.2f | E2E p50 %7.1f ms mean %7.1f | hit rate %.4f | %5.2f s",
			r.name, r.s.TTFT.P50, r.s.TTFT.Mean, r.s.ITL.P50, r.s.ITL.Mean, r.s.E2E.P50, r.s.E2E.Mean, *r.s.PrefixCacheHitRate, r.s.DurationS)
	}
	t.Logf("plain sim against real: TTFT p50 %+.1f %%, E2E mean %+.1f %%, hit rate %+.4f",
		100*(plain.TTFT.P50/real.TTFT.P50-1), 100*(plain.E2E.Mean/real.E2E.Mean-1), *plain.PrefixCacheHitRate-*real.PrefixCacheHitRate)

	tooBusy := lateness > agreeMaxLateness
	for _, c := range []struct {
		what           string
		real, informed float64
		limit          float64 // largest difference allowed
		timing         bool    // a time, compared only on a machine that kept to the timing model
	}{
		{"TTFT p50 (ms)", real.TTFT.P50, informed.TTFT.P50, agreeTTFTRel * real.TTFT.P50, true},
		{"E2E mean (ms)", real.E2E.Mean, informed.E2E.Mean, agreeE2ERel * real.E2E.Mean, true},
		{"prefix-cache hit rate", *real.PrefixCacheHitRate, *informed.PrefixCacheHitRate, agreeHitAbs, false},
	} {
		diff := math.Abs(c.real - c.informed)
		t.Logf("%-22s real %9.4f  informed sim %9.4f  difference %8.4f  tolerance %8.4f", c.what, c.real, c.informed, diff, c.limit)
		if diff > c.limit && !(c.timing && tooBusy) {
			t.Errorf("%s: real %.4f, simulated %.4f: the difference %.4f exceeds the tolerance %.4f", c.what, c.real, c.informed, diff, c.limit)
		}
	}
	if d := math.Abs(*plain.PrefixCacheHitRate - *real.PrefixCacheHitRate); d > agreeHitAbs {
		t.Errorf("prefix-cache hit rate: real %.4f, plain simulation %.4f: the difference %.4f exceeds %.4f",
			*real.PrefixCacheHitRate, *plain.PrefixCacheHitRate, d, agreeHitAbs)
	}
	if tooBusy {
		t.Skipf("timers fired %v late per %v sleep during the real run, above the %v the time tolerances hold at: the machine was too busy to compare times (the hit rates were compared)",
			lateness, agreeProbePeriod, agreeMaxLateness)
	}
}

// agreeProbePeriod is the lateness probe's sleep, about one decode step.
const agreeProbePeriod = 5 * time.Millisecond

// latenessProbe measures how late timers fire on this machine while it runs: it sleeps
// period again and again and averages how much longer each sleep took.
type latenessProbe struct {
	done   chan struct{}
	result chan time.Duration
}

func startLatenessProbe(period time.Duration) *latenessProbe {
	p := &latenessProbe{done: make(chan struct{}), result: make(chan time.Duration, 1)}
	go func() {
		var late time.Duration
		n := 0
		timer := time.NewTimer(period)
		defer timer.Stop()
		for {
			start := time.Now()
			timer.Reset(period)
			select {
			case <-p.done:
				if n > 0 {
					late /= time.Duration(n)
				}
				p.result <- late
				return
			case <-timer.C:
				late += time.Since(start) - period
				n++
			}
		}
	}()
	return p
}

// stop ends the probe and returns the mean lateness of its sleeps.
func (p *latenessProbe) stop() time.Duration {
	close(p.done)
	return <-p.result
}
