package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// reuseWorkload visits convs conversations of blocks blocks each, round robin, rounds
// times, one request every gap: the reuse distance is convs × blocks blocks.
func reuseWorkload(convs, blocks, rounds int, gap time.Duration) []bench.Request {
	var out []bench.Request
	for range rounds {
		for c := range convs {
			ids := make([]int64, blocks)
			for k := range ids {
				ids[k] = int64(c*1000 + k)
			}
			out = append(out, bench.Request{Arrival: time.Duration(len(out)) * gap, InputLength: blocks * 16,
				OutputLength: 4, HashIDs: ids})
		}
	}
	return out
}

func kvbmSimConfig(k *Kvbm) Config {
	eng := mocker.DefaultConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.MaxModelLen = 16, 64, 1024
	return Config{Workers: 1, Engine: eng, BlockTokens: 16, Seed: 1, KVBytesPerToken: 131072, Kvbm: k}
}

// A workload whose reuse exceeds the GPU cache hits in the block manager's tiers: the
// hit rate rises, the hits show by tier, and TTFT falls.
func TestKvbmRaisesHitRate(t *testing.T) {
	reqs := reuseWorkload(20, 20, 2, 300*time.Millisecond)
	bb := int64(16 * 131072)
	type result struct {
		s  bench.Summary
		st Stats
	}
	runs := map[string]result{}
	for _, tc := range []struct {
		name string
		kvbm *Kvbm
	}{
		{"gpu only", nil},
		{"host", &Kvbm{HostBytes: 500 * bb}},
		{"host and disk", &Kvbm{HostBytes: 100 * bb, DiskBytes: 1000 * bb}},
	} {
		out, st, err := Run(context.Background(), kvbmSimConfig(tc.kvbm), reqs)
		if err != nil {
			t.Fatal(err)
		}
		s := bench.Summarize(out)
		if s.Failed != 0 {
			t.Fatalf("%s: %d failed: %v", tc.name, s.Failed, s.Errors)
		}
		runs[tc.name] = result{s, st}
	}
	gpu, host, disk := runs["gpu only"], runs["host"], runs["host and disk"]
	if *gpu.s.PrefixCacheHitRate > 0.05 {
		t.Fatalf("GPU-only hit rate %v: the workload's reuse should exceed the GPU cache", *gpu.s.PrefixCacheHitRate)
	}
	// Second round: 19 of each prompt's 20 blocks are below the GPU (the last token is
	// always computed): 19/40 of all prompt tokens.
	want := 19.0 / 40
	for name, r := range map[string]result{"host": host, "host and disk": disk} {
		if got := *r.s.PrefixCacheHitRate; got < want-0.01 {
			t.Errorf("%s: hit rate %v, want about %v", name, got, want)
		}
		lower := r.st.Tiers.HitRate(kv.TierHost) + r.st.Tiers.HitRate(kv.TierDisk)
		if sum := lower + r.st.Tiers.HitRate(kv.TierNone); sum < *r.s.PrefixCacheHitRate-1e-9 || sum > *r.s.PrefixCacheHitRate+1e-9 {
			t.Errorf("%s: the tiers' hit rates add up to %v, the summary's is %v", name, sum, *r.s.PrefixCacheHitRate)
		}
		if lower < want-0.02 || r.st.Tiers.OffloadedBlocks == 0 {
			t.Errorf("%s: lower-tier hit rate %v, offloaded %d: want about %v", name, lower, r.st.Tiers.OffloadedBlocks, want)
		}
		if r.st.Tiers.InventoryBatches == 0 || r.st.Tiers.InventoryDumps != 0 {
			t.Errorf("%s: %d inventory batches, %d dumps asked: want some, none", name, r.st.Tiers.InventoryBatches, r.st.Tiers.InventoryDumps)
		}
	}
	// Host memory at 25 GB/s loads a 320-token prompt's 19 blocks (40 MB) in 1.6 ms,
	// faster than computing them (the reference timing's 4.7 ms); a disk at 5 GB/s
	// takes 8 ms, slower: its TTFT rises.
	if host.s.TTFT.P50 >= gpu.s.TTFT.P50 {
		t.Errorf("host tier: TTFT p50 %v, GPU only %v: want lower", host.s.TTFT.P50, gpu.s.TTFT.P50)
	}
	if disk.s.TTFT.P50 <= gpu.s.TTFT.P50 {
		t.Errorf("disk tier at 5 GB/s: TTFT p50 %v, GPU only %v: want higher (loading is slower than computing)", disk.s.TTFT.P50, gpu.s.TTFT.P50)
	}
	if host.st.Tiers.Hits[kv.TierDisk] != 0 || disk.st.Tiers.Hits[kv.TierDisk] == 0 {
		t.Errorf("disk hits %d without a disk tier, %d with one (host 100 blocks): want 0 and some",
			host.st.Tiers.Hits[kv.TierDisk], disk.st.Tiers.Hits[kv.TierDisk])
	}
}

// The block manager model: LRU out of host memory onto disk, out of disk for good, a
// disk read promoted, and the inventory changes in order.
func TestNodeKvbmPolicy(t *testing.T) {
	n := newNodeKvbm("n", &Kvbm{HostBytes: 2 * 10, DiskBytes: 2 * 10}, 10)
	for _, h := range []uint64{1, 2, 3, 4, 5} {
		n.Offload(h)
	}
	// host [4 5], disk [2 3]; 1 dropped.
	if got := n.Match([]uint64{4, 5, 2, 3, 1}); !slices.Equal(got, []kv.Tier{kv.TierHost, kv.TierHost, kv.TierDisk, kv.TierDisk}) {
		t.Fatalf("Match = %v", got)
	}
	if got := n.Onboard([]uint64{2}); got != 1 { // 2 promoted: host [5 2], 4 to disk [3 4]
		t.Fatalf("Onboard = %d", got)
	}
	if got := n.Match([]uint64{5, 2, 3, 4}); !slices.Equal(got, []kv.Tier{kv.TierHost, kv.TierHost, kv.TierDisk, kv.TierDisk}) {
		t.Fatalf("after promotion Match = %v", got)
	}
	inv, ok := n.take()
	if !ok || !inv.Snapshot || inv.Seq != 1 {
		t.Fatalf("first batch %+v", inv)
	}
	var b strings.Builder
	for _, c := range inv.Changes {
		op := "+"
		if c.Removed {
			op = "-"
		}
		b.WriteString(op + c.Tier.String())
		for _, h := range c.SeqHashes {
			b.WriteString(" " + string(rune('0'+h)))
		}
		b.WriteString(";")
	}
	const want = "+host 1 2 3;-host 1;+disk 1;+host 4;-host 2;+disk 2;+host 5;-host 3;+disk 3;-disk 1 2;+host 2;-host 4;+disk 4;"
	if b.String() != want {
		t.Fatalf("changes %s\nwant    %s", b.String(), want)
	}
	if _, ok := n.take(); ok {
		t.Fatal("a second batch without changes")
	}
	n.Offload(9)
	if inv, ok := n.take(); !ok || inv.Snapshot || inv.Seq != 2 || len(inv.Changes) != 4 {
		t.Fatalf("second batch %+v", inv)
	}
}

// With Kvbm.Remote a conversation that moves to another node finds its prefix in the
// block manager of the node it left (a G4 path): onboarded as remote-tier hits, which
// the router counted too (its inventory batches say ServesRemote). Without it, the
// moved conversations recompute their prefixes. Round robin over two workers moves
// every conversation of an odd count at each visit.
func TestKvbmRemoteServesOtherNodes(t *testing.T) {
	reqs := reuseWorkload(21, 20, 2, 300*time.Millisecond)
	bb := int64(16 * 131072)
	want := 19.0 / 40 // the second round's 19 leading blocks of 20 (the last token is computed)
	for _, tc := range []struct {
		name   string
		remote bool
		// lower: the expected hit rate below the GPU, all of it remote; routed: the
		// remote blocks the router counts (every block of the second round's prompts).
		lower  float64
		routed int64
	}{
		{"node tiers only", false, 0, 0},
		{"remote", true, want, 21 * 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := kvbmSimConfig(&Kvbm{HostBytes: 500 * bb, DiskBytes: 500 * bb, Remote: tc.remote})
			cfg.Workers, cfg.Router = 2, roundRobin(16)
			out, st, err := Run(context.Background(), cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if s := bench.Summarize(out); s.Failed != 0 {
				t.Fatalf("%d failed: %v", s.Failed, s.Errors)
			}
			tr := st.Tiers
			if h, d := tr.HitRate(kv.TierHost), tr.HitRate(kv.TierDisk); h != 0 || d != 0 {
				t.Errorf("host %v, disk %v hit rates: want 0 (every conversation moved)", h, d)
			}
			if got := tr.HitRate(kv.TierRemote); got < tc.lower-0.01 || got > tc.lower+0.01 {
				t.Errorf("remote hit rate %v, want %v", got, tc.lower)
			}
			if got := tr.RoutedBlocks[kv.TierRemote]; got != tc.routed {
				t.Errorf("router counted %d remote blocks, want %d (the engines onboarded %d)", got, tc.routed, tr.OnboardedBlocks[kv.TierRemote])
			}
			if tr.InventoryDumps != 0 {
				t.Errorf("%d inventory dumps asked, want none", tr.InventoryDumps)
			}
		})
	}
}

// The remote tier in the block manager model: another node's blocks match after the
// node's own, in any tier of that node, and reading one promotes it there as its own Get
// does; every batch then says ServesRemote.
func TestNodeKvbmRemote(t *testing.T) {
	k := &Kvbm{HostBytes: 1 * 10, DiskBytes: 2 * 10, Remote: true}
	f := &kvbmFleet{}
	a, b := newNodeKvbm("a", k, 10), newNodeKvbm("b", k, 10)
	f.join(a)
	f.join(b)
	a.Offload(1)
	b.Offload(2)
	b.Offload(3) // b: host [3], disk [2]
	if got := a.Match([]uint64{1, 2, 3, 4}); !slices.Equal(got, []kv.Tier{kv.TierHost, kv.TierRemote, kv.TierRemote}) {
		t.Fatalf("Match = %v", got)
	}
	if got := a.Onboard([]uint64{1, 2, 4}); got != 2 {
		t.Fatalf("Onboard = %d, want 2", got)
	}
	if got := b.Match([]uint64{2, 3}); !slices.Equal(got, []kv.Tier{kv.TierHost, kv.TierDisk}) {
		t.Fatalf("b after the remote read: Match = %v, want 2 promoted to host, 3 demoted", got)
	}
	if a.holds(2) {
		t.Fatal("a remote read copied the block to the reading node")
	}
	for _, n := range []*nodeKvbm{a, b} {
		if inv, ok := n.take(); !ok || !inv.ServesRemote {
			t.Errorf("%s: batch %+v: want ServesRemote", n.node, inv)
		}
	}
	alone := newNodeKvbm("c", &Kvbm{HostBytes: 10}, 10)
	alone.Offload(5)
	if got := alone.Match([]uint64{5, 1}); len(got) != 1 {
		t.Errorf("without a fleet Match = %v, want its own block only", got)
	}
	if inv, _ := alone.take(); inv.ServesRemote {
		t.Error("without Remote a batch says ServesRemote")
	}
}
