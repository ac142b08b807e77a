//go:build !cgo

package node

import "fmt"

// DiscoverSystemGPUs always fails with ErrNoDriver in a binary built without cgo: the
// NVML binding needs cgo to load libnvidia-ml. Such a node runs in CPU mode (mock engines
// only); docs/image.md says which binary a GPU node takes.
func DiscoverSystemGPUs() ([]GPU, error) {
	return nil, fmt.Errorf("%w: built without cgo (CGO_ENABLED=0), NVML unavailable", ErrNoDriver)
}
