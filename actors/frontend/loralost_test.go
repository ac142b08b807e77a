package frontend

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// TestStreamAdapterLost: a request whose worker gave its adapter up mid-stream (the
// adapter was unloaded past the grace, or the worker failed) and whose migration finds
// no worker with the adapter (ROUTE_NO_ADAPTER) ends with the 503 of an unavailable
// adapter, naming it and what happened, not with the 404 of an unknown model, which
// stays the answer when the first route finds none (TestStreamNoAdapter).
func TestStreamAdapterLost(t *testing.T) {
	h := buildHarness(t, harnessOpts{limit: 3, lora: "sql"}, &scriptedWorker{failAfter: 3, fault: "error"}, &scriptedWorker{failAfter: -1})
	if h.startErr != nil {
		t.Fatal(h.startErr)
	}
	// The stream steps when it is read: the migration's route is asked after this.
	h.router.mu.Lock()
	h.router.refuse = messages.RouteOutcome_ROUTE_NO_ADAPTER
	h.router.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tokens := 0
	var err error
	for {
		var ch *messages.TokenChunk
		if ch, err = h.stream.Recv(ctx); err != nil {
			break
		}
		tokens += len(ch.TokenIds)
	}
	var aerr *gateway.APIError
	if !errors.As(err, &aerr) || aerr.Status() != 503 || aerr.Kind.Entry().Code != "lora_unavailable" ||
		!strings.Contains(aerr.Message, "'sql'") || !strings.Contains(aerr.Message, "unloaded") {
		t.Fatalf("error %v, want the 503 of an unavailable adapter naming sql", err)
	}
	if tokens != 3 {
		t.Errorf("%d tokens before the error, want 3", tokens)
	}
	if errors.Is(err, gateway.ErrUnknownModel) {
		t.Errorf("error %v is an unknown model's", err)
	}
}
