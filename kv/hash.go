package kv

import (
	"encoding/binary"
	"unsafe"

	"github.com/zeebo/xxh3"
)

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
// []uint32 can be hashed in place as the little-endian byte string docs/reference.md §2 asks for.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// LocalBlockHash returns xxh3_64 of the little-endian uint32 encoding of block (the token
// ids of one KV block), with the given seed (see LoraSeed). It does not allocate on
// little-endian machines.
func LocalBlockHash(block []uint32, seed uint64) uint64 {
	if len(block) == 0 {
		return xxh3.HashSeed(nil, seed)
	}
	if littleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), len(block)*4)
		return xxh3.HashSeed(b, seed)
	}
	b := make([]byte, len(block)*4)
	for i, t := range block {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return xxh3.HashSeed(b, seed)
}

// ChainHash returns the sequence hash of a block whose parent block has sequence hash
// parent and whose own local hash is local:
// xxh3_64(LE64(parent) ‖ LE64(local), seed HashSeed) (docs/reference.md §2).
func ChainHash(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:8], parent)
	binary.LittleEndian.PutUint64(b[8:16], local)
	return xxh3.HashSeed(b[:], HashSeed)
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
// seed is the local-hash seed (see LoraSeed). blockSize must be positive.
func AppendChainedHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64, hasParent bool, parent uint64) []uint64 {
	if blockSize <= 0 {
		panic("kv: block size must be positive")
	}
	n := len(tokens) / blockSize
	prev, chained := parent, hasParent
	for i := 0; i < n; i++ {
		local := LocalBlockHash(tokens[i*blockSize:(i+1)*blockSize], seed)
		if chained {
			prev = ChainHash(prev, local)
		} else {
			prev, chained = local, true
		}
		dst = append(dst, prev)
	}
	return dst
}
