package model

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// precompiledNormalizer is HF tokenizers' Precompiled normalizer: SentencePiece's
// normalization rules (nmt_nfkc and the like) compiled into a "charsmap", a double-array
// trie (darts-clone) from UTF-8 strings to offsets into a blob of NUL-terminated
// replacements. The charsmap is the little-endian uint32 size of the trie in bytes, the
// trie's uint32 units, then the replacements.
//
// Text is rewritten one extended grapheme cluster at a time: a cluster shorter than 6
// bytes that the trie maps is replaced whole; otherwise each character is replaced by its
// mapping, or kept (docs/reference.md §25).
type precompiledNormalizer struct {
	units      []uint32
	normalized string
}

func newPrecompiled(b64 string) (func(string) string, error) {
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("Precompiled: precompiled_charsmap is not base64: %v", err)
	}
	if len(blob) < 4 {
		return nil, fmt.Errorf("Precompiled: precompiled_charsmap is %d bytes, too short", len(blob))
	}
	size := binary.LittleEndian.Uint32(blob)
	if size%4 != 0 || uint64(size) > uint64(len(blob)-4) || size == 0 {
		return nil, fmt.Errorf("Precompiled: trie size %d does not fit the %d-byte charsmap", size, len(blob))
	}
	p := &precompiledNormalizer{units: make([]uint32, size/4), normalized: string(blob[4+size:])}
	for i := range p.units {
		p.units[i] = binary.LittleEndian.Uint32(blob[4+4*i:])
	}
	return p.normalize, nil
}

func dartsHasLeaf(u uint32) bool  { return (u>>8)&1 == 1 }
func dartsValue(u uint32) uint32  { return u & (1<<31 - 1) }
func dartsLabel(u uint32) uint32  { return u & (1<<31 | 0xFF) }
func dartsOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// firstPrefixValue returns the value of the shortest key of the trie that is a prefix of
// key (HF tokenizers' transform takes the first result of the common-prefix search).
func (p *precompiledNormalizer) firstPrefixValue(key string) (uint32, bool) {
	pos := uint32(0)
	if len(p.units) == 0 {
		return 0, false
	}
	pos ^= dartsOffset(p.units[0])
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			return 0, false
		}
		pos ^= uint32(c)
		if int(pos) >= len(p.units) {
			return 0, false
		}
		u := p.units[pos]
		if dartsLabel(u) != uint32(c) {
			return 0, false
		}
		pos ^= dartsOffset(u)
		if int(pos) >= len(p.units) {
			return 0, false
		}
		if dartsHasLeaf(u) {
			return dartsValue(p.units[pos]), true
		}
	}
	return 0, false
}

// transform returns the replacement of chunk, if the trie maps a prefix of it.
func (p *precompiledNormalizer) transform(chunk string) (string, bool) {
	v, ok := p.firstPrefixValue(chunk)
	if !ok || int(v) > len(p.normalized) {
		return "", false
	}
	rest := p.normalized[v:]
	if end := strings.IndexByte(rest, 0); end >= 0 {
		rest = rest[:end]
	}
	return rest, true
}

func (p *precompiledNormalizer) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	state := -1
	for rest := s; rest != ""; {
		var g string
		g, rest, _, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if len(g) < 6 {
			if norm, ok := p.transform(g); ok {
				b.WriteString(norm)
				continue
			}
		}
		for i := 0; i < len(g); {
			_, size := utf8.DecodeRuneInString(g[i:])
			part := g[i : i+size]
			i += size
			if norm, ok := p.transform(part); ok {
				b.WriteString(norm)
			} else {
				b.WriteString(part)
			}
		}
	}
	return b.String()
}
