package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	modelfolder "github.com/turbine-llm/turbine/model"
)

// Gateway-overhead benchmark: the time to first token (TTFT) a client sees through the
// gateway, against the TTFT of the same kind of request sent straight to the mock engine
// the gateway routes to. One `turbine serve --workers 1` process with a high speedup
// ratio (engine time is a few µs), so the difference is what the gateway adds: HTTP
// parsing and validation, tokenization (text prompts only), routing (KV block hashing and
// the Router grain round trip), the engine request from the gateway, and detokenizing
// the first token.
const (
	benchSpeedup   = 1000 // mock engine speedup: a 4,096-token prefill models 86 ms, runs 86 µs
	benchMaxTokens = 2    // TTFT needs one token; the second ends the request quickly
	benchWarmup    = 16   // request pairs sent before timing, per sub-benchmark run
	benchTokenizer = "builtin:cl100k_base"
)

// BenchmarkGatewayOverhead alternates, b.N times, a streamed completion sent straight to
// the engine and one sent through the gateway, and reports the TTFT percentiles of each
// side in µs (time from sending the request to reading the first SSE data frame that
// carries a token). Sub-benchmarks: prompt length (ISL, tokens) and how the gateway gets
// the prompt: "ids" (token ids, as the engine gets them) or "text" (the same kind of
// prompt as text, which the gateway tokenizes; the engine still gets exactly isl ids).
//
// Fairness: every request (either side) has its own random prompt of isl words that are
// single tokens, so neither side gets prefix-cache hits (checked: usage
// prompt_tokens_details.cached_tokens must be 0) and both pay the same modelled prefill
// (checked: usage prompt_tokens must be isl). The direct request has the body the
// gateway itself sends to the engine (token ids, stream, include_usage,
// return_token_ids). The two sides take turns going first. Connections are kept alive on
// both sides.
func BenchmarkGatewayOverhead(b *testing.B) {
	if testing.Short() {
		b.Skip("end-to-end benchmark: skipped with -short")
	}
	m, err := modelfolder.LoadModel(benchTokenizer)
	if err != nil {
		b.Fatal(err)
	}
	words := singleTokenWords(m.Tokenizer)
	if len(words) < 1000 {
		b.Fatalf("%s has only %d single-token words", benchTokenizer, len(words))
	}
	s := startServe(b, 1, "--speedup-ratio", strconv.Itoa(benchSpeedup), "--tokenizer", benchTokenizer)
	engine, err := engineURL(s)
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(7, 11))
	for _, v := range []struct {
		prompt string
		isl    int
	}{{"ids", 256}, {"ids", 4096}, {"text", 256}, {"text", 4096}} {
		b.Run(fmt.Sprintf("%s/isl=%d", v.prompt, v.isl), func(b *testing.B) {
			direct := ttftProbe{client: client, url: engine + "/v1/completions", direct: true}
			gateway := ttftProbe{client: client, url: s.url + "/v1/completions"}
			if v.prompt == "text" {
				gateway.text = m.Tokenizer
			}
			pair := func(i int) (d, g time.Duration) {
				first, second := &direct, &gateway
				if i%2 == 1 {
					first, second = second, first
				}
				a, err := first.run(randomPrompt(rng, words, v.isl))
				if err != nil {
					b.Fatal(err)
				}
				c, err := second.run(randomPrompt(rng, words, v.isl))
				if err != nil {
					b.Fatal(err)
				}
				if i%2 == 1 {
					return c, a
				}
				return a, c
			}
			for i := 0; i < benchWarmup; i++ {
				pair(i)
			}
			ds := make([]time.Duration, 0, b.N)
			gs := make([]time.Duration, 0, b.N)
			diffs := make([]time.Duration, 0, b.N)
			cpu0, cpuErr := processCPU(s.cmd.Process.Pid)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, g := pair(i)
				ds, gs, diffs = append(ds, d), append(gs, g), append(diffs, g-d)
			}
			b.StopTimer()
			if cpu1, err := processCPU(s.cmd.Process.Pid); err == nil && cpuErr == nil {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(b.N), "serve-cpu-µs/pair")
			}
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(quantile(ds, 0.50)), "direct-ttft-p50-µs")
			b.ReportMetric(us(quantile(ds, 0.99)), "direct-ttft-p99-µs")
			b.ReportMetric(us(quantile(gs, 0.50)), "gateway-ttft-p50-µs")
			b.ReportMetric(us(quantile(gs, 0.99)), "gateway-ttft-p99-µs")
			b.ReportMetric(us(quantile(gs, 0.50)-quantile(ds, 0.50)), "added-ttft-p50-µs")
			b.ReportMetric(us(quantile(gs, 0.99)-quantile(ds, 0.99)), "added-ttft-p99-µs")
			b.ReportMetric(us(quantile(diffs, 0.50)), "paired-added-ttft-p50-µs")
		})
	}
}

// ttftProbe sends streamed completions to one /v1/completions URL.
type ttftProbe struct {
	client *http.Client
	url    string
	direct bool                  // the engine's own API: send the body the gateway sends to engines
	text   modelfolder.Tokenizer // when set, the prompt is sent as its decoded text
}

// run sends one streamed completion of prompt and returns its TTFT: from just before
// the request is sent to the end of reading the first SSE data frame whose choice
// carries a token (text or token ids); decoding that frame's JSON is not included.
// It reads the stream to its end (so the connection is reused) and fails on an error
// status, a missing token, a prompt_tokens other than len(prompt), or prefix-cache hits.
func (p *ttftProbe) run(prompt []uint32) (time.Duration, error) {
	body := map[string]any{
		"model": model, "prompt": prompt, "max_tokens": benchMaxTokens, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	}
	if p.direct {
		body["return_token_ids"] = true
	}
	if p.text != nil {
		body["prompt"] = p.text.Decode(prompt)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPost, p.url, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", p.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("POST %s: status %d: %s", p.url, resp.StatusCode, msg)
	}
	var ttft time.Duration
	promptTokens, cached := -1, -1
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		line, err := r.ReadSlice('\n')
		read := time.Since(start) // before decoding: the client's JSON cost is not counted
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("POST %s: reading the stream: %w", p.url, err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Text     string   `json:"text"`
				TokenIDs []uint32 `json:"token_ids"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return 0, fmt.Errorf("POST %s: bad SSE frame %q: %v", p.url, data, err)
		}
		if ttft == 0 && len(chunk.Choices) > 0 && (chunk.Choices[0].Text != "" || len(chunk.Choices[0].TokenIDs) > 0) {
			ttft = read
		}
		if u := chunk.Usage; u != nil {
			promptTokens = u.PromptTokens
			if u.PromptTokensDetails != nil {
				cached = u.PromptTokensDetails.CachedTokens
			}
		}
	}
	switch {
	case ttft == 0:
		return 0, fmt.Errorf("POST %s: the stream ended without a token", p.url)
	case promptTokens != len(prompt):
		return 0, fmt.Errorf("POST %s: usage prompt_tokens %d, want %d", p.url, promptTokens, len(prompt))
	case cached != 0:
		return 0, fmt.Errorf("POST %s: cached_tokens %d, want 0 (unique prompts must miss the prefix cache)", p.url, cached)
	}
	return ttft, nil
}

// singleTokenWords returns the ids of tok's ordinary tokens that are one space followed
// by 2 to 10 ASCII letters (" river"): a text of such words separated by their own
// spaces encodes back to exactly these ids (each word is one pre-token and one token).
func singleTokenWords(tok modelfolder.Tokenizer) []uint32 {
	var out []uint32
	for id := 0; id < tok.VocabSize(); id++ {
		t := uint32(id)
		if tok.IsSpecial(t) {
			continue
		}
		b, ok := tok.TokenBytes(t)
		if !ok || len(b) < 3 || len(b) > 11 || b[0] != ' ' {
			continue
		}
		letters := true
		for _, c := range b[1:] {
			letters = letters && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
		}
		if letters {
			out = append(out, t)
		}
	}
	return out
}

// randomPrompt returns n token ids drawn from words.
func randomPrompt(rng *rand.Rand, words []uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = words[rng.IntN(len(words))]
	}
	return out
}

// processCPU is the user plus system CPU time the process pid has used so far (its
// children not included), from fields 14 and 15 of /proc/<pid>/stat, in clock ticks of
// 1/100 s (Linux's USER_HZ).
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count after it.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' after the command name", pid)
	}
	f := strings.Fields(string(raw[i+1:])) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 13", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: cpu time %q: %v", pid, s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// quantile is the q-quantile (nearest rank below) of d, which must not be empty.
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// engineURL is the base URL of the mock engine the serve log last reported started
// (JSON line with message "engine started" and its HTTP "port"), on the serve's host.
func engineURL(s *server) (string, error) {
	u, err := url.Parse(s.url)
	if err != nil {
		return "", fmt.Errorf("serve url %q: %v", s.url, err)
	}
	port := 0
	for _, line := range strings.Split(s.Logs(), "\n") {
		var rec struct {
			Message string `json:"message"`
			Port    int    `json:"port"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "engine started" && rec.Port > 0 {
			port = rec.Port
		}
	}
	if port == 0 {
		return "", errors.New(`no "engine started" line with a port in the serve log`)
	}
	return fmt.Sprintf("http://%s:%d", u.Hostname(), port), nil
}
