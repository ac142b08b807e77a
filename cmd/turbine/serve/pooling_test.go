package serve

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// An embedding model (--runner pooling) has no disaggregated role and no trtllm-serve
// dialect: such a layout is refused before anything starts, instead of mock engines
// that refuse to start and are restarted without end.
func TestValidateRefusesPoolingLayouts(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		runner, dialect          string
		workers, prefill, decode int
		want                     string
	}{
		{"pooling, aggregated", options.RunnerPooling, "", 2, 0, 0, ""},
		{"pooling, sglang", options.RunnerPooling, "sglang", 2, 0, 0, ""},
		{"pooling, prefill and decode", options.RunnerPooling, "", 0, 1, 1, "--runner pooling: an embedding model has no prefill or decode workers (--prefill-workers 1, --decode-workers 1)"},
		{"pooling, prefill only beside aggregated", options.RunnerPooling, "", 1, 1, 0, "(--prefill-workers 1)"},
		{"pooling, decode only", options.RunnerPooling, "", 0, 0, 2, "(--decode-workers 2)"},
		{"pooling, trtllm", options.RunnerPooling, "trtllm", 2, 0, 0, "--runner pooling: --mocker-dialect trtllm"},
		{"generate, prefill and decode", options.RunnerGenerate, "", 0, 1, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			o.Engine.Runner, o.MockerDialect = tc.runner, tc.dialect
			o.Workers, o.WorkersSet, o.PrefillWorkers, o.DecodeWorkers = tc.workers, true, tc.prefill, tc.decode
			err := o.Validate()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
