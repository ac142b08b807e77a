package frontend

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/messages"
)

// TestRecorderDeclaresCountersAtZero: a model's first routing decision makes its
// migration, prefill-retry and KV-release counters appear at zero, every reason
// included; later events count on the same series.
func TestRecorderDeclaresCountersAtZero(t *testing.T) {
	r := &setRecorder{set: metrics.NewSet()}
	r.decided("m", messages.DisaggDecision_DISAGG_REMOTE)
	r.decided("m", messages.DisaggDecision_DISAGG_REMOTE)
	r.prefillRetried("m", messages.Fault_FAULT_KV_TRANSFER)
	r.notMoved("m")
	var b bytes.Buffer
	r.set.WritePrometheus(&b)
	got := b.String()
	for _, line := range []string{
		`turbine_frontend_disagg_decisions_total{model="m",decision="remote"} 2`,
		`turbine_frontend_migrations_total{model="m",reason="worker_terminated"} 0`,
		`turbine_frontend_migrations_total{model="m",reason="engine_error"} 0`,
		`turbine_frontend_migrations_total{model="m",reason="stalled"} 0`,
		`turbine_frontend_prefill_retries_total{model="m",reason="worker_terminated"} 0`,
		`turbine_frontend_prefill_retries_total{model="m",reason="engine_error"} 0`,
		`turbine_frontend_prefill_retries_total{model="m",reason="stalled"} 0`,
		`turbine_frontend_prefill_retries_total{model="m",reason="kv_transfer"} 1`,
		`turbine_frontend_kv_releases_total{model="m"} 0`,
		`turbine_frontend_deadline_exceeded_total{model="m"} 0`,
		`turbine_frontend_unacknowledged_legs_waiting_total{model="m"} 1`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, got)
		}
	}
	if n := strings.Count(got, "turbine_frontend_kv_releases_total{"); n != 1 {
		t.Errorf("%d kv_releases series, want 1:\n%s", n, got)
	}
}
