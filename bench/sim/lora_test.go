package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// loraEngine is smallEngine with maxLoras adapter slots and 100 ms adapter loads (50 ms
// at its speedup ratio of 2).
func loraEngine(maxLoras int) mocker.Config {
	c := smallEngine()
	c.MaxLoras, c.LoraLoadMillis = maxLoras, 100
	return c
}

// loraReq is a 200-token request (four hash ids of 64 tokens) under adapter lora.
func loraReq(at time.Duration, lora string, out int, ids ...int64) bench.Request {
	return bench.Request{Arrival: at, InputLength: 200, OutputLength: out, HashIDs: ids, Lora: lora}
}

// TestLoraTiming checks adapter loads against the timing model on one worker: a load
// delays the request's first token by the load time, a held adapter costs nothing, a
// request whose adapter has no free slot waits until the slot's adapter is unused, and
// the KV of one prompt under two adapters is not shared.
func TestLoraTiming(t *testing.T) {
	eng := loraEngine(1)
	sp := eng.SpeedupRatio
	load := ms(100, sp)
	prefill := ms(mocker.PrefillMillis(200), sp)
	for _, tc := range []struct {
		name     string
		maxLoras int
		reqs     []bench.Request
		// ttft per request; -1: checked by check
		ttft   []time.Duration
		cached []int
		stats  LoraStats
		check  func(t *testing.T, out bench.Outcome)
	}{
		{
			name:     "a load delays the first token",
			maxLoras: 1,
			reqs:     []bench.Request{loraReq(0, "a", 2, 1, 2, 3, 4)},
			ttft:     []time.Duration{load + prefill},
			cached:   []int{0},
			stats:    LoraStats{Loads: 1, Misses: 1},
		},
		{
			name:     "a held adapter is a hit",
			maxLoras: 1,
			reqs:     []bench.Request{loraReq(0, "a", 2, 1, 2, 3, 4), loraReq(5*time.Second, "a", 2, 5, 6, 7, 8)},
			ttft:     []time.Duration{load + prefill, prefill},
			cached:   []int{0, 0},
			stats:    LoraStats{Loads: 1, Hits: 1, Misses: 1},
		},
		{
			name:     "the base model needs no adapter",
			maxLoras: 1,
			reqs:     []bench.Request{loraReq(0, "", 2, 1, 2, 3, 4)},
			ttft:     []time.Duration{prefill},
			cached:   []int{0},
		},
		{
			// b finds the only slot's adapter in use: it waits for a's request to end,
			// then a is evicted and b loaded.
			name:     "every slot in use: the second adapter waits",
			maxLoras: 1,
			reqs:     []bench.Request{loraReq(0, "a", 4, 1, 2, 3, 4), loraReq(0, "b", 2, 5, 6, 7, 8)},
			ttft:     []time.Duration{load + prefill, -1},
			cached:   []int{0, 0},
			stats:    LoraStats{Loads: 2, Evictions: 1, Misses: 2, Waited: 1},
			check: func(t *testing.T, out bench.Outcome) {
				if a, b := out.Results[0], out.Results[1]; b.TTFT != a.E2E+load+prefill {
					t.Errorf("b's TTFT %v, want a's end %v + a load + its prefill = %v", b.TTFT, a.E2E, a.E2E+load+prefill)
				}
			},
		},
		{
			// The same prompt under a, b, a again and the base model: only a's second
			// request finds its blocks (12 full blocks of 16 of its 200 tokens).
			name:     "an adapter's KV is its own",
			maxLoras: 2,
			reqs: []bench.Request{loraReq(0, "a", 2, 1, 2, 3, 4), loraReq(5*time.Second, "b", 2, 1, 2, 3, 4),
				loraReq(10*time.Second, "a", 2, 1, 2, 3, 4), loraReq(15*time.Second, "", 2, 1, 2, 3, 4)},
			ttft:   []time.Duration{load + prefill, load + prefill, ms(mocker.PrefillMillis(8), sp), prefill},
			cached: []int{0, 0, 192, 0},
			stats:  LoraStats{Loads: 2, Hits: 1, Misses: 2},
		},
		{
			// A load waits for the step in flight, and the engine's next step for the load:
			// a arrives during the first 512-token chunk of the base request's 1000-token
			// prompt, so the load runs after that chunk and before the second one.
			name:     "a load stops the engine",
			maxLoras: 1,
			reqs: []bench.Request{{InputLength: 1000, OutputLength: 3, HashIDs: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
				loraReq(time.Millisecond, "a", 2, 17, 18, 19, 20)},
			ttft:   []time.Duration{-1, -1},
			cached: []int{0, 0},
			stats:  LoraStats{Loads: 1, Misses: 1},
			check: func(t *testing.T, out bench.Outcome) {
				base, a := out.Results[0], out.Results[1]
				if least := ms(mocker.PrefillMillis(512), sp) + load + ms(mocker.PrefillMillis(488), sp); base.TTFT < least {
					t.Errorf("the base request's TTFT %v: want at least its first chunk, the load and its second chunk, %v", base.TTFT, least)
				}
				if a.Start+a.TTFT <= base.TTFT {
					t.Errorf("a's first token at %v, before the base request's at %v", a.Start+a.TTFT, base.TTFT)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := eng
			e.MaxLoras = tc.maxLoras
			out, st, err := Run(context.Background(), Config{Workers: 1, Engine: e, BlockTokens: 64, Seed: 1}, tc.reqs)
			if err != nil {
				t.Fatal(err)
			}
			var end time.Duration
			for i, r := range out.Results {
				if r.Error != "" {
					t.Fatalf("request %d: %s: %s", i, r.Error, r.Detail)
				}
				if r.Lora != tc.reqs[i].Lora {
					t.Errorf("request %d: result names adapter %q, want %q", i, r.Lora, tc.reqs[i].Lora)
				}
				if tc.ttft[i] >= 0 && r.TTFT != tc.ttft[i] {
					t.Errorf("request %d: TTFT %v, want %v", i, r.TTFT, tc.ttft[i])
				}
				if r.CachedTokens != tc.cached[i] {
					t.Errorf("request %d: %d cached tokens, want %d", i, r.CachedTokens, tc.cached[i])
				}
				end = max(end, r.Start+r.E2E)
			}
			if st.Lora != tc.stats {
				t.Errorf("stats %+v, want %+v", st.Lora, tc.stats)
			}
			// Heartbeats do not lengthen the run.
			if st.SimulatedTime != end {
				t.Errorf("simulated time %v, want the last answer's end %v", st.SimulatedTime, end)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}

// TestLoraRouting: two adapters alternate on two workers of one slot each. A router that
// minds adapters learns (from the placements it sends and the workers' registrations)
// which worker holds which and loads each once; one that ignores them loads again and
// again, and its requests wait for the loads.
func TestLoraRouting(t *testing.T) {
	var reqs []bench.Request
	for i := range 40 {
		lora := "a"
		if i%2 == 1 {
			lora = "b"
		}
		id := int64(4 * i)
		reqs = append(reqs, loraReq(time.Duration(i)*500*time.Millisecond, lora, 4, id, id+1, id+2, id+3))
	}
	run := func(ignore bool) (bench.Summary, Stats) {
		t.Helper()
		eng := loraEngine(1)
		rc := kv.DefaultConfig(eng.BlockSize)
		rc.IgnoreAdapters = ignore
		out, st, err := Run(context.Background(), Config{Workers: 2, Engine: eng, Router: rc, BlockTokens: 64, Seed: 3}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		s := bench.Summarize(out)
		if s.Failed != 0 {
			t.Fatalf("ignore %v: %d failed: %v", ignore, s.Failed, s.Errors)
		}
		return s, st
	}
	aware, awareSt := run(false)
	ignoring, ignoringSt := run(true)
	if awareSt.Lora != (LoraStats{Loads: 2, Hits: 38, Misses: 2}) {
		t.Errorf("adapter-aware routing: %+v, want 2 loads and 38 hits", awareSt.Lora)
	}
	if ignoringSt.Lora.Loads < 10 || ignoringSt.Lora.Unplanned != 0 {
		t.Errorf("routing that ignores adapters: %+v, want at least 10 loads, all asked for", ignoringSt.Lora)
	}
	if aware.Lora.TTFT.Mean >= ignoring.Lora.TTFT.Mean {
		t.Errorf("mean TTFT %v ms (aware) against %v ms (ignoring): want the aware router's lower", aware.Lora.TTFT.Mean, ignoring.Lora.TTFT.Mean)
	}
}

// TestLoraRegistration: a worker reports the adapters its engine holds, so the router
// still knows them long after its own placements stopped counting (kv.LoraPlacedTTL):
// asked for the adapter then, it weighs no load on the worker that holds it and one on
// the other.
func TestLoraRegistration(t *testing.T) {
	reqs := []bench.Request{loraReq(0, "a", 2, 1, 2, 3, 4), loraReq(3*kv.LoraPlacedTTL, "", 2, 5, 6, 7, 8)}
	s, err := newSimulator(Config{Workers: 2, Engine: loraEngine(1), BlockTokens: 64, Seed: 1}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	holder := s.workers[s.legs[0].worker].name
	prompt, err := bench.Tokens(reqs[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.router.Route(kv.RouteInput{RequestID: "probe", Tokens: prompt, LoraName: "a", LoraOnDemand: true,
		LoraPath: LoraPath("a"), Explain: true}, simBase.Add(s.now+time.Second), s.rng)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Candidates) != 2 {
		t.Fatalf("%d candidates, want 2", len(d.Candidates))
	}
	for _, c := range d.Candidates {
		load := false
		for _, term := range c.Terms {
			load = load || term.Name == "adapter_ms"
		}
		if want := c.WorkerID != holder; load != want {
			t.Errorf("%s (the holder is %s): a load weighed %v, want %v", c.WorkerID, holder, load, want)
		}
	}
}

func TestLoraConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "Heartbeat"},
		{"heartbeat of a day", func(c *Config) { c.Heartbeat = 24 * time.Hour }, "Heartbeat"},
		{"more slots than a router takes", func(c *Config) { c.Engine.MaxLoras = MaxLoras + 1 }, "Engine.MaxLoras 4097"},
		{"negative slots", func(c *Config) { c.Engine.MaxLoras = -1 }, "Engine"},
		{"negative load time", func(c *Config) { c.Engine.LoraLoadMillis = -1 }, "Engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 2, Engine: loraEngine(2)}
			tc.edit(&cfg)
			if _, _, err := Run(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v: want one naming %s", err, tc.field)
			}
		})
	}
}

// TestLoraFaultsKeepInvariants: adapter requests on few slots, with adapter-blind routing
// or not, disaggregated or not, with workers killed and clients giving up: every request
// ends (no leg is left waiting for a slot), nothing is left behind, and two runs agree.
func TestLoraFaultsKeepInvariants(t *testing.T) {
	kinds := []string{"", ErrWorkerFailed, ErrNoWorkers, ErrAllBusy, bench.ErrTimeout}
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 16))
			reqs := sharedPrefixWorkload(80, 3, 1, 1+rng.IntN(2), 512, 5+rng.IntN(40), 60, seed)
			if err := bench.AssignLoras(reqs, bench.LoraSpec{Adapters: 2 + rng.IntN(8), Zipf: rng.Float64() * 2, BaseFraction: 0.2}, seed); err != nil {
				t.Fatal(err)
			}
			eng := loraEngine(1 + rng.IntN(2))
			rc := kv.DefaultConfig(eng.BlockSize)
			rc.IgnoreAdapters = rng.IntN(2) == 0
			cfg := Config{Workers: 1 + rng.IntN(4), Engine: eng, Router: rc, BlockTokens: 512, Seed: seed,
				EventDelay: time.Duration(rng.IntN(3)) * time.Millisecond, Heartbeat: time.Duration(100+rng.IntN(1000)) * time.Millisecond}
			if rng.IntN(3) == 0 {
				cfg.PrefillWorkers = 1 + rng.IntN(2)
			}
			names := WorkerNames(cfg.Workers, cfg.PrefillWorkers)
			if rng.IntN(3) == 0 {
				cfg.RequestTimeout = time.Duration(300+rng.IntN(3000)) * time.Millisecond
			}
			for range rng.IntN(len(names)) {
				cfg.Faults = append(cfg.Faults, Fault{At: time.Duration(rng.IntN(1500)) * time.Millisecond, Worker: names[rng.IntN(len(names))]})
			}
			s := runSim(t, cfg, reqs)
			out, st := s.outcome()
			for i, r := range out.Results {
				if !slices.Contains(kinds, r.Error) {
					t.Errorf("request %d: error %q: %s", i, r.Error, r.Detail)
				}
			}
			for _, w := range s.workers {
				for _, slot := range w.lora.wait {
					if s.legs[slot].state == legLoraWait {
						t.Errorf("%s: leg %d still waits for a slot", w.name, slot)
					}
				}
			}
			if st.Lora.Loads == 0 || st.Lora.Waited > st.Lora.Misses {
				t.Errorf("adapter stats %+v: want loads, and slot waits among the misses", st.Lora)
			}
			checkDrained(t, s)
			again, st2, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			st.WallTime, st2.WallTime = 0, 0
			if !reflect.DeepEqual(out, again) || !reflect.DeepEqual(st, st2) {
				t.Fatalf("two runs differ: %+v\n%+v", st, st2)
			}
			t.Logf("%d+%d workers, %d slots, ignore %v, faults %v: errors %v; %+v", cfg.Workers, cfg.PrefillWorkers, eng.MaxLoras,
				rc.IgnoreAdapters, cfg.Faults, bench.Summarize(out).Errors, st.Lora)
		})
	}
}
