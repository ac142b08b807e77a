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
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// runSim runs reqs on cfg and returns the simulator after the run.
func runSim(t *testing.T, cfg Config, reqs []bench.Request) *simulator {
	t.Helper()
	s, err := newSimulator(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// legWorkers lists the workers of request i's legs, in the order they were sent.
func legWorkers(s *simulator, i int) []string {
	var out []string
	for _, lg := range s.legs {
		if int(lg.req) == i {
			out = append(out, s.workers[lg.worker].name)
		}
	}
	return out
}

// checkDrained fails unless the run left nothing behind: the router tracks no request
// and lists only the live workers, every flow is done, and no live engine holds work or
// pinned blocks.
func checkDrained(t *testing.T, s *simulator) {
	t.Helper()
	rs := s.router.Stats()
	live := 0
	for _, w := range s.workers {
		if w.dead {
			continue
		}
		live++
		if est := w.eng.Stats(); w.eng.HasWork() || est.PinnedRequests != 0 || est.ActiveBlocks != 0 {
			t.Errorf("%s: engine left with work or blocks: %+v", w.name, est)
		}
	}
	if rs.ActiveRequests != 0 || len(rs.Workers) != live || s.applyErrs != 0 {
		t.Errorf("router: %d requests tracked, %d workers (%d live), %d batches not applied", rs.ActiveRequests, len(rs.Workers), live, s.applyErrs)
	}
	for i, st := range s.state {
		if st.flow != nil || !st.ended {
			t.Errorf("request %d: flow not done (%v) or not ended (%v)", i, st.flow != nil, st.ended)
		}
	}
}

// killWorkload is 4 requests of 200 distinct prompt tokens and 100 output tokens arriving
// together: round-robin routing puts requests 0 and 2 on worker-0, 1 and 3 on worker-1;
// on smallEngine each decode step takes about 5 ms, so they stream for about half a
// second.
func killWorkload() []bench.Request {
	reqs := make([]bench.Request, 4)
	for i := range reqs {
		reqs[i] = bench.Request{InputLength: 200, OutputLength: 100, HashIDs: []int64{int64(i + 1)}}
	}
	return reqs
}

func roundRobin(blockSize int) kv.Config {
	rc := kv.DefaultConfig(blockSize)
	rc.Policy = kv.PolicyRoundRobin
	return rc
}

// TestKillAggregated: a killed worker's streams migrate to the other worker and finish
// there (or fail, with migration off; or find no worker when every one was killed); a
// worker killed before the requests arrive gets none.
func TestKillAggregated(t *testing.T) {
	eng := smallEngine()
	noMigration := flow.DefaultConfig()
	noMigration.MigrationLimit = 0
	late := bench.Request{Arrival: time.Second, InputLength: 200, OutputLength: 4, HashIDs: []int64{9}}
	for _, tc := range []struct {
		name   string
		reqs   []bench.Request
		faults []Fault
		flow   flow.Config
		// want per request: error kind and worker list
		errs       []string
		legs       [][]string
		migrations map[messages.Fault]int
		decisions  int
	}{
		{
			name:       "streams migrate",
			reqs:       killWorkload(),
			faults:     []Fault{{At: 200 * time.Millisecond, Worker: "worker-0"}},
			errs:       []string{"", "", "", ""},
			legs:       [][]string{{"worker-0", "worker-1"}, {"worker-1"}, {"worker-0", "worker-1"}, {"worker-1"}},
			migrations: map[messages.Fault]int{messages.Fault_FAULT_WORKER_TERMINATED: 2},
			decisions:  6,
		},
		{
			name:       "migration off",
			reqs:       killWorkload(),
			faults:     []Fault{{At: 200 * time.Millisecond, Worker: "worker-0"}},
			flow:       noMigration,
			errs:       []string{ErrWorkerFailed, "", ErrWorkerFailed, ""},
			legs:       [][]string{{"worker-0"}, {"worker-1"}, {"worker-0"}, {"worker-1"}},
			migrations: map[messages.Fault]int{},
			decisions:  4,
		},
		{
			name:       "every worker killed",
			reqs:       append(killWorkload(), late),
			faults:     []Fault{{At: 200 * time.Millisecond, Worker: "worker-1"}, {At: 200 * time.Millisecond, Worker: "worker-0"}},
			errs:       []string{ErrNoWorkers, ErrNoWorkers, ErrNoWorkers, ErrNoWorkers, ErrNoWorkers},
			legs:       [][]string{{"worker-0"}, {"worker-1"}, {"worker-0"}, {"worker-1"}, nil},
			migrations: map[messages.Fault]int{},
			decisions:  4,
		},
		{
			name:       "killed before the arrivals",
			reqs:       killWorkload(),
			faults:     []Fault{{At: 0, Worker: "worker-0"}},
			errs:       []string{"", "", "", ""},
			legs:       [][]string{{"worker-1"}, {"worker-1"}, {"worker-1"}, {"worker-1"}},
			migrations: map[messages.Fault]int{},
			decisions:  4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: 2, Engine: eng, Router: roundRobin(eng.BlockSize), BlockTokens: 512, Faults: tc.faults, Flow: tc.flow}
			s := runSim(t, cfg, tc.reqs)
			out, st := s.outcome()
			for i, r := range out.Results {
				if r.Error != tc.errs[i] {
					t.Errorf("request %d: error %q (%s), want %q", i, r.Error, r.Detail, tc.errs[i])
				}
				if got := legWorkers(s, i); !slices.Equal(got, tc.legs[i]) {
					t.Errorf("request %d: legs on %v, want %v", i, got, tc.legs[i])
				}
				if r.Error != "" {
					continue
				}
				if r.OutputTokens != tc.reqs[i].OutputLength || len(r.ITL) != r.OutputTokens-1 || r.PromptTokens != tc.reqs[i].InputLength {
					t.Errorf("request %d: %d output tokens, %d gaps, %d prompt tokens", i, r.OutputTokens, len(r.ITL), r.PromptTokens)
				}
				if len(tc.legs[i]) > 1 && slices.Max(r.ITL) < flow.DefaultTerminatedGrace {
					t.Errorf("request %d: migrated, but no gap of the termination grace (%v): ITL max %v", i, flow.DefaultTerminatedGrace, slices.Max(r.ITL))
				}
			}
			if !reflect.DeepEqual(st.Migrations, tc.migrations) {
				t.Errorf("migrations %v, want %v", st.Migrations, tc.migrations)
			}
			if st.Decisions[DecisionAggregated] != tc.decisions {
				t.Errorf("decisions %v, want %d aggregated", st.Decisions, tc.decisions)
			}
			checkDrained(t, s)
		})
	}
}

// TestKillDisagg: faults of disaggregated serving. A prefill worker killed during its
// prefill leg, or while a decode engine reads its KV blocks, makes the request prefill
// again on the other prefill worker (a prefill retry, not a migration); a decode worker
// killed mid-stream makes it migrate. Every request finishes and nothing stays pinned.
func TestKillDisagg(t *testing.T) {
	eng := smallEngine()
	sp := eng.SpeedupRatio
	const kvBytes = 1 << 20
	// 2000 prompt tokens: chunks of 512, 512, 512 and 464 tokens, then 125 full blocks
	// of 1 MiB per token × 16 tokens at 64 GB/s × 2.
	prefill := 3*ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(464), sp)
	transfer := time.Duration(float64(2000*kvBytes) / (DefaultTransferBandwidth * sp) * float64(time.Second))
	long := bench.Request{InputLength: 2000, OutputLength: 50, HashIDs: []int64{1, 2, 3, 4}}
	for _, tc := range []struct {
		name            string
		decode, prefill int
		at              time.Duration
		victim          int // leg whose worker is killed (of the undisturbed run)
		retries         map[messages.Fault]int
		migrations      map[messages.Fault]int
		decisions       map[kv.DisaggDecision]int
		legs            int // legs sent (a decode leg goes once its prefill leg finished)
	}{
		{"prefill worker during its leg", 1, 2, prefill / 2, 0,
			map[messages.Fault]int{messages.Fault_FAULT_WORKER_TERMINATED: 1}, map[messages.Fault]int{},
			map[kv.DisaggDecision]int{kv.DisaggRemote: 2}, 3},
		{"prefill worker during the KV transfer", 1, 2, prefill + transfer/2, 0,
			map[messages.Fault]int{messages.Fault_FAULT_KV_TRANSFER: 1}, map[messages.Fault]int{},
			map[kv.DisaggDecision]int{kv.DisaggRemote: 2}, 4},
		{"the only prefill worker during the KV transfer", 1, 1, prefill + transfer/2, 0,
			map[messages.Fault]int{messages.Fault_FAULT_KV_TRANSFER: 1}, map[messages.Fault]int{},
			map[kv.DisaggDecision]int{kv.DisaggRemote: 1, kv.DisaggLocalNoPrefillWorkers: 1}, 3},
		{"decode worker mid-stream", 2, 1, prefill + transfer + 100*time.Millisecond, 1,
			map[messages.Fault]int{}, map[messages.Fault]int{messages.Fault_FAULT_WORKER_TERMINATED: 1},
			// The continuation (prompt and the tokens so far) is a new request for the
			// router: more than 1000 uncached tokens on the other decode worker, prefilled
			// remotely again.
			map[kv.DisaggDecision]int{kv.DisaggRemote: 2}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Workers: tc.decode, PrefillWorkers: tc.prefill, Engine: eng, BlockTokens: 512, KVBytesPerToken: kvBytes, Seed: 3}
			dry := runSim(t, cfg, []bench.Request{long})
			cfg.Faults = []Fault{{At: tc.at, Worker: legWorkers(dry, 0)[tc.victim]}}
			s := runSim(t, cfg, []bench.Request{long})
			out, st := s.outcome()
			r := out.Results[0]
			if r.Error != "" || r.OutputTokens != long.OutputLength || r.PromptTokens != long.InputLength {
				t.Fatalf("result %+v", r)
			}
			if r.TTFT <= dry.results[0].TTFT && tc.victim == 0 {
				t.Errorf("TTFT %v, not above the undisturbed %v", r.TTFT, dry.results[0].TTFT)
			}
			if !reflect.DeepEqual(st.PrefillRetries, tc.retries) || !reflect.DeepEqual(st.Migrations, tc.migrations) ||
				!reflect.DeepEqual(st.Decisions, tc.decisions) {
				t.Errorf("prefill retries %v, migrations %v, decisions %v; want %v, %v, %v",
					st.PrefillRetries, st.Migrations, st.Decisions, tc.retries, tc.migrations, tc.decisions)
			}
			if legs := legWorkers(s, 0); len(legs) != tc.legs || slices.Contains(legs[tc.victim+1:], cfg.Faults[0].Worker) {
				t.Errorf("legs on %v: want %d, none after the kill on %s", legs, tc.legs, cfg.Faults[0].Worker)
			}
			checkDrained(t, s)
		})
	}
}

// TestRequestTimeout: a client that gives up (Config.RequestTimeout) fails with
// bench.ErrTimeout at its deadline, and its flow cancels what still runs: the engine
// drops the request, and a decode leg cancelled during its KV transfer leaves no block
// pinned on the prefill engine.
func TestRequestTimeout(t *testing.T) {
	eng := smallEngine()
	sp := eng.SpeedupRatio
	prefill := 3*ms(mocker.PrefillMillis(512), sp) + ms(mocker.PrefillMillis(464), sp)
	transfer := time.Duration(float64(2000<<20) / (DefaultTransferBandwidth * sp) * float64(time.Second))
	for _, tc := range []struct {
		name           string
		prefillWorkers int
		timeout        time.Duration
	}{
		{"mid-stream", 0, 300 * time.Millisecond},
		{"before the first token", 0, prefill / 2},
		{"during the prefill leg", 1, prefill / 2},
		{"during the KV transfer", 1, prefill + transfer/2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := []bench.Request{
				{InputLength: 2000, OutputLength: 1000, HashIDs: []int64{1, 2, 3, 4}},
				{Arrival: 2 * time.Second, InputLength: 100, OutputLength: 5, HashIDs: []int64{9}},
			}
			cfg := Config{Workers: 1, PrefillWorkers: tc.prefillWorkers, Engine: eng, BlockTokens: 512, KVBytesPerToken: 1 << 20,
				RequestTimeout: tc.timeout}
			s := runSim(t, cfg, reqs)
			out, _ := s.outcome()
			if r := out.Results[0]; r.Error != bench.ErrTimeout || r.E2E != tc.timeout || !strings.Contains(r.Detail, tc.timeout.String()) {
				t.Errorf("long request: %+v, want %s at %v", r, bench.ErrTimeout, tc.timeout)
			}
			if r := out.Results[1]; r.Error != "" || r.OutputTokens != 5 {
				t.Errorf("short request: %+v", r)
			}
			checkDrained(t, s)
		})
	}
}

// TestFaultsKeepInvariants runs random workloads on random fleets with random kills and
// timeouts: every request ends once with a known kind, a finished one with all its
// tokens, the run is deterministic, and it leaves nothing behind.
func TestFaultsKeepInvariants(t *testing.T) {
	kinds := []string{"", ErrWorkerFailed, ErrNoWorkers, ErrAllBusy, bench.ErrTimeout}
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			reqs := sharedPrefixWorkload(60, 3, 2, 1+rng.IntN(3), 512, 5+rng.IntN(60), 40, seed)
			cfg := Config{Workers: 1 + rng.IntN(4), Engine: smallEngine(), BlockTokens: 512, Seed: seed,
				KVBytesPerToken: int64(rng.IntN(2)) << 20, EventDelay: time.Duration(rng.IntN(3)) * time.Millisecond}
			if rng.IntN(2) == 0 {
				cfg.PrefillWorkers = 1 + rng.IntN(2)
			}
			names := WorkerNames(cfg.Workers, cfg.PrefillWorkers)
			if rng.IntN(3) == 0 {
				cfg.RequestTimeout = time.Duration(500+rng.IntN(4000)) * time.Millisecond
			}
			if rng.IntN(3) == 0 {
				cfg.Flow = flow.DefaultConfig()
				cfg.Flow.MigrationLimit = rng.IntN(2)
			}
			for range rng.IntN(len(names) + 1) {
				cfg.Faults = append(cfg.Faults, Fault{At: time.Duration(rng.IntN(2000)) * time.Millisecond, Worker: names[rng.IntN(len(names))]})
			}
			ends := 0
			cfg.Progress = func(done, total int) { ends++ }
			s := runSim(t, cfg, reqs)
			out, st := s.outcome()
			if ends != len(reqs) {
				t.Errorf("%d ends reported for %d requests", ends, len(reqs))
			}
			for i, r := range out.Results {
				if !slices.Contains(kinds, r.Error) {
					t.Errorf("request %d: error %q: %s", i, r.Error, r.Detail)
				}
				if r.Error == "" && (r.OutputTokens != reqs[i].OutputLength || len(r.ITL) != r.OutputTokens-1) {
					t.Errorf("request %d: %d tokens, %d gaps, want %d", i, r.OutputTokens, len(r.ITL), reqs[i].OutputLength)
				}
			}
			checkDrained(t, s)
			cfg.Progress = nil
			again, st2, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			st.WallTime, st2.WallTime = 0, 0
			if !reflect.DeepEqual(out, again) || !reflect.DeepEqual(st, st2) {
				t.Fatalf("two runs differ: %+v\n%+v", st, st2)
			}
			t.Logf("%d+%d workers, faults %v, timeout %v: errors %v; migrations %v, prefill retries %v", cfg.Workers, cfg.PrefillWorkers,
				cfg.Faults, cfg.RequestTimeout, bench.Summarize(out).Errors, st.Migrations, st.PrefillRetries)
		})
	}
}

func TestFaultConfig(t *testing.T) {
	good := Config{Workers: 2, PrefillWorkers: 1, Engine: smallEngine()}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown worker", func(c *Config) { c.Faults = []Fault{{Worker: "worker-0"}} }, `Faults[0]: worker "worker-0": no such worker (the fleet's are decode-0 to decode-1, prefill-0)`},
		{"negative time", func(c *Config) { c.Faults = []Fault{{Worker: "decode-0"}, {At: -1, Worker: "decode-1"}} }, "Faults[1]: kill at -1ns"},
		{"unknown kind", func(c *Config) { c.Faults = []Fault{{Worker: "decode-0", Kind: 9}} }, "Faults[0]: FaultKind(9)"},
		{"negative timeout", func(c *Config) { c.RequestTimeout = -time.Second }, "RequestTimeout -1s"},
		{"negative migration limit", func(c *Config) { c.Flow = flow.DefaultConfig(); c.Flow.MigrationLimit = -1 }, "sim: Flow"},
		{"no credits", func(c *Config) { c.Flow = flow.DefaultConfig(); c.Flow.Credits = 0 }, "sim: Flow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, _, err := Run(context.Background(), cfg, []bench.Request{{InputLength: 10, OutputLength: 1, HashIDs: []int64{1}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Fault
		err  string
	}{
		{"worker-1@30s", Fault{At: 30 * time.Second, Worker: "worker-1"}, ""},
		{"prefill-0@1m30s", Fault{At: 90 * time.Second, Worker: "prefill-0"}, ""},
		{"decode-2@0s", Fault{Worker: "decode-2"}, ""},
		{"worker-1", Fault{}, "want WORKER@TIME"},
		{"@30s", Fault{}, "want WORKER@TIME"},
		{"worker-1@soon", Fault{}, `time "soon"`},
		{"worker-1@-1s", Fault{}, `time "-1s"`},
		{"worker-1@900000h", Fault{}, `time "900000h"`},
	} {
		got, err := ParseFault(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestReleaseWakesEngine: an engine that has no room for a waiting request while the
// KV blocks of a finished prefill leg are pinned goes idle, and must step again once the
// decode leg's transfer releases them (or a cancel frees blocks), not wait for the next
// request or, in a flow, for its stall timeout. On smallEngine a 3000-token prompt takes
// 188 of the 256 blocks: two do not fit at once.
func TestReleaseWakesEngine(t *testing.T) {
	eng := smallEngine()
	reqs := []bench.Request{
		{InputLength: 3000, OutputLength: 2, HashIDs: []int64{1, 2, 3, 4, 5, 6}},
		{InputLength: 3000, OutputLength: 2, HashIDs: []int64{11, 12, 13, 14, 15, 16}},
	}
	cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, BlockTokens: 512, KVBytesPerToken: 1 << 20}
	s := runSim(t, cfg, reqs)
	out, st := s.outcome()
	for i, r := range out.Results {
		if r.Error != "" || r.TTFT > 5*time.Second {
			t.Errorf("request %d: error %q (%s), TTFT %v: want its answer within seconds", i, r.Error, r.Detail, r.TTFT)
		}
	}
	if st.Decisions[kv.DisaggRemote] != 2 || len(st.PrefillRetries) != 0 {
		t.Errorf("decisions %v, prefill retries %v: want both remote, none retried", st.Decisions, st.PrefillRetries)
	}
	checkDrained(t, s)
}

func TestWorkerNames(t *testing.T) {
	for _, tc := range []struct {
		workers, prefill int
		names            []string
		described        string
	}{
		{1, 0, []string{"worker-0"}, "worker-0"},
		{3, 0, []string{"worker-0", "worker-1", "worker-2"}, "worker-0 to worker-2"},
		{2, 1, []string{"decode-0", "decode-1", "prefill-0"}, "decode-0 to decode-1, prefill-0"},
	} {
		if got := WorkerNames(tc.workers, tc.prefill); !slices.Equal(got, tc.names) {
			t.Errorf("%d+%d workers: names %v, want %v", tc.workers, tc.prefill, got, tc.names)
		}
		if got := DescribeWorkers(tc.workers, tc.prefill); got != tc.described {
			t.Errorf("%d+%d workers: %q, want %q", tc.workers, tc.prefill, got, tc.described)
		}
		s, err := newSimulator(Config{Workers: tc.workers, PrefillWorkers: tc.prefill, Engine: smallEngine()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range s.workers {
			if w.name != tc.names[i] {
				t.Errorf("%d+%d workers: worker %d is %s, want %s", tc.workers, tc.prefill, i, w.name, tc.names[i])
			}
		}
	}
}

// TestFaultAfterTheRun: a kill due after every request ended does not happen: it
// neither lengthens the run nor counts as a kill (Stats.SimulatedTime ends with the
// last request).
func TestFaultAfterTheRun(t *testing.T) {
	eng := smallEngine()
	cfg := Config{Workers: 2, Engine: eng, Router: roundRobin(eng.BlockSize), BlockTokens: 512,
		Faults: []Fault{{At: time.Hour, Worker: "worker-1"}}}
	out, st, err := Run(context.Background(), cfg, killWorkload())
	if err != nil {
		t.Fatal(err)
	}
	if st.SimulatedTime != out.Duration || st.SimulatedTime >= time.Hour {
		t.Errorf("simulated %v, run %v: want the run's end, not the kill's hour", st.SimulatedTime, out.Duration)
	}
	if want := []FaultReport{{Fault: cfg.Faults[0]}}; !reflect.DeepEqual(st.Faults, want) {
		t.Errorf("faults %+v, want %+v", st.Faults, want)
	}
	// A kill during the run strikes; a second kill of its worker, and one after the
	// run, do not.
	cfg.Faults = []Fault{{At: time.Hour, Worker: "worker-1"}, {At: 200 * time.Millisecond, Worker: "worker-0"},
		{At: 300 * time.Millisecond, Worker: "worker-0"}}
	out, st, err = Run(context.Background(), cfg, killWorkload())
	if err != nil {
		t.Fatal(err)
	}
	want := []FaultReport{{Fault: cfg.Faults[0]}, {Fault: cfg.Faults[1], Struck: true}, {Fault: cfg.Faults[2]}}
	if !reflect.DeepEqual(st.Faults, want) || st.SimulatedTime >= time.Hour || bench.Summarize(out).Succeeded != 4 {
		t.Errorf("faults %+v, simulated %v, summary %+v: want %+v, the run's end and every request answered", st.Faults, st.SimulatedTime,
			bench.Summarize(out), want)
	}
	if st.Migrations[messages.Fault_FAULT_WORKER_TERMINATED] != 2 {
		t.Errorf("migrations %v: want worker-0's two streams moved", st.Migrations)
	}
}
