package kv

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// HashScheme numbers the router's hashing (this file: seeds, the local and chained
// hashes, salts). A worker computes the sequence hashes of its block-list dump itself
// only when the router's scheme is its own (messages.RegisterAck.dump_hash_scheme); any
// change to a hash here must change it.
const HashScheme uint32 = 1

// HashSeed is the xxh3 seed of the router's block hashes (docs/reference.md §2; the value the
// reference router uses).
const HashSeed uint64 = 1337

// LoraSeed returns the seed of the local block hashes of a prompt run with the LoRA
// adapter lora: HashSeed for the base model (lora == ""), otherwise
// HashSeed + xxh3_64(lora) (unseeded xxh3 of the name's UTF-8 bytes, wrapping addition).
// The same tokens under two adapters therefore never share blocks.
func LoraSeed(lora string) uint64 {
	if lora == "" {
		return HashSeed
	}
	return HashSeed + xxh3.HashString(lora)
}

// littleEndian is true when uint32 values are laid out little-endian in memory, so a
// []uint32 can be hashed in place as the little-endian byte string docs/reference.md §2
// asks for. A variable, so that the tests can run the portable path on any machine.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// The hashes are xxh3_64 (docs/reference.md §2). A block of B tokens is 4·B bytes; the
// block sizes engines use (16 on vLLM's CUDA backend, 32) fall in xxh3's 17–128-byte
// case, and every chain hash in its 9–16-byte case: both are a few 64×64→128-bit
// multiplications over the input's 64-bit words and a seed-dependent secret, computed
// here straight from the token ids (a little-endian 64-bit word of the byte string is
// two consecutive token ids, whatever the machine's byte order), with the seeded secret
// worked out once per prompt rather than once per block. Other sizes go to the xxh3
// library over the tokens' bytes: above 240 bytes (64-token blocks, the mock engine's)
// its vector code beats scalar Go. hash_speed_test.go checks every path against the
// library, on this machine's byte order and on the portable one.

// xxh3's default secret, as little-endian 64-bit words (the first 128 bytes: all that
// the 17–128-byte case reads).
var xxh3Secret = [16]uint64{
	0xbe4ba423396cfeb8, 0x1cad21f72c81017c, 0xdb979083e96dd4de, 0x1f67b3b7a4a44072,
	0x78e5c0cc4ee679cb, 0x2172ffcc7dd05a82, 0x8e2443f7744608b8, 0x4c263a81e69035e0,
	0xcb00c391bb52283c, 0xa32e531b8b65d088, 0x4ef90da297486471, 0xd8acdea946ef1938,
	0x3f349ce33f76faa8, 0x1d4f0bc7c7bbdcf9, 0x3159b4cd4be0518a, 0x647378d9c97e9fc8,
}

const xxh3Prime64_1 = 0x9e3779b185ebca87

// The 9–16-byte case of xxh3 with seed HashSeed on 16 bytes mixes the first word with
// chainLo and the last with chainHi (secret words at bytes 24, 32, 40, 48).
const (
	chainLo = (0x1f67b3b7a4a44072 ^ 0x78e5c0cc4ee679cb) + HashSeed
	chainHi = (0x2172ffcc7dd05a82 ^ 0x8e2443f7744608b8) - HashSeed
)

func mulFold(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

func avalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= 0x165667919e3779f9
	return x ^ x>>32
}

// seededSecret is xxh3's secret for the 17–128-byte case under seed: word j plus the
// seed for even j, minus it for odd j.
func seededSecret(seed uint64) (k [16]uint64) {
	for j := range k {
		if j%2 == 0 {
			k[j] = xxh3Secret[j] + seed
		} else {
			k[j] = xxh3Secret[j] - seed
		}
	}
	return k
}

// word is the little-endian 64-bit word at byte 4·i of the tokens' byte string.
func word(t []uint32, i int) uint64 { return uint64(t[i]) | uint64(t[i+1])<<32 }

// hashMid is xxh3_64 of the tokens' byte string for 5 to 32 tokens (17–128 bytes), with
// the seeded secret k.
func hashMid(t []uint32, k *[16]uint64) uint64 {
	n := len(t)
	acc := uint64(4*n) * xxh3Prime64_1
	if n > 8 {
		if n > 16 {
			if n > 24 {
				acc += mulFold(word(t, 12)^k[12], word(t, 14)^k[13])
				acc += mulFold(word(t, n-16)^k[14], word(t, n-14)^k[15])
			}
			acc += mulFold(word(t, 8)^k[8], word(t, 10)^k[9])
			acc += mulFold(word(t, n-12)^k[10], word(t, n-10)^k[11])
		}
		acc += mulFold(word(t, 4)^k[4], word(t, 6)^k[5])
		acc += mulFold(word(t, n-8)^k[6], word(t, n-6)^k[7])
	}
	acc += mulFold(word(t, 0)^k[0], word(t, 2)^k[1])
	acc += mulFold(word(t, n-4)^k[2], word(t, n-2)^k[3])
	return avalanche(acc)
}

// hash16 is hashMid for 16 tokens (64 bytes).
func hash16(t *[16]uint32, k *[16]uint64) uint64 {
	acc := uint64(xxh3Prime64_1 << 6 & (1<<64 - 1)) // 64 · prime, wrapped
	acc += mulFold((uint64(t[4])|uint64(t[5])<<32)^k[4], (uint64(t[6])|uint64(t[7])<<32)^k[5])
	acc += mulFold((uint64(t[8])|uint64(t[9])<<32)^k[6], (uint64(t[10])|uint64(t[11])<<32)^k[7])
	acc += mulFold((uint64(t[0])|uint64(t[1])<<32)^k[0], (uint64(t[2])|uint64(t[3])<<32)^k[1])
	acc += mulFold((uint64(t[12])|uint64(t[13])<<32)^k[2], (uint64(t[14])|uint64(t[15])<<32)^k[3])
	return avalanche(acc)
}

// hashBytes is xxh3_64 of the tokens' little-endian byte string with seed, through the
// library: in place on little-endian machines, through buf (grown as needed and
// returned for reuse) elsewhere.
func hashBytes(t []uint32, seed uint64, buf []byte) (uint64, []byte) {
	if len(t) == 0 {
		return xxh3.HashSeed(nil, seed), buf
	}
	if littleEndian {
		return xxh3.HashSeed(unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), len(t)*4), seed), buf
	}
	buf = buf[:0]
	for _, v := range t {
		buf = binary.LittleEndian.AppendUint32(buf, v)
	}
	return xxh3.HashSeed(buf, seed), buf
}

// LocalBlockHash returns xxh3_64 of the little-endian uint32 encoding of block (the token
// ids of one KV block), with the given seed (see LoraSeed). It does not allocate on
// little-endian machines, nor for blocks of 5 to 32 tokens on any.
func LocalBlockHash(block []uint32, seed uint64) uint64 {
	if n := len(block); n >= 5 && n <= 32 {
		k := seededSecret(seed)
		return hashMid(block, &k)
	}
	h, _ := hashBytes(block, seed, nil)
	return h
}

// ChainHash returns the sequence hash of a block whose parent block has sequence hash
// parent and whose own local hash is local:
// xxh3_64(LE64(parent) ‖ LE64(local), seed HashSeed) (docs/reference.md §2).
func ChainHash(parent, local uint64) uint64 {
	lo, hi := parent^chainLo, local^chainHi
	return avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold(lo, hi))
}

// SequenceHashes returns the router's chained sequence hash of every full block of
// tokens (len(tokens)/blockSize of them; a trailing partial block is not hashed):
// seq[0] = local[0], seq[i] = ChainHash(seq[i-1], local[i]), with local[i] the
// LocalBlockHash of block i under LoraSeed(lora). Equal seq[i] means equal prefixes of
// (i+1)*blockSize tokens. blockSize must be positive; it panics otherwise.
func SequenceHashes(tokens []uint32, blockSize int, lora string) []uint64 {
	return AppendSequenceHashes(nil, tokens, blockSize, lora)
}

// AppendSequenceHashes appends the sequence hashes of tokens (see SequenceHashes) to dst
// and returns the extended slice. It allocates only when dst lacks capacity.
func AppendSequenceHashes(dst []uint64, tokens []uint32, blockSize int, lora string) []uint64 {
	return AppendChainedHashes(dst, tokens, blockSize, LoraSeed(lora), false, 0)
}

// saltSeed is the xxh3 seed of SaltHash, apart from HashSeed so that a salt's hash is
// not the hash of some block's tokens under the base model's seed.
const saltSeed uint64 = HashSeed ^ 0x73616c74 // "salt"

// SaltHash returns what a request's cache salt (vLLM's and SGLang's cache_salt) mixes
// into its first block: xxh3_64 of the salt's UTF-8 bytes with seed saltSeed. A salted
// prompt's first block chains onto it as onto a parent, seq[0] = ChainHash(SaltHash(salt),
// local[0]), and every later block chains from there, so prompts under two salts (or
// under a salt and none) share no block while prompts under one salt share their
// prefixes (docs/reference.md §2). The empty salt is no salt.
func SaltHash(salt string) uint64 { return xxh3.HashStringSeed(salt, saltSeed) }

// AppendSaltedSequenceHashes appends the sequence hashes of tokens under the LoRA
// adapter lora and the cache salt salt ("" for none: then it is AppendSequenceHashes).
// It allocates only when dst lacks capacity.
func AppendSaltedSequenceHashes(dst []uint64, tokens []uint32, blockSize int, lora, salt string) []uint64 {
	if salt == "" {
		return AppendChainedHashes(dst, tokens, blockSize, LoraSeed(lora), false, 0)
	}
	return AppendChainedHashes(dst, tokens, blockSize, LoraSeed(lora), true, SaltHash(salt))
}

// FirstBlockHash returns the sequence hash of a prompt's first block from its local hash
// (LocalBlockHash under LoraSeed): local itself, or chained onto SaltHash(salt) for a
// salted prompt.
func FirstBlockHash(local uint64, salt string) uint64 {
	if salt == "" {
		return local
	}
	return ChainHash(SaltHash(salt), local)
}

// AppendChainedHashes appends the sequence hashes of the full blocks of tokens, chained
// onto a parent block with sequence hash parent when hasParent is true (a continuation
// such as a BlockStored event whose parent is known), or starting a sequence otherwise.
// seed is the local-hash seed (see LoraSeed). blockSize must be positive. It allocates
// at most once, when dst lacks capacity (and, on big-endian machines only, for block
// sizes other than 5 to 32 tokens).
func AppendChainedHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64, hasParent bool, parent uint64) []uint64 {
	if blockSize <= 0 {
		panic("kv: block size must be positive")
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return dst
	}
	dst = slices.Grow(dst, n)
	if blockSize == 16 {
		return appendChained16(dst, tokens[:n*16], seed, hasParent, parent)
	}
	prev, chained := parent, hasParent
	var k [16]uint64
	mid := blockSize >= 5 && blockSize <= 32
	if mid {
		k = seededSecret(seed)
	}
	var buf []byte
	for i := 0; i < n; i++ {
		block := tokens[i*blockSize : (i+1)*blockSize]
		var local uint64
		if mid {
			local = hashMid(block, &k)
		} else {
			local, buf = hashBytes(block, seed, buf)
		}
		if chained {
			prev = ChainHash(prev, local)
		} else {
			prev, chained = local, true
		}
		dst = append(dst, prev)
	}
	return dst
}

// appendChained16 is AppendChainedHashes for blocks of 16 tokens (len(tokens) a multiple
// of 16), with room in dst for every hash.
func appendChained16(dst []uint64, tokens []uint32, seed uint64, hasParent bool, parent uint64) []uint64 {
	k := seededSecret(seed)
	prev := parent
	i := 0
	if !hasParent {
		prev = hash16((*[16]uint32)(tokens), &k)
		dst = append(dst, prev)
		i = 16
	}
	for ; i < len(tokens); i += 16 {
		local := hash16((*[16]uint32)(tokens[i:]), &k)
		lo, hi := prev^chainLo, local^chainHi
		prev = avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold(lo, hi))
		dst = append(dst, prev)
	}
	return dst
}

// promptTokens is the prompt's length in tokens: len(Tokens), or PromptTokens when the
// caller sent the prompt's block hashes instead of its tokens.
func (in *RouteInput) promptTokens() int {
	if len(in.Tokens) > 0 {
		return len(in.Tokens)
	}
	return in.PromptTokens
}

// checkPrompt checks a prompt given by its block hashes (Tokens empty): PromptTokens
// not negative, and one hash per full block of blockSize tokens. A caller that hashed
// with another block size sends another number of hashes (for any prompt of at least
// one block when one size divides the other, as engines' power-of-two sizes do).
func (in *RouteInput) checkPrompt(blockSize int) error {
	if len(in.Tokens) > 0 {
		return nil
	}
	if in.PromptTokens < 0 {
		return fmt.Errorf("%w: prompt of %d tokens", ErrInvalidRequest, in.PromptTokens)
	}
	if want := in.PromptTokens / blockSize; len(in.BlockHashes) != want {
		return fmt.Errorf("%w: %d block hashes for a prompt of %d tokens, which has %d full blocks of %d tokens (hashed with another block size?)",
			ErrInvalidRequest, len(in.BlockHashes), in.PromptTokens, want, blockSize)
	}
	return nil
}
