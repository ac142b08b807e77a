package vllm

import (
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestSamplingBodies: every sampling field reaches the /v1/completions body under vLLM's
// name (golden bodies in testdata/sampling_bodies.golden; go test -update rewrites them).
func TestSamplingBodies(t *testing.T) {
	enginetest.GoldenBodies(t, "sampling_bodies.golden", func(s *messages.SamplingParams) ([]byte, error) {
		r, err := requestFrom("m", "r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		return completionBody(r)
	})
}

// TestSamplingReachesTheMockEngine: every sampling field goes through the adapter and
// the mock engine's vLLM dialect, with the observable ones honoured.
func TestSamplingReachesTheMockEngine(t *testing.T) {
	enginetest.SamplingRoundTrip(t, server.DialectVLLM, func(url string) engines.Engine { return Connect(url, EngineOptions{Model: "m"}) })
}
