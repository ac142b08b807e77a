package kv

import (
	"math/rand/v2"
	"testing"
)

// TestU64MapAgainstGoMap drives u64Map and a Go map with the same random operations,
// with key spaces that collide (small integers, zero, high bits only) and churn that
// grows and shrinks the table.
func TestU64MapAgainstGoMap(t *testing.T) {
	keyspaces := map[string]func(r *rand.Rand) uint64{
		"small":     func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) },
		"high bits": func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) << 52 },
		"random":    func(r *rand.Rand) uint64 { return r.Uint64() >> uint(r.IntN(64)) },
	}
	for name, key := range keyspaces {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 13))
			var m u64Map
			ref := map[uint64]uint32{}
			for step := 0; step < 60000; step++ {
				k := key(rng)
				phase := (step / 5000) % 2 // alternate growing and shrinking phases
				switch op := rng.IntN(10); {
				case op < 3+4*(1-phase):
					v := rng.Uint32()
					m.put(k, v)
					ref[k] = v
				case op < 5+4*(1-phase):
					v := rng.Uint32()
					got, found := m.getOrPut(k, v)
					want, ok := ref[k]
					if !ok {
						ref[k], want = v, v
					}
					if found != ok || got != want {
						t.Fatalf("step %d getOrPut(%#x) = %d,%v want %d,%v", step, k, got, found, want, ok)
					}
				default:
					_, ok := ref[k]
					if m.del(k) != ok {
						t.Fatalf("step %d del(%#x) disagrees", step, k)
					}
					delete(ref, k)
				}
				if m.len() != len(ref) {
					t.Fatalf("step %d: len %d, want %d", step, m.len(), len(ref))
				}
				if step%1000 == 0 {
					seen := 0
					m.each(func(k uint64, v uint32) {
						seen++
						if ref[k] != v {
							t.Fatalf("each: %#x=%d, want %d", k, v, ref[k])
						}
					})
					if seen != len(ref) {
						t.Fatalf("each saw %d keys, want %d", seen, len(ref))
					}
					for k, v := range ref {
						if got, ok := m.get(k); !ok || got != v {
							t.Fatalf("get(%#x) = %d,%v want %d", k, got, ok, v)
						}
					}
				}
				if got, ok := m.get(k); ok != (func() bool { _, ok := ref[k]; return ok })() || got != ref[k] {
					t.Fatalf("step %d get(%#x) = %d,%v", step, k, got, ok)
				}
			}
		})
	}
}
