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
)

// Tokens synthesizes r's prompt: each hash id maps to a fixed pseudo-random block of
// blockTokens token ids seeded by the id, and the last block is cut to r.InputLength.
// Shared hash ids are therefore shared tokens, and any KV block size that divides
// blockTokens sees the same sharing. It fails when the ids cover too few tokens.
func Tokens(r Request, blockTokens int) ([]uint32, error) {
	if blockTokens < 1 || len(r.HashIDs)*blockTokens < r.InputLength {
		return nil, fmt.Errorf("bench: %d hash ids of %d tokens cannot cover an input of %d tokens", len(r.HashIDs), blockTokens, r.InputLength)
	}
	out := make([]uint32, 0, len(r.HashIDs)*blockTokens)
	for _, h := range r.HashIDs {
		rng := rand.New(rand.NewPCG(uint64(h), promptSeed))
		for range blockTokens {
			out = append(out, firstToken+uint32(rng.IntN(tokenRange)))
		}
	}
	return out[:r.InputLength], nil
}
