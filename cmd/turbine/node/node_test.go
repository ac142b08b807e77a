package node

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-1"}, "--workers"},
		{[]string{"--node-id", ""}, "--node-id"},
		{[]string{"--engine", "llama.cpp"}, "--engine"},
		{[]string{"--tensor-parallel-size", "-2"}, "--tensor-parallel-size"},
		{[]string{"--discovery", "zk://x"}, "--discovery"},
		{[]string{"--block-size", "0"}, "--block-size"},
		{[]string{"--heartbeat", "1ms"}, "--heartbeat"},
		{[]string{"--tokenizer", "/nonexistent/model"}, "--tokenizer"},
		{[]string{"--engine", "vllm", "--model", "Qwen/Qwen3-8B"}, "--tokenizer"},
		{[]string{"--engine", "sglang", "--model", "../../../actors/frontend/testdata/tiny"}, "--model"},
		{[]string{"--gpu-memory-utilization", "2"}, "--gpu-memory-utilization"},
		{[]string{"--mocker-dialect", "tgi"}, "--mocker-dialect"},
		{[]string{"--worker-role", "both"}, "--worker-role"},
		{[]string{"--kv-bytes-per-token", "9223372036854775807"}, "--kv-bytes-per-token 9223372036854775807"},
		{[]string{"--kv-transfer-bandwidth", "1e-300"}, "--kv-transfer-bandwidth 1e-300"},
		{[]string{"--kv-load-failure-policy", "recompute", "--mocker-dialect", "sglang"}, "--kv-load-failure-policy recompute needs --mocker-dialect vllm"},
		{[]string{"--engine", "vllm", "--model", "../testdata/tiny-qwen3", "stray", "--", "--enforce-eager"}, `unexpected argument "stray"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestCompleteCard(t *testing.T) {
	good := func() *messages.ModelCard {
		return &messages.ModelCard{Model: "m", KvBlockSize: 16, TotalKvBlocks: 100, MaxNumSeqs: 8,
			MaxNumBatchedTokens: 512, ContextLength: 1024}
	}
	tests := []struct {
		name   string
		mutate func(*messages.ModelCard)
		want   string // "" = accepted
	}{
		{"builtin tokenizer by default", func(*messages.ModelCard) {}, ""},
		{"zero block size", func(c *messages.ModelCard) { c.KvBlockSize = 0 }, "kv_block_size"},
		{"no KV blocks", func(c *messages.ModelCard) { c.TotalKvBlocks = 0 }, "total_kv_blocks"},
		{"missing tokenizer folder", func(c *messages.ModelCard) { c.Tokenizer = "/nonexistent/tok" }, "/nonexistent/tok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := good()
			tc.mutate(in)
			out, err := completeCard(in)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one naming %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.Tokenizer != "builtin:cl100k_base" || out == in {
				t.Fatalf("card %+v: want a copy with the default tokenizer", out)
			}
		})
	}
}
