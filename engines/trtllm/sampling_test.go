package trtllm

import (
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestSamplingBodies: every sampling field reaches the /v1/completions body under
// trtllm-serve's name, or is refused when trtllm-serve has no such field (golden bodies
// in testdata/sampling_bodies.golden; go test -update rewrites them).
func TestSamplingBodies(t *testing.T) {
	enginetest.GoldenBodies(t, "sampling_bodies.golden", func(s *messages.SamplingParams) ([]byte, error) {
		r, err := requestFrom("m", "r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		return completionBody(r)
	})
}

// TestSamplingReachesTheMockEngine: every sampling field trtllm-serve has goes through
// the adapter and the mock engine's trtllm dialect, with the observable ones honoured;
// the others are refused.
func TestSamplingReachesTheMockEngine(t *testing.T) {
	enginetest.SamplingRoundTrip(t, server.DialectTRTLLM, func(url string) engines.Engine {
		c, err := New(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}, "bad_words", "allowed_token_ids", "priority", "cache_salt", "everything")
}
