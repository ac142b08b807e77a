package options

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

const fixture = "../../testdata/tiny-qwen3"

// parsed returns the engine and launch options after args.
func parsed(t *testing.T, args ...string) (Engine, Launch) {
	t.Helper()
	e, l := DefaultEngine(), DefaultLaunch()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.Flags(fs)
	l.Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return e, l
}

func TestNodeCard(t *testing.T) {
	for _, tc := range []struct {
		name    string
		engine  string
		args    []string
		model   string
		context int32
		err     string
	}{
		{"folder: its context length, served as given", "vllm", []string{"--model", fixture}, fixture, 40960, ""},
		{"folder, --max-model-len and a served name", "sglang", []string{"--model", fixture, "--max-model-len", "4096", "--served-model-name", "q"}, "q", 4096, ""},
		{"--max-model-len above the folder's is the user's call", "trtllm", []string{"--model", fixture, "--max-model-len", "65536"}, fixture, 65536, ""},
		{"mocker by name with a tokenizer folder", "mocker", []string{"--model", "tiny", "--tokenizer", fixture}, "tiny", 32768, ""},
		{"mocker by name, builtin tokenizer", "mocker", nil, "turbine-mock", 32768, ""},
		{"real engine by hub name with the model's tokenizer folder", "vllm", []string{"--model", "Qwen/Qwen3-8B", "--tokenizer", fixture}, "Qwen/Qwen3-8B", 32768, ""},
		{"real engine by hub name, builtin tokenizer", "vllm", []string{"--model", "Qwen/Qwen3-8B"}, "", 0, "give the model's folder as --model or --tokenizer"},
		{"folder without config.json", "vllm", []string{"--model", "../../../../actors/frontend/testdata/tiny"}, "", 0, "--model ../../../../actors/frontend/testdata/tiny: model: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, l := parsed(t, tc.args...)
			card, err := e.NodeCard(tc.engine, l)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if card.Model != tc.model || card.ContextLength != tc.context || card.Engine != tc.engine ||
				card.KvBlockSize != 64 || card.TotalKvBlocks != 16384 || card.MaxNumSeqs != 256 || card.MaxNumBatchedTokens != 8192 {
				t.Fatalf("card %v\nwant model %q, context length %d, engine %s and the flags' limits", card, tc.model, tc.context, tc.engine)
			}
		})
	}
}

func TestTrackedFlags(t *testing.T) {
	e, _ := parsed(t)
	if e.MaxModelLenSet || e.ReadyTimeoutSet || e.WorkerReadyTimeout("vllm") != RealEngineReadyTimeout ||
		e.WorkerReadyTimeout("mocker") != 2*time.Minute {
		t.Fatalf("defaults: %+v", e)
	}
	e, _ = parsed(t, "--max-model-len", "32768", "--ready-timeout", "5s")
	if !e.MaxModelLenSet || e.MaxModelLen != 32768 || !e.ReadyTimeoutSet || e.WorkerReadyTimeout("vllm") != 5*time.Second {
		t.Fatalf("given: %+v", e)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e = DefaultEngine()
	e.Flags(fs)
	if err := fs.Parse([]string{"--max-model-len", "many"}); err == nil || e.MaxModelLenSet {
		t.Fatalf("a bad value: %v, set %v", err, e.MaxModelLenSet)
	}
}

func TestLaunchValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"--gpu-memory-utilization", "0.9", "--mocker-dialect", "trtllm"}, ""},
		{[]string{"--gpu-memory-utilization", "1.2"}, "--gpu-memory-utilization 1.2"},
		{[]string{"--python", ""}, "--python"},
		{[]string{"--mocker-dialect", "tgi"}, `--mocker-dialect "tgi"`},
	} {
		_, l := parsed(t, tc.args...)
		err := l.Validate()
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Fatalf("%v: Validate = %v, want %q", tc.args, err, tc.err)
		}
	}
}
