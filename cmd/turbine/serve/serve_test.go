package serve

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--port", "99999"}, "--port"},
		{[]string{"--block-size", "-1"}, "--block-size"},
		{[]string{"--router-mode", "foo"}, "--router-mode"},
		{[]string{"--speedup-ratio", "0"}, "--speedup-ratio"},
		{[]string{"--overlap-weight", "-1"}, "--overlap-weight"},
		{[]string{"--heartbeat", "1ms"}, "--heartbeat"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--tokenizer", "/nonexistent/model"}, "--tokenizer"},
		{[]string{"--workers", "abc"}, "workers"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"--router-temperature", "NaN"}, "--router-temperature"},
		{[]string{"--overlap-weight", "Inf"}, "--overlap-weight"},
		{[]string{"--speedup-ratio", "NaN"}, "--speedup-ratio"},
		{[]string{"--num-gpu-blocks", "1"}, "--max-model-len"},
		{[]string{"--prefill-workers", "-1", "--decode-workers", "1"}, "--prefill-workers"},
		{[]string{"--decode-workers", "300"}, "--decode-workers"},
		{[]string{"--prefill-workers", "1"}, "--prefill-workers 1 without --decode-workers"},
		{[]string{"--prefill-workers", "1", "--decode-workers", "1", "--workers", "-1"}, "--workers"},
		{[]string{"--prefill-workers", "200", "--decode-workers", "100"}, "256 workers at most"},
		{[]string{"--max-local-prefill-tokens", "-5"}, "--max-local-prefill-tokens"},
		{[]string{"--max-prefill-queue-tokens", "-1"}, "--max-prefill-queue-tokens"},
		{[]string{"--mocker-dialect", "tgi"}, "--mocker-dialect"},
		{[]string{"--kv-bytes-per-token", "-1"}, "--kv-bytes-per-token"},
		{[]string{"--kv-transfer-bandwidth", "-1"}, "--kv-transfer-bandwidth"},
		{[]string{"--kv-transfer-bandwidth", "Inf"}, "--kv-transfer-bandwidth"},
		{[]string{"--kv-bytes-per-token", "9223372036854775807"}, "--kv-bytes-per-token 9223372036854775807: want 0 (the model's) or 1..16777216 bytes"},
		{[]string{"--kv-transfer-bandwidth", "1e-300"}, "--kv-transfer-bandwidth 1e-300: want 0 (the default) or 1e+06..1e+13 bytes/s"},
		{[]string{"--kv-transfer-bandwidth", "2e13"}, "--kv-transfer-bandwidth 2e+13"},
		{[]string{"--kv-load-failure-policy", "retry"}, `--kv-load-failure-policy "retry"`},
		{[]string{"--kv-load-failure-policy", "recompute", "--mocker-dialect", "trtllm"}, "--kv-load-failure-policy recompute needs --mocker-dialect vllm"},
		{[]string{"--planner", "auto"}, `--planner "auto"`},
		{[]string{"--planner", "sla"}, "--planner-profile"},
		{[]string{"--planner", "load", "--connector", "kubernetes"}, "--connector kubernetes"},
		{[]string{"--planner", "load", "--gpu-budget", "1", "--prefill-workers", "1", "--decode-workers", "1"}, "--gpu-budget 1 holds fewer than --min-workers 1"},
		{[]string{"--planner", "load", "--planner-report-interval", "0s"}, "--planner-report-interval"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Every case fails before anything binds or starts.
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestDefaultsAreValid(t *testing.T) {
	o := Defaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Port != 8000 || o.Workers != 2 || o.RouterMode != "ttft" || o.BlockSize != 64 {
		t.Fatalf("defaults changed: %+v", o)
	}
}

// TestLayout: the workers serve starts, by role, for each combination of the worker flags.
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "w0:aggregated w1:aggregated"},
		{[]string{"--workers", "3"}, "w0:aggregated w1:aggregated w2:aggregated"},
		{[]string{"--prefill-workers", "1", "--decode-workers", "2"}, "p0:prefill d0:decode d1:decode"},
		{[]string{"--decode-workers", "1"}, "d0:decode"},
		{[]string{"--workers", "1", "--prefill-workers", "1", "--decode-workers", "1"}, "w0:aggregated p0:prefill d0:decode"},
		{[]string{"--workers", "0", "--prefill-workers", "1", "--decode-workers", "1"}, "p0:prefill d0:decode"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := Defaults()
			_, help, err := options.Parse(options.Command{Name: "serve", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
				Validate: o.Validate, Log: &o.Log}, tc.args, io.Discard)
			if err != nil || help {
				t.Fatalf("parse: %v", err)
			}
			var got []string
			for _, w := range o.layout() {
				got = append(got, w.id+":"+w.role)
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("layout %v, want %s", got, tc.want)
			}
		})
	}
}

func TestDisaggFlags(t *testing.T) {
	o := Defaults()
	if o.MaxLocalPrefillTokens != 1000 || o.EnforceDisagg {
		t.Fatalf("disaggregation defaults changed: %+v", o.Disagg)
	}
	_, _, err := options.Parse(options.Command{Name: "serve", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, []string{"--max-local-prefill-tokens", "0", "--max-prefill-queue-tokens", "500",
		"--enforce-disagg", "--prefill-workers", "1", "--decode-workers", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Disagg.Config()
	if c.MaxLocalPrefillTokens != 0 || c.MaxPrefillQueueTokens != 500 || !c.Enforce {
		t.Fatalf("router config %+v", c)
	}
}
