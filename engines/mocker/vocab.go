package mocker

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Vocab is what the engine generates from.
type Vocab struct {
	// Ordinary holds the token ids output is drawn from (words that decode cleanly).
	Ordinary []uint32
	// EOS holds the end-of-sequence ids; the first one is the one generated.
	EOS []uint32
}

// TokenSource is the part of a tokenizer BuildVocab needs (model.Tokenizer has it).
type TokenSource interface {
	TokenBytes(id uint32) ([]byte, bool)
	VocabSize() int
	IsSpecial(id uint32) bool
}

// BuildVocab picks the ordinary tokens of src: not special, and whose bytes are one space
// followed by 2 to 10 ASCII letters (" the", " Paris"), so generated text reads as words
// separated by spaces and decodes the same token by token as all at once. eos is kept
// as given. Errors: no such token in the vocabulary.
func BuildVocab(src TokenSource, eos []uint32) (Vocab, error) {
	n := src.VocabSize()
	if n <= 0 {
		return Vocab{}, errors.New("mocker: tokenizer has an empty vocabulary")
	}
	var v Vocab
	for id := 0; id < n && id <= math.MaxUint32; id++ {
		t := uint32(id)
		if src.IsSpecial(t) {
			continue
		}
		b, ok := src.TokenBytes(t)
		if ok && isSpaceWord(b) {
			v.Ordinary = append(v.Ordinary, t)
		}
	}
	if len(v.Ordinary) == 0 {
		return Vocab{}, fmt.Errorf("mocker: none of the tokenizer's %d tokens is a space followed by 2-10 ASCII letters", n)
	}
	v.EOS = append([]uint32(nil), eos...)
	return v, nil
}

func isSpaceWord(b []byte) bool {
	if len(b) < 3 || len(b) > 11 || b[0] != ' ' {
		return false
	}
	for _, c := range b[1:] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// Token generation: a rolling 64-bit state folds the seed and every token of the
// sequence (prompt, then output) in order; the next token is a function of that state
// alone, like greedy decoding. The same prompt and seed therefore give the same output
// on any engine, and a request re-sent with part of its output appended to the prompt
// continues exactly where the first stopped. A request with a Script (a model's answer
// planned by engines/mocker/persona) gives the script's tokens instead.

// mix64 is the SplitMix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

const golden = 0x9e3779b97f4a7c15

func seedState(seed uint64) uint64 { return mix64(seed + golden) }

func foldToken(state uint64, t uint32) uint64 {
	return mix64(bits.RotateLeft64(state, 17) ^ (uint64(t) + golden))
}

func foldTokens(state uint64, ts []uint32) uint64 {
	for _, t := range ts {
		state = foldToken(state, t)
	}
	return state
}

// unitFloat maps x to [0, 1).
func unitFloat(x uint64) float64 { return float64(x>>11) / (1 << 53) }
