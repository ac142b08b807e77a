package model

import (
	"math"
	"unicode/utf8"
)

// wordPieceModel is HF tokenizers' WordPiece model (BERT): a word is cut greedily into
// the longest vocabulary entries from the left, the pieces after the first looked up
// with the continuing-subword prefix ("##"). A word longer than maxChars characters, or
// with a part no entry matches, is the unk token as a whole.
type wordPieceModel struct {
	initial map[string]uint32 // entries without the prefix
	cont    map[string]uint32 // entries with the prefix, keyed without it
	unkID   uint32
	// maxChars is max_input_chars_per_word; maxLen the longest entry in bytes (the
	// prefix not counted), which bounds the search.
	maxChars, maxLen int
}

func (m *wordPieceModel) encodeWord(word string, out []uint32) []uint32 {
	if utf8.RuneCountInString(word) > m.maxChars {
		return append(out, m.unkID)
	}
	mark := len(out)
	for start := 0; start < len(word); {
		table := m.initial
		if start > 0 {
			table = m.cont
		}
		end := min(len(word), start+m.maxLen)
		for end > start && !utf8.RuneStart(wordByte(word, end)) {
			end--
		}
		found := false
		for end > start {
			if id, ok := table[word[start:end]]; ok {
				out = append(out, id)
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return append(out[:mark], m.unkID)
		}
		start = end
	}
	return out
}

// wordByte returns word[i], or a rune-start byte at the end of word.
func wordByte(word string, i int) byte {
	if i >= len(word) {
		return 0
	}
	return word[i]
}

// unigramModel is HF tokenizers' Unigram model (T5, XLM-R, ALBERT): the encoding of a
// word is the segmentation into vocabulary pieces with the highest total score (Viterbi);
// a character no piece starts with costs the unk score (the lowest score minus 10),
// consecutive unknowns fuse into one unk, which byte_fallback spells as <0xNN> tokens
// when they all exist.
type unigramModel struct {
	trie     byteTrie
	scores   []float64 // by id
	unkID    uint32
	unkScore float64
	byteIDs  *[256]int32 // nil without byte_fallback
}

type viterbiNode struct {
	score float64
	start int32 // -1: not reached
	id    uint32
	unk   bool
}

func (m *unigramModel) encodeWord(word string, out []uint32) []uint32 {
	n := len(word)
	best := make([]viterbiNode, n+1)
	for i := range best {
		best[i].start = -1
	}
	best[0].start = 0
	for pos := 0; pos < n; {
		if best[pos].start < 0 {
			pos++
			continue
		}
		base := best[pos].score
		_, mblen := utf8.DecodeRuneInString(word[pos:])
		single := false
		m.trie.prefixes(word[pos:], func(length int, id uint32) {
			cand := base + m.scores[id]
			t := &best[pos+length]
			if t.start < 0 || cand > t.score {
				*t = viterbiNode{score: cand, start: int32(pos), id: id}
			}
			if length == mblen {
				single = true
			}
		})
		if !single {
			cand := base + m.unkScore
			t := &best[pos+mblen]
			if t.start < 0 || cand > t.score {
				*t = viterbiNode{score: cand, start: int32(pos), id: m.unkID, unk: true}
			}
		}
		pos += mblen
	}
	// Backtrack, then emit in order, fusing consecutive unknowns.
	type piece struct {
		start, end int
		id         uint32
		unk        bool
	}
	var rev []piece
	for end := n; end > 0; {
		nd := best[end]
		start := int(nd.start)
		if nd.unk && len(rev) > 0 && rev[len(rev)-1].unk {
			rev[len(rev)-1].start = start
		} else {
			rev = append(rev, piece{start: start, end: end, id: nd.id, unk: nd.unk})
		}
		end = start
	}
	for i := len(rev) - 1; i >= 0; i-- {
		p := rev[i]
		if p.unk && m.byteIDs != nil {
			if ids, ok := m.byteTokens(word[p.start:p.end]); ok {
				out = append(out, ids...)
				continue
			}
		}
		out = append(out, p.id)
	}
	return out
}

func (m *unigramModel) byteTokens(s string) ([]uint32, bool) {
	ids := make([]uint32, len(s))
	for i := 0; i < len(s); i++ {
		id := m.byteIDs[s[i]]
		if id < 0 {
			return nil, false
		}
		ids[i] = uint32(id)
	}
	return ids, true
}

// byteTrie maps byte strings to ids for prefix search: the root's children sit in a
// table, deeper ones in a hash map keyed by (node, byte).
type byteTrie struct {
	root  [256]int32       // child node of the root by byte, 0 for none
	edges map[uint64]int32 // (node<<8 | byte) → child node
	ids   []int32          // id ending at each node, -1 for none (node 0 is the root)
}

func newByteTrie(n int) byteTrie {
	return byteTrie{edges: make(map[uint64]int32, n*2), ids: []int32{-1}}
}

func (t *byteTrie) insert(s string, id uint32) {
	node := int32(0)
	for i := 0; i < len(s); i++ {
		var next int32
		if node == 0 {
			next = t.root[s[i]]
		} else {
			next = t.edges[uint64(node)<<8|uint64(s[i])]
		}
		if next == 0 {
			next = int32(len(t.ids))
			t.ids = append(t.ids, -1)
			if node == 0 {
				t.root[s[i]] = next
			} else {
				t.edges[uint64(node)<<8|uint64(s[i])] = next
			}
		}
		node = next
	}
	t.ids[node] = int32(id)
}

// prefixes calls fn for every entry that is a prefix of s, shortest first.
func (t *byteTrie) prefixes(s string, fn func(length int, id uint32)) {
	if len(s) == 0 {
		return
	}
	node := t.root[s[0]]
	for i := 1; node != 0; i++ {
		if id := t.ids[node]; id >= 0 {
			fn(i, uint32(id))
		}
		if i >= len(s) {
			return
		}
		node = t.edges[uint64(node)<<8|uint64(s[i])]
	}
}

// unkPenalty is what an unknown character costs below the lowest piece score (HF
// tokenizers' and SentencePiece's kUnkPenalty).
const unkPenalty = 10.0

func minScore(scores []float64) float64 {
	lo := math.Inf(1)
	for _, s := range scores {
		lo = min(lo, s)
	}
	return lo
}
