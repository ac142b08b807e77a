package options

import (
	"strings"
	"testing"
)

func TestCheckPoolingLayout(t *testing.T) {
	for _, tc := range []struct {
		name, runner, engineFlag, engine string
		disagg                           []string
		want                             string
	}{
		{"generate, disaggregated", RunnerGenerate, "--engine", "trtllm", []string{"--worker-role prefill"}, ""},
		{"pooling, aggregated vllm", RunnerPooling, "--engine", "vllm", nil, ""},
		{"pooling, default mock dialect", RunnerPooling, "--mocker-dialect", "", nil, ""},
		{"pooling, mock sglang", RunnerPooling, "--mocker-dialect", "sglang", nil, ""},
		{"pooling, two roles", RunnerPooling, "--mocker-dialect", "", []string{"--prefill-workers 1", "--decode-workers 2"},
			"--runner pooling: an embedding model has no prefill or decode workers (--prefill-workers 1, --decode-workers 2); serve it with aggregated workers"},
		{"pooling, trtllm", RunnerPooling, "--engine", "trtllm", nil,
			"--runner pooling: --engine trtllm: trtllm-serve serves no embeddings; use vllm or sglang"},
		{"pooling, mock trtllm", RunnerPooling, "--mocker-dialect", "trtllm", nil, "--runner pooling: --mocker-dialect trtllm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultEngine()
			o.Runner = tc.runner
			err := o.CheckPoolingLayout(tc.engineFlag, tc.engine, tc.disagg...)
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
