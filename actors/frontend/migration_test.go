package frontend

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

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
			first := &scriptedWorker{failAfter: c.after, fault: c.fault}
			if c.fault == "stop" {
				first.stopGate = make(chan struct{})
			}
			h := buildHarness(t, harnessOpts{limit: 3, structured: &messages.StructuredOutput{JsonObject: true}},
				first, &scriptedWorker{failAfter: -1})
			if h.startErr != nil {
				t.Fatal(h.startErr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var chunks []*messages.TokenChunk
			var got []uint32
			gateClosed := false
			for {
				ch, err := h.stream.Recv(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("Recv after %d chunks: %v", len(chunks), err)
				}
				chunks = append(chunks, ch)
				got = append(got, ch.TokenIds...)
				if first.stopGate != nil && len(got) == c.after && !gateClosed {
					close(first.stopGate) // the worker stops once its chunks are here
					gateClosed = true
				}
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
