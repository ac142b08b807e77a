//go:build cgo

package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// machine describes a mock NVML: n devices in two PCIe halves (devices of one half share
// a switch, TOPOLOGY_SINGLE; across halves TOPOLOGY_SYSTEM), and failures to inject.
type machine struct {
	n           int
	initRet     nvml.Return
	countRet    nvml.Return
	fail        map[string]int // "handle" or "memory": the device index whose query fails
	noTopology  bool
	shutdowns   *int
	topologyFor func(i, j int) TopologyLevel
}

func (m machine) lib() *mock.Interface {
	devices := make([]*mock.Device, m.n)
	index := func(d nvml.Device) int { return slices.Index(devices, d.(*mock.Device)) }
	for i := range devices {
		devices[i] = &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return fmt.Sprintf("GPU-%08d", i), nvml.SUCCESS },
			GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				if f, ok := m.fail["memory"]; ok && f == i {
					return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
				}
				return nvml.Memory{Total: 80 << 30}, nvml.SUCCESS
			},
		}
		devices[i].GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if m.noTopology {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.GpuTopologyLevel(m.topologyFor(i, index(other))), nvml.SUCCESS
		}
	}
	return &mock.Interface{
		InitFunc: func() nvml.Return { return m.initRet },
		ShutdownFunc: func() nvml.Return {
			*m.shutdowns++
			return nvml.SUCCESS
		},
		DeviceGetCountFunc: func() (int, nvml.Return) { return m.n, m.countRet },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if f, ok := m.fail["handle"]; ok && f == i {
				return nil, nvml.ERROR_UNKNOWN
			}
			return devices[i], nvml.SUCCESS
		},
	}
}

func TestDiscoverGPUs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		m         machine
		wantN     int
		noDriver  bool   // errors.Is(err, ErrNoDriver)
		wantErr   string // substring of the error; "" for none
		shutdowns int
		links     bool // topology known
	}{
		{name: "no GPU", m: machine{n: 0}, shutdowns: 1},
		{name: "one GPU", m: machine{n: 1}, wantN: 1, shutdowns: 1},
		{name: "eight GPUs", m: machine{n: 8}, wantN: 8, shutdowns: 1, links: true},
		{name: "topology not supported", m: machine{n: 4, noTopology: true}, wantN: 4, shutdowns: 1},
		{name: "library not found", m: machine{n: 8, initRet: nvml.ERROR_LIBRARY_NOT_FOUND},
			noDriver: true, wantErr: "ERROR_LIBRARY_NOT_FOUND"},
		{name: "driver not loaded", m: machine{n: 8, initRet: nvml.ERROR_DRIVER_NOT_LOADED},
			noDriver: true, wantErr: "ERROR_DRIVER_NOT_LOADED"},
		{name: "init refused", m: machine{n: 8, initRet: nvml.ERROR_NO_PERMISSION},
			wantErr: "nvml init: ERROR_NO_PERMISSION"},
		{name: "count fails", m: machine{n: 8, countRet: nvml.ERROR_UNKNOWN},
			wantErr: "device count: ERROR_UNKNOWN", shutdowns: 1},
		{name: "handle fails", m: machine{n: 8, fail: map[string]int{"handle": 5}},
			wantErr: "GPU 5: nvml device handle: ERROR_UNKNOWN", shutdowns: 1},
		{name: "memory query fails", m: machine{n: 8, fail: map[string]int{"memory": 2}},
			wantErr: "GPU 2: nvml memory info: ERROR_GPU_IS_LOST", shutdowns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shutdowns := 0
			m := tc.m
			m.shutdowns, m.topologyFor = &shutdowns, halves(m.n)
			gpus, err := DiscoverGPUs(m.lib())
			if shutdowns != tc.shutdowns {
				t.Errorf("Shutdown called %d times, want %d", shutdowns, tc.shutdowns)
			}
			if errors.Is(err, ErrNoDriver) != tc.noDriver {
				t.Errorf("errors.Is(%v, ErrNoDriver) = %v, want %v", err, !tc.noDriver, tc.noDriver)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != tc.wantN {
				t.Fatalf("%d GPUs, want %d", len(gpus), tc.wantN)
			}
			for i, g := range gpus {
				if g.Index != i || g.UUID != fmt.Sprintf("GPU-%08d", i) || g.Name != "NVIDIA H100 80GB HBM3" || g.MemoryTotalBytes != 80<<30 {
					t.Errorf("GPU %d = %+v", i, g)
				}
				if !tc.links {
					if len(g.Links) != 0 {
						t.Errorf("GPU %d links = %v, want none", i, g.Links)
					}
					continue
				}
				if len(g.Links) != len(gpus)-1 {
					t.Errorf("GPU %d has %d links, want %d", i, len(g.Links), len(gpus)-1)
				}
				for j, l := range g.Links {
					if want := m.topologyFor(i, j); l != want || j == i {
						t.Errorf("GPU %d link to %d = %v, want %v", i, j, l, want)
					}
				}
			}
		})
	}
}

// TestDiscoverGPUsThisMachine runs the real NVML binding. Without libnvidia-ml (a
// machine with no NVIDIA driver) it must report ErrNoDriver, not panic; with a driver it
// lists the devices.
func TestDiscoverGPUsThisMachine(t *testing.T) {
	gpus, err := DiscoverGPUs(nvml.New())
	if err != nil {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("DiscoverGPUs(nvml.New()) = %v, want nil or ErrNoDriver", err)
		}
		t.Logf("CPU mode: %v", err)
		return
	}
	t.Logf("%d GPUs", len(gpus))
	for i, g := range gpus {
		t.Logf("GPU %d: %s %s %d bytes, links %v", g.Index, g.UUID, g.Name, g.MemoryTotalBytes, g.Links)
		if g.Index != i || !strings.HasPrefix(g.UUID, "GPU-") || g.Name == "" || g.MemoryTotalBytes == 0 {
			t.Errorf("GPU %d = %+v", i, g)
		}
	}
}

func TestCUDAEnv(t *testing.T) {
	for _, tc := range []struct {
		gpus []int
		want string
	}{
		{nil, "CUDA_VISIBLE_DEVICES="},
		{[]int{}, "CUDA_VISIBLE_DEVICES="},
		{[]int{3}, "CUDA_VISIBLE_DEVICES=3"},
		{[]int{0, 1, 6, 7}, "CUDA_VISIBLE_DEVICES=0,1,6,7"},
	} {
		got := CUDAEnv(tc.gpus)
		if want := []string{tc.want, "CUDA_DEVICE_ORDER=PCI_BUS_ID"}; !slices.Equal(got, want) {
			t.Errorf("CUDAEnv(%v) = %q, want %q", tc.gpus, got, want)
		}
	}
}
