package kv

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestTierFraction(t *testing.T) {
	rate := DefaultProfile().PrefillTokensPerSecond()
	tests := []struct {
		name           string
		bpt, rate, bw  float64
		want, tolerate float64
	}{
		// docs/reference.md §9.2's figures: the mock model and Llama-3.1-8B (131,072 B/token)
		// at the default profile's 48,434 tokens/s.
		{"host 25 GB/s", 131072, rate, DefaultHostGBps, 0.7461, 1e-4},
		{"remote 10 GB/s", 131072, rate, DefaultRemoteGBps, 0.3652, 1e-4},
		{"disk 5 GB/s is slower than recomputing", 131072, rate, DefaultDiskGBps, 0, 0},
		{"free transfer", 131072, rate, math.Inf(1), 0, 0},
		{"no bandwidth", 131072, rate, 0, 0, 0},
		{"no rate", 131072, 0, 25, 0, 0},
		{"NaN bandwidth", 131072, rate, math.NaN(), 0, 0},
		{"tiny model", 1, rate, 25, 1, 1e-5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TierFraction(tt.bpt, tt.rate, tt.bw); math.Abs(got-tt.want) > tt.tolerate || math.IsNaN(got) {
				t.Errorf("TierFraction = %v, want %v ± %v", got, tt.want, tt.tolerate)
			}
		})
	}
	if got := DefaultProfile().PrefillTokensPerSecond(); math.Abs(got-48434) > 1 {
		t.Errorf("default prefill rate %v tokens/s, want about 48,434", got)
	}
	d := DefaultTierCredit()
	if c := DefaultConfig(16).TierCredit; c != d || c.Host <= c.Remote || c.Remote <= c.Disk {
		t.Errorf("DefaultConfig's credit %+v, want DefaultTierCredit %+v ordered host > remote > disk", c, d)
	}
	if c := TierCreditsFor(0, DefaultProfile(), DefaultTierBandwidth()); c != d {
		t.Errorf("no KV size: %+v, want the default model's %+v", c, d)
	}
}

func TestTierCreditValidate(t *testing.T) {
	for _, c := range []TierCredit{{Host: -0.1}, {Disk: 1.5}, {Remote: math.NaN()}} {
		cfg := DefaultConfig(16)
		cfg.TierCredit = c
		if _, err := NewRouter(cfg); err == nil {
			t.Errorf("NewRouter accepted TierCredit %+v", c)
		}
	}
	r, err := NewRouter(DefaultConfig(16))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetTierCredit(TierCredit{Host: 2}); err == nil {
		t.Error("SetTierCredit accepted a host credit of 2")
	}
	if err := r.SetTierCredit(TierCredit{Host: 1, Disk: 0.5}); err != nil || r.TierCredit() != (TierCredit{Host: 1, Disk: 0.5}) {
		t.Errorf("SetTierCredit: %v, %+v", err, r.TierCredit())
	}
}

// tierModel is the naive reference of one node's inventory: hash → set of tiers.
type tierModel map[uint64]uint8

// TestTierIndexModel checks the tier index against a map model on seeded random
// streams of snapshots and in-order batches on a few nodes, with write-through (a block in
// several tiers), removals of absent blocks and changes of no tier.
func TestTierIndexModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		x := NewTierIndex()
		nodes := []string{"n0", "n1", "n2"}
		models := map[string]tierModel{}
		seqs := map[string]uint64{}
		for step := 0; step < 300; step++ {
			node := nodes[rng.IntN(len(nodes))]
			snap := seqs[node] == 0 || rng.IntN(20) == 0
			seqs[node]++
			inv := Inventory{Epoch: 1, Seq: seqs[node], Snapshot: snap}
			if snap {
				models[node] = tierModel{}
			}
			m := models[node]
			for c := rng.IntN(4); c >= 0; c-- {
				ch := TierChange{Tier: Tier(rng.IntN(NumTiers + 1)), Removed: rng.IntN(3) == 0}
				for k := rng.IntN(8); k >= 0; k-- {
					ch.SeqHashes = append(ch.SeqHashes, uint64(rng.IntN(40)))
				}
				inv.Changes = append(inv.Changes, ch)
				if ch.Tier < TierHost || ch.Tier > TierRemote {
					continue
				}
				for _, h := range ch.SeqHashes {
					if ch.Removed {
						m[h] &^= 1 << ch.Tier
					} else {
						m[h] |= 1 << ch.Tier
					}
				}
			}
			if x.Apply(node, inv) {
				t.Fatalf("seed %d step %d: in-order batch asked for a snapshot", seed, step)
			}
		}
		entries := 0
		for _, st := range x.Stats() {
			var perTier [NumTiers]int
			for h := uint64(0); h < 40; h++ {
				want := models[st.Node][h]
				if got := x.Tiers(st.Node, h); got != want {
					t.Fatalf("seed %d: node %s hash %d tiers %03b, model %03b", seed, st.Node, h, got, want)
				}
				for tr := TierHost; tr <= TierRemote; tr++ {
					if want&(1<<tr) != 0 {
						perTier[tr]++
					}
				}
				if want != 0 {
					entries++
				}
			}
			if st.Blocks != perTier {
				t.Fatalf("seed %d: node %s per-tier %v, model %v", seed, st.Node, st.Blocks, perTier)
			}
		}
		if x.entries != entries {
			t.Fatalf("seed %d: entries %d, model %d", seed, x.entries, entries)
		}
	}
}

func TestTierRun(t *testing.T) {
	hashes := []uint64{11, 12, 13, 14, 15, 16}
	x := NewTierIndex()
	own := x.addWorker("own")
	x.Apply("own", Inventory{Epoch: 1, Seq: 1, Snapshot: true, Changes: []TierChange{
		{Tier: TierDisk, SeqHashes: []uint64{12, 13}}, {Tier: TierHost, SeqHashes: []uint64{13, 16}}}})
	x.Apply("peer", Inventory{Epoch: 1, Seq: 1, Snapshot: true, ServesRemote: true, Changes: []TierChange{
		{Tier: TierHost, SeqHashes: []uint64{11, 14}}}})
	x.Apply("private", Inventory{Epoch: 1, Seq: 1, Snapshot: true, Changes: []TierChange{
		{Tier: TierHost, SeqHashes: []uint64{11, 12, 13, 14, 15, 16}}}})
	tests := []struct {
		name string
		slot int32
		gpu  int
		want [NumTiers]int // none, host, disk, remote
	}{
		{"own tiers then a remote node's, to the first block held nowhere", own, 0, [NumTiers]int{0, 1, 1, 2}},
		{"after a GPU hit", own, 2, [NumTiers]int{0, 1, 0, 1}},
		{"a block beyond the gap does not count", own, 4, [NumTiers]int{}},
		{"GPU hit of the whole prompt", own, 6, [NumTiers]int{}},
		{"no node: remote blocks only", -1, 0, [NumTiers]int{0, 0, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x.beginRoute()
			if got := x.run(tt.slot, hashes, tt.gpu, false); got != tt.want {
				t.Errorf("run = %v, want %v", got, tt.want)
			}
			// memoized: the same answer twice in one route
			if got := x.run(tt.slot, hashes, tt.gpu, false); got != tt.want {
				t.Errorf("memoized run = %v, want %v", got, tt.want)
			}
		})
	}
	// The memo does not outlive a route.
	x.Apply("own", Inventory{Epoch: 1, Seq: 2, Changes: []TierChange{{Tier: TierHost, SeqHashes: []uint64{15}}}})
	x.beginRoute()
	if got := x.run(own, hashes, 4, false); got != ([NumTiers]int{0, 2, 0, 0}) {
		t.Errorf("after a batch: run = %v, want 2 host blocks", got)
	}
}

// TestTierRunRemoteOverDisk: a block on the worker's own disk that another node serving
// remote tiers holds counts at the faster of the two copies.
func TestTierRunRemoteOverDisk(t *testing.T) {
	hashes := []uint64{21, 22, 23}
	x := NewTierIndex()
	own := x.addWorker("own")
	x.Apply("own", Inventory{Epoch: 1, Seq: 1, Snapshot: true, ServesRemote: true, Changes: []TierChange{
		{Tier: TierDisk, SeqHashes: []uint64{21, 22, 23}}}})
	x.Apply("peer", Inventory{Epoch: 1, Seq: 1, Snapshot: true, ServesRemote: true, Changes: []TierChange{
		{Tier: TierHost, SeqHashes: []uint64{22}}}})
	tests := []struct {
		name           string
		remoteOverDisk bool
		want           [NumTiers]int // none, host, disk, remote
	}{
		{"disk credit at least remote's: the own disk", false, [NumTiers]int{0, 0, 3, 0}},
		{"remote credit above disk's: the peer's copy, the own disk for the rest", true, [NumTiers]int{0, 0, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x.beginRoute()
			if got := x.run(own, hashes, 0, tt.remoteOverDisk); got != tt.want {
				t.Errorf("run = %v, want %v", got, tt.want)
			}
		})
	}
}

// tierPair is two idle workers on two nodes; n1's block manager holds the prompt's
// blocks in tier (the first gpu of them on w0's GPU too when gpu > 0).
func tierPair(t *testing.T, policy string, tier Tier, blocks, gpu int) (*Router, []uint64) {
	t.Helper()
	cfg := DefaultConfig(16)
	cfg.Policy = policy
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"n0", "n1"} {
		if _, err := r.Register(WorkerSpec{ID: "w" + string(rune('0'+i)), Node: n, BlockSize: 16, Ready: true, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	toks := make([]uint32, blocks*16)
	for i := range toks {
		toks[i] = uint32(i)
	}
	hashes := SequenceHashes(toks, 16, "")
	if r.ApplyInventory("n1", Inventory{Epoch: 1, Seq: 1, Snapshot: true,
		Changes: []TierChange{{Tier: tier, SeqHashes: hashes}}}) {
		t.Fatal("snapshot asked for a snapshot")
	}
	if gpu > 0 {
		ev := Event{Kind: BlockStored, BlockSize: 16, TokenIDs: toks[:gpu*16]}
		for i := 0; i < gpu; i++ {
			ev.EngineHashes = append(ev.EngineHashes, uint64(100+i))
		}
		if _, err := r.ApplyBatch("w0", 1, 1, []Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	return r, hashes
}

func TestRouteTierCredit(t *testing.T) {
	tests := []struct {
		name        string
		policy      string
		tier        Tier
		gpu         int
		want        string
		host, disk  int
		remote      int
		creditToken float64
	}{
		{"ttft: host hit wins", PolicyTTFT, TierHost, 0, "w1", 256, 0, 0, 256 * 16 * DefaultTierCredit().Host},
		{"kv: host hit wins", PolicyKV, TierHost, 0, "w1", 256, 0, 0, 256 * 16 * DefaultTierCredit().Host},
		{"ttft: GPU hit beats host hit", PolicyTTFT, TierHost, 256, "w0", 0, 0, 0, 0},
		{"ttft: a whole host hit beats half a GPU hit", PolicyTTFT, TierHost, 128, "w1", 256, 0, 0, 256 * 16 * DefaultTierCredit().Host},
		{"ttft: disk is worth nothing at default bandwidth", PolicyTTFT, TierDisk, 0, "w0", 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, hashes := tierPair(t, tt.policy, tt.tier, 256, tt.gpu)
			d, err := r.Route(RouteInput{RequestID: "r", BlockHashes: hashes, PromptTokens: len(hashes) * 16, Explain: true}, t0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkerID != tt.want {
				t.Fatalf("routed to %s, want %s (%+v)", d.WorkerID, tt.want, d.Candidates)
			}
			gpu := tt.gpu
			if d.WorkerID != "w0" {
				gpu = 0
			}
			if d.HostBlocks != tt.host || d.DiskBlocks != tt.disk || d.RemoteBlocks != tt.remote || d.OverlapBlocks != gpu {
				t.Errorf("decision gpu/host/disk/remote %d/%d/%d/%d, want %d/%d/%d/%d", d.OverlapBlocks, d.HostBlocks,
					d.DiskBlocks, d.RemoteBlocks, gpu, tt.host, tt.disk, tt.remote)
			}
			// explained: every candidate carries the tier facts
			for _, c := range d.Candidates {
				i := slices.IndexFunc(c.Terms, func(x Term) bool { return x.Name == TermTierCreditTokens })
				if i < 0 {
					t.Fatalf("candidate %s has no %s term: %+v", c.WorkerID, TermTierCreditTokens, c.Terms)
				}
				if c.Chosen && math.Abs(c.Terms[i].Value-tt.creditToken) > 1e-6 {
					t.Errorf("chosen %s credit %v tokens, want %v", c.WorkerID, c.Terms[i].Value, tt.creditToken)
				}
			}
			want := int64(len(hashes)*16 - gpu*16 - int(tt.creditToken+0.5))
			if d.PrefillTokens != want {
				t.Errorf("prefill tokens %d, want %d", d.PrefillTokens, want)
			}
		})
	}
}

// A host hit loses to an idle worker once the tier-holding worker has a long queue.
func TestRouteTierQueue(t *testing.T) {
	r, hashes := tierPair(t, PolicyTTFT, TierHost, 64, 0)
	other := make([]uint64, 512)
	for i := range other {
		other[i] = uint64(1e6 + i)
	}
	if _, err := r.Route(RouteInput{RequestID: "big", BlockHashes: other, PromptTokens: 512 * 16, PinWorker: "w1"}, t0, nil); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(RouteInput{RequestID: "r", BlockHashes: hashes, PromptTokens: len(hashes) * 16}, t0.Add(time.Millisecond), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "w0" {
		t.Errorf("routed to %s behind 8,192 queued tokens, want the idle w0", d.WorkerID)
	}
	r.Free("big")
	d, err = r.Route(RouteInput{RequestID: "r", BlockHashes: hashes, PromptTokens: len(hashes) * 16}, t0.Add(time.Millisecond), nil)
	if err != nil || d.WorkerID != "w1" || d.HostBlocks != 64 {
		t.Errorf("queue gone: routed to %s with %d host blocks (%v), want w1 with 64", d.WorkerID, d.HostBlocks, err)
	}
	if st := r.Stats(); st.TierHitBlocks[TierHost] != 64 {
		t.Errorf("Stats.TierHitBlocks host %d, want 64", st.TierHitBlocks[TierHost])
	}
}

// Without inventory no candidate carries tier facts and explanations are unchanged.
func TestRouteNoInventory(t *testing.T) {
	r, hashes := tierPair(t, PolicyTTFT, TierHost, 8, 0)
	r.ForgetNode("n1")
	if !r.Tiers().Empty() {
		t.Fatal("tier index not empty after ForgetNode")
	}
	d, err := r.Route(RouteInput{RequestID: "r", BlockHashes: hashes, PromptTokens: len(hashes) * 16, Explain: true}, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates {
		for _, x := range c.Terms {
			if x.Name == TermHostHitBlocks {
				t.Errorf("candidate %s explains tier terms without inventory", c.WorkerID)
			}
		}
	}
}
