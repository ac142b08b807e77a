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

// checkActiveInvariants verifies the invariants written on ActiveSequences and
// activeTree, recounting every node's requests from the requests' paths.
func checkActiveInvariants(a *ActiveSequences) error {
	t := &a.tr
	refs := map[uint32]uint32{}
	ends := map[uint32]uint32{}
	perWorker := map[WorkerID]map[uint32]uint32{}
	for id, s := range a.seqs {
		if perWorker[s.worker] == nil {
			perWorker[s.worker] = map[uint32]uint32{}
		}
		if s.tail != noSlot {
			ends[s.tail]++
		}
		for x, n := s.tail, 0; x != noSlot; x = t.nodes[x].parent {
			if int(x) >= len(t.nodes) || len(t.nodes[x].hashes) == 0 {
				return fmt.Errorf("request %s on dead node %d", id, x)
			}
			if n++; n > len(t.nodes) {
				return fmt.Errorf("request %s: parent cycle", id)
			}
			refs[x]++
			perWorker[s.worker][x]++
		}
	}
	children := map[uint32]uint32{}
	live, blocks := 0, 0
	for x := range t.nodes {
		x := uint32(x)
		n := &t.nodes[x]
		if len(n.hashes) == 0 {
			for _, b := range t.row(x) {
				if b != 0 {
					return fmt.Errorf("free node %d has a bitset", x)
				}
			}
			continue
		}
		live++
		blocks += len(n.hashes)
		if n.parent != noSlot {
			children[n.parent]++
		}
		if got, ok := t.lookup(n.parent, n.hashes[0]); !ok || got != x || !n.indexed {
			return fmt.Errorf("node %d not found from its parent (%d, %v, indexed %v)", x, got, ok, n.indexed)
		}
	}
	users := map[uint32]uint32{}
	for x := range t.nodes {
		if n := &t.nodes[x]; len(n.hashes) > 0 {
			users[n.run]++
			if b := t.runs[n.run].buf; len(b) == 0 || &n.hashes[0] != &b[:len(n.hashes)+cap(b)-cap(n.hashes)][cap(b)-cap(n.hashes)] {
				return fmt.Errorf("node %d: hashes outside its run %d", x, n.run)
			}
		}
	}
	for r := range t.runs {
		if t.runs[r].users != users[uint32(r)] {
			return fmt.Errorf("run %d: %d users, counted %d", r, t.runs[r].users, users[uint32(r)])
		}
	}
	pooled := 0
	for _, class := range t.pool {
		for _, b := range class {
			pooled += cap(b)
		}
	}
	if pooled != t.pooled {
		return fmt.Errorf("pool holds %d words, counted %d", t.pooled, pooled)
	}
	if live != t.live || blocks != t.blocks || t.index.len() != live {
		return fmt.Errorf("%d live nodes of %d blocks, tree says %d of %d, index %d", live, blocks, t.live, t.blocks, t.index.len())
	}
	for x := range t.nodes {
		x := uint32(x)
		n := &t.nodes[x]
		if len(n.hashes) == 0 {
			continue
		}
		if refs[x] == 0 {
			return fmt.Errorf("node %d live without requests", x)
		}
		if n.refs != refs[x] || n.ends != ends[x] {
			return fmt.Errorf("node %d refs %d ends %d, counted %d, %d", x, n.refs, n.ends, refs[x], ends[x])
		}
		if n.children != children[x] {
			return fmt.Errorf("node %d children %d, counted %d", x, n.children, children[x])
		}
		listed := uint32(0)
		for c, prev := n.first, noSlot; c != noSlot; prev, c = c, t.nodes[c].next {
			if t.nodes[c].parent != x || t.nodes[c].prev != prev {
				return fmt.Errorf("node %d: child list broken at %d", x, c)
			}
			if listed++; listed > n.children {
				return fmt.Errorf("node %d: child list longer than %d", x, n.children)
			}
		}
		if listed != n.children {
			return fmt.Errorf("node %d lists %d children of %d", x, listed, n.children)
		}
		if n.ends == 0 && n.children == 1 {
			return fmt.Errorf("node %d has one child and no request ending at it (not merged)", x)
		}
		holders := uint32(0)
		for wi := range a.workers {
			w := WorkerID(wi)
			c := perWorker[w][x]
			if t.has(x, w) != (c > 0) {
				return fmt.Errorf("node %d worker %d: bit %v, %d requests", x, w, t.has(x, w), c)
			}
			got, ok := a.workers[w].extra.get(uint64(x))
			if c > 0 {
				holders++
			}
			if c > 1 && got != c-1 || c <= 1 && ok {
				return fmt.Errorf("node %d worker %d: extra %d (%v), want %d", x, w, got, ok, int(c)-1)
			}
		}
		if holders != n.holders {
			return fmt.Errorf("node %d holders %d, counted %d", x, n.holders, holders)
		}
	}
	for wi := range a.workers {
		w := WorkerID(wi)
		want, shared := 0, 0
		for x, c := range perWorker[w] {
			want += len(t.nodes[x].hashes)
			if c > 1 {
				shared++
			}
		}
		if got := a.workers[w].blocks; got != want {
			return fmt.Errorf("worker %d blocks %d, counted %d", w, got, want)
		}
		if got := a.workers[w].extra.len(); got != shared {
			return fmt.Errorf("worker %d: %d extra entries, %d nodes shared by its requests", w, got, shared)
		}
	}
	return nil
}

// requestBlocks is the number of prompt blocks of active request id (0 if not active).
func (a *ActiveSequences) requestBlocks(id string) int {
	s, ok := a.seqs[id]
	if !ok {
		return 0
	}
	n := 0
	for x := s.tail; x != noSlot; x = a.tr.nodes[x].parent {
		n += len(a.tr.nodes[x].hashes)
	}
	return n
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
	return leadingIn(probe, active)
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

// leadingIn is the number of leading hashes of probe that are in set: a reference
// model's active prefix.
func leadingIn(probe []uint64, set map[uint64]bool) uint32 {
	n := uint32(0)
	for _, h := range probe {
		if !set[h] {
			break
		}
		n++
	}
	return n
}
