package sim

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// The simulator's error kinds of refused routes are the outcomes' labels: one vocabulary.
func TestRefusedKindsAreOutcomeLabels(t *testing.T) {
	if ErrNoWorkers != messages.RouteOutcome_ROUTE_NO_WORKERS.Label() || ErrAllBusy != messages.RouteOutcome_ROUTE_ALL_BUSY.Label() {
		t.Fatalf("kinds %q %q, want the outcomes' labels", ErrNoWorkers, ErrAllBusy)
	}
}

// Under enforced disaggregation, a request that arrives once every prefill worker is
// gone fails with the router's outcome, no_prefill_workers.
func TestNoPrefillWorkersKind(t *testing.T) {
	eng := smallEngine()
	cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, BlockTokens: 512, Seed: 3,
		Router: kv.DefaultConfig(eng.BlockSize)}
	cfg.Router.Disagg.Enforce = true
	cfg.Faults = []Fault{{At: 0, Worker: "prefill-0"}}
	long := bench.Request{Arrival: time.Second, InputLength: 2000, OutputLength: 10, HashIDs: []int64{1, 2, 3, 4}}
	s := runSim(t, cfg, []bench.Request{long})
	out, _ := s.outcome()
	if got := out.Results[0].Error; got != messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS.Label() {
		t.Fatalf("error kind %q (%s), want no_prefill_workers", got, out.Results[0].Detail)
	}
}
