package mocker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/persona"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/gateway/parse"
)

// syncBuffer is a log sink the test reads while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitReady returns the ready log line's fields.
func waitReady(t *testing.T, logs *syncBuffer, errc <-chan error) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == "mocker serving" {
				return m
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("Run returned %v; logs:\n%s", err, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no ready line; logs:\n%s", logs.String())
	return nil
}

func TestRunServesAndShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"--port", "0", "--served-model-name", "mock-a", "--block-size", "16",
			"--num-gpu-blocks-override", "1024", "--max-model-len", "4096", "--speedup-ratio", "50", "--seed", "3",
			"--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`},
			io.Discard, logs)
	}()
	ready := waitReady(t, logs, errc)
	if ready["level"] != "info" || ready["port"] == nil || ready["kv_events"] == nil || ready["kv_events_bind"] != true {
		t.Fatalf("ready line %v", ready)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", int(ready["port"].(float64)))
	c, err := vllm.New(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Models(ctx)
	if err != nil || len(ms) != 1 || ms[0].ID != "mock-a" || ms[0].Root != "turbine-mock" || ms[0].MaxModelLen != 4096 {
		t.Fatalf("models %+v %v", ms, err)
	}
	st, err := c.Complete(ctx, vllm.CompletionRequest{PromptTokenIDs: []uint32{10, 20, 30}, MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		ch, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += len(ch.TokenIDs)
	}
	st.Close()
	if n != 5 {
		t.Fatalf("%d tokens", n)
	}
	l, err := c.Load(ctx)
	if err != nil || l.BlockSize != 16 || l.NumGPUBlocks != 1024 {
		t.Fatalf("load %+v %v", l, err)
	}

	// Graceful shutdown: a request in flight finishes, then Run returns.
	st, err = c.Complete(context.Background(), vllm.CompletionRequest{PromptTokenIDs: []uint32{1, 2}, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	got := 1
	for {
		ch, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("in-flight request cut by shutdown after %d chunks: %v", got, err)
		}
		got++
		if ch.FinishReason != "" && ch.FinishReason != "length" {
			t.Fatalf("finish %q", ch.FinishReason)
		}
	}
	if got != 200 {
		t.Fatalf("in-flight request got %d chunks", got)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--host", ""}, "--host"},
		{[]string{"--block-size", "0"}, "--block-size 0"},
		{[]string{"--num-gpu-blocks-override", "2"}, "--max-model-len 32768 exceeds the KV cache"},
		{[]string{"--max-num-seqs", "-1"}, "--max-num-seqs"},
		{[]string{"--speedup-ratio", "0"}, "--speedup-ratio"},
		{[]string{"--mean-output-tokens", "0"}, "--mean-output-tokens"},
		{[]string{"--no-enable-chunked-prefill"}, "without chunked prefill"},
		{[]string{"--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"nats"}`}, "--kv-events-config"},
		{[]string{"--kv-events-config", `{"enable_kv_cache_events":true}`, "--no-enable-prefix-caching"}, "prefix caching"},
		{[]string{"--tokenizer", "builtin:nope"}, "--tokenizer builtin:nope"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--port", "x"}, `invalid value "x" for flag -port`},
		{[]string{"model-as-argument"}, "unexpected argument"},
		{[]string{"--shutdown-grace", "-1s"}, "--shutdown-grace"},
		{[]string{"--role", "both"}, `--role "both"`},
		{[]string{"--kv-transfer-port", "-1"}, "--kv-transfer-port -1"},
		{[]string{"--kv-transfer-bandwidth", "0"}, "--kv-transfer-bandwidth"},
		{[]string{"--kv-bytes-per-token", "-5"}, "--kv-bytes-per-token -5"},
		{[]string{"--kv-transfer-timeout", "0s"}, "--kv-transfer-timeout"},
		{[]string{"--kv-bytes-per-token", "9223372036854775807"}, "--kv-bytes-per-token 9223372036854775807: want 1..16777216"},
		{[]string{"--kv-bytes-per-token", "16777217"}, "--kv-bytes-per-token 16777217"},
		{[]string{"--kv-transfer-bandwidth", "1e-300"}, "--kv-transfer-bandwidth 1e-300: want 1e+06..1e+13 bytes/s"},
		{[]string{"--kv-transfer-bandwidth", "1e14"}, "--kv-transfer-bandwidth 1e+14"},
		{[]string{"--kv-transfer-bandwidth", "NaN"}, "--kv-transfer-bandwidth NaN"},
		{[]string{"--kv-transfer-bandwidth", "1e6", "--speedup-ratio", "1e-7"}, "is below 1 byte/s"},
		{[]string{"--kv-transfer-connect-timeout", "0s"}, "--kv-transfer-connect-timeout"},
		{[]string{"--kv-transfer-read-timeout", "100ms"}, "--kv-transfer-read-timeout 100ms: want at least 1s"},
		{[]string{"--kv-load-failure-policy", "retry"}, `--kv-load-failure-policy "retry"`},
		{[]string{"--kv-load-failure-policy", "recompute", "--dialect", "sglang"}, "recompute needs --dialect vllm"},
		{[]string{"--model", "../../../model/testdata/bad-malformed"}, "or set --kv-bytes-per-token"},
		{[]string{"--tool-call-parser", "nonesuch"}, `--tool-call-parser "nonesuch": want one of`},
		{[]string{"--reasoning-parser", "nonesuch"}, `--reasoning-parser "nonesuch": want one of`},
	} {
		// A free port: some checks come after the listener is made, and the default
		// port (8000) may be taken on the machine.
		err := Run(context.Background(), append([]string{"--port", "0"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	if err := Run(context.Background(), []string{"-h"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("-h: %v", err)
	}
}

func TestResolveTokenizer(t *testing.T) {
	for _, tc := range []struct{ model, tokenizer, want string }{
		{"turbine-mock", "", DefaultTokenizer},
		{"builtin:o200k_base", "", "builtin:o200k_base"},
		{t.TempDir(), "", ""}, // a folder is its own tokenizer
		{"x", "builtin:p50k_base", "builtin:p50k_base"},
	} {
		o := Defaults()
		o.Model, o.Tokenizer = tc.model, tc.tokenizer
		if err := o.resolve(); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if want == "" {
			want = tc.model
		}
		if o.Tokenizer != want || o.ServedModelName != tc.model {
			t.Errorf("model %q: tokenizer %q served %q", tc.model, o.Tokenizer, o.ServedModelName)
		}
	}
}

func TestKVBytesPerToken(t *testing.T) {
	const cards = "../../../model/testdata/"
	for _, tc := range []struct {
		args []string
		want int64
	}{
		{nil, 131072}, // the documented default
		{[]string{"--model", cards + "mistral-small-3.1-24b-instruct"}, 2 * 40 * 8 * 128 * 2},
		{[]string{"--tokenizer", cards + "llama-3.1-8b-instruct"}, 2 * 32 * 8 * 128 * 2},
		{[]string{"--model", cards + "mistral-small-3.1-24b-instruct", "--kv-bytes-per-token", "7"}, 7},
		{[]string{"--model", t.TempDir()}, 131072}, // a folder without config.json
	} {
		o := Defaults()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		flags(&o, fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := o.resolve(); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.KVTransfer.BytesPerToken != tc.want {
			t.Errorf("%q: %d KV bytes per token, want %d", tc.args, o.KVTransfer.BytesPerToken, tc.want)
		}
	}
}

// TestRoleFlags: a prefill mocker's ready line names its role and KV transfer port, and
// the port answers.
func TestRoleFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"--port", "0", "--role", "prefill", "--kv-transfer-port", "0", "--kv-bytes-per-token", "4096",
			"--max-model-len", "4096", "--log-format", "json"}, io.Discard, logs)
	}()
	ready := waitReady(t, logs, errc)
	addr, _ := ready["kv_transfer"].(string)
	if ready["role"] != "prefill" || ready["kv_bytes_per_token"] != 4096.0 || ready["kv_transfer_engine_id"] == nil || addr == "" {
		t.Fatalf("ready line %v", ready)
	}
	released, err := kvtransfer.Release(ctx, addr, ready["kv_transfer_engine_id"].(string), "nothing-pinned")
	if err != nil || released {
		t.Fatalf("release on the transfer port: %v %v", released, err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestParserFlags: every parser name both the gateway reads (gateway/parse) and the mock
// engine writes (engines/mocker/persona) is accepted, from the flag or from
// TURBINE_TOOL_CALL_PARSER / TURBINE_REASONING_PARSER.
func TestParserFlags(t *testing.T) {
	tools, reasoning := parserNames(parse.ToolParserNames(), persona.ToolParsers()),
		parserNames(parse.ReasoningParserNames(), persona.ReasoningParsers())
	if len(tools) == 0 || len(reasoning) == 0 {
		t.Skipf("gateway/parse registers no parser the mock engine writes yet (tools %v, reasoning %v)", tools, reasoning)
	}
	for _, name := range tools {
		o := Defaults()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		flags(&o, fs)
		if err := fs.Parse([]string{"--tool-call-parser", name}); err != nil {
			t.Fatal(err)
		}
		if err := o.resolve(); err != nil || o.ToolCallParser != name {
			t.Fatalf("--tool-call-parser %s: %v (%q)", name, err, o.ToolCallParser)
		}
	}
	o := Defaults()
	o.ToolCallParser, o.ReasoningParser = "none", "none"
	if err := o.resolve(); err != nil || o.ToolCallParser != "" || o.ReasoningParser != "" {
		t.Fatalf("none: %v (%q, %q)", err, o.ToolCallParser, o.ReasoningParser)
	}
	t.Setenv("TURBINE_REASONING_PARSER", reasoning[0])
	o = Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	flags(&o, fs)
	if err := cli.Parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if err := o.resolve(); err != nil || o.ReasoningParser != reasoning[0] {
		t.Fatalf("TURBINE_REASONING_PARSER=%s: %v (%q)", reasoning[0], err, o.ReasoningParser)
	}
}

// TestRunPlaysModelFamily: with --tool-call-parser and --reasoning-parser the engine
// answers a chat prompt offering a tool with a thinking block and a call in that family's
// syntax.
func TestRunPlaysModelFamily(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"--port", "0", "--max-model-len", "4096", "--speedup-ratio", "100",
			"--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--log-format", "json"}, io.Discard, logs)
	}()
	ready := waitReady(t, logs, errc)
	if ready["tool_call_parser"] != "hermes" || ready["reasoning_parser"] != "qwen3" {
		t.Fatalf("ready line %v", ready)
	}
	prompt := "<|im_start|>system\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
		"\n</tools><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
	body, _ := json.Marshal(map[string]any{"model": "turbine-mock", "prompt": prompt, "max_tokens": 500})
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/completions", int(ready["port"].(float64))), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("answer %+v: %v", out, err)
	}
	text := out.Choices[0].Text
	if !strings.HasPrefix(text, "<think>\n") || !strings.Contains(text, "</think>\n\n<tool_call>\n{\"name\": \"get_weather\"") ||
		out.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %q (%s)", text, out.Choices[0].FinishReason)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
