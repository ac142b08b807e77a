package worker

import (
	"testing"

	"github.com/rs/zerolog"
)

// TestRegistrationCarriesNodeID: every registration names the node agent that runs the
// worker (WorkerInfo.node_id), and none when it runs on its own.
func TestRegistrationCarriesNodeID(t *testing.T) {
	for _, node := range []string{"gpu-7", ""} {
		_, _, info := startWorker(t, newDisaggEngine(), func(c *Config) { c.NodeID = node }, zerolog.Nop())
		if info.NodeId != node {
			t.Errorf("registration node_id %q, want %q", info.NodeId, node)
		}
	}
}
