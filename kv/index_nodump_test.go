package kv

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIndexWithoutDumpRoutesTheSame drives an index with and one without dump data
// (NewIndex, NewIndexWithoutDump) with the same random event stream (stores, removals,
// clears, adapters, salts, unknown parents) and checks after every event that both give
// every probe the same overlaps and hold the same nodes and blocks, that the one without
// dump data keeps the index invariants, no token ids, adapters or salts, and dumps
// nothing.
func TestIndexWithoutDumpRoutesTheSame(t *testing.T) {
	const bs = 4
	c := rand.New(rand.NewPCG(21, 21))
	g := newStreamGen(bs, 4, 5)
	m := newModel(bs)
	full, lean := NewIndex(bs), NewIndexWithoutDump(bs)
	var oa, ob []uint32
	for step := 0; step < 20000; step++ {
		w, ev := g.next(c, m)
		if c.IntN(8) == 0 && ev.Kind == BlockStored && !ev.HasParent {
			ev.CacheSalt = "salt"
		}
		_ = m.apply(w, ev)
		ea, eb := full.Apply(w, ev), lean.Apply(w, ev)
		if (ea == nil) != (eb == nil) || (ea != nil && ea.Error() != eb.Error()) {
			t.Fatalf("step %d: errors %v and %v", step, ea, eb)
		}
		if full.Nodes() != lean.Nodes() {
			t.Fatalf("step %d: %d nodes, %d without dump data", step, full.Nodes(), lean.Nodes())
		}
		for wi := 0; wi < full.WorkerSlots(); wi++ {
			if full.Blocks(WorkerID(wi)) != lean.Blocks(WorkerID(wi)) {
				t.Fatalf("step %d: worker %d holds %d blocks, %d without dump data", step, wi, full.Blocks(WorkerID(wi)), lean.Blocks(WorkerID(wi)))
			}
		}
		toks, lora := g.probe(c)
		hashes := SequenceHashes(toks, bs, lora)
		oa, ob = full.Overlaps(hashes, oa), lean.Overlaps(hashes, ob)
		if !slices.Equal(oa, ob) {
			t.Fatalf("step %d: overlaps %v, %v without dump data", step, oa, ob)
		}
		if step%500 == 0 {
			if err := checkIndexInvariants(lean); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	if len(lean.tokens) != 0 || len(lean.loraOf) != 0 || len(lean.salts) != 0 {
		t.Fatalf("dump data kept: %d token pages, %d adapters, %d salts", len(lean.tokens), len(lean.loraOf), len(lean.salts))
	}
	for wi := 0; wi < lean.WorkerSlots(); wi++ {
		if d := lean.Dump(WorkerID(wi)); d != nil {
			t.Fatalf("worker %d: dump %v from an index without dump data", wi, d)
		}
	}
}

// TestRouterNoDump: a Router with Config.NoDump refuses DumpWorker and routes.
func TestRouterNoDump(t *testing.T) {
	cfg := DefaultConfig(4)
	cfg.NoDump = true
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(WorkerSpec{ID: "w0", BlockSize: 4, Ready: true, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	ev := Event{Kind: BlockStored, EngineHashes: []uint64{1, 2}, TokenIDs: prompt(8), BlockSize: 4}
	if nd, err := r.ApplyBatch("w0", 1, 1, []Event{ev}); nd || err != nil {
		t.Fatal(nd, err)
	}
	if _, _, evs, err := r.DumpWorker("w0"); !errors.Is(err, ErrInvalidRequest) || evs != nil {
		t.Fatalf("DumpWorker: %v, %v; want ErrInvalidRequest", evs, err)
	}
	d, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(9)}, t0, rand.New(rand.NewPCG(1, 1)))
	if err != nil || d.OverlapBlocks != 2 {
		t.Fatalf("route %+v %v, want 2 blocks cached", d, err)
	}
}
