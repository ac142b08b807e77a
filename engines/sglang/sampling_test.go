package sglang

import (
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestSamplingBodies: every sampling field reaches the /generate body under SGLang's
// name, or is refused when SGLang has no such parameter (golden bodies in
// testdata/sampling_bodies.golden; go test -update rewrites them).
func TestSamplingBodies(t *testing.T) {
	enginetest.GoldenBodies(t, "sampling_bodies.golden", func(s *messages.SamplingParams) ([]byte, error) {
		r, err := generateRequest("r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		return generateBody(r)
	})
}

// TestSamplingReachesTheMockEngine: every sampling field SGLang has goes through the
// adapter and the mock engine's SGLang dialect, with the observable ones honoured; the
// others are refused.
func TestSamplingReachesTheMockEngine(t *testing.T) {
	enginetest.SamplingRoundTrip(t, server.DialectSGLang, func(url string) engines.Engine {
		c, err := New(url, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEngine(c, 16)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}, "bad_words", "allowed_token_ids", "everything")
}
