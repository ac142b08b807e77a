package mocker

import "math"

// DefaultEmbeddingSize is the mock engine's embedding size when the model folder names
// no hidden_size (docs/reference.md §23).
const DefaultEmbeddingSize = 1024

// Embed returns the mock engine's embedding of tokens (docs/reference.md §23): a
// pseudo-random vector of size elements for each token, drawn from the token id and its
// position, mean-pooled, then truncated to dimensions when 0 < dimensions < size
// (Matryoshka) and scaled to unit Euclidean norm after the truncation, as vLLM
// normalises a truncated vector. The same tokens give the same vector on every engine;
// different tokens (or the same tokens in another order) give different ones. It returns
// nil for no tokens or size < 1.
func Embed(tokens []uint32, size, dimensions int) []float32 {
	if len(tokens) == 0 || size < 1 {
		return nil
	}
	n := size
	if dimensions > 0 && dimensions < size {
		n = dimensions
	}
	sum := make([]float64, n)
	for pos, tok := range tokens {
		seed := splitmix64(uint64(tok)<<32 ^ uint64(pos)*0x9e3779b97f4a7c15)
		for j := range sum {
			// A value in [-1, 1) per (token, position, element).
			sum[j] += float64(int64(splitmix64(seed+uint64(j)))) / (1 << 63)
		}
	}
	var norm float64
	for _, x := range sum {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, n)
	if norm == 0 {
		out[0] = 1 // cannot happen for real draws; keeps the vector unit-norm regardless
		return out
	}
	for j, x := range sum {
		out[j] = float32(x / norm)
	}
	return out
}

// splitmix64 is SplitMix64's output function: a 64-bit mix of x.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
