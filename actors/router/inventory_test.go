package router

import (
	"math"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

func registerOn(t *testing.T, g *Grain, id, node string, card *messages.ModelCard) {
	t.Helper()
	ack, err := g.Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "a", Id: "worker/" + id},
			Card: card, Ready: true, EngineEpoch: 1, NodeId: node},
		Load: &messages.WorkerLoad{TotalBlocks: 1000},
	}, nil)
	if err != nil || !ack.Accepted {
		t.Fatalf("register %s: %+v %v", id, ack, err)
	}
}

func inventory(node string, seq uint64, snapshot bool, tier messages.KvTier, hashes ...uint64) *messages.KvbmInventory {
	return &messages.KvbmInventory{NodeId: node, Model: "m", Epoch: 1, Seq: seq, Snapshot: snapshot,
		Changes: []*messages.KvbmTierChange{{Tier: tier, SeqHashes: hashes}}}
}

func TestGrainPublishInventory(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := New(Config{Mode: "ttft", WorkerTTL: 5 * time.Second, NodeTTL: time.Minute, Now: clock.now, Seed: 1})
	g.model = "m"
	// Before any worker: dropped, no snapshot asked (the core does not exist yet).
	if ack, _ := g.PublishInventory(inventory("n1", 1, true, messages.KvTier_KV_TIER_HOST, 1), nil); ack.NeedDump {
		t.Fatal("need_dump before the router started")
	}
	card := &messages.ModelCard{Model: "m", KvBlockSize: 16, TotalKvBlocks: 1000}
	registerOn(t, g, "w0", "n0", card)
	registerOn(t, g, "w1", "n1", card)
	toks := make([]uint32, 64*16)
	for i := range toks {
		toks[i] = uint32(i)
	}
	hashes := kv.SequenceHashes(toks, 16, "")

	steps := []struct {
		name     string
		inv      *messages.KvbmInventory
		needDump bool
	}{
		{"unknown node: snapshot first", inventory("n1", 1, false, messages.KvTier_KV_TIER_HOST, hashes...), true},
		{"snapshot", inventory("n1", 2, true, messages.KvTier_KV_TIER_HOST, hashes[:32]...), false},
		{"next batch", inventory("n1", 3, false, messages.KvTier_KV_TIER_HOST, hashes[32:]...), false},
		{"gap", inventory("n1", 5, false, messages.KvTier_KV_TIER_DISK, hashes...), true},
		{"snapshot after the gap", inventory("n1", 6, true, messages.KvTier_KV_TIER_HOST, hashes...), false},
		{"unknown tier skipped, rest applies", &messages.KvbmInventory{NodeId: "n1", Model: "m", Epoch: 1, Seq: 7,
			Changes: []*messages.KvbmTierChange{{Tier: 9, SeqHashes: hashes}, {Tier: messages.KvTier_KV_TIER_DISK, SeqHashes: hashes[:1]}}}, false},
		{"another model refused", &messages.KvbmInventory{NodeId: "n1", Model: "x", Epoch: 1, Seq: 8}, false},
		{"no node refused", &messages.KvbmInventory{Model: "m", Epoch: 1, Seq: 8}, false},
		{"refused batches are not applied: a gap", inventory("n1", 9, false, messages.KvTier_KV_TIER_HOST), true},
		{"snapshot", inventory("n1", 10, true, messages.KvTier_KV_TIER_HOST, hashes...), false},
	}
	for _, s := range steps {
		ack, err := g.PublishInventory(s.inv, nil)
		if err != nil || ack.NeedDump != s.needDump {
			t.Fatalf("%s: need_dump %v (%v), want %v", s.name, ack.GetNeedDump(), err, s.needDump)
		}
	}
	st := g.core.Stats()
	if len(st.Tiers) != 2 || st.Tiers[1].Node != "n1" || st.Tiers[1].Blocks[kv.TierHost] != 64 || st.SkippedTierChanges != 1 {
		t.Fatalf("tier index %+v, skipped %d", st.Tiers, st.SkippedTierChanges)
	}
	// The credits come from the card (no architecture: the default model's).
	if c := g.core.TierCredit(); c != kv.DefaultTierCredit() {
		t.Errorf("tier credit %+v, want %+v", c, kv.DefaultTierCredit())
	}
	resp, err := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: toks, Explain: true}, nil)
	if err != nil || resp.WorkerId != "w1" || resp.OverlapBlocks != 0 {
		t.Fatalf("route: %v %+v, want w1 (host hit) with no GPU overlap", err, resp)
	}
	found := false
	for _, c := range resp.GetCandidates() {
		for _, term := range c.Terms {
			if c.WorkerId == "w1" && term.Name == kv.TermHostHitBlocks && term.Value == 64 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("explanation lacks w1's host_hit_blocks 64: %+v", resp.GetCandidates())
	}
	rs, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if rs.HostHitBlocks != 64 || len(rs.TierNodes) != 2 || rs.TierNodes[1].HostBlocks != 64 || rs.Workers[1].NodeId != "n1" {
		t.Errorf("router stats: host hits %d, nodes %+v, worker %+v", rs.HostHitBlocks, rs.TierNodes, rs.Workers[1])
	}

	// A node whose workers left and that went silent is forgotten, then asked for a snapshot.
	if _, err := g.Deregister(&messages.DeregisterWorker{WorkerId: "w1"}, nil); err != nil {
		t.Fatal(err)
	}
	clock.t = clock.t.Add(2 * time.Minute)
	registerOn(t, g, "w0", "n0", card) // a heartbeat runs the expiry
	if ack, _ := g.PublishInventory(inventory("n1", 11, false, messages.KvTier_KV_TIER_HOST, hashes...), nil); !ack.NeedDump {
		t.Error("a forgotten node's batch did not ask for a snapshot")
	}
}

func TestKVBytesPerToken(t *testing.T) {
	tests := []struct {
		name string
		arch *messages.ModelArchitecture
		want int64
	}{
		{"no architecture: the default model", nil, kv.DefaultKVBytesPerToken},
		{"card's figure", &messages.ModelArchitecture{KvBytesPerToken: 147456}, 147456},
		{"Llama-3.1-8B from its figures", &messages.ModelArchitecture{NumLayers: 32, NumKvHeads: 8, HeadDim: 128, Dtype: "bfloat16"}, 131072},
		{"unknown dtype", &messages.ModelArchitecture{NumLayers: 32, NumKvHeads: 8, HeadDim: 128, Dtype: "weird"}, kv.DefaultKVBytesPerToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KVBytesPerToken(&messages.ModelCard{Architecture: tt.arch}); got != tt.want {
				t.Errorf("KVBytesPerToken = %d, want %d", got, tt.want)
			}
		})
	}
	// A bigger KV cache per token is worth less from the same tier.
	g := New(Config{})
	small := g.tierCredit(&messages.ModelCard{Architecture: &messages.ModelArchitecture{KvBytesPerToken: 65536}})
	big := g.tierCredit(&messages.ModelCard{Architecture: &messages.ModelArchitecture{KvBytesPerToken: 327680}})
	if !(small.Host > big.Host) || math.IsNaN(small.Host) {
		t.Errorf("credit of a small KV %v not above a big one's %v", small.Host, big.Host)
	}
	over := kv.TierCredit{Host: 1, Disk: 0.5, Remote: 0.25}
	if c := New(Config{TierCredit: &over}).tierCredit(nil); c != over {
		t.Errorf("override %+v, got %+v", over, c)
	}
}
