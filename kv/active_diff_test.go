package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// refActive is the reference for ActiveSequences: every figure recomputed from the
// list of active requests, with maps.
type refActive struct {
	maxAge time.Duration
	reqs   map[string]*refReq
}

type refReq struct {
	w        WorkerID
	hashes   []uint64
	prefill  int64
	done     bool // prefill done
	decoding bool // PrefillDoneAt
	start    time.Time
}

func (m *refActive) add(id string, w WorkerID, hashes []uint64, prefill int64, now time.Time) {
	m.reqs[id] = &refReq{w: w, hashes: append([]uint64(nil), hashes...), prefill: max(prefill, 0), start: now}
}

func (m *refActive) load(w WorkerID) Load {
	var l Load
	blocks := map[uint64]bool{}
	for _, r := range m.reqs {
		if r.w != w {
			continue
		}
		l.Sequences++
		if !r.done {
			l.PrefillTokens += r.prefill
		}
		if r.decoding {
			l.Decoding++
		}
		for _, h := range r.hashes {
			blocks[h] = true
		}
	}
	l.ActiveBlocks = len(blocks)
	return l
}

func (m *refActive) blocks() int {
	all := map[uint64]bool{}
	for _, r := range m.reqs {
		for _, h := range r.hashes {
			all[h] = true
		}
	}
	return len(all)
}

func (m *refActive) prefix(w WorkerID, probe []uint64) uint32 {
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

// activeOps drives an ActiveSequences and its reference with the operations next
// returns, comparing them after every step. Prompts are paths in a small tree of token
// blocks (next picks each block from a few), so that requests share prefixes, leave one
// another mid-run and end inside one another; worker ids reach past 64, so bitsets of
// two words are exercised.
type activeOps struct {
	next    func(n int) int // a number in [0, n)
	workers int
	ids     int
	maxAge  time.Duration
}

func (o activeOps) prompt(bs int) []uint64 {
	blocks := make([]int, o.next(14))
	for i := range blocks {
		blocks[i] = o.next(3)
	}
	if o.next(4) == 0 && len(blocks) > 0 { // a long tail of its own
		for i := 0; i < 20; i++ {
			blocks = append(blocks, 3+o.next(1000))
		}
	}
	return SequenceHashes(blocksOf(bs, blocks...), bs, "")
}

func (o activeOps) run(tb testing.TB, steps int) {
	tb.Helper()
	const bs = 2
	a := NewActiveSequences(o.maxAge)
	m := &refActive{maxAge: o.maxAge, reqs: map[string]*refReq{}}
	now := t0
	out := make([]uint32, o.workers)
	for step := 0; step < steps; step++ {
		now = now.Add(time.Duration(o.next(2000)) * time.Millisecond)
		id := fmt.Sprint("r", o.next(o.ids))
		var op string
		switch k := o.next(20); {
		case k < 8:
			op = "add"
			w := WorkerID(o.next(o.workers))
			h := o.prompt(bs)
			p := int64(o.next(200)) - 20
			a.Add(id, w, h, p, now)
			m.add(id, w, h, p, now)
		case k < 11:
			op = "prefill done"
			_, ok := a.PrefillDoneAt(id, now)
			r, live := m.reqs[id]
			if ok != (live && !r.done) {
				tb.Fatalf("step %d: PrefillDoneAt(%s) %v, reference live %v done %v", step, id, ok, live, live && r.done)
			}
			if live {
				r.done, r.decoding = true, r.decoding || ok
			}
		case k < 12:
			op = "prefill done (no clock)"
			ok := a.PrefillDone(id)
			r, live := m.reqs[id]
			if ok != live {
				tb.Fatalf("step %d: PrefillDone(%s) %v, reference %v", step, id, ok, live)
			}
			if live {
				r.done = true
			}
		case k < 17:
			op = "free"
			_, live := m.reqs[id]
			if got := a.Free(id); got != live {
				tb.Fatalf("step %d: Free(%s) %v, reference %v", step, id, got, live)
			}
			delete(m.reqs, id)
		case k < 19:
			op = "expire"
			n := 0
			if m.maxAge > 0 {
				for id, r := range m.reqs {
					if now.Sub(r.start) > m.maxAge {
						delete(m.reqs, id)
						n++
					}
				}
			}
			if got := a.Expire(now); got != n {
				tb.Fatalf("step %d: expired %d, reference %d", step, got, n)
			}
		default:
			op = "remove worker"
			w := WorkerID(o.next(o.workers))
			n := 0
			for id, r := range m.reqs {
				if r.w == w {
					delete(m.reqs, id)
					n++
				}
			}
			if got := a.RemoveWorker(w); got != n {
				tb.Fatalf("step %d: RemoveWorker(%d) freed %d, reference %d", step, w, got, n)
			}
		}
		if a.Len() != len(m.reqs) || a.Blocks() != m.blocks() {
			tb.Fatalf("step %d (%s): %d requests, %d blocks; reference %d, %d", step, op, a.Len(), a.Blocks(), len(m.reqs), m.blocks())
		}
		for w := WorkerID(0); int(w) < o.workers; w++ {
			if got, want := a.Load(w), m.load(w); got != want {
				tb.Fatalf("step %d (%s) worker %d: load %+v, reference %+v", step, op, w, got, want)
			}
		}
		for probes := 0; probes < 2; probes++ {
			probe := o.prompt(bs)
			if probes == 1 { // a prompt that is active somewhere, cut short or not
				for _, r := range m.reqs {
					probe = r.hashes[:o.next(len(r.hashes)+1)]
					break
				}
			}
			a.ActivePrefix(probe, out)
			for w := WorkerID(0); int(w) < o.workers; w++ {
				if want := m.prefix(w, probe); out[w] != want {
					tb.Fatalf("step %d (%s) worker %d: active prefix %d of %d, reference %d", step, op, w, out[w], len(probe), want)
				}
			}
		}
		if err := checkActiveInvariants(a); err != nil {
			tb.Fatalf("step %d (%s): %v", step, op, err)
		}
	}
	for id := range m.reqs {
		a.Free(id)
	}
	if a.Len() != 0 || a.Blocks() != 0 || a.tr.live != 0 || a.tr.index.len() != 0 {
		tb.Fatalf("after freeing all: %d requests, %d blocks, %d nodes, %d indexed", a.Len(), a.Blocks(), a.tr.live, a.tr.index.len())
	}
	for w := WorkerID(0); int(w) < o.workers; w++ {
		if a.Load(w) != (Load{}) {
			tb.Fatalf("worker %d load %+v after freeing all", w, a.Load(w))
		}
	}
}

// TestActiveMatchesReference drives ActiveSequences and refActive with random
// Add/PrefillDone/Free/Expire/RemoveWorker sequences and compares every worker's load,
// the distinct block count and ActivePrefix for random and active prompts after every
// step, and checks the trie's invariants.
func TestActiveMatchesReference(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		ids     int
		maxAge  time.Duration
	}{
		{"few workers, many ids", 4, 40, 60 * time.Second},
		{"two bitset words", 70, 30, 90 * time.Second},
		{"no expiry", 3, 12, 0},
	}
	for _, c := range cases {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed %d", c.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 18))
				activeOps{next: rng.IntN, workers: c.workers, ids: c.ids, maxAge: c.maxAge}.run(t, 1500)
			})
		}
	}
}

// FuzzActiveSequences: the same comparison, with the fuzzer choosing every decision.
func FuzzActiveSequences(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("add add free add split merge expire remove"))
	seed := make([]byte, 512)
	for i := range seed {
		seed[i] = byte(i * 37)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(n int) int {
			if len(data) < 2 {
				return 0
			}
			v := int(binary.LittleEndian.Uint16(data))
			data = data[2:]
			return v % n
		}
		activeOps{next: next, workers: 66, ids: 8, maxAge: 30 * time.Second}.run(t, min(len(data)/6+1, 400))
	})
}
