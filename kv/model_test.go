package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// naiveSeqHashes computes docs/reference.md §2 hashes the slow, obvious way, independently of
// hash.go: encode tokens as little-endian bytes, hash with xxh3 directly.
func naiveSeqHashes(tokens []uint32, bs int, lora string, hasParent bool, parent uint64) []uint64 {
	seed := uint64(1337)
	if lora != "" {
		seed += xxh3.Hash([]byte(lora))
	}
	var out []uint64
	prev, chained := parent, hasParent
	for i := 0; i+bs <= len(tokens); i += bs {
		b := make([]byte, 0, 4*bs)
		for _, t := range tokens[i : i+bs] {
			b = binary.LittleEndian.AppendUint32(b, t)
		}
		local := xxh3.HashSeed(b, seed)
		if chained {
			var c []byte
			c = binary.LittleEndian.AppendUint64(c, prev)
			c = binary.LittleEndian.AppendUint64(c, local)
			prev = xxh3.HashSeed(c, 1337)
		} else {
			prev, chained = local, true
		}
		out = append(out, prev)
	}
	return out
}

// model is the reference model of Index: per worker, engine hash → sequence hash.
type model struct {
	bs      int
	workers map[WorkerID]map[uint64]uint64
	// held counts, per worker, the engine hashes mapping to each sequence hash (derived).
	held map[WorkerID]map[uint64]int
}

func newModel(bs int) *model {
	return &model{bs: bs, workers: map[WorkerID]map[uint64]uint64{}, held: map[WorkerID]map[uint64]int{}}
}

func (m *model) set(w WorkerID, e, seq uint64) {
	m.del(w, e)
	if m.workers[w] == nil {
		m.workers[w] = map[uint64]uint64{}
		m.held[w] = map[uint64]int{}
	}
	m.workers[w][e] = seq
	m.held[w][seq]++
}

func (m *model) del(w WorkerID, e uint64) {
	seq, ok := m.workers[w][e]
	if !ok {
		return
	}
	delete(m.workers[w], e)
	if m.held[w][seq]--; m.held[w][seq] == 0 {
		delete(m.held[w], seq)
	}
}

func (m *model) apply(w WorkerID, ev Event) error {
	switch ev.Kind {
	case BlockStored:
		if ev.BlockSize != m.bs || len(ev.TokenIDs) != len(ev.EngineHashes)*m.bs {
			return ErrInvalidEvent
		}
		if ev.Medium != "" && ev.Medium != "GPU" {
			return nil
		}
		if len(ev.EngineHashes) == 0 {
			return nil
		}
		var parent uint64
		if ev.HasParent {
			p, ok := m.workers[w][ev.ParentHash]
			if !ok {
				return ErrUnknownParent
			}
			parent = p
		}
		seq := naiveSeqHashes(ev.TokenIDs, m.bs, ev.LoraName, ev.HasParent, parent)
		for i, e := range ev.EngineHashes {
			m.set(w, e, seq[i])
		}
	case BlockRemoved:
		if ev.Medium != "" && ev.Medium != "GPU" {
			return nil
		}
		for _, e := range ev.EngineHashes {
			m.del(w, e)
		}
	case AllBlocksCleared:
		clear(m.workers[w])
		clear(m.held[w])
	default:
		return ErrInvalidEvent
	}
	return nil
}

func (m *model) overlap(w WorkerID, prompt []uint64) uint32 {
	n := uint32(0)
	for _, h := range prompt {
		if m.held[w][h] == 0 {
			break
		}
		n++
	}
	return n
}

// chooser is a source of small choices: a seeded RNG, or fuzzer bytes.
type chooser interface{ IntN(n int) int }

type byteChooser struct{ b []byte }

func (c *byteChooser) IntN(n int) int {
	if n <= 1 || len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % n
}

func (c *byteChooser) done() bool { return len(c.b) == 0 }

// streamGen produces KV events that exercise sharing, chaining, orphans, engine hash
// reuse, unknown parents, other tiers and malformed events.
type streamGen struct {
	bs       int
	nWorkers int
	// held engine hashes per worker, as the generator believes (may be stale; fine).
	alphabet [][]uint32
}

func newStreamGen(bs, nWorkers, nContents int) *streamGen {
	g := &streamGen{bs: bs, nWorkers: nWorkers}
	for c := 0; c < nContents; c++ {
		blk := make([]uint32, bs)
		for i := range blk {
			blk[i] = uint32(c*1000 + i)
		}
		g.alphabet = append(g.alphabet, blk)
	}
	return g
}

func (g *streamGen) tokens(c chooser, n int) []uint32 {
	var t []uint32
	for i := 0; i < n; i++ {
		t = append(t, g.alphabet[c.IntN(len(g.alphabet))]...)
	}
	return t
}

// next returns a worker and an event. held lists the worker's engine hashes (from the
// model), used to pick parents and removals.
func (g *streamGen) next(c chooser, m *model) (WorkerID, Event) {
	w := WorkerID(c.IntN(g.nWorkers))
	var held []uint64
	for e := range m.workers[w] {
		held = append(held, e)
	}
	// deterministic order for reproducibility
	sortU64(held)
	loras := []string{"", "", "", "adapter-a"}
	switch op := c.IntN(20); {
	case op < 11: // store
		n := 1 + c.IntN(4)
		ev := Event{Kind: BlockStored, BlockSize: g.bs, TokenIDs: g.tokens(c, n), LoraName: loras[c.IntN(len(loras))]}
		switch p := c.IntN(10); {
		case p < 3 || len(held) == 0:
		case p == 9:
			ev.HasParent, ev.ParentHash = true, 1<<40+uint64(c.IntN(1000)) // unknown
		default:
			ev.HasParent, ev.ParentHash = true, held[c.IntN(len(held))]
		}
		for i := 0; i < n; i++ {
			// a small engine-hash space forces reuse of engine hashes for other content
			ev.EngineHashes = append(ev.EngineHashes, uint64(c.IntN(64)))
		}
		switch c.IntN(25) {
		case 0:
			ev.BlockSize = g.bs * 2
		case 1:
			ev.TokenIDs = ev.TokenIDs[:len(ev.TokenIDs)-1]
		case 2:
			ev.Medium = "CPU_PINNED"
		case 3:
			ev.Medium = "GPU"
		}
		return w, ev
	case op < 18: // remove
		ev := Event{Kind: BlockRemoved}
		k := 1 + c.IntN(3)
		for i := 0; i < k; i++ {
			if len(held) > 0 && c.IntN(5) != 0 {
				ev.EngineHashes = append(ev.EngineHashes, held[c.IntN(len(held))])
			} else {
				ev.EngineHashes = append(ev.EngineHashes, uint64(c.IntN(128)))
			}
		}
		if c.IntN(15) == 0 {
			ev.Medium = "DISK"
		}
		return w, ev
	case op < 19:
		return w, Event{Kind: AllBlocksCleared}
	default:
		if c.IntN(4) == 0 {
			return w, Event{Kind: EventKind(9)}
		}
		return w, Event{Kind: BlockStored, BlockSize: g.bs} // empty store
	}
}

func (g *streamGen) probe(c chooser) ([]uint32, string) {
	loras := []string{"", "", "adapter-a"}
	return g.tokens(c, c.IntN(7)), loras[c.IntN(len(loras))]
}

func sortU64(s []uint64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// checkTableInvariants verifies the invariants written on bitTable.
func checkTableInvariants(t *bitTable) error {
	n := 0
	branches := map[uint32]uint32{}
	for si := range t.keys {
		s := uint32(si)
		if !t.live(s) {
			for _, b := range t.row(s) {
				if b != 0 {
					return fmt.Errorf("free slot %d has bits", s)
				}
			}
			continue
		}
		n++
		p := t.parent[s]
		if p != noSlot && !t.live(p) {
			return fmt.Errorf("slot %d has dead parent %d", s, p)
		}
		got, inMap := t.index.get(t.keys[s])
		switch t.state[s] {
		case slotHashed:
			if !inMap || got != s {
				return fmt.Errorf("hashed slot %d not in the map (%d, %v)", s, got, inMap)
			}
			if p != noSlot {
				branches[p]++
			}
		case slotLinked:
			if p == noSlot || t.next[p] != s {
				return fmt.Errorf("linked slot %d is not its parent's first child", s)
			}
			if inMap {
				return fmt.Errorf("linked slot %d is also in the map", s)
			}
		}
		if c := t.next[s]; c != noSlot && (!t.live(c) || t.state[c] != slotLinked || t.parent[c] != s) {
			return fmt.Errorf("slot %d: next %d is not a linked child", s, c)
		}
	}
	for si := range t.keys {
		s := uint32(si)
		if t.live(s) && t.branches[s] != branches[s] {
			return fmt.Errorf("slot %d branches %d, counted %d", s, t.branches[s], branches[s])
		}
	}
	if n != t.len() {
		return fmt.Errorf("len %d, counted %d live slots", t.len(), n)
	}
	inMap := 0
	t.index.each(func(k uint64, v uint32) {
		inMap++
		if !t.live(v) || t.keys[v] != k {
			n = -1
		}
	})
	if n < 0 {
		return fmt.Errorf("map entry names a dead or different slot")
	}
	for _, s := range t.free {
		if t.live(s) {
			return fmt.Errorf("slot %d both free and live", s)
		}
	}
	return nil
}

// entries copies a u64Map into a Go map.
func entries(m *u64Map) map[uint64]uint32 {
	out := map[uint64]uint32{}
	m.each(func(k uint64, v uint32) { out[k] = v })
	return out
}

// checkIndexInvariants verifies the invariants written on Index against its internals.
func checkIndexInvariants(x *Index) error {
	if err := checkTableInvariants(&x.t); err != nil {
		return err
	}
	live := map[uint32]bool{}
	for s := range x.t.keys {
		if x.t.live(uint32(s)) {
			live[uint32(s)] = true
		}
	}
	children := map[uint32]uint32{}
	for s := range live {
		if p := x.t.parent[s]; p != noSlot {
			children[p]++
		}
	}
	for s := range live {
		m := x.meta[s]
		pop := uint32(0)
		for _, b := range x.t.row(s) {
			pop += uint32(bits.OnesCount64(b))
		}
		if pop != m.holders {
			return fmt.Errorf("slot %d holders %d, bits %d", s, m.holders, pop)
		}
		if children[s] != m.children {
			return fmt.Errorf("slot %d children %d, counted %d", s, m.children, children[s])
		}
		if m.holders == 0 && m.children == 0 {
			return fmt.Errorf("slot %d live but neither held nor needed", s)
		}
	}
	for _, s := range x.t.free {
		if live[s] {
			return fmt.Errorf("slot %d both free and live", s)
		}
		for _, b := range x.t.row(s) {
			if b != 0 {
				return fmt.Errorf("free slot %d has bits", s)
			}
		}
	}
	refsOf := make([]map[uint32]uint32, len(x.workers))
	for wi, wb := range x.workers {
		w := WorkerID(wi)
		if wb == nil {
			continue
		}
		refs := map[uint32]uint32{}
		refsOf[wi] = refs
		for _, s := range entries(&wb.blocks) {
			if !live[s] {
				return fmt.Errorf("worker %d maps to dead slot %d", w, s)
			}
			refs[s]++
		}
		for s, want := range refs {
			got := wb.extra[s]
			if x.t.has(s, w) {
				got++
			}
			if want != got {
				return fmt.Errorf("worker %d slot %d: %d engine hashes, bit+extra %d", w, s, want, got)
			}
		}
		for s := range wb.extra {
			if refs[s] == 0 {
				return fmt.Errorf("worker %d slot %d: extra count without engine hashes", w, s)
			}
		}
	}
	for s := range live {
		for k, word := range x.t.row(s) {
			for word != 0 {
				w := k*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if w >= len(refsOf) || refsOf[w][s] == 0 {
					return fmt.Errorf("worker %d slot %d: bit set without engine hashes", w, s)
				}
			}
		}
	}
	return nil
}

// compareIndex checks x against the model on every worker and the given probes.
func compareIndex(x *Index, m *model, nWorkers int, probes [][]uint64) error {
	for w := 0; w < nWorkers; w++ {
		if got, want := x.Blocks(WorkerID(w)), len(m.workers[WorkerID(w)]); got != want {
			return fmt.Errorf("worker %d: Blocks %d, model %d", w, got, want)
		}
	}
	var out []uint32
	for _, p := range probes {
		out = x.Overlaps(p, out)
		for w := 0; w < nWorkers; w++ {
			var got uint32
			if w < len(out) {
				got = out[w]
			}
			if want := m.overlap(WorkerID(w), p); got != want {
				return fmt.Errorf("worker %d probe of %d blocks: overlap %d, model %d", w, len(p), got, want)
			}
		}
	}
	return nil
}

// runDifferential drives index and model with the same stream and compares them; every
// dumpEvery steps it also checks that Dump replays into an identical index.
func runDifferential(t testing.TB, c chooser, steps, nWorkers, dumpEvery int, stop func() bool) {
	const bs = 4
	g := newStreamGen(bs, nWorkers, 4)
	x := NewIndex(bs)
	m := newModel(bs)
	var probes [][]uint64
	for i := 0; i < 24; i++ {
		toks, lora := g.probe(c)
		probes = append(probes, SequenceHashes(toks, bs, lora))
	}
	for step := 0; step < steps && (stop == nil || !stop()); step++ {
		w, ev := g.next(c, m)
		errX := x.Apply(w, ev)
		errM := m.apply(w, ev)
		if (errX == nil) != (errM == nil) || (errM != nil && !errors.Is(errX, errM)) {
			t.Fatalf("step %d worker %d %+v: index error %v, model error %v", step, w, ev, errX, errM)
		}
		if step%7 == 0 || nWorkers <= 8 {
			if err := checkIndexInvariants(x); err != nil {
				t.Fatalf("step %d after %+v: %v", step, ev, err)
			}
		}
		if nWorkers <= 8 || step%5 == 0 {
			if err := compareIndex(x, m, nWorkers, probes); err != nil {
				t.Fatalf("step %d after worker %d %+v: %v", step, w, ev, err)
			}
		}
		if dumpEvery > 0 && step%dumpEvery == dumpEvery-1 {
			y := NewIndex(bs)
			for wi := 0; wi < nWorkers; wi++ {
				for _, dev := range x.Dump(WorkerID(wi)) {
					if err := y.Apply(WorkerID(wi), dev); err != nil {
						t.Fatalf("step %d: replaying dump of worker %d: %v", step, wi, err)
					}
				}
			}
			if err := checkIndexInvariants(y); err != nil {
				t.Fatalf("step %d replayed index: %v", step, err)
			}
			if err := compareIndex(y, m, nWorkers, probes); err != nil {
				t.Fatalf("step %d replayed index: %v", step, err)
			}
			for wi := 0; wi < nWorkers; wi++ {
				if !eventsEqual(x.Dump(WorkerID(wi)), y.Dump(WorkerID(wi))) {
					t.Fatalf("step %d: worker %d: the replayed index dumps differently", step, wi)
				}
			}
			if x.Nodes() != y.Nodes() {
				t.Fatalf("step %d: replayed index has %d nodes, original %d", step, y.Nodes(), x.Nodes())
			}
			// The replay must also carry the engine hashes: the same removals apply.
			for wi := 0; wi < nWorkers; wi++ {
				for e := range m.workers[WorkerID(wi)] {
					ev := Event{Kind: BlockRemoved, EngineHashes: []uint64{e}}
					_ = x.Apply(WorkerID(wi), ev)
					_ = y.Apply(WorkerID(wi), ev)
					_ = m.apply(WorkerID(wi), ev)
					break
				}
			}
			if err := compareIndex(y, m, nWorkers, probes); err != nil {
				t.Fatalf("step %d replayed index after removals: %v", step, err)
			}
			if err := compareIndex(x, m, nWorkers, probes); err != nil {
				t.Fatalf("step %d index after removals: %v", step, err)
			}
		}
	}
}

var _ chooser = (*rand.Rand)(nil)
