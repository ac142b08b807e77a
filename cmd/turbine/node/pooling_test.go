package node

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// A node serving an embedding model (--runner pooling) refuses, before anything starts,
// a disaggregated --worker-role and an engine without embeddings, instead of workers
// whose engines refuse to start and are restarted without end.
func TestValidateRefusesPoolingLayouts(t *testing.T) {
	for _, tc := range []struct {
		name, runner, role, engine, dialect string
		want                                string
	}{
		{"pooling, aggregated", options.RunnerPooling, "aggregated", "mocker", "", ""},
		{"pooling, prefill", options.RunnerPooling, "prefill", "mocker", "", "--runner pooling: an embedding model has no prefill or decode workers (--worker-role prefill)"},
		{"pooling, decode", options.RunnerPooling, "decode", "vllm", "", "(--worker-role decode)"},
		{"pooling, mock trtllm", options.RunnerPooling, "aggregated", "mocker", "trtllm", "--runner pooling: --mocker-dialect trtllm"},
		{"pooling, trtllm", options.RunnerPooling, "aggregated", "trtllm", "", "--runner pooling: --engine trtllm"},
		{"generate, prefill", options.RunnerGenerate, "prefill", "mocker", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			o.Engine.Runner, o.WorkerRole, o.EngineName, o.MockerDialect = tc.runner, tc.role, tc.engine, tc.dialect
			err := o.Validate()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
