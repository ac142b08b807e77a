//go:build !cgo

package node

import (
	"errors"
	"testing"
)

// TestDiscoverSystemGPUsWithoutCgo: a static build reports no driver, so the node runs
// in CPU mode instead of failing.
func TestDiscoverSystemGPUsWithoutCgo(t *testing.T) {
	gpus, err := DiscoverSystemGPUs()
	if !errors.Is(err, ErrNoDriver) || gpus != nil {
		t.Fatalf("DiscoverSystemGPUs() = %v, %v; want nil, ErrNoDriver", gpus, err)
	}
}
