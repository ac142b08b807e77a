package model

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// mergesBPEModel is HF tokenizers' BPE model over characters, as SentencePiece-style
// tokenizers use it (Llama-2, Mistral v0.x, Gemma): a word starts as its characters
// (a character outside the vocabulary becomes its <0xNN> byte tokens with byte_fallback,
// else the unk token, consecutive ones fused with fuse_unk), then the adjacent pair with
// the lowest merge rank is merged, leftmost first on ties, until no pair has a merge.
//
// These files have no pre-tokenizer that splits (Llama-2) or one that never splits
// after the normalizer has replaced the spaces (Gemma), so a word is a whole text between
// added tokens. encodeWord cuts it before the "▁" that no merge can join to the
// character before it (docs/reference.md §25) and merges each piece on its own, which
// gives the same tokens.
type mergesBPEModel struct {
	vocab map[string]uint32
	// ascii[c] is the id of the one-character token c, -1 when absent.
	ascii [128]int32
	// merges maps a pair of ids to its rank and the id it merges into.
	merges map[uint64]mergeRule
	// byteIDs[b] is the id of <0xNN>, -1 when absent; nil without byte_fallback.
	byteIDs      *[256]int32
	unkID        int32 // -1 when there is no unk token
	fuseUnk      bool
	ignoreMerges bool
	// cutBeforeSpace: "▁" is a one-character token, so a word may be cut before a "▁".
	// joinsSpace holds the characters that end the left side of a merge whose right side
	// starts with "▁": a cut after one of them is not safe.
	cutBeforeSpace bool
	joinsSpace     map[rune]bool
}

// spaceMark is SentencePiece's word-boundary mark, U+2581.
const spaceMark = "\u2581"

type mergeRule struct{ rank, id uint32 }

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

type bpeSymbol struct {
	id         uint32
	prev, next int32 // -1 at the ends
	dead       bool
}

// mergeScratch holds the buffers one encodeWord call reuses across its pieces.
type mergeScratch struct {
	ids  []uint32
	syms []bpeSymbol
	heap []mergeCand
}

// scratchPool keeps mergeScratch buffers between calls (a word that is a whole
// paragraph needs buffers as long as it).
var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

// maxPooledScratch is the number of symbols above which buffers are not kept.
const maxPooledScratch = 1 << 16

func putScratch(s *mergeScratch) {
	if cap(s.ids) > maxPooledScratch || cap(s.heap) > 4*maxPooledScratch {
		return
	}
	scratchPool.Put(s)
}

func (m *mergesBPEModel) encodeWord(word string, out []uint32) []uint32 {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(out, id)
		}
	}
	s := scratchPool.Get().(*mergeScratch)
	defer putScratch(s)
	if !m.cutBeforeSpace {
		return m.encodePiece(word, out, s)
	}
	start := 0
	for i := 1; i < len(word); {
		j := strings.Index(word[i:], spaceMark)
		if j < 0 {
			break
		}
		cut := i + j
		if m.canCutAt(word, cut) {
			out = m.encodePiece(word[start:cut], out, s)
			start = cut
		}
		i = cut + len(spaceMark)
	}
	return m.encodePiece(word[start:], out, s)
}

// canCutAt reports whether no merge can join the character before word[cut:] (which
// starts with "▁") to what follows: the character is a token of its own (neither byte
// fallback nor unk, whose strings end in other characters) that ends the left side of no
// merge with a right side starting with "▁". Every token built across the cut would
// contain that character followed by "▁", so it would need such a merge.
func (m *mergesBPEModel) canCutAt(word string, cut int) bool {
	r, size := utf8.DecodeLastRuneInString(word[:cut])
	if r == utf8.RuneError && size <= 1 {
		return false
	}
	if r < utf8.RuneSelf {
		if m.ascii[r] < 0 {
			return false
		}
	} else if _, ok := m.vocab[word[cut-size:cut]]; !ok {
		return false
	}
	return !m.joinsSpace[r]
}

// encodePiece merges one piece of a word (the whole word when it is not cut).
func (m *mergesBPEModel) encodePiece(word string, out []uint32, s *mergeScratch) []uint32 {
	ids := s.ids[:0]
	lastUnk := false
	push := func(id uint32, unk bool) {
		if unk && lastUnk && m.fuseUnk {
			return
		}
		lastUnk = unk
		ids = append(ids, id)
	}
	for i := 0; i < len(word); {
		c := word[i]
		if c < utf8.RuneSelf {
			if id := m.ascii[c]; id >= 0 {
				push(uint32(id), false)
				i++
				continue
			}
			m.unknown(word[i:i+1], push)
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+size]
		if id, ok := m.vocab[ch]; ok {
			push(id, false)
		} else {
			m.unknown(ch, push)
		}
		i += size
	}
	s.ids = ids
	if len(ids) <= smallMerge {
		return append(out, m.mergeSmall(ids)...)
	}
	syms := s.syms[:0]
	for i, id := range ids {
		syms = append(syms, bpeSymbol{id: id, prev: int32(i) - 1, next: int32(i) + 1})
	}
	syms[len(syms)-1].next = -1
	s.syms = syms
	s.heap = m.mergeAll(syms, s.heap[:0])
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// smallMerge is the number of symbols up to which a piece is merged by scanning its
// pairs for the lowest rank at every step (most words), above which by mergeAll's heap.
const smallMerge = 24

// mergeSmall merges ids in place and returns them: the same merges as mergeAll, found by
// scanning the pairs' ranks (ranks[i] is that of ids[i] and ids[i+1]).
func (m *mergesBPEModel) mergeSmall(ids []uint32) []uint32 {
	var rules [smallMerge]mergeRule
	const none = ^uint32(0)
	rule := func(i int) mergeRule {
		if r, ok := m.merges[pairKey(ids[i], ids[i+1])]; ok {
			return r
		}
		return mergeRule{rank: none}
	}
	for i := 0; i+1 < len(ids); i++ {
		rules[i] = rule(i)
	}
	for len(ids) > 1 {
		best := -1
		for i := 0; i+1 < len(ids); i++ {
			if rules[i].rank != none && (best < 0 || rules[i].rank < rules[best].rank) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		ids[best] = rules[best].id
		copy(ids[best+1:], ids[best+2:])
		ids = ids[:len(ids)-1]
		copy(rules[best:], rules[best+1:len(ids)])
		if best+1 < len(ids) {
			rules[best] = rule(best)
		}
		if best > 0 {
			rules[best-1] = rule(best - 1)
		}
	}
	return ids
}

// unknown handles a character that is not a token: its byte tokens, else unk, else
// nothing (HF drops it when the model has no unk token).
func (m *mergesBPEModel) unknown(ch string, push func(id uint32, unk bool)) {
	if m.byteIDs != nil {
		ok := true
		for j := 0; j < len(ch); j++ {
			if m.byteIDs[ch[j]] < 0 {
				ok = false
				break
			}
		}
		if ok {
			for j := 0; j < len(ch); j++ {
				push(uint32(m.byteIDs[ch[j]]), false)
			}
			return
		}
	}
	if m.unkID >= 0 {
		push(uint32(m.unkID), true)
	}
}

// mergeCand is a queued merge: key is its rank above its position (the lower key merges
// first: lowest rank, leftmost on ties), left and rgt the pair's ids when queued, to drop
// the entries a neighbouring merge has made stale.
type mergeCand struct {
	key           uint64
	id, left, rgt uint32
}

func candKey(rank uint32, pos int32) uint64 { return uint64(rank)<<32 | uint64(uint32(pos)) }

// mergeAll applies merges to the linked symbols until none applies; h is an empty heap
// to use, returned for reuse.
func (m *mergesBPEModel) mergeAll(syms []bpeSymbol, h []mergeCand) []mergeCand {
	cand := func(i int32) (mergeCand, bool) {
		j := syms[i].next
		if j < 0 {
			return mergeCand{}, false
		}
		r, ok := m.merges[pairKey(syms[i].id, syms[j].id)]
		return mergeCand{key: candKey(r.rank, i), id: r.id, left: syms[i].id, rgt: syms[j].id}, ok
	}
	for i := range syms {
		if c, ok := cand(int32(i)); ok {
			h = append(h, c)
		}
	}
	heapInit(h)
	for len(h) > 0 {
		var c mergeCand
		c, h = heapPop(h)
		i := int32(uint32(c.key))
		s := &syms[i]
		if s.dead || s.id != c.left || s.next < 0 || syms[s.next].id != c.rgt {
			continue
		}
		j := s.next
		syms[j].dead = true
		s.id = c.id
		s.next = syms[j].next
		if s.next >= 0 {
			syms[s.next].prev = i
			if c, ok := cand(i); ok {
				h = heapPush(h, c)
			}
		}
		if s.prev >= 0 {
			if c, ok := cand(s.prev); ok {
				h = heapPush(h, c)
			}
		}
	}
	return h
}

// heapInit orders h as a binary min-heap by key.
func heapInit(h []mergeCand) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapPush(h []mergeCand, e mergeCand) []mergeCand {
	h = append(h, e)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[i].key >= h[p].key {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []mergeCand) (mergeCand, []mergeCand) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	heapDown(h, 0)
	return top, h
}

func heapDown(h []mergeCand, i int) {
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].key < h[m].key {
			m = l
		}
		if r < len(h) && h[r].key < h[m].key {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
