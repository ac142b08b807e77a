package flow

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// TestRouteCarriesSession: every route of a request names its client session
// (RouteRequest session_id), and a request without one names none.
func TestRouteCarriesSession(t *testing.T) {
	for _, session := range []string{"conv-7", ""} {
		f := New(Request{ID: "r", Model: "m", Tokens: []uint32{1, 2, 3}, Sampling: &messages.SamplingParams{MaxTokens: 4},
			SessionID: session}, DefaultConfig())
		var routes []*messages.RouteRequest
		for _, e := range f.Step(Start{}, time.Unix(0, 0)) {
			if r, ok := e.(Route); ok {
				routes = append(routes, r.Request)
			}
		}
		if len(routes) != 1 {
			t.Fatalf("session %q: %d routes, want 1", session, len(routes))
		}
		if got := routes[0].GetSessionId(); got != session {
			t.Errorf("RouteRequest session_id %q, want %q", got, session)
		}
	}
}
