package node

import (
	"errors"
	"strconv"
	"strings"
)

// GPU is one device as NVML reports it.
type GPU struct {
	Index            int    // NVML device index (what CUDA_VISIBLE_DEVICES names, see CUDAEnv)
	UUID             string // e.g. "GPU-5a0b…"
	Name             string // product name, e.g. "NVIDIA H100 80GB HBM3"
	MemoryTotalBytes uint64
	// Links maps the index of another GPU to the NVML topology level of the closest
	// common ancestor of the two (TopologyInternal … TopologySystem: lower is closer).
	// Nil, or a missing entry, means unknown; the Allocator then treats the pair as
	// farthest apart.
	Links map[int]TopologyLevel
}

// TopologyLevel is NVML's nvmlGpuTopologyLevel_t, with the same values, kept here so
// that the package builds without cgo (the NVML binding needs it; see gpu_nvml.go).
type TopologyLevel int32

// NVML's topology levels, closest first.
const (
	TopologyInternal   TopologyLevel = 0  // the same board (e.g. NVLink on one card)
	TopologySingle     TopologyLevel = 10 // one PCIe switch between them
	TopologyMultiple   TopologyLevel = 20 // several PCIe switches, no host bridge
	TopologyHostbridge TopologyLevel = 30 // a host bridge
	TopologyNode       TopologyLevel = 40 // host bridges within one NUMA node
	TopologySystem     TopologyLevel = 50 // across NUMA nodes (SMP interconnect)
)

// ErrNoDriver says that the machine has no usable NVML: the library is not installed or
// the kernel driver is not loaded, or the binary was built without cgo (CGO_ENABLED=0,
// as in the static container image: see docs/image.md). A node that gets it runs in CPU
// mode.
var ErrNoDriver = errors.New("node: no NVML driver")

func link(g *GPU, other int, level TopologyLevel) {
	if g.Links == nil {
		g.Links = map[int]TopologyLevel{}
	}
	g.Links[other] = level
}

// CUDAEnv returns the environment (KEY=VALUE) that pins an engine to gpus, given as NVML
// indices: CUDA_VISIBLE_DEVICES=<indices, comma-separated, in the given order> and
// CUDA_DEVICE_ORDER=PCI_BUS_ID, so that CUDA numbers devices in PCI bus order as NVML
// does rather than fastest first. Empty gpus give CUDA_VISIBLE_DEVICES="" (no GPU
// visible).
func CUDAEnv(gpus []int) []string {
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = strconv.Itoa(g)
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + strings.Join(ids, ","), "CUDA_DEVICE_ORDER=PCI_BUS_ID"}
}
