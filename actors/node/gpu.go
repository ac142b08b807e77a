package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is one device as NVML reports it.
type GPU struct {
	Index            int    // NVML device index (what CUDA_VISIBLE_DEVICES names, see CUDAEnv)
	UUID             string // e.g. "GPU-5a0b…"
	Name             string // product name, e.g. "NVIDIA H100 80GB HBM3"
	MemoryTotalBytes uint64
	// Links maps the index of another GPU to the NVML topology level of the closest
	// common ancestor of the two (nvml.TOPOLOGY_INTERNAL … nvml.TOPOLOGY_SYSTEM: lower is
	// closer). Nil, or a missing entry, means unknown; the Allocator then treats the pair
	// as farthest apart.
	Links map[int]nvml.GpuTopologyLevel
}

// ErrNoDriver says that the machine has no usable NVML: the library is not installed or
// the kernel driver is not loaded. A node that gets it runs in CPU mode.
var ErrNoDriver = errors.New("node: no NVML driver")

// DiscoverGPUs lists the machine's GPUs, in NVML index order, through lib (nvml.New() in
// production; github.com/NVIDIA/go-nvml/pkg/nvml/mock in tests). It calls Init and
// Shutdown, DeviceGetCount, DeviceGetHandleByIndex and, per device, GetUUID, GetName,
// GetMemoryInfo and GetTopologyCommonAncestor with every other device (a mock must set
// all of these).
//
// Errors: ErrNoDriver wrapped with NVML's reason when Init returns
// ERROR_LIBRARY_NOT_FOUND or ERROR_DRIVER_NOT_LOADED; any other Init failure, and any
// failing device query, as an error naming the call (and the device index). A topology
// query that fails leaves that pair's link unknown: topology only guides placement. A
// loaded driver that sees no device gives an empty list and no error.
func DiscoverGPUs(lib nvml.Interface) ([]GPU, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: nvml init: %v", ErrNoDriver, ret)
	default:
		return nil, fmt.Errorf("node: nvml init: %v", ret)
	}
	defer lib.Shutdown()
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("node: nvml device count: %v", ret)
	}
	gpus := make([]GPU, 0, count)
	devices := make([]nvml.Device, 0, count)
	for i := 0; i < count; i++ {
		d, g, err := describe(lib, i)
		if err != nil {
			return nil, err
		}
		devices, gpus = append(devices, d), append(gpus, g)
	}
	for i := range devices {
		for j := i + 1; j < len(devices); j++ {
			level, ret := devices[i].GetTopologyCommonAncestor(devices[j])
			if ret != nvml.SUCCESS {
				continue
			}
			link(&gpus[i], j, level)
			link(&gpus[j], i, level)
		}
	}
	return gpus, nil
}

func describe(lib nvml.Interface, i int) (nvml.Device, GPU, error) {
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, GPU{}, fmt.Errorf("node: GPU %d: nvml device handle: %v", i, ret)
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, GPU{}, fmt.Errorf("node: GPU %d: nvml UUID: %v", i, ret)
	}
	name, ret := d.GetName()
	if ret != nvml.SUCCESS {
		return nil, GPU{}, fmt.Errorf("node: GPU %d: nvml name: %v", i, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, GPU{}, fmt.Errorf("node: GPU %d: nvml memory info: %v", i, ret)
	}
	return d, GPU{Index: i, UUID: uuid, Name: name, MemoryTotalBytes: mem.Total}, nil
}

func link(g *GPU, other int, level nvml.GpuTopologyLevel) {
	if g.Links == nil {
		g.Links = map[int]nvml.GpuTopologyLevel{}
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
