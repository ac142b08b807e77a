package node

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// gpusWith returns n GPUs whose pairwise links come from level (nil: no topology).
func gpusWith(n int, level func(i, j int) TopologyLevel) []GPU {
	gpus := make([]GPU, n)
	for i := range gpus {
		gpus[i] = GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i)}
		for j := 0; j < n && level != nil; j++ {
			if j != i {
				link(&gpus[i], j, level(i, j))
			}
		}
	}
	return gpus
}

// halves: GPUs in the same half of the machine share a PCIe switch; across halves they
// are a system apart.
func halves(n int) func(i, j int) TopologyLevel {
	return func(i, j int) TopologyLevel {
		if i/(max(n, 2)/2) == j/(max(n, 2)/2) {
			return TopologySingle
		}
		return TopologySystem
	}
}

// nvlinkPairs: (0,1), (2,3) … are NVLink peers (TopologyInternal); others share a host
// bridge.
func nvlinkPairs(i, j int) TopologyLevel {
	if i/2 == j/2 {
		return TopologyInternal
	}
	return TopologyHostbridge
}

// step is one allocator call: "alloc <id> <n>" expecting gpus or an error containing
// err, or "release <id>".
type step struct {
	op, id string
	n      int
	gpus   []int
	err    string
}

func TestAllocator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gpus  []GPU
		steps []step
	}{
		{"lowest free indices without topology", gpusWith(4, nil), []step{
			{op: "alloc", id: "a", n: 2, gpus: []int{0, 1}},
			{op: "alloc", id: "b", n: 1, gpus: []int{2}},
			{op: "alloc", id: "c", n: 2, err: "worker c needs 2 GPUs, 1 free (3)"},
			{op: "release", id: "a"},
			{op: "alloc", id: "c", n: 3, gpus: []int{0, 1, 3}},
			{op: "alloc", id: "d", n: 1, err: "worker d needs 1 GPUs, 0 free (none)"},
		}},
		{"exhaustion names the free GPUs", gpusWith(4, nil), []step{
			{op: "alloc", id: "a", n: 2, gpus: []int{0, 1}},
			{op: "release", id: "a"},
			{op: "alloc", id: "x", n: 1, gpus: []int{0}},
			{op: "alloc", id: "y", n: 2, gpus: []int{1, 2}},
			{op: "release", id: "y"},
			{op: "alloc", id: "z", n: 1, gpus: []int{1}},
			{op: "alloc", id: "w", n: 1, gpus: []int{2}},
			{op: "release", id: "z"},
			{op: "alloc", id: "big", n: 4, err: "worker big needs 4 GPUs, 2 free (1,3)"},
		}},
		{"ids and counts", gpusWith(2, nil), []step{
			{op: "alloc", id: "", n: 1, err: "empty worker id"},
			{op: "alloc", id: "a", n: -1, err: "asks for -1 GPUs"},
			{op: "alloc", id: "a", n: 0, gpus: nil},
			{op: "alloc", id: "a", n: 1, err: "worker id a is already in use"},
			{op: "alloc", id: "b", n: 2, gpus: []int{0, 1}},
			{op: "alloc", id: "b", n: 0, err: "worker id b is already in use"},
			{op: "release", id: "a"},
			{op: "release", id: "nobody"},
			{op: "alloc", id: "a", n: 0, gpus: nil},
			{op: "release", id: "b"},
			{op: "release", id: "b"},
			{op: "alloc", id: "b", n: 2, gpus: []int{0, 1}},
		}},
		{"topology: a tensor-parallel set stays in one PCIe half", gpusWith(8, halves(8)), []step{
			{op: "alloc", id: "a", n: 1, gpus: []int{0}},
			{op: "alloc", id: "b", n: 4, gpus: []int{4, 5, 6, 7}},
			{op: "alloc", id: "c", n: 3, gpus: []int{1, 2, 3}},
			{op: "release", id: "a"},
			{op: "release", id: "c"},
			{op: "alloc", id: "d", n: 2, gpus: []int{0, 1}},
			{op: "alloc", id: "e", n: 1, gpus: []int{2}},
			{op: "release", id: "b"},
			// Free: 3 (first half), 4-7 (second half): two in the second half.
			{op: "alloc", id: "f", n: 2, gpus: []int{4, 5}},
			// Two out of 3, 6, 7: the pair in one half, not the lowest indices.
			{op: "alloc", id: "g", n: 2, gpus: []int{6, 7}},
			{op: "release", id: "g"},
			// Three out of 3, 6, 7: a set spans the halves when nothing closer is free.
			{op: "alloc", id: "h", n: 3, gpus: []int{3, 6, 7}},
		}},
		{"topology: NVLink peers together", gpusWith(4, nvlinkPairs), []step{
			{op: "alloc", id: "a", n: 1, gpus: []int{0}},
			{op: "alloc", id: "b", n: 2, gpus: []int{2, 3}},
			{op: "alloc", id: "c", n: 1, gpus: []int{1}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAllocator(tc.gpus)
			for i, s := range tc.steps {
				if s.op == "release" {
					a.Release(s.id)
					continue
				}
				got, err := a.Allocate(s.id, s.n)
				switch {
				case s.err != "" && (err == nil || !strings.Contains(err.Error(), s.err)):
					t.Fatalf("step %d: Allocate(%q, %d) = %v, %v; want error containing %q", i, s.id, s.n, got, err, s.err)
				case s.err == "" && err != nil:
					t.Fatalf("step %d: Allocate(%q, %d): %v", i, s.id, s.n, err)
				case s.err == "" && !slices.Equal(got, s.gpus):
					t.Fatalf("step %d: Allocate(%q, %d) = %v, want %v", i, s.id, s.n, got, s.gpus)
				}
			}
		})
	}
}

// TestAllocatorRandom checks the allocator's invariants on seeded random streams of
// allocations and releases against a model that only counts: sets are disjoint and
// ascending, an allocation fails exactly when too few GPUs are free or the id is taken,
// and ownership matches the sets handed out.
func TestAllocatorRandom(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 1 + rng.Intn(12)
		var level func(i, j int) TopologyLevel
		if seed%2 == 0 {
			level = halves(n)
		}
		a := NewAllocator(gpusWith(n, level))
		held := map[string][]int{}
		for op := 0; op < 400; op++ {
			id := fmt.Sprintf("w%d", rng.Intn(8))
			if rng.Intn(3) == 0 {
				a.Release(id)
				delete(held, id)
				continue
			}
			want := rng.Intn(n + 2)
			used := 0
			for _, g := range held {
				used += len(g)
			}
			_, taken := held[id]
			got, err := a.Allocate(id, want)
			if ok := !taken && want <= n-used; ok != (err == nil) {
				t.Fatalf("seed %d op %d: Allocate(%s, %d) with %d/%d used, id taken %v: err = %v", seed, op, id, want, used, n, taken, err)
			}
			if err != nil {
				continue
			}
			if len(got) != want || !slices.IsSorted(got) {
				t.Fatalf("seed %d op %d: Allocate(%s, %d) = %v", seed, op, id, want, got)
			}
			for _, g := range got {
				for other, set := range held {
					if slices.Contains(set, g) {
						t.Fatalf("seed %d op %d: GPU %d given to %s, already held by %s", seed, op, g, id, other)
					}
				}
				if a.Owner(g) != id {
					t.Fatalf("seed %d op %d: Owner(%d) = %q, want %s", seed, op, g, a.Owner(g), id)
				}
			}
			held[id] = got
		}
	}
}
