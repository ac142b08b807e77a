package frontend

import (
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// TestStructuredNotMigrated: a request whose output is constrained (structured output)
// is never moved to another worker, whatever the fault and the limit: its stream ends
// with the fault's error chunk, still marked migratable (the gateway answers 502), saying
// why; no second worker is asked.
func TestStructuredNotMigrated(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault string
		after int
	}{
		{"engine error", "error", 3},
		{"worker terminated", "stop", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := buildHarness(t, harnessOpts{limit: 3, structured: &messages.StructuredOutput{JsonObject: true}},
				&scriptedWorker{failAfter: c.after, fault: c.fault}, &scriptedWorker{failAfter: -1})
			if h.startErr != nil {
				t.Fatal(h.startErr)
			}
			chunks := h.drain(t)
			var got []uint32
			for _, ch := range chunks {
				got = append(got, ch.TokenIds...)
			}
			last := chunks[len(chunks)-1]
			if !slices.Equal(got, wantTokens[:c.after]) || last.FinishReason != "error" || last.Fault == messages.Fault_FAULT_NONE ||
				!strings.Contains(last.Error, "not migrated: structured output requests are not moved") {
				t.Errorf("tokens %v, last chunk %+v; want %v then a migratable error saying structured output is not moved",
					got, last, wantTokens[:c.after])
			}
			if len(h.migrated) != 0 {
				t.Errorf("migrations counted %v, want none", h.migrated)
			}
			h.stream.Close()
			h.checkRouter(t, 1)
		})
	}
}
