package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// smallEngine is an engine small enough that KV usage, and so decode time, moves with
// every block: 16-token blocks, 256 of them, 512 tokens per step.
func smallEngine() mocker.Config {
	c := mocker.DefaultConfig()
	c.BlockSize = 16
	c.NumGPUBlocks = 256
	c.MaxModelLen = 4096
	c.MaxNumBatchedTokens = 512
	c.SpeedupRatio = 2
	return c
}

// ms converts a timing-model figure (milliseconds) at a speedup ratio to the duration
// the engine reports, with the same arithmetic as mocker.StepDuration.
func ms(x, speedup float64) time.Duration {
	return time.Duration(x / speedup * float64(time.Millisecond))
}

// sharedPrefixWorkload returns n requests in groups sharing a prefix of prefixIDs hash
// ids (of blockTokens tokens each) followed by suffixIDs ids of their own, arriving as a
// Poisson process of rate requests/s; every request has osl output tokens.
func sharedPrefixWorkload(n, groups, prefixIDs, suffixIDs, blockTokens, osl int, rate float64, seed uint64) []bench.Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]bench.Request, n)
	next := int64(groups * prefixIDs)
	var at float64
	for i := range out {
		g := rng.IntN(groups)
		ids := make([]int64, 0, prefixIDs+suffixIDs)
		for k := range prefixIDs {
			ids = append(ids, int64(g*prefixIDs+k))
		}
		for range suffixIDs {
			ids = append(ids, next)
			next++
		}
		at += rng.ExpFloat64() / rate
		out[i] = bench.Request{Arrival: time.Duration(at * float64(time.Second)), InputLength: len(ids) * blockTokens,
			OutputLength: osl, HashIDs: ids}
	}
	return out
}

func TestConfigErrors(t *testing.T) {
	good := Config{Workers: 2, Engine: smallEngine()}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no workers", func(c *Config) { c.Workers = 0 }, "Workers"},
		{"negative prefill workers", func(c *Config) { c.PrefillWorkers = -1 }, "PrefillWorkers"},
		{"engine", func(c *Config) { c.Engine.NumGPUBlocks = -1 }, "Engine"},
		{"router block size", func(c *Config) { c.Router = kv.DefaultConfig(32) }, "Router.BlockSize"},
		{"router policy", func(c *Config) { c.Router.Policy = "nonesuch" }, "Router"},
		{"block tokens", func(c *Config) { c.BlockTokens = -1 }, "BlockTokens"},
		{"event delay", func(c *Config) { c.EventDelay = -time.Millisecond }, "EventDelay"},
		{"step overhead", func(c *Config) { c.StepOverhead = -1 }, "StepOverhead"},
		{"kv bytes", func(c *Config) { c.KVBytesPerToken = -1 }, "KVBytesPerToken"},
		{"bandwidth", func(c *Config) { c.TransferBandwidth = math.Inf(1) }, "TransferBandwidth"},
		{"local prefill", func(c *Config) { c.MaxLocalPrefillTokens = -1 }, "MaxLocalPrefillTokens"},
		// Figures whose times or memory run away.
		{"kv bytes at int64's maximum", func(c *Config) { c.KVBytesPerToken = math.MaxInt64 }, "KVBytesPerToken 9223372036854775807: want 0 to 16777216 bytes"},
		{"kv bytes above 16 MiB", func(c *Config) { c.KVBytesPerToken = 16<<20 + 1 }, "KVBytesPerToken"},
		{"bandwidth 1e-300", func(c *Config) { c.TransferBandwidth = 1e-300 }, "TransferBandwidth 1e-300 bytes/s: want 1e+06 to 1e+13"},
		{"bandwidth above 10 TB/s", func(c *Config) { c.TransferBandwidth = 1e14 }, "TransferBandwidth"},
		{"bandwidth NaN", func(c *Config) { c.TransferBandwidth = math.NaN() }, "TransferBandwidth"},
		{"speedup 1e-300", func(c *Config) { c.Engine.SpeedupRatio = 1e-300 }, "Engine.SpeedupRatio 1e-300: want 0.001 to 1e+06"},
		{"speedup 1e7", func(c *Config) { c.Engine.SpeedupRatio = 1e7 }, "Engine.SpeedupRatio"},
		{"event delay of a day", func(c *Config) { c.EventDelay = 24 * time.Hour }, "EventDelay"},
		{"step overhead of a day", func(c *Config) { c.StepOverhead = 24 * time.Hour }, "StepOverhead"},
		{"memory limit", func(c *Config) { c.MemoryLimit = -1 }, "MemoryLimit"},
		{"3000 default engines", func(c *Config) { c.Workers, c.Engine = 3000, mocker.DefaultConfig() }, "Workers 3000 + PrefillWorkers 0 engines of Engine.NumGPUBlocks 16384"},
		{"memory above a set limit", func(c *Config) { c.MemoryLimit = 1 << 10 }, "need about 168.0 KiB once their caches fill, above MemoryLimit 1.0 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, _, err := Run(context.Background(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v: want one naming %s", err, tc.field)
			}
		})
	}
	for _, at := range []time.Duration{-1, bench.MaxArrival + 1, math.MinInt64} {
		t.Run(fmt.Sprintf("arrival %v", at), func(t *testing.T) {
			_, _, err := Run(context.Background(), good, []bench.Request{{InputLength: 1, OutputLength: 1, HashIDs: []int64{1}},
				{Arrival: at, InputLength: 1, OutputLength: 1, HashIDs: []int64{1}}})
			if err == nil || !strings.Contains(err.Error(), "request 1: arrival") {
				t.Fatalf("error %v: want one naming request 1's arrival", err)
			}
		})
	}
	t.Run("zero engine and router mean the defaults", func(t *testing.T) {
		out, _, err := Run(context.Background(), Config{Workers: 1}, []bench.Request{{InputLength: 100, OutputLength: 2, HashIDs: []int64{1}}})
		if err != nil || out.Results[0].Error != "" {
			t.Fatalf("error %v, result %+v", err, out.Results[0])
		}
		if want := ms(mocker.PrefillMillis(100), 1); out.Results[0].TTFT != want {
			t.Fatalf("TTFT %v, want %v (reference timing, speedup 1)", out.Results[0].TTFT, want)
		}
	})
}

// TestTiming checks TTFT, ITL and E2E against the timing model computed by hand for
// requests alone on an engine (docs/reference.md §7).
func TestTiming(t *testing.T) {
	eng := smallEngine()
	sp := eng.SpeedupRatio
	// Decode time of the step that computes the token at sequence length L (prompt
	// plus earlier outputs): KV usage is the sequence's blocks, ceil(L/16), of 256.
	decode := func(l int) time.Duration { return ms(mocker.DecodeMillis(float64((l+15)/16)/256), sp) }
	// 1000 prompt tokens are 2 hash ids of 512 (the last cut to 488).
	one := bench.Request{Arrival: 3 * time.Second, InputLength: 1000, OutputLength: 4, HashIDs: []int64{7, 8}}
	for _, tc := range []struct {
		name     string
		reqs     []bench.Request
		overhead time.Duration // Config.StepOverhead
		// want per request: TTFT, ITL gaps, cached tokens
		ttft   []time.Duration
		itl    [][]time.Duration
		cached []int
	}{
		{
			// 1000 tokens with 512 per step: a 512-token chunk, then 488 tokens that end
			// with the first token; then one decode step per token.
			name:   "chunked prefill then decode",
			reqs:   []bench.Request{one},
			ttft:   []time.Duration{ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(488), sp)},
			itl:    [][]time.Duration{{decode(1001), decode(1002), decode(1003)}},
			cached: []int{0},
		},
		{
			// A step overhead lengthens every step: two to the first token, one per gap.
			name:     "step overhead",
			reqs:     []bench.Request{one},
			overhead: time.Millisecond,
			ttft:     []time.Duration{ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(488), sp) + 2*time.Millisecond},
			itl: [][]time.Duration{{decode(1001) + time.Millisecond, decode(1002) + time.Millisecond,
				decode(1003) + time.Millisecond}},
			cached: []int{0},
		},
		{
			// The same prompt again after the first finished: 62 full blocks (992 tokens)
			// hit (at most (1000-1)/16 blocks, so that a token is left to compute) and
			// the other 8 tokens are prefilled.
			name:   "prefix hit",
			reqs:   []bench.Request{one, {Arrival: 10 * time.Second, InputLength: 1000, OutputLength: 2, HashIDs: []int64{7, 8}}},
			ttft:   []time.Duration{ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(488), sp), ms(mocker.PrefillMillis(8), sp)},
			itl:    [][]time.Duration{{decode(1001), decode(1002), decode(1003)}, {decode(1001)}},
			cached: []int{0, 992},
		},
		{
			// Two 200-token prompts arriving together share one prefill step; then each
			// decode step holds both sequences (13 blocks each at length 201..).
			name: "same instant arrivals share a step",
			reqs: []bench.Request{
				{Arrival: 0, InputLength: 200, OutputLength: 2, HashIDs: []int64{1}},
				{Arrival: 0, InputLength: 200, OutputLength: 2, HashIDs: []int64{2}},
			},
			ttft: []time.Duration{ms(mocker.PrefillMillis(400), sp), ms(mocker.PrefillMillis(400), sp)},
			itl: [][]time.Duration{
				{ms(mocker.DecodeMillis(26.0/256), sp)}, {ms(mocker.DecodeMillis(26.0/256), sp)},
			},
			cached: []int{0, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 1, Engine: eng, StepOverhead: tc.overhead, Seed: 1}
			out, st, err := Run(context.Background(), cfg, tc.reqs)
			if err != nil {
				t.Fatal(err)
			}
			var end time.Duration
			for i, r := range out.Results {
				if r.Error != "" {
					t.Fatalf("request %d: %s: %s", i, r.Error, r.Detail)
				}
				if r.Index != i || r.Start != tc.reqs[i].Arrival-tc.reqs[0].Arrival {
					t.Errorf("request %d: index %d, start %v", i, r.Index, r.Start)
				}
				if r.TTFT != tc.ttft[i] {
					t.Errorf("request %d: TTFT %v, want %v", i, r.TTFT, tc.ttft[i])
				}
				if !reflect.DeepEqual(r.ITL, tc.itl[i]) {
					t.Errorf("request %d: ITL %v, want %v", i, r.ITL, tc.itl[i])
				}
				e2e := r.TTFT
				for _, g := range r.ITL {
					e2e += g
				}
				if r.E2E != e2e {
					t.Errorf("request %d: E2E %v, want TTFT + ITLs = %v", i, r.E2E, e2e)
				}
				want := max(tc.reqs[i].OutputLength, 1)
				if r.OutputTokens != want || r.PromptTokens != tc.reqs[i].InputLength || r.InputLength != tc.reqs[i].InputLength {
					t.Errorf("request %d: %d output, %d prompt, %d input tokens", i, r.OutputTokens, r.PromptTokens, r.InputLength)
				}
				if !r.CachedKnown || r.CachedTokens != tc.cached[i] {
					t.Errorf("request %d: cached %d (known %v), want %d", i, r.CachedTokens, r.CachedKnown, tc.cached[i])
				}
				end = max(end, r.Start+r.E2E)
			}
			if out.Duration != end || st.SimulatedTime != end {
				t.Errorf("duration %v, simulated %v, want %v", out.Duration, st.SimulatedTime, end)
			}
			if st.Requests != len(tc.reqs) || st.Decisions[DecisionAggregated] != len(tc.reqs) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestDeterministic runs workloads twice, with policies and options that draw random
// numbers, and wants the same outcome.
func TestDeterministic(t *testing.T) {
	reqs := sharedPrefixWorkload(150, 6, 2, 1, 64, 20, 40, 3)
	for _, tc := range []struct {
		name   string
		policy string
		temp   float64
		delay  time.Duration
	}{
		{"kv", kv.PolicyKV, 0, 0},
		{"kv softmax, event delay", kv.PolicyKV, 0.5, 3 * time.Millisecond},
		{"random", kv.PolicyRandom, 0, 0},
		{"round-robin", kv.PolicyRoundRobin, 0, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := kv.DefaultConfig(16)
			rc.Policy, rc.Temperature = tc.policy, tc.temp
			cfg := Config{Workers: 4, Engine: smallEngine(), Router: rc, BlockTokens: 64, EventDelay: tc.delay, Seed: 9}
			a, sa, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			b, sb, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			sa.WallTime, sb.WallTime = 0, 0
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(sa, sb) {
				t.Fatalf("two runs differ:\n%+v\n%+v", sa, sb)
			}
			if s := bench.Summarize(a); s.Succeeded != len(reqs) {
				t.Fatalf("%d of %d succeeded: %v", s.Succeeded, len(reqs), s.Errors)
			}
			cfg.Seed = 10
			c, _, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if tc.policy == kv.PolicyRandom && reflect.DeepEqual(a, c) {
				t.Fatal("another seed gave the same random routing")
			}
		})
	}
}

// TestKVRoutingHitsPrefixes: on a workload of 8 shared prefixes, kv routing sends each
// group to the workers that hold its prefix, random routing spreads every group over
// all 8 workers, so each group's prefix is computed up to 8 times.
func TestKVRoutingHitsPrefixes(t *testing.T) {
	// 400 requests, 8 groups; 6 blocks of 64 tokens shared, 1 own; 4 output tokens; 50/s.
	reqs := sharedPrefixWorkload(400, 8, 6, 1, 64, 4, 50, 5)
	rates := map[string]float64{}
	for _, policy := range []string{kv.PolicyKV, kv.PolicyRandom} {
		rc := kv.DefaultConfig(16)
		rc.Policy = policy
		out, _, err := Run(context.Background(), Config{Workers: 8, Engine: smallEngine(), Router: rc, BlockTokens: 64, Seed: 2}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		s := bench.Summarize(out)
		if s.Succeeded != len(reqs) || s.PrefixCacheHitRate == nil {
			t.Fatalf("%s: %d of %d succeeded, hit rate %v", policy, s.Succeeded, len(reqs), s.PrefixCacheHitRate)
		}
		rates[policy] = *s.PrefixCacheHitRate
	}
	// Prompts are 7 blocks of 64 tokens, 6 of them shared: a request hits at most 6/7 =
	// 0.857. kv routing misses about once per group (8 of 400: 0.84), random routing
	// about once per group and worker (64 of 400: 0.72); measured 0.840 and 0.690.
	t.Logf("prefix-cache hit rate: kv %.3f, random %.3f", rates[kv.PolicyKV], rates[kv.PolicyRandom])
	if rates[kv.PolicyKV] < rates[kv.PolicyRandom]+0.1 {
		t.Fatalf("kv routing hit rate %.3f is not above random's %.3f", rates[kv.PolicyKV], rates[kv.PolicyRandom])
	}
}

// TestRouterDrained: when a run ends, the router tracks no request and holds every
// batch of KV events it was sent (no gap, no lost parent).
func TestRouterDrained(t *testing.T) {
	reqs := sharedPrefixWorkload(200, 5, 3, 2, 64, 30, 100, 7)
	reqs = append(reqs, bench.Request{Arrival: time.Second, InputLength: 5000, OutputLength: 1, HashIDs: make([]int64, 79)}) // too long
	for _, policy := range []string{kv.PolicyKV, kv.PolicyRoundRobin, kv.PolicyRandom} {
		for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
			rc := kv.DefaultConfig(16)
			rc.Policy = policy
			s, err := newSimulator(Config{Workers: 3, Engine: smallEngine(), Router: rc, BlockTokens: 64, EventDelay: delay}, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := s.router.Stats()
			if st.ActiveRequests != 0 || s.applyErrs != 0 || st.Routed != int64(len(reqs)-1) {
				t.Errorf("%s, delay %v: %d active requests, %d event batches not applied, %d routed", policy, delay, st.ActiveRequests, s.applyErrs, st.Routed)
			}
			for _, w := range st.Workers {
				if w.ActiveRequests != 0 || w.ActiveBlocks != 0 || w.ActivePrefillTokens != 0 || !w.Synced || w.LastSeq != s.workers[w.Worker].seq {
					t.Errorf("%s, delay %v: worker %+v", policy, delay, w)
				}
			}
			for i, w := range s.workers {
				if w.eng.HasWork() || w.busy || len(w.pending) != 0 {
					t.Errorf("%s, delay %v: worker %d still busy", policy, delay, i)
				}
			}
		}
	}
}

// TestFailedRequests: requests that cannot run fail with their kind; the rest run.
func TestFailedRequests(t *testing.T) {
	eng := smallEngine()
	reqs := []bench.Request{
		{Arrival: 0, InputLength: 4000, OutputLength: 200, HashIDs: make([]int64, 63)}, // 4200 > 4096
		{Arrival: 0, InputLength: 100, OutputLength: 3, HashIDs: []int64{1, 2}},
		{Arrival: 0, InputLength: 100, OutputLength: 3, HashIDs: nil}, // no ids to synthesize from
		{Arrival: 0, InputLength: 100, OutputLength: 0, HashIDs: []int64{3, 4}},
	}
	var progress []int
	cfg := Config{Workers: 1, Engine: eng, BlockTokens: 64, Progress: func(done, total int) {
		if total != len(reqs) {
			t.Errorf("progress total %d", total)
		}
		progress = append(progress, done)
	}}
	out, _, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{ErrInvalidRequest, "", bench.ErrWorkload, ""}
	for i, r := range out.Results {
		if r.Error != kinds[i] {
			t.Errorf("request %d: error %q (%s), want %q", i, r.Error, r.Detail, kinds[i])
		}
	}
	if out.Results[3].OutputTokens != 1 {
		t.Errorf("output length 0: %d tokens, want 1 (max_tokens 1, as the bench runner sends)", out.Results[3].OutputTokens)
	}
	if !reflect.DeepEqual(progress, []int{1, 2, 3, 4}) {
		t.Errorf("progress calls %v", progress)
	}

	// A prefill-token busy threshold of 1: the second of two simultaneous requests finds
	// the only worker busy.
	rc := kv.DefaultConfig(eng.BlockSize)
	rc.Busy.PrefillTokens = 1
	out, _, err = Run(context.Background(), Config{Workers: 1, Engine: eng, Router: rc, BlockTokens: 64},
		[]bench.Request{reqs[1], reqs[3]})
	if err != nil {
		t.Fatal(err)
	}
	if out.Results[0].Error != "" || out.Results[1].Error != ErrAllBusy {
		t.Errorf("busy worker: errors %q, %q; want none, %q", out.Results[0].Error, out.Results[1].Error, ErrAllBusy)
	}
}

func TestCancel(t *testing.T) {
	reqs := sharedPrefixWorkload(300, 4, 2, 2, 64, 50, 200, 11)
	t.Run("before the start", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out, _, err := Run(ctx, Config{Workers: 2, Engine: smallEngine(), BlockTokens: 64}, reqs)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		for i, r := range out.Results {
			if r.Error != bench.ErrCanceled || r.Index != i {
				t.Fatalf("request %d: %+v", i, r)
			}
		}
	})
	t.Run("midway", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := Config{Workers: 2, Engine: smallEngine(), BlockTokens: 64, Progress: func(done, _ int) {
			if done == 20 {
				cancel()
			}
		}}
		s, err := newSimulator(cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		out, _ := s.outcome()
		var ok, canceled int
		for i, r := range out.Results {
			switch r.Error {
			case "":
				ok++
			case bench.ErrCanceled:
				canceled++
			default:
				t.Errorf("request %d: %s: %s", i, r.Error, r.Detail)
			}
		}
		if ok < 20 || canceled == 0 || ok+canceled != len(reqs) {
			t.Fatalf("%d finished, %d canceled of %d", ok, canceled, len(reqs))
		}
		if st := s.router.Stats(); st.ActiveRequests != 0 {
			t.Fatalf("router still tracks %d requests", st.ActiveRequests)
		}
	})
}

// TestDisaggTiming checks xPyD serving against the timing model for requests alone: a
// long prompt is prefilled on the prefill worker (its one token unseen by the client),
// its full blocks are transferred at the KV bandwidth, and the decode worker computes
// only the last prompt token before the first output token; a short prompt is
// prefilled on its decode worker.
func TestDisaggTiming(t *testing.T) {
	eng := smallEngine()
	sp := eng.SpeedupRatio
	const kvBytes = 131072 // bytes per token
	decode := func(l int) time.Duration { return ms(mocker.DecodeMillis(float64((l+15)/16)/256), sp) }
	// 2000 tokens: 125 full blocks of 16, all transferred: 2000 × 128 KiB at 64 GB/s × 2.
	transfer := time.Duration(float64(2000*kvBytes) / (DefaultTransferBandwidth * sp) * float64(time.Second))
	long := bench.Request{Arrival: 0, InputLength: 2000, OutputLength: 3, HashIDs: []int64{1, 2, 3, 4}}
	short := bench.Request{Arrival: 10 * time.Second, InputLength: 500, OutputLength: 2, HashIDs: []int64{9}}
	for _, tc := range []struct {
		name      string
		reqs      []bench.Request
		maxLocal  int // Config.MaxLocalPrefillTokens
		ttft      []time.Duration
		itl       [][]time.Duration
		decisions map[kv.DisaggDecision]int
	}{
		{
			name: "remote prefill",
			reqs: []bench.Request{long},
			// Prefill worker: chunks of 512, 512, 512 and 464 tokens; transfer; decode
			// worker: the last prompt token (a 1-token prefill step), then decode steps.
			ttft: []time.Duration{3*ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(464), sp) + transfer +
				ms(mocker.PrefillMillis(1), sp)},
			itl:       [][]time.Duration{{decode(2001), decode(2002)}},
			decisions: map[kv.DisaggDecision]int{kv.DisaggRemote: 1},
		},
		{
			// A threshold above the prompt's 2000 tokens: the decode worker prefills it.
			name:      "threshold set above the prompt",
			reqs:      []bench.Request{long},
			maxLocal:  4000,
			ttft:      []time.Duration{3*ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(464), sp)},
			itl:       [][]time.Duration{{decode(2001), decode(2002)}},
			decisions: map[kv.DisaggDecision]int{kv.DisaggLocalShortPrefill: 1},
		},
		{
			name:      "short prompt prefilled locally",
			reqs:      []bench.Request{long, short},
			ttft:      []time.Duration{0, ms(mocker.PrefillMillis(500), sp)},
			itl:       [][]time.Duration{nil, {decode(501)}},
			decisions: map[kv.DisaggDecision]int{kv.DisaggRemote: 1, kv.DisaggLocalShortPrefill: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, BlockTokens: 512, KVBytesPerToken: kvBytes,
				MaxLocalPrefillTokens: tc.maxLocal}
			s, err := newSimulator(cfg, tc.reqs)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			out, st := s.outcome()
			for i, r := range out.Results {
				if r.Error != "" {
					t.Fatalf("request %d: %s: %s", i, r.Error, r.Detail)
				}
				if tc.ttft[i] == 0 {
					continue // checked by another case
				}
				if r.TTFT != tc.ttft[i] || !reflect.DeepEqual(r.ITL, tc.itl[i]) {
					t.Errorf("request %d: TTFT %v, ITL %v; want %v, %v", i, r.TTFT, r.ITL, tc.ttft[i], tc.itl[i])
				}
				if r.OutputTokens != tc.reqs[i].OutputLength || r.PromptTokens != tc.reqs[i].InputLength || r.CachedTokens != 0 {
					t.Errorf("request %d: %d output, %d prompt, %d cached tokens", i, r.OutputTokens, r.PromptTokens, r.CachedTokens)
				}
			}
			if !reflect.DeepEqual(st.Decisions, tc.decisions) {
				t.Errorf("decisions %v, want %v", st.Decisions, tc.decisions)
			}
			// A remote prefill leaves no pinned block on the prefill engine, its prompt's 125
			// full blocks in both engines' prefix caches, and all but the last prompt token
			// imported on the decode engine; a local one leaves the prefill engine unused.
			pre, dec := s.workers[1].eng.Stats(), s.workers[0].eng.Stats()
			if s.workers[1].role != kv.RolePrefill || pre.PinnedRequests != 0 || pre.ActiveBlocks != 0 {
				t.Errorf("prefill engine %+v", pre)
			}
			wantImported, wantPrefillCached := uint64(1999), 125
			if tc.maxLocal > 0 {
				wantImported, wantPrefillCached = 0, 0
			}
			if dec.ImportedTokens != wantImported || dec.CachedBlocks < 125 || pre.CachedBlocks != wantPrefillCached {
				t.Errorf("decode engine %+v, prefill engine %+v: want %d tokens imported, %d blocks cached on prefill",
					dec, pre, wantImported, wantPrefillCached)
			}
		})
	}
}

// TestDisaggCachedTokens: a remote request's cached tokens are its prefill engine's
// prefix-cache hit, as the frontend reports them. A short local request first leaves 496
// of the long prompt's tokens (31 blocks of 16) cached on the decode engine only; the long
// one, prefilled remotely on a cold prefill engine, has 0 cached tokens, not 496.
func TestDisaggCachedTokens(t *testing.T) {
	reqs := []bench.Request{
		{Arrival: 0, InputLength: 500, OutputLength: 2, HashIDs: []int64{1}},
		{Arrival: 10 * time.Second, InputLength: 2000, OutputLength: 2, HashIDs: []int64{1, 2, 3, 4}},
	}
	cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: smallEngine(), BlockTokens: 512, KVBytesPerToken: 131072}
	s, err := newSimulator(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, st := s.outcome()
	if st.Decisions[kv.DisaggLocalShortPrefill] != 1 || st.Decisions[kv.DisaggRemote] != 1 {
		t.Fatalf("decisions %v: want the short request local, the long one remote", st.Decisions)
	}
	for i, want := range []int{0, 0} {
		if r := out.Results[i]; r.Error != "" || !r.CachedKnown || r.CachedTokens != want {
			t.Errorf("request %d: error %q, cached tokens %d (known %v), want %d", i, r.Error, r.CachedTokens, r.CachedKnown, want)
		}
	}
}

// TestDisaggFleet runs a mixed workload on a 2P4D fleet: every request succeeds, both
// kinds of decision occur, the run is deterministic and the router ends with nothing
// tracked (neither leg) and every event batch applied.
func TestDisaggFleet(t *testing.T) {
	reqs := sharedPrefixWorkload(200, 5, 2, 2, 512, 20, 20, 13)
	for i := range reqs {
		if i%3 == 0 { // some short prompts, prefilled on their decode worker
			reqs[i].InputLength = 300
			reqs[i].HashIDs = reqs[i].HashIDs[:1]
		}
	}
	cfg := Config{Workers: 4, PrefillWorkers: 2, Engine: smallEngine(), BlockTokens: 512, KVBytesPerToken: 1 << 20,
		EventDelay: time.Millisecond, Seed: 4}
	var outs []bench.Outcome
	for range 2 {
		s, err := newSimulator(cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		out, st := s.outcome()
		outs = append(outs, out)
		if sum := bench.Summarize(out); sum.Succeeded != len(reqs) {
			t.Fatalf("%d of %d succeeded: %v", sum.Succeeded, len(reqs), sum.Errors)
		}
		if st.Decisions[kv.DisaggRemote] == 0 || st.Decisions[kv.DisaggLocalShortPrefill] == 0 {
			t.Errorf("decisions %v: want remote and local ones", st.Decisions)
		}
		rs := s.router.Stats()
		var n int
		for k, c := range st.Decisions {
			n += c
			if rs.Decisions[k] != int64(c) {
				t.Errorf("decision %s: %d counted, the router says %d", k, c, rs.Decisions[k])
			}
		}
		if n != len(reqs) || rs.ActiveRequests != 0 || s.applyErrs != 0 {
			t.Errorf("%d decisions, %d requests still tracked, %d batches not applied", n, rs.ActiveRequests, s.applyErrs)
		}
		for _, w := range s.workers {
			if est := w.eng.Stats(); w.eng.HasWork() || est.PinnedRequests != 0 || est.ActiveBlocks != 0 {
				t.Errorf("%s: %+v", w.name, est)
			}
		}
	}
	if !reflect.DeepEqual(outs[0], outs[1]) {
		t.Fatal("two runs differ")
	}
}

// TestMemoryEstimate: the fleets the bench command promises (8 to 256 workers of the
// default engine) fit DefaultMemoryLimit; thousands do not.
func TestMemoryEstimate(t *testing.T) {
	eng := mocker.DefaultConfig()
	for _, tc := range []struct {
		workers, prefill int
		fits             bool
	}{{8, 0, true}, {64, 0, true}, {256, 0, true}, {128, 128, true}, {3000, 0, false}, {1024, 0, false}} {
		est := MemoryEstimate(tc.workers+tc.prefill, eng.NumGPUBlocks, eng.BlockSize)
		if fits := est <= DefaultMemoryLimit; fits != tc.fits {
			t.Errorf("%d+%d workers: estimate %s, fits %v; want %v", tc.workers, tc.prefill, Bytes(est), fits, tc.fits)
		}
		_, err := Config{Workers: tc.workers, PrefillWorkers: tc.prefill}.normalize()
		if (err == nil) != tc.fits {
			t.Errorf("%d+%d workers: %v", tc.workers, tc.prefill, err)
		}
	}
	if est := MemoryEstimate(math.MaxInt32, math.MaxInt, 1<<20); est != math.MaxInt64 {
		t.Errorf("estimate %d, want saturated at %d", est, int64(math.MaxInt64))
	}
}

// TestOverflowStopsRun: a step or KV transfer that would end beyond MaxSimulatedTime
// (here from figures past Config's bounds, set behind its back) stops the run with an
// error; no request reports a negative time.
func TestOverflowStopsRun(t *testing.T) {
	eng := smallEngine()
	long := bench.Request{InputLength: 2000, OutputLength: 3, HashIDs: []int64{1, 2, 3, 4}}
	for _, tc := range []struct {
		name string
		edit func(*simulator)
		want string
	}{
		{"KV transfer at 1e-300 bytes/s", func(s *simulator) { s.cfg.TransferBandwidth = 1e-300 }, "sim: request 0: a KV transfer of"},
		{"step at speedup 1e-300", func(s *simulator) {
			slow := eng
			slow.SpeedupRatio = 1e-300
			e, err := mocker.New(slow, simVocab())
			if err != nil {
				t.Fatal(err)
			}
			s.workers[1].eng = e // the prefill worker
		}, "sim: prefill-0: a step of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, BlockTokens: 512, KVBytesPerToken: 1 << 20}
			s, err := newSimulator(cfg, []bench.Request{long, {Arrival: time.Second, InputLength: 10, OutputLength: 1, HashIDs: []int64{9}}})
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(s)
			err = s.run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "MaxSimulatedTime") {
				t.Fatalf("error %v, want one containing %q and naming MaxSimulatedTime", err, tc.want)
			}
			out, _ := s.outcome()
			for i, r := range out.Results {
				if r.Error == "" || r.Start < 0 || r.TTFT < 0 || r.E2E < 0 || out.Duration < 0 {
					t.Errorf("request %d: %+v (run %v): want a failure, no negative time", i, r, out.Duration)
				}
			}
		})
	}
}
