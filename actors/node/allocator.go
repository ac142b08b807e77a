package node

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Allocator pins disjoint sets of a node's GPUs to workers. It is pure (no I/O, no
// clock) and not safe for concurrent use: the node actor owns it.
//
// Placement: for n GPUs it picks, among the free ones, a set whose farthest pair is as
// close as possible in the PCIe/NVLink topology (GPU.Links), so that tensor-parallel
// ranks talk over the fastest path. It grows a set greedily from each free GPU as a seed
// (adding the free GPU nearest to the set, lowest index on ties) and keeps the set with
// the lowest farthest-pair level, then the lowest indices. Without topology every pair
// counts as equally far, and the result is the lowest free indices.
type Allocator struct {
	gpus  []GPU          // sorted by index
	pos   map[int]int    // NVML index -> position in gpus
	owner map[int]string // NVML index -> worker id; absent when free
	sets  map[string][]int
}

// NewAllocator returns an allocator over gpus, all free. Indices must be distinct
// (DiscoverGPUs guarantees it; Props checks it).
func NewAllocator(gpus []GPU) *Allocator {
	a := &Allocator{gpus: slices.Clone(gpus), pos: map[int]int{}, owner: map[int]string{}, sets: map[string][]int{}}
	sort.Slice(a.gpus, func(i, j int) bool { return a.gpus[i].Index < a.gpus[j].Index })
	for i, g := range a.gpus {
		a.pos[g.Index] = i
	}
	return a
}

// Allocate pins n GPUs to workerID and returns their NVML indices, ascending. n = 0
// records the worker with no GPU (nil indices), so that its id is taken.
//
// Errors: empty workerID, n < 0, a workerID that already holds an allocation, and fewer
// than n free GPUs ("worker w1 needs 4 GPUs, 2 free (0,3)"). Nothing is pinned on error.
func (a *Allocator) Allocate(workerID string, n int) ([]int, error) {
	switch {
	case workerID == "":
		return nil, errors.New("node: allocate: empty worker id")
	case n < 0:
		return nil, fmt.Errorf("node: allocate: worker %s asks for %d GPUs (< 0)", workerID, n)
	}
	if _, dup := a.sets[workerID]; dup {
		return nil, fmt.Errorf("node: allocate: worker id %s is already in use on this node", workerID)
	}
	free := a.Free()
	if n > len(free) {
		return nil, fmt.Errorf("node: worker %s needs %d GPUs, %d free (%s)", workerID, n, len(free), formatIndices(free))
	}
	var set []int
	if n > 0 {
		set = a.pick(free, n)
	}
	for _, g := range set {
		a.owner[g] = workerID
	}
	a.sets[workerID] = set
	return slices.Clone(set), nil
}

// Release frees the GPUs of workerID and its id. Unknown ids are ignored.
func (a *Allocator) Release(workerID string) {
	for _, g := range a.sets[workerID] {
		delete(a.owner, g)
	}
	delete(a.sets, workerID)
}

// Free returns the NVML indices of the free GPUs, ascending.
func (a *Allocator) Free() []int {
	var free []int
	for _, g := range a.gpus {
		if _, used := a.owner[g.Index]; !used {
			free = append(free, g.Index)
		}
	}
	return free
}

// Owner returns the worker pinned to the GPU with NVML index idx, or "".
func (a *Allocator) Owner(idx int) string { return a.owner[idx] }

// GPUs returns the GPUs the allocator places on, by index.
func (a *Allocator) GPUs() []GPU { return slices.Clone(a.gpus) }

// pick chooses n of the free indices (n ≤ len(free), n > 0), ascending.
func (a *Allocator) pick(free []int, n int) []int {
	var best []int
	bestLevel := TopologyLevel(0)
	for _, seed := range free {
		set, level := a.grow(seed, free, n)
		if best == nil || level < bestLevel || (level == bestLevel && slices.Compare(set, best) < 0) {
			best, bestLevel = set, level
		}
	}
	return best
}

// grow builds a set of n GPUs from seed, adding each time the free GPU whose farthest
// link to the set is nearest (lowest index on ties). It returns the set, ascending, and
// its farthest-pair level.
func (a *Allocator) grow(seed int, free []int, n int) ([]int, TopologyLevel) {
	set := []int{seed}
	var worst TopologyLevel
	for len(set) < n {
		next, nextLevel := -1, TopologyLevel(0)
		for _, c := range free {
			if slices.Contains(set, c) {
				continue
			}
			var far TopologyLevel
			for _, s := range set {
				far = max(far, a.level(c, s))
			}
			if next < 0 || far < nextLevel {
				next, nextLevel = c, far
			}
		}
		set = append(set, next)
		worst = max(worst, nextLevel)
	}
	slices.Sort(set)
	return set, worst
}

// unknownLevel ranks a pair without topology information as farther than any level
// NVML reports.
const unknownLevel = TopologySystem + 1

func (a *Allocator) level(i, j int) TopologyLevel {
	if l, ok := a.gpus[a.pos[i]].Links[j]; ok {
		return l
	}
	return unknownLevel
}

func formatIndices(idx []int) string {
	if len(idx) == 0 {
		return "none"
	}
	s := make([]string, len(idx))
	for i, g := range idx {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

// AllocateExact pins the GPUs with NVML indices gpus to workerID (a replacement that
// takes over the GPUs its predecessor freed). Errors: empty workerID, a workerID that
// already holds an allocation, and an index that is unknown or pinned. Nothing is pinned
// on error.
func (a *Allocator) AllocateExact(workerID string, gpus []int) error {
	if workerID == "" {
		return errors.New("node: allocate: empty worker id")
	}
	if _, dup := a.sets[workerID]; dup {
		return fmt.Errorf("node: allocate: worker id %s is already in use on this node", workerID)
	}
	known := map[int]bool{}
	for _, g := range a.gpus {
		known[g.Index] = true
	}
	for i, g := range gpus {
		if slices.Contains(gpus[:i], g) {
			return fmt.Errorf("node: allocate: worker %s asks for GPU %d twice", workerID, g)
		}
		if !known[g] {
			return fmt.Errorf("node: allocate: worker %s asks for GPU %d, which this node does not have", workerID, g)
		}
		if o := a.owner[g]; o != "" {
			return fmt.Errorf("node: allocate: worker %s asks for GPU %d, pinned to %s", workerID, g, o)
		}
	}
	set := slices.Clone(gpus)
	slices.Sort(set)
	for _, g := range set {
		a.owner[g] = workerID
	}
	a.sets[workerID] = set
	return nil
}
