package kvbm

import (
	"slices"

	"github.com/turbine-llm/turbine/kv"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

// The inventory's pure core (docs/reference.md §9.5): the store's changes in, numbered
// per-model messages.KvbmInventory batches out. No clock, no I/O: the publisher goroutine
// (actor.go) drains the store, calls Inventory, sends what it returns and hands back
// each Router grain's answer.

// MaxHashesPerBatch bounds the sequence hashes of one KvbmInventory message (8 bytes
// each): a large change set or snapshot is split into several numbered batches, keeping
// every message far below the transport's size limit.
const MaxHashesPerBatch = 16384

// Grouped is one drain of the store's changes, grouped by model.
type Grouped struct {
	// Models maps a model to its tier changes, in the order the store made them:
	// consecutive changes of the same tier and direction form one kv.TierChange, so
	// applying the changes in order gives the store's state.
	Models map[string][]kv.TierChange
	// Foreign counts the changes of keys that are not Turbine block keys
	// (kvbm.ParseBlockKey: LMCache chunks, redis-cli's keys): held, not published.
	Foreign int
}

// Group groups changes by model (kvbm.ParseBlockKey), keeping their order within each
// model; other keys are counted in Foreign.
func Group(changes []store.Change) Grouped {
	g := Grouped{Models: map[string][]kv.TierChange{}}
	for _, c := range changes {
		model, h, ok := store.ParseBlockKey(c.Key)
		if !ok {
			g.Foreign++
			continue
		}
		tcs := g.Models[model]
		if n := len(tcs); n > 0 && tcs[n-1].Tier == c.Tier && tcs[n-1].Removed == c.Removed {
			tcs[n-1].SeqHashes = append(tcs[n-1].SeqHashes, h)
		} else {
			tcs = append(tcs, kv.TierChange{Tier: c.Tier, Removed: c.Removed, SeqHashes: []uint64{h}})
		}
		g.Models[model] = tcs
	}
	return g
}

// SnapshotOf lists every Turbine block a store holds (the pairs Store.Snapshot gives),
// grouped by model and tier: one Stored kv.TierChange per tier (host, disk, remote
// order), hashes ascending. Foreign counts the other keys.
func SnapshotOf(blocks []Block) Grouped {
	g := Grouped{Models: map[string][]kv.TierChange{}}
	byModel := map[string]*[kv.NumTiers][]uint64{}
	for _, b := range blocks {
		model, h, ok := store.ParseBlockKey(b.Key)
		if !ok || b.Tier == kv.TierNone || int(b.Tier) >= kv.NumTiers {
			g.Foreign++
			continue
		}
		t := byModel[model]
		if t == nil {
			t = &[kv.NumTiers][]uint64{}
			byModel[model] = t
		}
		t[b.Tier] = append(t[b.Tier], h)
	}
	for model, t := range byModel {
		var tcs []kv.TierChange
		for tier, hs := range t {
			if len(hs) == 0 {
				continue
			}
			slices.Sort(hs)
			tcs = append(tcs, kv.TierChange{Tier: kv.Tier(tier), SeqHashes: hs})
		}
		g.Models[model] = tcs
	}
	return g
}

// Block is one block of a store snapshot: its key and the tier it is in.
type Block struct {
	Key  string
	Tier kv.Tier
}

// Inventory numbers a block manager's inventory batches and decides when a model gets a
// snapshot instead of changes. Not safe for concurrent use: the Manager owns it, and
// its publishers use it one step at a time under the Manager's lock.
//
// Numbering: Seq counts each model's batches from 1 within Epoch (the block manager's
// start); a Router grain that sees a gap, an unknown node or a new epoch answers
// need_dump (NeedSnapshot), and that model's next batch is a snapshot, which replaces all
// the router knew of the node's blocks of that model.
type Inventory struct {
	NodeID       string
	Epoch        uint64
	ServesRemote bool

	seq       map[string]uint64 // model -> last seq sent
	snapshot  map[string]bool   // models whose next batch is a snapshot
	snapAll   bool              // every model's next batch is a snapshot (start, overflow)
	published map[string]bool   // models ever published in this epoch
}

// NewInventory returns the numbering of node's inventory in epoch; every model's first
// batch is a snapshot (a router may hold blocks of an earlier epoch).
func NewInventory(node string, epoch uint64, servesRemote bool) *Inventory {
	return &Inventory{NodeID: node, Epoch: epoch, ServesRemote: servesRemote, seq: map[string]uint64{},
		snapshot: map[string]bool{}, snapAll: true, published: map[string]bool{}}
}

// NeedSnapshot marks model's next batch as a snapshot (its router answered need_dump, or
// a send failed and the router may have missed a batch).
func (inv *Inventory) NeedSnapshot(model string) { inv.snapshot[model] = true }

// Overflowed marks every model's next batch as a snapshot (the store dropped changes).
func (inv *Inventory) Overflowed() { inv.snapAll = true }

// WantsSnapshot reports whether the next Step needs the store's snapshot.
func (inv *Inventory) WantsSnapshot() bool { return inv.snapAll || len(inv.snapshot) > 0 }

// Step turns one drain of the store into the batches to send, in order: for each model
// (sorted) that needs a snapshot, its snapshot from snap (whose first batch has snapshot
// set, the rest carry the remaining blocks as stored changes); for the others, their
// changes. snap is read only when WantsSnapshot; a model that needs a snapshot and holds
// nothing now gets an empty snapshot when it was published before (its router forgets the
// node's blocks). Changes drained together with a snapshot are superseded by it for that
// model (the snapshot is taken after the drain, so it includes them).
func (inv *Inventory) Step(changes Grouped, snap Grouped) []*messages.KvbmInventory {
	var out []*messages.KvbmInventory
	snapModels := map[string]bool{}
	if inv.snapAll {
		for m := range inv.published {
			snapModels[m] = true
		}
		for m := range snap.Models {
			snapModels[m] = true
		}
	} else {
		for m := range inv.snapshot {
			snapModels[m] = true
		}
	}
	inv.snapAll, inv.snapshot = false, map[string]bool{}
	models := make([]string, 0, len(changes.Models)+len(snapModels))
	for m := range changes.Models {
		models = append(models, m)
	}
	for m := range snapModels {
		models = append(models, m)
	}
	slices.Sort(models)
	models = slices.Compact(models)
	for _, m := range models {
		if snapModels[m] {
			if len(snap.Models[m]) == 0 && !inv.published[m] {
				continue
			}
			out = append(out, inv.batches(m, snap.Models[m], true)...)
			continue
		}
		out = append(out, inv.batches(m, changes.Models[m], false)...)
	}
	return out
}

// batches splits model's changes into numbered batches of at most MaxHashesPerBatch
// hashes; with snapshot, the first is the snapshot (always one, even when empty).
func (inv *Inventory) batches(model string, tcs []kv.TierChange, snapshot bool) []*messages.KvbmInventory {
	var out []*messages.KvbmInventory
	cur := inv.newBatch(model, snapshot)
	n := 0
	for _, tc := range tcs {
		hs := tc.SeqHashes
		for len(hs) > 0 {
			if n == MaxHashesPerBatch {
				out = append(out, cur)
				cur, n = inv.newBatch(model, false), 0
			}
			k := min(len(hs), MaxHashesPerBatch-n)
			cur.Changes = append(cur.Changes, &messages.KvbmTierChange{Tier: TierProto(tc.Tier), Removed: tc.Removed,
				SeqHashes: slices.Clone(hs[:k])})
			hs, n = hs[k:], n+k
		}
	}
	if n > 0 || snapshot {
		out = append(out, cur)
	} else {
		inv.seq[model]-- // nothing to send: the number is not used
	}
	inv.published[model] = true
	return out
}

func (inv *Inventory) newBatch(model string, snapshot bool) *messages.KvbmInventory {
	inv.seq[model]++
	return &messages.KvbmInventory{NodeId: inv.NodeID, Model: model, Epoch: inv.Epoch, Seq: inv.seq[model],
		Snapshot: snapshot, ServesRemote: inv.ServesRemote}
}

// Models lists the models published in this epoch, sorted.
func (inv *Inventory) Models() []string {
	out := make([]string, 0, len(inv.published))
	for m := range inv.published {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// TierProto maps a kv.Tier to its messages.KvTier.
func TierProto(t kv.Tier) messages.KvTier {
	switch t {
	case kv.TierHost:
		return messages.KvTier_KV_TIER_HOST
	case kv.TierDisk:
		return messages.KvTier_KV_TIER_DISK
	case kv.TierRemote:
		return messages.KvTier_KV_TIER_REMOTE
	}
	return messages.KvTier_KV_TIER_UNSPECIFIED
}
