//go:build cgo

package node

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestTopologyLevelsMatchNVML: the cgo-free TopologyLevel carries NVML's values, so the
// levels DiscoverGPUs converts keep their order and meaning.
func TestTopologyLevelsMatchNVML(t *testing.T) {
	for _, c := range []struct {
		ours TopologyLevel
		nvml nvml.GpuTopologyLevel
	}{
		{TopologyInternal, nvml.TOPOLOGY_INTERNAL},
		{TopologySingle, nvml.TOPOLOGY_SINGLE},
		{TopologyMultiple, nvml.TOPOLOGY_MULTIPLE},
		{TopologyHostbridge, nvml.TOPOLOGY_HOSTBRIDGE},
		{TopologyNode, nvml.TOPOLOGY_NODE},
		{TopologySystem, nvml.TOPOLOGY_SYSTEM},
	} {
		if int64(c.ours) != int64(c.nvml) {
			t.Errorf("TopologyLevel %d, NVML says %d", c.ours, c.nvml)
		}
	}
}
