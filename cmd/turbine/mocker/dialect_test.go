package mocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/trtllm"
)

// startRun runs the mocker with args and returns its base URL and ready line.
func startRun(t *testing.T, args ...string) (string, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, append([]string{"--port", "0", "--served-model-name", "mock-d", "--block-size", "16",
			"--num-gpu-blocks-override", "1024", "--max-model-len", "4096", "--speedup-ratio", "100"}, args...), io.Discard, logs)
	}()
	ready := waitReady(t, logs, errc)
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return fmt.Sprintf("http://127.0.0.1:%d", int(ready["port"].(float64))), ready
}

func TestSGLangDialect(t *testing.T) {
	// SGLang's --kv-events-config has no enable flag: a zmq publisher is on.
	base, ready := startRun(t, "--dialect", "sglang", "--incremental-streaming-output",
		"--kv-events-config", `{"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`)
	if ready["dialect"] != "sglang" || ready["kv_events"] == nil {
		t.Fatalf("ready line %v", ready)
	}
	c, err := sglang.New(base, nil, sglang.Options{IncrementalOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.Generate(ctx, sglang.GenerateRequest{RID: "x", InputIDs: []uint32{10, 20, 30}, Sampling: sglang.SamplingParams{MaxNewTokens: 5, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	for {
		ch, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += len(ch.TokenIDs)
	}
	if n != 5 {
		t.Fatalf("%d tokens", n)
	}
	l, err := c.Load(ctx)
	if err != nil || l.Running != 0 || l.MaxTotalTokens != 1024*16 {
		t.Fatalf("load %+v %v", l, err)
	}
}

func TestTRTLLMDialect(t *testing.T) {
	base, ready := startRun(t, "--dialect", "trtllm", "--event-buffer-max-size", "100")
	if ready["dialect"] != "trtllm" {
		t.Fatalf("ready line %v", ready)
	}
	c, err := trtllm.New(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := c.Models(ctx); err != nil || len(ids) != 1 || ids[0] != "mock-d" {
		t.Fatalf("models %v %v", ids, err)
	}
	prompt := make([]uint32, 20)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	s, err := c.Complete(ctx, trtllm.CompletionRequest{Model: "mock-d", PromptTokenIDs: prompt, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	evs, err := c.KVCacheEvents(ctx)
	if err != nil || len(evs) < 2 || evs[0].Data.Type != "created" || evs[1].Data.Type != "stored" ||
		len(evs[1].Data.Blocks) != 1 || len(evs[1].Data.Blocks[0].Tokens) != 16 {
		t.Fatalf("events %+v %v", evs, err)
	}
	stats, err := c.IterationStats(ctx)
	if err != nil || len(stats) == 0 || stats[len(stats)-1].KVCacheStats == nil || stats[len(stats)-1].KVCacheStats.MaxNumBlocks != 1024 {
		t.Fatalf("stats %+v %v", stats, err)
	}
}

func TestDialectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dialect", "tgi"}, `--dialect "tgi"`},
		{[]string{"--incremental-streaming-output"}, "--incremental-streaming-output needs --dialect sglang"},
		{[]string{"--dialect", "sglang", "--event-buffer-max-size", "10"}, "--event-buffer-max-size needs --dialect trtllm"},
		{[]string{"--dialect", "trtllm", "--event-buffer-max-size", "-1"}, "--event-buffer-max-size -1"},
		{[]string{"--dialect", "trtllm", "--event-buffer-max-size", "10", "--no-enable-prefix-caching"}, "prefix caching"},
	} {
		err := Run(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
}
