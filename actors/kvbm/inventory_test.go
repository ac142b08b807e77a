package kvbm

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/kv"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

func put(model string, h uint64, t kv.Tier) store.Change {
	return store.Change{Key: store.BlockKey(model, h), Tier: t}
}

func del(model string, h uint64, t kv.Tier) store.Change {
	return store.Change{Key: store.BlockKey(model, h), Tier: t, Removed: true}
}

// render is a batch in one line: model seq [S] then tier±hashes per change.
func render(bs []*messages.KvbmInventory) []string {
	var out []string
	for _, b := range bs {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s@%s e%d #%d", b.Model, b.NodeId, b.Epoch, b.Seq)
		if b.Snapshot {
			sb.WriteString(" S")
		}
		for _, c := range b.Changes {
			sign := "+"
			if c.Removed {
				sign = "-"
			}
			fmt.Fprintf(&sb, " %s%s%v", strings.ToLower(strings.TrimPrefix(c.Tier.String(), "KV_TIER_")), sign, c.SeqHashes)
		}
		out = append(out, sb.String())
	}
	return out
}

// TestGroup: changes are grouped per model in order, consecutive runs of one tier and
// direction merged; keys that are not Turbine block keys are counted, not published.
func TestGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []store.Change
		want    map[string][]kv.TierChange
		foreign int
	}{
		{"empty", nil, map[string][]kv.TierChange{}, 0},
		{"runs merge", []store.Change{put("m", 1, kv.TierHost), put("m", 2, kv.TierHost), put("n", 3, kv.TierHost)},
			map[string][]kv.TierChange{"m": {{Tier: kv.TierHost, SeqHashes: []uint64{1, 2}}},
				"n": {{Tier: kv.TierHost, SeqHashes: []uint64{3}}}}, 0},
		{"order kept", []store.Change{put("m", 1, kv.TierHost), del("m", 1, kv.TierHost), put("m", 1, kv.TierDisk), put("m", 1, kv.TierHost)},
			map[string][]kv.TierChange{"m": {{Tier: kv.TierHost, SeqHashes: []uint64{1}}, {Tier: kv.TierHost, Removed: true, SeqHashes: []uint64{1}},
				{Tier: kv.TierDisk, SeqHashes: []uint64{1}}, {Tier: kv.TierHost, SeqHashes: []uint64{1}}}}, 0},
		{"foreign", []store.Change{{Key: "mymodel@1@0@abc@bfloat16", Tier: kv.TierHost}, {Key: "foo"}, put("m@x", 9, kv.TierDisk)},
			map[string][]kv.TierChange{"m@x": {{Tier: kv.TierDisk, SeqHashes: []uint64{9}}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := Group(tc.in)
			if !reflect.DeepEqual(g.Models, tc.want) || g.Foreign != tc.foreign {
				t.Errorf("Group = %+v foreign %d, want %+v foreign %d", g.Models, g.Foreign, tc.want, tc.foreign)
			}
		})
	}
}

// TestInventorySteps: numbering per model, snapshots first, after need_dump and after
// an overflow, empty snapshots for models that held blocks, and changes superseded by a
// snapshot.
func TestInventorySteps(t *testing.T) {
	type step struct {
		changes  []store.Change
		snap     []Block
		before   func(*Inventory)
		want     []string
		wantSnap bool // WantsSnapshot before the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first batch is a snapshot, then changes", []step{
			{changes: []store.Change{put("m", 1, kv.TierHost)}, snap: []Block{{store.BlockKey("m", 1), kv.TierHost}, {"lmcache-key", kv.TierHost}},
				wantSnap: true, want: []string{"m@n1 e7 #1 S host+[1]"}},
			{changes: []store.Change{put("m", 2, kv.TierHost), del("m", 1, kv.TierHost), put("m", 1, kv.TierDisk)},
				want: []string{"m@n1 e7 #2 host+[2] host-[1] disk+[1]"}},
			{want: nil},
		}},
		{"nothing held at start: no empty snapshot", []step{
			{wantSnap: true, want: nil},
			{changes: []store.Change{put("b", 5, kv.TierHost), put("a", 4, kv.TierHost)},
				want: []string{"a@n1 e7 #1 host+[4]", "b@n1 e7 #1 host+[5]"}},
		}},
		{"need dump: that model's next batch is a snapshot", []step{
			{changes: []store.Change{put("a", 1, kv.TierHost), put("b", 2, kv.TierHost)}, wantSnap: true,
				snap: []Block{{store.BlockKey("a", 1), kv.TierHost}, {store.BlockKey("b", 2), kv.TierHost}},
				want: []string{"a@n1 e7 #1 S host+[1]", "b@n1 e7 #1 S host+[2]"}},
			{before: func(inv *Inventory) { inv.NeedSnapshot("b") }, wantSnap: true,
				changes: []store.Change{put("a", 3, kv.TierHost), put("b", 4, kv.TierHost)},
				snap: []Block{{store.BlockKey("a", 1), kv.TierHost}, {store.BlockKey("a", 3), kv.TierHost},
					{store.BlockKey("b", 4), kv.TierDisk}, {store.BlockKey("b", 2), kv.TierHost}},
				want: []string{"a@n1 e7 #2 host+[3]", "b@n1 e7 #2 S host+[2] disk+[4]"}},
		}},
		{"overflow: every model, an empty snapshot for one that holds nothing now", []step{
			{changes: []store.Change{put("a", 1, kv.TierHost)}, wantSnap: true, snap: []Block{{store.BlockKey("a", 1), kv.TierHost}},
				want: []string{"a@n1 e7 #1 S host+[1]"}},
			{before: func(inv *Inventory) { inv.Overflowed() }, wantSnap: true,
				snap: []Block{{store.BlockKey("c", 9), kv.TierDisk}},
				want: []string{"a@n1 e7 #2 S", "c@n1 e7 #1 S disk+[9]"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := NewInventory("n1", 7, false)
			for i, s := range tc.steps {
				if s.before != nil {
					s.before(inv)
				}
				if got := inv.WantsSnapshot(); got != s.wantSnap {
					t.Fatalf("step %d: WantsSnapshot = %v, want %v", i, got, s.wantSnap)
				}
				got := render(inv.Step(Group(s.changes), SnapshotOf(s.snap)))
				if !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d:\n got %q\nwant %q", i, got, s.want)
				}
			}
		})
	}
}

// TestInventorySplits: a change set larger than MaxHashesPerBatch leaves as several
// numbered batches; only a snapshot's first carries the snapshot flag.
func TestInventorySplits(t *testing.T) {
	inv := NewInventory("n", 1, true)
	var blocks []Block
	for i := range MaxHashesPerBatch + 3 {
		blocks = append(blocks, Block{store.BlockKey("m", uint64(i)), kv.TierHost})
	}
	bs := inv.Step(Group(nil), SnapshotOf(blocks))
	if len(bs) != 2 || !bs[0].Snapshot || bs[1].Snapshot || bs[0].Seq != 1 || bs[1].Seq != 2 || !bs[1].ServesRemote {
		t.Fatalf("snapshot batches = %q, want #1 S and #2", render(bs))
	}
	if n0, n1 := len(bs[0].Changes[0].SeqHashes), len(bs[1].Changes[0].SeqHashes); n0 != MaxHashesPerBatch || n1 != 3 {
		t.Fatalf("batch sizes %d, %d; want %d, 3", n0, n1, MaxHashesPerBatch)
	}
	var ch []store.Change
	for i := range 2*MaxHashesPerBatch + 1 {
		ch = append(ch, del("m", uint64(i), kv.TierHost))
	}
	bs = inv.Step(Group(ch), Grouped{})
	if len(bs) != 3 || bs[0].Seq != 3 || bs[2].Seq != 5 || bs[0].Snapshot {
		t.Fatalf("change batches: %d, first seq %d", len(bs), bs[0].GetSeq())
	}
}

// FuzzGroup: any change stream groups without loss: replaying the groups gives the
// stream's Turbine keys in order.
func FuzzGroup(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []store.Change
		for _, b := range data {
			in = append(in, store.Change{Key: store.BlockKey(string('a'+rune(b%3)), uint64(b>>2)), Tier: kv.Tier(1 + b%2), Removed: b&64 != 0})
		}
		g := Group(in)
		n := 0
		for _, tcs := range g.Models {
			for _, tc := range tcs {
				n += len(tc.SeqHashes)
			}
		}
		if n != len(in) || g.Foreign != 0 {
			t.Fatalf("grouped %d of %d changes", n, len(in))
		}
	})
}
