package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/turbine-llm/turbine/bench"
	benchcmd "github.com/turbine-llm/turbine/cmd/turbine/bench"
)

// TestBenchChatServe runs `turbine bench --endpoint chat` with a shared prefix against a
// real `turbine serve` (one mock engine, cl100k_base with a ChatML template): every
// answer has the asked output length (ignore_eos honoured through chat), the prompt
// tokens the server counts are the synthesized words plus the same template tokens for
// every request (one word, one token), and the shared prefix shows as cached tokens.
func TestBenchChatServe(t *testing.T) {
	s := startServe(t, 1, "--block-size", "16", "--speedup-ratio", "100")
	out := t.TempDir()
	const requests, osl = 8, 6
	var stdout, stderr bytes.Buffer
	args := []string{"--url", s.url, "--model", "turbine-mock", "--endpoint", "chat", "--isl", "uniform:150:250",
		"--osl", "6", "--requests", "8", "--concurrency", "2", "--shared-prefix-groups", "1", "--shared-prefix-tokens", "100",
		"--block-tokens", "16", "--out", out, "--progress-interval", "0"}
	if err := benchcmd.Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s\n%s", err, stderr.String(), s.Logs())
	}
	f, err := os.Open(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := bench.ReadSummary(f, "summary.json")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := bench.SyntheticSpec{ISL: mustParseLength(t, "uniform:150:250"), OSL: bench.FixedLength(osl), Requests: requests,
		PrefixGroups: 1, PrefixTokens: 100, BlockTokens: 16, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var words int64
	for _, r := range reqs {
		words += int64(r.InputLength)
	}
	template := (sum.InputTokens - words) / requests
	if sum.Succeeded != requests || sum.OutputTokens != requests*osl || (sum.InputTokens-words)%requests != 0 || template < 1 || template > 20 {
		t.Fatalf("summary %+v: want %d valid answers of %d tokens, prompts of the %d words plus the same template tokens each\n%s",
			sum, requests, osl, words, stdout.String())
	}
	// Every request that starts after the first has been prefilled shares at least the
	// prefix's whole 16-token blocks (96 tokens) with it, after the template's own leading
	// tokens. At concurrency 2 the first two start together, and the engine may take
	// them in one step, before either prefix is cached: every later one starts after one
	// of them ended.
	if want := int64(requests-2) * 96; sum.PrefixCacheHitRate == nil || sum.CachedTokens < want {
		t.Fatalf("cached %d of %d prompt tokens, want at least %d\n%s", sum.CachedTokens, sum.PromptTokens, want, stdout.String())
	}
	t.Logf("template tokens per request %d; %s", template, stdout.String())
}

func mustParseLength(t *testing.T, s string) bench.Length {
	t.Helper()
	l, err := bench.ParseLength(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
