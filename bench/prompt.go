package bench

import (
	"fmt"
	"math/rand/v2"
)

// Token ids of synthesized prompts lie in [firstToken, firstToken+tokenRange): ordinary
// ids of any vocabulary of 91,000 or more (below the special tokens of common ones).
const (
	firstToken = 1000
	tokenRange = 90000
	promptSeed = 0x6d6f6f6e63616b65 // "mooncake"
	// prefixSeed seeds the remainder of a shared prefix (Request.PrefixID), a stream
	// apart from every hash id's.
	prefixSeed = promptSeed + 1
)

// Tokens synthesizes r's prompt: each hash id maps to a fixed pseudo-random block of
// blockTokens token ids seeded by the id, and the last block is cut to r.InputLength.
// Shared hash ids are therefore shared tokens, and any KV block size that divides
// blockTokens sees the same sharing. A shared prefix that ends inside a block
// (r.PrefixTokens) has its last PrefixTokens%blockTokens tokens seeded by r.PrefixID
// instead, so that the requests of one prefix group share exactly PrefixTokens tokens.
// It fails when the ids cover too few tokens or the prefix is longer than the prompt.
func Tokens(r Request, blockTokens int) ([]uint32, error) {
	if blockTokens < 1 || len(r.HashIDs)*blockTokens < r.InputLength {
		return nil, fmt.Errorf("bench: %d hash ids of %d tokens cannot cover an input of %d tokens", len(r.HashIDs), blockTokens, r.InputLength)
	}
	if r.PrefixTokens < 0 || r.PrefixTokens > r.InputLength {
		return nil, fmt.Errorf("bench: shared prefix of %d tokens in a prompt of %d", r.PrefixTokens, r.InputLength)
	}
	out := make([]uint32, 0, len(r.HashIDs)*blockTokens)
	for _, h := range r.HashIDs {
		out = appendBlock(out, uint64(h), promptSeed, blockTokens)
	}
	if rest := r.PrefixTokens % blockTokens; rest > 0 {
		start := r.PrefixTokens - rest
		appendBlock(out[start:start], uint64(r.PrefixID), prefixSeed, rest) // overwrites in place
	}
	return out[:r.InputLength], nil
}

// appendBlock appends n token ids drawn from the stream (id, seed) to out.
func appendBlock(out []uint32, id, seed uint64, n int) []uint32 {
	rng := rand.New(rand.NewPCG(id, seed))
	for range n {
		out = append(out, firstToken+uint32(rng.IntN(tokenRange)))
	}
	return out
}
