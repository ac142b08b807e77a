//go:build cgo

package node

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DiscoverSystemGPUs lists this machine's GPUs through the NVML library (libnvidia-ml,
// loaded at run time); see DiscoverGPUs for the result and its errors.
func DiscoverSystemGPUs() ([]GPU, error) { return DiscoverGPUs(nvml.New()) }

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
			link(&gpus[i], j, TopologyLevel(level))
			link(&gpus[j], i, TopologyLevel(level))
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
