package kv

import (
	"encoding/binary"
	"fmt"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// libraryChainedHashes computes AppendChainedHashes block by block through the xxh3
// library: the tokens' bytes (viewed in place on little-endian machines) for the local
// hash, a 16-byte buffer for the chain hash. It is the reference the specialised paths
// of hash.go are checked against, and the baseline of BenchmarkHashPrompt's "library"
// runs.
func libraryChainedHashes(dst []uint64, tokens []uint32, bs int, seed uint64, hasParent bool, parent uint64) []uint64 {
	prev, chained := parent, hasParent
	var buf []byte
	for i := 0; i+bs <= len(tokens); i += bs {
		block := tokens[i : i+bs]
		var b []byte
		if littleEndian {
			b = unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), 4*bs)
		} else {
			buf = buf[:0]
			for _, t := range block {
				buf = binary.LittleEndian.AppendUint32(buf, t)
			}
			b = buf
		}
		local := xxh3.HashSeed(b, seed)
		if chained {
			var c [16]byte
			binary.LittleEndian.PutUint64(c[:8], prev)
			binary.LittleEndian.PutUint64(c[8:], local)
			prev = xxh3.HashSeed(c[:], HashSeed)
		} else {
			prev, chained = local, true
		}
		dst = append(dst, prev)
	}
	return dst
}

// withPortable runs fn with the byte-order-independent path of hash.go (the tokens'
// bytes written out, as on a big-endian machine).
func withPortable(t testing.TB, fn func()) {
	old := littleEndian
	littleEndian = false
	defer func() { littleEndian = old }()
	fn()
}

// checkHashes compares AppendChainedHashes (in place and portable), LocalBlockHash and
// ChainHash with the library reference and with naiveSeqHashes for one input.
func checkHashes(t testing.TB, toks []uint32, bs int, lora string, hasParent bool, parent uint64) {
	t.Helper()
	seed := LoraSeed(lora)
	want := libraryChainedHashes(nil, toks, bs, seed, hasParent, parent)
	if naive := naiveSeqHashes(toks, bs, lora, hasParent, parent); !slices.Equal(want, naive) {
		t.Fatalf("bs %d, %d tokens: library reference %x, naive %x", bs, len(toks), want, naive)
	}
	got := AppendChainedHashes([]uint64{7}, toks, bs, seed, hasParent, parent)
	if got[0] != 7 || !slices.Equal(got[1:], want) {
		t.Fatalf("bs %d, %d tokens, lora %q, parent %v %x: AppendChainedHashes %x, want %x", bs, len(toks), lora, hasParent, parent, got[1:], want)
	}
	withPortable(t, func() {
		if p := AppendChainedHashes(nil, toks, bs, seed, hasParent, parent); !slices.Equal(p, want) {
			t.Fatalf("bs %d, %d tokens: portable path %x, want %x", bs, len(toks), p, want)
		}
		if len(toks) >= bs {
			if l, w := LocalBlockHash(toks[:bs], seed), libraryChainedHashes(nil, toks[:bs], bs, seed, false, 0)[0]; l != w {
				t.Fatalf("bs %d: portable LocalBlockHash %x, want %x", bs, l, w)
			}
		}
	})
	if len(toks) >= bs {
		block := toks[:bs]
		local := LocalBlockHash(block, seed)
		if w := libraryChainedHashes(nil, block, bs, seed, false, 0)[0]; local != w {
			t.Fatalf("bs %d: LocalBlockHash %x, want %x", bs, local, w)
		}
		if c, w := ChainHash(parent, local), libraryChainedHashes(nil, block, bs, seed, true, parent)[0]; c != w {
			t.Fatalf("ChainHash(%x, %x) = %x, want %x", parent, local, c, w)
		}
	}
}

// TestHashPathsAgree covers every xxh3 length case the block sizes reach (1 to 300
// tokens: 4 to 1,200 bytes), with and without a parent, under the base seed and an
// adapter's, against the library reference.
func TestHashPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 18))
	for bs := 1; bs <= 300; bs++ {
		for _, lora := range []string{"", "sql-lora"} {
			toks := make([]uint32, 3*bs+bs/2)
			for i := range toks {
				toks[i] = rng.Uint32()
			}
			checkHashes(t, toks, bs, lora, false, 0)
			checkHashes(t, toks, bs, lora, true, rng.Uint64())
		}
	}
}

// TestAppendChainedHashesAllocations: no allocation when dst has room, whatever the
// block size and seed.
func TestAppendChainedHashesAllocations(t *testing.T) {
	toks := make([]uint32, 8192)
	for i := range toks {
		toks[i] = uint32(i * 7919)
	}
	for _, bs := range []int{4, 16, 32, 48, 64, 256} {
		dst := make([]uint64, 0, len(toks))
		for _, seed := range []uint64{HashSeed, LoraSeed("sql-lora")} {
			if a := testing.AllocsPerRun(20, func() { dst = AppendChainedHashes(dst[:0], toks, bs, seed, false, 0) }); a != 0 {
				t.Errorf("block size %d, seed %d: %v allocations with room in dst, want 0", bs, seed, a)
			}
		}
	}
}

// FuzzChainedHashes: the specialised paths agree with the library on any tokens, block
// size, adapter and parent.
func FuzzChainedHashes(f *testing.F) {
	f.Add([]byte("hello, world: some tokens to hash"), uint16(16), "", false, uint64(0))
	f.Add(make([]byte, 4096), uint16(64), "lora", true, uint64(99))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint16(1), "", true, uint64(1))
	f.Fuzz(func(t *testing.T, raw []byte, bs uint16, lora string, hasParent bool, parent uint64) {
		if bs == 0 || bs > 512 {
			return
		}
		toks := make([]uint32, len(raw)/4)
		for i := range toks {
			toks[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		checkHashes(t, toks, int(bs), lora, hasParent, parent)
	})
}

// BenchmarkHashPrompt8K: the router's block hashes of an 8,192-token prompt at block
// sizes 16 (vLLM's default, BenchmarkRoute's fleet) and 64 (the mock engine's), with
// hash.go ("fast") and block by block through the xxh3 library ("library", how hash.go
// did it before). Run the two alternately to compare on a busy machine.
func BenchmarkHashPrompt8K(b *testing.B) {
	for _, bs := range []int{16, 64} {
		toks := make([]uint32, 8192)
		rng := rand.New(rand.NewPCG(1, uint64(bs)))
		for i := range toks {
			toks[i] = uint32(rng.IntN(151936))
		}
		hashes := make([]uint64, 0, len(toks)/bs)
		for _, impl := range []string{"fast", "library"} {
			b.Run(fmt.Sprintf("bs=%d/%s", bs, impl), func(b *testing.B) {
				b.SetBytes(int64(len(toks) * 4))
				b.ReportAllocs()
				defer threadcpu.Lock()()
				cpu0, _ := threadcpu.Used()
				for i := 0; i < b.N; i++ {
					if impl == "fast" {
						hashes = AppendChainedHashes(hashes[:0], toks, bs, HashSeed, false, 0)
					} else {
						hashes = libraryChainedHashes(hashes[:0], toks, bs, HashSeed, false, 0)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/prompt")
				if cpu1, ok := threadcpu.Used(); ok {
					b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/prompt")
				}
			})
		}
	}
}
