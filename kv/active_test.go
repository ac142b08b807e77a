package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestActiveSharedPrefixCountsOnce(t *testing.T) {
	a := NewActiveSequences(DefaultMaxSequenceAge)
	const bs = 4
	r1 := SequenceHashes(blocksOf(bs, 1, 2, 3, 10, 11), bs, "")
	r2 := SequenceHashes(blocksOf(bs, 1, 2, 3, 20), bs, "")
	a.Add("r1", 0, r1, 20, t0)
	a.Add("r2", 0, r2, 4, t0)
	if got := a.Load(0); got != (Load{ActiveBlocks: 6, PrefillTokens: 24, Sequences: 2}) {
		t.Fatalf("load %+v", got)
	}
	// The same prompt on another worker counts there separately.
	a.Add("r3", 1, r2, 16, t0)
	out := make([]uint32, 2)
	probe := SequenceHashes(blocksOf(bs, 1, 2, 3, 10, 99), bs, "")
	a.ActivePrefix(probe, out)
	if out[0] != 4 || out[1] != 3 {
		t.Fatalf("active prefix %v, want [4 3]", out)
	}
	a.PrefillDone("r1")
	a.PrefillDone("r1")
	if got := a.Load(0).PrefillTokens; got != 4 {
		t.Fatalf("prefill tokens after PrefillDone %d, want 4", got)
	}
	a.Free("r2")
	if got := a.Load(0); got != (Load{ActiveBlocks: 5, PrefillTokens: 0, Sequences: 1}) {
		t.Fatalf("load after free %+v", got)
	}
	if a.Free("r2") || a.Free("never") || a.PrefillDone("never") {
		t.Fatal("unknown or freed ids must report false")
	}
}

func TestActiveExpire(t *testing.T) {
	a := NewActiveSequences(300 * time.Second)
	h := SequenceHashes(blocksOf(2, 1, 2), 2, "")
	a.Add("old", 0, h, 4, t0)
	a.Add("new", 0, h, 4, t0.Add(200*time.Second))
	if n := a.Expire(t0.Add(300 * time.Second)); n != 0 {
		t.Fatalf("expired %d at exactly 300 s", n)
	}
	if n := a.Expire(t0.Add(301 * time.Second)); n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	if _, ok := a.Worker("old"); ok {
		t.Fatal("old still active")
	}
	// Re-adding an id restarts its clock: the first queue entry must not expire it.
	a.Add("new", 1, h, 4, t0.Add(400*time.Second))
	if n := a.Expire(t0.Add(600 * time.Second)); n != 0 {
		t.Fatalf("re-added request expired by its stale entry (%d)", n)
	}
	if n := a.Expire(t0.Add(701 * time.Second)); n != 1 || a.Len() != 0 || a.Blocks() != 0 {
		t.Fatalf("expired %d, %d left, %d blocks", n, a.Len(), a.Blocks())
	}
	if a.Load(0) != (Load{}) || a.Load(1) != (Load{}) {
		t.Fatalf("loads not zero: %+v %+v", a.Load(0), a.Load(1))
	}
	never := NewActiveSequences(0)
	never.Add("x", 0, h, 1, t0)
	if never.Expire(t0.Add(1000*time.Hour)) != 0 {
		t.Fatal("maxAge 0 must disable expiry")
	}
}

// activeModel is the obvious model: load is recomputed from the request list.
type activeModel struct {
	reqs map[string]modelReq
}

type modelReq struct {
	w       WorkerID
	hashes  []uint64
	prefill int64
	done    bool
	start   time.Time
}

func (m *activeModel) load(w WorkerID) Load {
	blocks := map[uint64]bool{}
	var l Load
	for _, r := range m.reqs {
		if r.w != w {
			continue
		}
		l.Sequences++
		if !r.done {
			l.PrefillTokens += r.prefill
		}
		for _, h := range r.hashes {
			blocks[h] = true
		}
	}
	l.ActiveBlocks = len(blocks)
	return l
}

// checkActiveInvariants verifies the invariants written on ActiveSequences.
func checkActiveInvariants(a *ActiveSequences) error {
	refs := map[uint32]uint32{}
	perWorker := map[WorkerID]map[uint32]uint32{}
	for _, s := range a.seqs {
		if perWorker[s.worker] == nil {
			perWorker[s.worker] = map[uint32]uint32{}
		}
		for _, slot := range s.slots {
			if !a.t.live(slot) {
				return fmt.Errorf("request on dead slot %d", slot)
			}
			refs[slot]++
			perWorker[s.worker][slot]++
		}
	}
	if err := checkTableInvariants(&a.t); err != nil {
		return err
	}
	for slot := range a.t.keys {
		slot := uint32(slot)
		if !a.t.live(slot) {
			continue
		}
		if a.refs[slot] != refs[slot] {
			return fmt.Errorf("slot %d refs %d, counted %d", slot, a.refs[slot], refs[slot])
		}
		holders := uint32(0)
		for wi := range a.workers {
			w := WorkerID(wi)
			n := perWorker[w][slot]
			if a.t.has(slot, w) != (n > 0) {
				return fmt.Errorf("slot %d worker %d: bit %v, %d requests", slot, w, a.t.has(slot, w), n)
			}
			if n > 0 {
				holders++
				if got, _ := a.workers[w].extra.get(uint64(slot)); got != n-1 {
					return fmt.Errorf("slot %d worker %d: extra %d, want %d", slot, w, got, n-1)
				}
			}
		}
		if holders != a.holders[slot] {
			return fmt.Errorf("slot %d holders %d, counted %d", slot, a.holders[slot], holders)
		}
		if refs[slot] == 0 {
			return fmt.Errorf("slot %d live without requests", slot)
		}
	}
	for wi := range a.workers {
		w := WorkerID(wi)
		if got, want := a.workers[w].blocks, len(perWorker[w]); got != want {
			return fmt.Errorf("worker %d blocks %d, counted %d", w, got, want)
		}
	}
	return nil
}

func (m *activeModel) prefix(w WorkerID, probe []uint64) uint32 {
	active := map[uint64]bool{}
	for _, r := range m.reqs {
		if r.w == w {
			for _, h := range r.hashes {
				active[h] = true
			}
		}
	}
	n := uint32(0)
	for _, h := range probe {
		if !active[h] {
			break
		}
		n++
	}
	return n
}

// TestActiveEveryPathReturnsLoadToZero is the load-tracking trap: whatever mix of
// free, prefill done, re-route, expiry and worker removal ends the requests, every
// worker's load must match the model throughout and be zero at the end.
func TestActiveEveryPathReturnsLoadToZero(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			const bs, workers = 2, 5
			a := NewActiveSequences(60 * time.Second)
			m := &activeModel{reqs: map[string]modelReq{}}
			now := t0
			for step := 0; step < 3000; step++ {
				now = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
				id := fmt.Sprint("r", rng.IntN(60))
				switch op := rng.IntN(10); {
				case op < 4:
					var ids []int
					for i := 0; i < rng.IntN(6); i++ {
						ids = append(ids, rng.IntN(3))
					}
					h := SequenceHashes(blocksOf(bs, ids...), bs, "")
					w := WorkerID(rng.IntN(workers))
					p := int64(rng.IntN(100))
					a.Add(id, w, h, p, now)
					m.reqs[id] = modelReq{w: w, hashes: h, prefill: p, start: now}
				case op < 6:
					a.PrefillDone(id)
					if r, ok := m.reqs[id]; ok {
						r.done = true
						m.reqs[id] = r
					}
				case op < 8:
					a.Free(id)
					delete(m.reqs, id)
				case op < 9:
					a.Expire(now)
					for id, r := range m.reqs {
						if now.Sub(r.start) > 60*time.Second {
							delete(m.reqs, id)
						}
					}
				default:
					if rng.IntN(10) == 0 {
						w := WorkerID(rng.IntN(workers))
						a.RemoveWorker(w)
						for id, r := range m.reqs {
							if r.w == w {
								delete(m.reqs, id)
							}
						}
					}
				}
				for w := WorkerID(0); w < workers; w++ {
					if got, want := a.Load(w), m.load(w); got != want {
						t.Fatalf("step %d worker %d: load %+v, model %+v", step, w, got, want)
					}
				}
				probe := SequenceHashes(blocksOf(bs, rng.IntN(3), rng.IntN(3), rng.IntN(3)), bs, "")
				out := make([]uint32, workers)
				a.ActivePrefix(probe, out)
				for w := WorkerID(0); w < workers; w++ {
					if want := m.prefix(w, probe); out[w] != want {
						t.Fatalf("step %d worker %d: active prefix %d, model %d", step, w, out[w], want)
					}
				}
				if a.Len() != len(m.reqs) {
					t.Fatalf("step %d: %d active, model %d", step, a.Len(), len(m.reqs))
				}
				if err := checkActiveInvariants(a); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			// End every remaining request, alternating paths.
			i := 0
			for id := range m.reqs {
				if i%2 == 0 {
					a.Free(id)
				}
				i++
			}
			a.Expire(now.Add(time.Hour))
			for w := WorkerID(0); w < workers; w++ {
				if a.Load(w) != (Load{}) {
					t.Fatalf("worker %d load %+v after all requests ended", w, a.Load(w))
				}
			}
			if a.Blocks() != 0 || a.Len() != 0 || a.queue.len() != 0 {
				t.Fatalf("leftovers: %d blocks, %d requests, %d queued", a.Blocks(), a.Len(), a.queue.len())
			}
		})
	}
}
