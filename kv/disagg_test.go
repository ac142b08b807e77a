package kv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Role
		err  string
	}{
		{"", RoleAggregated, ""},
		{"aggregated", RoleAggregated, ""},
		{"prefill", RolePrefill, ""},
		{"decode", RoleDecode, ""},
		{"Prefill", 0, `kv: invalid worker role: "Prefill" (want aggregated, prefill or decode)`},
		{"both", 0, `kv: invalid worker role: "both"`},
	} {
		got, err := ParseRole(tc.in)
		if tc.err != "" {
			if !errors.Is(err, ErrInvalidRole) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRole(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.in != "" && got.Label() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.Label(), tc.in)
		}
	}
	if s := Role(9).Label(); s != "Role(9)" {
		t.Errorf("Role(9).Label() = %q", s)
	}
}

func TestDisaggConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*DisaggConfig)
		msg  string
	}{
		{"local", func(d *DisaggConfig) { d.MaxLocalPrefillTokens = -1 }, "Disagg.MaxLocalPrefillTokens -1"},
		{"queue", func(d *DisaggConfig) { d.MaxPrefillQueueTokens = -5 }, "Disagg.MaxPrefillQueueTokens -5"},
	} {
		cfg := DefaultConfig(4)
		tc.mod(&cfg.Disagg)
		if _, err := NewRouter(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %q", tc.name, err, tc.msg)
		}
	}
	d := DefaultConfig(4).Disagg
	if d.MaxLocalPrefillTokens != 1000 || d.MaxPrefillQueueTokens != 32768 || d.Enforce {
		t.Errorf("default disagg config %+v", d)
	}
	r, _ := NewRouter(DefaultConfig(4))
	if _, err := r.Register(WorkerSpec{ID: "w", BlockSize: 4, Role: Role(7)}); !errors.Is(err, ErrInvalidRole) ||
		!strings.Contains(err.Error(), `worker "w": Role(7)`) {
		t.Errorf("register with role 7: %v", err)
	}
}

// disaggBS is the block size of the disaggregation tests: prompts of n tokens are
// prompt(n) = 1..n, and MaxLocalPrefillTokens is 8 (two blocks).
const disaggBS = 4

func prompt(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i + 1)
	}
	return t
}

// fleetWorker is one worker of a test fleet: "d0:decode", "p1:prefill:down" (not
// ready), "a0" (aggregated).
func parseFleet(t *testing.T, r *Router, fleet string) {
	t.Helper()
	for _, w := range strings.Fields(fleet) {
		parts := strings.Split(w, ":")
		spec := WorkerSpec{ID: parts[0], BlockSize: disaggBS, TotalBlocks: 100, Ready: true, Epoch: 1}
		if len(parts) > 1 {
			role, err := ParseRole(parts[1])
			if err != nil {
				t.Fatal(err)
			}
			spec.Role = role
		}
		if len(parts) > 2 && parts[2] == "down" {
			spec.Ready = false
		}
		if _, err := r.Register(spec); err != nil {
			t.Fatal(err)
		}
	}
}

// cache makes worker hold the first n tokens of prompt(…) (whole blocks) in its KV cache.
func cache(t *testing.T, r *Router, worker string, n int) {
	t.Helper()
	toks := prompt(n)
	hashes := make([]uint64, n/disaggBS)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	rw := r.byName[worker]
	seq := rw.lastSeq + 1
	ev := Event{Kind: BlockStored, EngineHashes: hashes, TokenIDs: toks, BlockSize: disaggBS}
	if nd, err := r.ApplyBatch(worker, 1, seq, []Event{ev}); nd || err != nil {
		t.Fatalf("cache on %s: %v %v", worker, nd, err)
	}
}

// load puts an active request of n tokens (other tokens than prompt(…)), with its
// prefill not done, on worker.
func load(r *Router, worker, id string, n int) {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = uint32(90000 + i)
	}
	r.active.Add(id, r.byName[worker].id, SequenceHashes(toks, disaggBS, ""), int64(n), t0)
}

func TestDisaggDecisions(t *testing.T) {
	type want struct {
		kind     DisaggDecision
		decode   string
		prefill  string // "" unless remote
		uncached int64
		err      error
	}
	for _, tc := range []struct {
		name  string
		fleet string
		cfg   func(*Config)
		setup func(t *testing.T, r *Router)
		in    RouteInput
		want  want
	}{
		{name: "aggregated fleet", fleet: "a0 a1",
			in:   RouteInput{Tokens: prompt(40)},
			want: want{kind: DisaggAggregated, decode: "a0", uncached: 40}},
		{name: "remote", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40)},
			want: want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{name: "remote with an aggregated worker decoding", fleet: "a0 p0:prefill",
			in:   RouteInput{Tokens: prompt(40)},
			want: want{kind: DisaggRemote, decode: "a0", prefill: "p0", uncached: 40}},
		{name: "short prompt", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(8)},
			want: want{kind: DisaggLocalShortPrefill, decode: "d0", uncached: 8}},
		{name: "short uncached suffix: decode worker holds the prefix", fleet: "d0:decode p0:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "d0", 32) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggLocalShortPrefill, decode: "d0", uncached: 8}},
		{name: "one token over the local limit goes remote", fleet: "d0:decode p0:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "d0", 32) },
			in:    RouteInput{Tokens: prompt(41)},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 9}},
		{name: "local requested", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), LocalPrefill: true},
			want: want{kind: DisaggLocalRequested, decode: "d0", uncached: 40}},
		{name: "prefill worker not ready", fleet: "d0:decode p0:prefill:down",
			in:   RouteInput{Tokens: prompt(40)},
			want: want{kind: DisaggLocalNoPrefillWorkers, decode: "d0", uncached: 40}},
		{name: "prefill worker excluded", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), ExcludePrefill: []string{"p0"}},
			want: want{kind: DisaggLocalNoPrefillWorkers, decode: "d0", uncached: 40}},
		{name: "one prefill worker excluded, the other used", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "p0", 40) },
			in:    RouteInput{Tokens: prompt(40), ExcludePrefill: []string{"p0"}},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p1", uncached: 40}},
		{name: "enforce without prefill worker", fleet: "d0:decode p0:prefill:down",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(40)},
			want: want{err: ErrNoPrefillWorkers}},
		{name: "enforce, all prefill workers excluded", fleet: "d0:decode p0:prefill",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(40), ExcludePrefill: []string{"p0"}},
			want: want{err: ErrNoPrefillWorkers}},
		{name: "enforce keeps short prompts local", fleet: "d0:decode p0:prefill:down",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(8)},
			want: want{kind: DisaggLocalShortPrefill, decode: "d0", uncached: 8}},
		{name: "enforce honours a local request", fleet: "d0:decode p0:prefill:down",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(40), LocalPrefill: true},
			want: want{kind: DisaggLocalRequested, decode: "d0", uncached: 40}},
		{name: "prefill queue long", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { load(r, "p0", "x0", 24); load(r, "p1", "x1", 28) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggLocalPrefillQueue, decode: "d0", uncached: 40}},
		{name: "prefill queue at the limit is not long", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { load(r, "p0", "x0", 24); load(r, "p1", "x1", 20) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p1", uncached: 40}},
		{name: "the excluded worker's short queue does not count", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { load(r, "p0", "x0", 24) },
			in:    RouteInput{Tokens: prompt(40), ExcludePrefill: []string{"p1"}},
			want:  want{kind: DisaggLocalPrefillQueue, decode: "d0", uncached: 40}},
		{name: "queue limit 0 is off", fleet: "d0:decode p0:prefill",
			cfg:   func(c *Config) { c.Disagg.MaxPrefillQueueTokens = 0 },
			setup: func(t *testing.T, r *Router) { load(r, "p0", "x0", 400) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{name: "every prefill worker busy counts as a long queue", fleet: "d0:decode p0:prefill",
			cfg: func(c *Config) {
				c.Busy.PrefillTokens, c.Disagg.MaxPrefillQueueTokens = 10, 0
			},
			setup: func(t *testing.T, r *Router) { load(r, "p0", "x0", 12) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggLocalPrefillQueue, decode: "d0", uncached: 40}},
		{name: "prefill worker chosen KV-aware", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "p1", 32) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p1", uncached: 40}},
		{name: "decode worker chosen for load, not for its cached prefix", fleet: "d0:decode d1:decode p0:prefill",
			// Aggregated kv routing would take d0 (cost 12 against 20); for decode only
			// the blocks count (12 against 10).
			setup: func(t *testing.T, r *Router) { cache(t, r, "d0", 40); load(r, "d0", "x0", 8) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggRemote, decode: "d1", prefill: "p0", uncached: 40}},
		{name: "no decode worker: prefill workers serve aggregated", fleet: "d0:decode:down p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "p1", 32) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{kind: DisaggAggregated, decode: "p1", uncached: 8}},
		{name: "decode workers excluded: prefill workers serve aggregated", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), Exclude: []string{"d0"}},
			want: want{kind: DisaggAggregated, decode: "p0", uncached: 40}},
		{name: "decode workers excluded: a prefill worker this request failed on serves nothing", fleet: "d0:decode p0:prefill p1:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "p0", 40) },
			in:    RouteInput{Tokens: prompt(40), Exclude: []string{"d0"}, ExcludePrefill: []string{"p0"}},
			want:  want{kind: DisaggAggregated, decode: "p1", uncached: 40}},
		{name: "decode workers excluded, the only prefill worker failed", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), Exclude: []string{"d0"}, ExcludePrefill: []string{"p0"}},
			want: want{err: ErrNoWorkers}},
		{name: "enforce: no decode worker, prefill workers serve no whole request", fleet: "d0:decode:down p0:prefill",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(40)},
			want: want{err: ErrNoWorkers}},
		{name: "enforce: decode workers excluded, prefill workers serve no whole request", fleet: "d0:decode p0:prefill",
			cfg:  func(c *Config) { c.Disagg.Enforce = true },
			in:   RouteInput{Tokens: prompt(8), Exclude: []string{"d0"}},
			want: want{err: ErrNoWorkers}},
		{name: "decode workers all busy", fleet: "d0:decode p0:prefill",
			cfg:   func(c *Config) { c.Busy.KVUsage = 0.05 },
			setup: func(t *testing.T, r *Router) { load(r, "d0", "x0", 40) },
			in:    RouteInput{Tokens: prompt(40)},
			want:  want{err: ErrAllBusy}},
		{name: "nothing ready", fleet: "d0:decode:down p0:prefill:down",
			in:   RouteInput{Tokens: prompt(40)},
			want: want{err: ErrNoWorkers}},
		{name: "pinned decode worker taken though another is lighter", fleet: "d0:decode d1:decode p0:prefill",
			setup: func(t *testing.T, r *Router) { load(r, "d0", "x0", 8) },
			in:    RouteInput{Tokens: prompt(40), PinWorker: "d0"},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{name: "pinned decode worker holding the prompt prefills it locally", fleet: "d0:decode d1:decode p0:prefill",
			setup: func(t *testing.T, r *Router) { cache(t, r, "d1", 40); load(r, "d1", "x0", 40) },
			in:    RouteInput{Tokens: prompt(40), PinWorker: "d1"},
			want:  want{kind: DisaggLocalShortPrefill, decode: "d1", uncached: 0}},
		{name: "pinned busy decode worker still taken", fleet: "d0:decode p0:prefill",
			cfg:   func(c *Config) { c.Busy.KVUsage = 0.05 },
			setup: func(t *testing.T, r *Router) { load(r, "d0", "x0", 40) },
			in:    RouteInput{Tokens: prompt(40), PinWorker: "d0"},
			want:  want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{name: "a prefill worker is no pin: routed normally", fleet: "d0:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), PinWorker: "p0"},
			want: want{kind: DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{name: "an excluded pinned worker is no pin", fleet: "d0:decode d1:decode p0:prefill",
			in:   RouteInput{Tokens: prompt(40), PinWorker: "d0", Exclude: []string{"d0"}},
			want: want{kind: DisaggRemote, decode: "d1", prefill: "p0", uncached: 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(disaggBS)
			cfg.Policy = PolicyKV // the cases weigh workers by the KV cost (docs/reference.md §3)
			cfg.Disagg.MaxLocalPrefillTokens, cfg.Disagg.MaxPrefillQueueTokens = 8, 20
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			parseFleet(t, r, tc.fleet)
			if tc.setup != nil {
				tc.setup(t, r)
			}
			in := tc.in
			in.RequestID = "r"
			d, err := r.Route(in, t0, nil) // nil: ties go to the first worker
			if tc.want.err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("error %v, want %v", err, tc.want.err)
				}
				if _, ok := r.active.Worker("r"); ok {
					t.Fatal("a refused request is tracked")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pw := ""
			if d.Prefill != nil {
				pw = d.Prefill.WorkerID
			}
			if d.Disagg != tc.want.kind || d.WorkerID != tc.want.decode || pw != tc.want.prefill ||
				d.UncachedPrefillTokens != tc.want.uncached {
				t.Fatalf("decision %s on %s, prefill %q, uncached %d; want %s on %s, prefill %q, uncached %d",
					d.Disagg, d.WorkerID, pw, d.UncachedPrefillTokens,
					tc.want.kind, tc.want.decode, tc.want.prefill, tc.want.uncached)
			}
			checkTracking(t, r, "r", d, len(in.Tokens))
			if n := r.Stats().Decisions[d.Disagg]; n != 1 {
				t.Errorf("Stats.Decisions[%s] = %d, want 1", d.Disagg, n)
			}
		})
	}
}

// checkTracking checks that decision d of request id (isl tokens) is tracked as the
// decision says: a remote one as two legs, anything else as one request.
func checkTracking(t *testing.T, r *Router, id string, d Decision, isl int) {
	t.Helper()
	blocks := isl / disaggBS
	w, ok := r.active.Worker(id)
	if !ok || w != d.Worker {
		t.Fatalf("request tracked on %v (%v), want %v", w, ok, d.Worker)
	}
	seq := r.active.seqs[id]
	if r.active.requestBlocks(id) != blocks || seq.prefillTokens != d.PrefillTokens {
		t.Fatalf("decode leg: %d blocks, %d prefill tokens; want %d, %d", r.active.requestBlocks(id), seq.prefillTokens, blocks, d.PrefillTokens)
	}
	pw, pok := r.active.Worker(PrefillRequestID(id))
	if d.Disagg != DisaggRemote {
		if pok || d.Prefill != nil {
			t.Fatalf("%s decision with a prefill leg (%v, %+v)", d.Disagg, pok, d.Prefill)
		}
		if d.PrefillTokens != d.UncachedPrefillTokens {
			t.Fatalf("local prefill tokens %d, uncached %d", d.PrefillTokens, d.UncachedPrefillTokens)
		}
		return
	}
	p := d.Prefill
	if !pok || pw != p.Worker || p.RequestID != id+"#prefill" {
		t.Fatalf("prefill leg %+v tracked on %v (%v)", p, pw, pok)
	}
	if d.PrefillTokens != 0 {
		t.Fatalf("decode leg of a remote decision tracks %d prefill tokens, want 0", d.PrefillTokens)
	}
	pseq := r.active.seqs[p.RequestID]
	if wantTok := int64(isl - p.OverlapBlocks*disaggBS); pseq.prefillTokens != wantTok || p.PrefillTokens != wantTok ||
		r.active.requestBlocks(p.RequestID) != blocks {
		t.Fatalf("prefill leg: %d blocks, %d prefill tokens (decision %d); want %d, %d",
			r.active.requestBlocks(p.RequestID), pseq.prefillTokens, p.PrefillTokens, blocks, wantTok)
	}
}

// TestDisaggLoadFreedForBothLegs: each leg's load goes when its id is freed; freeing
// the request id frees a leg left behind; PrefillDone of the request covers its leg;
// re-routing an id and removing a worker free the old legs.
func TestDisaggLoadFreedForBothLegs(t *testing.T) {
	cfg := DefaultConfig(disaggBS)
	cfg.Disagg.MaxLocalPrefillTokens = 8
	r, _ := NewRouter(cfg)
	parseFleet(t, r, "d0:decode p0:prefill p1:prefill")
	var rng *rand.Rand // ties go to the first worker
	loads := func() string {
		var sb strings.Builder
		for _, w := range r.Stats().Workers {
			fmt.Fprintf(&sb, "%s=%d/%d/%d ", w.ID, w.ActiveRequests, w.ActiveBlocks, w.ActivePrefillTokens)
		}
		return strings.TrimSpace(sb.String())
	}
	expect := func(step, want string) {
		t.Helper()
		if got := loads(); got != want {
			t.Fatalf("%s: loads (requests/blocks/prefill tokens) %s, want %s", step, got, want)
		}
	}
	route := func(id string, in RouteInput) Decision {
		t.Helper()
		in.RequestID = id
		d, err := r.Route(in, t0, rng)
		if err != nil || d.Disagg != DisaggRemote {
			t.Fatalf("route %s: %+v %v", id, d, err)
		}
		return d
	}
	d := route("r1", RouteInput{Tokens: prompt(40)})
	expect("routed", "d0=1/10/0 p0=1/10/40 p1=0/0/0")
	if !r.Free(d.Prefill.RequestID) {
		t.Fatal("prefill leg not active")
	}
	expect("prefill leg freed", "d0=1/10/0 p0=0/0/0 p1=0/0/0")
	if !r.Free("r1") || r.Free("r1") || r.Free(d.Prefill.RequestID) {
		t.Fatal("Free reports wrongly")
	}
	expect("decode leg freed", "d0=0/0/0 p0=0/0/0 p1=0/0/0")

	route("r2", RouteInput{Tokens: prompt(40)})
	if !r.PrefillDone("r2") {
		t.Fatal("PrefillDone(r2) reports inactive")
	}
	expect("first token", "d0=1/10/0 p0=1/10/0 p1=0/0/0")
	r.Free("r2")
	expect("request freed with its leg", "d0=0/0/0 p0=0/0/0 p1=0/0/0")

	route("r3", RouteInput{Tokens: prompt(40)})
	d = route("r3", RouteInput{Tokens: prompt(40), ExcludePrefill: []string{"p0"}})
	if d.Prefill.WorkerID != "p1" {
		t.Fatalf("re-route with p0 excluded went to %s", d.Prefill.WorkerID)
	}
	expect("re-routed", "d0=1/10/0 p0=0/0/0 p1=1/10/40")
	if _, err := r.Route(RouteInput{RequestID: "r3", Tokens: prompt(40), LocalPrefill: true}, t0, rng); err != nil {
		t.Fatal(err)
	}
	expect("re-routed local", "d0=1/10/40 p0=0/0/0 p1=0/0/0")
	r.Free("r3")

	route("r4", RouteInput{Tokens: prompt(40)})
	if n, err := r.RemoveWorker("p0"); n != 1 || err != nil {
		t.Fatalf("RemoveWorker(p0) freed %d, %v", n, err)
	}
	expect("prefill worker removed", "d0=1/10/0 p1=0/0/0")
	r.Free("r4")

	// Both legs expire with the request.
	r2, _ := NewRouter(cfg)
	parseFleet(t, r2, "d0:decode p0:prefill")
	if _, err := r2.Route(RouteInput{RequestID: "old", Tokens: prompt(40)}, t0, rng); err != nil {
		t.Fatal(err)
	}
	if n := r2.Expire(t0.Add(DefaultMaxSequenceAge + time.Second)); n != (Expired{Stale: 2}) || r2.active.Len() != 0 {
		t.Fatalf("expired %+v, %d left", n, r2.active.Len())
	}
	if err := checkActiveInvariants(r.active); err != nil {
		t.Fatal(err)
	}
}

// TestDisaggRoleChange: a worker that re-registers with another role is routed by its
// new role at once, and a fleet that loses its last prefill and decode workers routes
// aggregated again.
func TestDisaggRoleChange(t *testing.T) {
	cfg := DefaultConfig(disaggBS)
	cfg.Disagg.MaxLocalPrefillTokens = 8
	r, _ := NewRouter(cfg)
	parseFleet(t, r, "a0 w1:prefill")
	rng := rand.New(rand.NewPCG(1, 2))
	route := func(id string) Decision {
		t.Helper()
		d, err := r.Route(RouteInput{RequestID: id, Tokens: prompt(40)}, t0, rng)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := route("r1"); d.Disagg != DisaggRemote || d.Prefill.WorkerID != "w1" {
		t.Fatalf("with w1 prefill: %+v", d)
	}
	roles := func() string {
		var s []string
		for _, w := range r.Stats().Workers {
			s = append(s, w.ID+"="+w.Role.Label())
		}
		return strings.Join(s, " ")
	}
	// w1 becomes a decode worker; its prefill leg stays tracked until freed.
	if _, err := r.Register(WorkerSpec{ID: "w1", BlockSize: disaggBS, TotalBlocks: 100, Ready: true, Epoch: 1, Role: RoleDecode}); err != nil {
		t.Fatal(err)
	}
	if got := roles(); got != "a0=aggregated w1=decode" {
		t.Fatalf("roles %s", got)
	}
	if d := route("r2"); d.Disagg != DisaggLocalNoPrefillWorkers {
		t.Fatalf("no prefill worker left: %+v", d)
	}
	if r.active.Load(r.byName["w1"].id).Sequences == 0 {
		t.Fatal("the prefill leg routed before the role change was dropped")
	}
	r.Free("r1")
	r.Free("r2")
	// w1 becomes aggregated: the fleet is aggregated again.
	if _, err := r.Register(WorkerSpec{ID: "w1", BlockSize: disaggBS, TotalBlocks: 100, Ready: true, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if d := route("r3"); d.Disagg != DisaggAggregated || d.Prefill != nil {
		t.Fatalf("aggregated fleet: %+v", d)
	}
	// A decode worker that leaves also ends disaggregated mode.
	parseFleet(t, r, "d9:decode")
	if !r.disaggregated() {
		t.Fatal("a decode worker must switch to disaggregated serving")
	}
	if _, err := r.RemoveWorker("d9"); err != nil {
		t.Fatal(err)
	}
	if r.disaggregated() || r.roleCount != [numRoles]int{2, 0, 0} {
		t.Fatalf("after d9 left: disaggregated %v, role counts %v", r.disaggregated(), r.roleCount)
	}
}

// TestDisaggStatsCounts: Stats.Decisions has every kind; OverlapBlocks counts the prefix
// hit of the worker that prefilled.
func TestDisaggStatsCounts(t *testing.T) {
	cfg := DefaultConfig(disaggBS)
	cfg.Disagg.MaxLocalPrefillTokens = 8
	r, _ := NewRouter(cfg)
	parseFleet(t, r, "d0:decode p0:prefill")
	cache(t, r, "p0", 24)
	rng := rand.New(rand.NewPCG(1, 2))
	for i, in := range []RouteInput{{Tokens: prompt(40)}, {Tokens: prompt(4)}, {Tokens: prompt(40), LocalPrefill: true}} {
		in.RequestID = fmt.Sprint("r", i)
		if _, err := r.Route(in, t0, rng); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	want := map[DisaggDecision]int64{DisaggAggregated: 0, DisaggRemote: 1, DisaggLocalShortPrefill: 1,
		DisaggLocalPrefillQueue: 0, DisaggLocalNoPrefillWorkers: 0, DisaggLocalRequested: 1}
	if fmt.Sprint(st.Decisions) != fmt.Sprint(want) {
		t.Fatalf("decisions %v, want %v", st.Decisions, want)
	}
	if st.Routed != 3 || st.PromptBlocks != 10+1+10 || st.OverlapBlocks != 6 {
		t.Fatalf("routed %d, prompt blocks %d, overlap blocks %d; want 3, 21, 6", st.Routed, st.PromptBlocks, st.OverlapBlocks)
	}
}

// TestAggregatedFleetUnchanged: with aggregated workers only, the disaggregation
// fields of a request change nothing: every decision is DisaggAggregated without a
// prefill leg, and the placements are those of the same calls without LocalPrefill and
// ExcludePrefill. (The scripts under testdata/scripts pin the placements themselves.)
func TestAggregatedFleetUnchanged(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		run := func(disaggFields bool) []string {
			cfg := DefaultConfig(disaggBS)
			cfg.Temperature = 0.3
			r, _ := NewRouter(cfg)
			for i := 0; i < 4; i++ {
				spec := WorkerSpec{ID: fmt.Sprint("w", i), BlockSize: disaggBS, TotalBlocks: 50, Ready: true, Epoch: 1}
				if disaggFields {
					role, _ := ParseRole("aggregated")
					spec.Role = role
				}
				if _, err := r.Register(spec); err != nil {
					t.Fatal(err)
				}
			}
			c := rand.New(rand.NewPCG(seed, 9))
			rng := rand.New(rand.NewPCG(seed, 10))
			var out []string
			for i := 0; i < 300; i++ {
				id := fmt.Sprint("r", c.IntN(40))
				if c.IntN(4) == 0 {
					r.Free(id)
					continue
				}
				in := RouteInput{RequestID: id, Tokens: prompt(4 + c.IntN(60))}
				if local := c.IntN(2) == 0; disaggFields {
					in.LocalPrefill, in.ExcludePrefill = local, []string{"w0"}
				}
				d, err := r.Route(in, t0, rng)
				if err != nil {
					t.Fatal(err)
				}
				if d.Disagg != DisaggAggregated || d.Prefill != nil || d.UncachedPrefillTokens != d.PrefillTokens {
					t.Fatalf("aggregated fleet decision %+v", d)
				}
				out = append(out, fmt.Sprint(d.WorkerID, d.OverlapBlocks, d.PrefillTokens))
			}
			return out
		}
		a, b := run(false), run(true)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("seed %d: placements differ with the disaggregation fields set", seed)
		}
	}
}

// TestDisaggRandomOps drives a mixed fleet with random registrations (roles changing),
// routes with every option, frees of either leg, removals and expiry, and checks after
// every step: the load tracking's invariants, the role counts, that every decision's
// workers have the roles it implies, and that load returns to zero at the end.
func TestDisaggRandomOps(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			c := rand.New(rand.NewPCG(seed, 7))
			rng := rand.New(rand.NewPCG(seed, 8))
			cfg := DefaultConfig(disaggBS)
			cfg.Disagg = DisaggConfig{MaxLocalPrefillTokens: 8, MaxPrefillQueueTokens: 40, Enforce: seed == 2}
			cfg.MaxSequenceAge = 50 * time.Second
			r, _ := NewRouter(cfg)
			names := []string{"w0", "w1", "w2", "w3", "w4"}
			now := t0
			kinds := map[string]int{}
			for step := 0; step < 3000; step++ {
				name := names[c.IntN(len(names))]
				switch op := c.IntN(10); {
				case op < 2:
					if _, err := r.Register(WorkerSpec{ID: name, BlockSize: disaggBS, TotalBlocks: 40,
						Ready: c.IntN(5) != 0, Epoch: 1, Role: Role(c.IntN(int(numRoles)))}); err != nil {
						t.Fatal(err)
					}
				case op < 6:
					in := RouteInput{RequestID: fmt.Sprint("r", c.IntN(10)), Tokens: prompt(c.IntN(60)),
						LocalPrefill: c.IntN(6) == 0}
					if c.IntN(4) == 0 {
						in.Exclude = []string{names[c.IntN(len(names))]}
					}
					if c.IntN(3) == 0 {
						in.ExcludePrefill = []string{names[c.IntN(len(names))]}
					}
					d, err := r.Route(in, now, rng)
					if err != nil {
						if !errors.Is(err, ErrNoWorkers) && !errors.Is(err, ErrAllBusy) && !errors.Is(err, ErrNoPrefillWorkers) {
							t.Fatalf("step %d: %v", step, err)
						}
						kinds[err.Error()[:12]]++
						continue
					}
					kinds[d.Disagg.Label()]++
					checkRoles(t, r, step, in, d)
					checkTracking(t, r, in.RequestID, d, len(in.Tokens))
				case op < 8:
					id := fmt.Sprint("r", c.IntN(10))
					switch c.IntN(3) {
					case 0:
						r.Free(id)
					case 1:
						r.Free(PrefillRequestID(id))
					default:
						r.PrefillDone(id)
					}
				case op < 9:
					_, _ = r.RemoveWorker(name)
				default:
					now = now.Add(time.Duration(c.IntN(30)) * time.Second)
					r.Expire(now)
				}
				if err := checkActiveInvariants(r.active); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				var counts [numRoles]int
				for _, rw := range r.workers {
					if rw != nil {
						counts[rw.role]++
					}
				}
				if counts != r.roleCount {
					t.Fatalf("step %d: role counts %v, workers say %v", step, r.roleCount, counts)
				}
			}
			for _, k := range []DisaggDecision{DisaggAggregated, DisaggRemote, DisaggLocalShortPrefill, DisaggLocalRequested,
				DisaggLocalNoPrefillWorkers} {
				if kinds[k.Label()] == 0 && !((k == DisaggLocalNoPrefillWorkers || k == DisaggAggregated) && cfg.Disagg.Enforce) {
					t.Errorf("no %s decision in %v", k, kinds)
				}
			}
			for _, n := range names {
				_, _ = r.RemoveWorker(n)
			}
			if r.active.Len() != 0 || r.active.Blocks() != 0 {
				t.Fatalf("after removing every worker: %d requests, %d blocks active", r.active.Len(), r.active.Blocks())
			}
		})
	}
}

// checkRoles checks that a decision's workers have the roles it implies.
func checkRoles(t *testing.T, r *Router, step int, in RouteInput, d Decision) {
	t.Helper()
	role := r.workers[d.Worker].role
	if excluded(in.Exclude, d.WorkerID) {
		t.Fatalf("step %d: excluded worker %s chosen", step, d.WorkerID)
	}
	switch {
	case !r.disaggregated():
		if d.Disagg != DisaggAggregated {
			t.Fatalf("step %d: %s decision in an aggregated fleet", step, d.Disagg)
		}
	case d.Disagg == DisaggAggregated:
		if role != RolePrefill || r.cfg.Disagg.Enforce || excluded(in.ExcludePrefill, d.WorkerID) {
			t.Fatalf("step %d: aggregated fallback on %v worker %s (enforce %v, prefill excluded %v)", step, role, d.WorkerID,
				r.cfg.Disagg.Enforce, in.ExcludePrefill)
		}
	case role == RolePrefill:
		t.Fatalf("step %d: %s decision decodes on prefill worker %s", step, d.Disagg, d.WorkerID)
	case d.Disagg == DisaggRemote:
		pr := r.workers[d.Prefill.Worker].role
		if pr != RolePrefill || excluded(in.ExcludePrefill, d.Prefill.WorkerID) {
			t.Fatalf("step %d: prefill leg on %s (%v)", step, d.Prefill.WorkerID, pr)
		}
	case d.Disagg == DisaggLocalNoPrefillWorkers && r.cfg.Disagg.Enforce:
		t.Fatalf("step %d: local fallback despite Enforce", step)
	}
}

// TestDisaggPoolsCycleSeparately: with round-robin, the decode and prefill pools each
// follow their own cycle.
func TestDisaggPoolsCycleSeparately(t *testing.T) {
	cfg := DefaultConfig(disaggBS)
	cfg.Policy = PolicyRoundRobin
	cfg.Disagg.MaxLocalPrefillTokens = 8
	r, _ := NewRouter(cfg)
	parseFleet(t, r, "d0:decode d1:decode p0:prefill p1:prefill")
	var got []string
	for i := 0; i < 4; i++ {
		d, err := r.Route(RouteInput{RequestID: fmt.Sprint("r", i), Tokens: prompt(40)}, t0, nil)
		if err != nil || d.Disagg != DisaggRemote {
			t.Fatalf("route %d: %+v %v", i, d, err)
		}
		got = append(got, d.WorkerID+"+"+d.Prefill.WorkerID)
	}
	if want := "d0+p0 d1+p1 d0+p0 d1+p1"; strings.Join(got, " ") != want {
		t.Fatalf("placements %v, want %s", got, want)
	}
}
