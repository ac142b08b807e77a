package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// mooncakeRequest is one line of the Mooncake trace (JSONL).
type mooncakeRequest struct {
	Timestamp    int64   `json:"timestamp"`     // ms from the trace start
	InputLength  int     `json:"input_length"`  // tokens
	OutputLength int     `json:"output_length"` // tokens
	HashIDs      []int64 `json:"hash_ids"`      // one per 512-token block, prefix-chained
}

const mooncakeBlock = 512

// sharedDataDir is ../shared/data beside the repository root, or "" when absent.
func sharedDataDir(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
	data := filepath.Join(dir, "..", "shared", "data")
	if _, err := os.Stat(data); err != nil {
		return ""
	}
	return data
}

// readMooncake reads the first n requests of a Mooncake trace, validating each line.
func readMooncake(path string, n int) ([]mooncakeRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mooncakeRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan() && len(out) < n; line++ {
		var r mooncakeRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if r.InputLength <= 0 || r.OutputLength < 0 || len(r.HashIDs) != (r.InputLength+mooncakeBlock-1)/mooncakeBlock {
			return nil, fmt.Errorf("%s:%d: input_length %d does not match %d hash_ids of %d tokens",
				path, line, r.InputLength, len(r.HashIDs), mooncakeBlock)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// mooncakeTokens synthesizes the prompt's token ids: each hash id maps to a fixed
// pseudo-random block of 512 ordinary token ids seeded by the id; the last block is cut
// to input_length. Shared hash ids are therefore shared tokens.
func mooncakeTokens(r mooncakeRequest) []uint32 {
	out := make([]uint32, 0, len(r.HashIDs)*mooncakeBlock)
	for _, h := range r.HashIDs {
		rng := rand.New(rand.NewPCG(uint64(h), 0x6d6f6f6e63616b65))
		for i := 0; i < mooncakeBlock; i++ {
			out = append(out, 1000+uint32(rng.IntN(90000)))
		}
	}
	return out[:r.InputLength]
}

// replay sends reqs through /v1/completions with `concurrency` in flight (in trace
// order) and returns prompt tokens and cached prompt tokens as the engines reported them.
func replay(t *testing.T, s *server, reqs []mooncakeRequest, concurrency int) (prompt, cached int64) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, concurrency)
	errs := make(chan error, len(reqs))
	for _, r := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func(r mooncakeRequest) {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := s.postJSON(context.Background(), "/v1/completions", map[string]any{
				"model": model, "prompt": mooncakeTokens(r), "max_tokens": min(max(r.OutputLength, 1), 4),
				"ignore_eos": true,
			})
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("status %d: %s", resp.StatusCode, body)
				return
			}
			var out struct {
				Usage struct {
					PromptTokens        int64 `json:"prompt_tokens"`
					PromptTokensDetails *struct {
						CachedTokens int64 `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &out); err != nil || out.Usage.PromptTokensDetails == nil {
				errs <- fmt.Errorf("usage without prompt_tokens_details: %s", body)
				return
			}
			mu.Lock()
			prompt += out.Usage.PromptTokens
			cached += out.Usage.PromptTokensDetails.CachedTokens
			mu.Unlock()
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return prompt, cached
}

// TestE2EMooncakeReplay replays the first requests of the Mooncake conversation trace
// through the gateway under each routing mode and compares the engines' prefix-cache
// hit rates: kv routing must beat round-robin.
func TestE2EMooncakeReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("trace replay: skipped with -short")
	}
	data := sharedDataDir(t)
	if data == "" {
		t.Skip("../shared/data (the production traces) is not beside the repository")
	}
	reqs, err := readMooncake(filepath.Join(data, "mooncake_fast25_conversation_trace.jsonl"), 500)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("infinite-cache ceiling of these %d requests: %.1f%% of prompt tokens are prefix hits", len(reqs), 100*hitCeiling(reqs))
	rates := map[string]float64{}
	for _, mode := range []string{"kv", "round-robin", "random"} {
		s := startServe(t, 4, "--router-mode", mode, "--speedup-ratio", "100", "--max-model-len", "131072")
		prompt, cached := replay(t, s, reqs, 8)
		rates[mode] = float64(cached) / float64(prompt)
		t.Logf("mode %-11s prefix-cache hit rate %5.1f%% (%d of %d prompt tokens, %d requests, 4 workers)",
			mode, 100*rates[mode], cached, prompt, len(reqs))
		s.waitIdle(t)
		s.stop()
	}
	if rates["kv"] <= rates["round-robin"] {
		t.Fatalf("kv hit rate %.3f does not beat round-robin's %.3f", rates["kv"], rates["round-robin"])
	}
}

// hitCeiling is the fraction of prompt tokens that are prefix hits with one infinite
// cache shared by all: no routing policy can do better.
func hitCeiling(reqs []mooncakeRequest) float64 {
	seen := map[int64]bool{}
	var hit, total int
	for _, r := range reqs {
		k := 0
		for k < len(r.HashIDs) && seen[r.HashIDs[k]] {
			k++
		}
		hit += min(k*mooncakeBlock, r.InputLength)
		total += r.InputLength
		for _, h := range r.HashIDs {
			seen[h] = true
		}
	}
	return float64(hit) / float64(total)
}
