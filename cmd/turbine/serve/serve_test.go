package serve

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	core "github.com/turbine-llm/turbine/planner"
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

// With --planner, the planner plans workers of the GPUs each mock worker plays
// (--mocker-tensor-parallel-size): an SLA profile without that size, and boot workers
// whose GPUs exceed --gpu-budget, are start-up errors naming the flags.
func TestPlannerChecksTheLayout(t *testing.T) {
	profile := filepath.Join("..", "..", "..", "planner", "testdata", "profile-small.json") // sizes 1 and 2
	for _, tc := range []struct {
		args []string
		want []string // "" valid
		tp   int      // the planner's GPUs per worker when valid
	}{
		{[]string{"--planner", "sla", "--planner-profile", profile, "--mocker-tensor-parallel-size", "2"}, nil, 2},
		{[]string{"--planner", "sla", "--planner-profile", profile}, nil, 1},
		{[]string{"--planner", "load", "--mocker-tensor-parallel-size", "4", "--workers", "2"}, nil, 4},
		{[]string{"--planner", "load", "--workers", "4", "--gpu-budget", "4"}, nil, 1},
		{[]string{"--workers", "4", "--gpu-budget", "2"}, nil, 1}, // no planner: no budget
		{[]string{"--planner", "sla", "--planner-profile", profile, "--mocker-tensor-parallel-size", "4"},
			[]string{"--planner-profile " + profile + " has no entry for --mocker-tensor-parallel-size 4", "[1 2]"}, 0},
		{[]string{"--planner", "load", "--workers", "4", "--gpu-budget", "2"},
			[]string{"--workers 4: 4 workers × 1 GPU each", "over --gpu-budget 2", "start at most 2 workers"}, 0},
		{[]string{"--planner", "load", "--workers", "2", "--mocker-tensor-parallel-size", "2", "--gpu-budget", "3"},
			[]string{"--workers 2: 2 workers × 2 GPUs each (--mocker-tensor-parallel-size 2) = 4 GPUs, over --gpu-budget 3"}, 0},
		{[]string{"--planner", "load", "--prefill-workers", "2", "--decode-workers", "2", "--gpu-budget", "3"},
			[]string{"--workers 0 + --prefill-workers 2 + --decode-workers 2: 4 workers", "over --gpu-budget 3"}, 0},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := Defaults()
			_, _, err := options.Parse(options.Command{Name: "serve", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
				Validate: o.Validate, Log: &o.Log}, tc.args, io.Discard)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !o.Planner.Enabled() {
					return
				}
				for _, pool := range core.Pools {
					if g := o.Planner.Core(o.Planner.Disaggregated).GPUsPerEngine[pool]; g != tc.tp {
						t.Fatalf("the planner plans %v workers of %d GPUs, want %d", pool, g, tc.tp)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("valid, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q, want one with %q", err, w)
				}
			}
		})
	}
}

// The virtual connector starts from serve's boot layout, counted per pool.
func TestBootPools(t *testing.T) {
	o := Defaults()
	o.Workers, o.PrefillWorkers, o.DecodeWorkers = 1, 2, 3
	got := o.bootPools()
	if got[core.PoolAggregated] != 1 || got[core.PoolPrefill] != 2 || got[core.PoolDecode] != 3 || len(got) != 3 {
		t.Fatalf("boot pools %v, want aggregated 1, prefill 2, decode 3", got)
	}
	o.Workers, o.PrefillWorkers, o.DecodeWorkers = 0, 1, 1
	if got := o.bootPools(); len(got) != 2 || got[core.PoolPrefill] != 1 || got[core.PoolDecode] != 1 {
		t.Fatalf("boot pools %v, want prefill 1, decode 1", got)
	}
}
