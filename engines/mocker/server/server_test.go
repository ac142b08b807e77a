package server

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/model"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var (
	modelOnce sync.Once
	loaded    *model.Model
	modelErr  error
)

func testModel(t testing.TB) *model.Model {
	t.Helper()
	modelOnce.Do(func() { loaded, modelErr = model.LoadModel("builtin:cl100k_base") })
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return loaded
}

func TestMain(m *testing.M) {
	metrics.ExposeMetadata(true) // as the mocker process does
	os.Exit(m.Run())
}

func testOptions(t testing.TB) Options {
	cfg := mocker.DefaultConfig()
	cfg.BlockSize = 16
	cfg.NumGPUBlocks = 256
	cfg.MaxModelLen = 2048
	cfg.SpeedupRatio = 100
	cfg.Seed = 1
	return Options{Params: Params{Engine: cfg}, ServedModelName: "turbine-mock", ModelRoot: "builtin:cl100k_base", Model: testModel(t)}
}

func startServer(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	return s, hs
}

// post sends a vLLM /v1/completions body.
func post(t *testing.T, url string, body string) (*http.Response, []byte) {
	t.Helper()
	return postJSON(t, url+"/v1/completions", body)
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func ids(v any) []uint32 {
	var out []uint32
	for _, x := range v.([]any) {
		out = append(out, uint32(x.(float64)))
	}
	return out
}

func promptIDs(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(1000 + i*3)
	}
	return out
}

func jsonIDs(v []uint32) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCompletionNonStreaming(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	prompt := promptIDs(40)
	resp, b := post(t, hs.URL, fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":12,"ignore_eos":true,"return_token_ids":true}`, jsonIDs(prompt)))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := decodeMap(t, b)
	if got := keys(m); !slices.Equal(got, []string{"choices", "created", "id", "kv_transfer_params", "model", "object", "service_tier", "system_fingerprint", "usage"}) {
		t.Fatalf("response keys %v", got)
	}
	if m["object"] != "text_completion" || m["model"] != "turbine-mock" || !strings.HasPrefix(m["id"].(string), "cmpl-") {
		t.Fatalf("response %s", b)
	}
	c := m["choices"].([]any)[0].(map[string]any)
	if got := keys(c); !slices.Equal(got, []string{"finish_reason", "index", "logprobs", "prompt_logprobs", "prompt_token_ids", "stop_reason", "text", "token_ids"}) {
		t.Fatalf("choice keys %v", got)
	}
	out := ids(c["token_ids"])
	if len(out) != 12 || c["finish_reason"] != "length" || c["stop_reason"] != nil || c["logprobs"] != nil {
		t.Fatalf("choice %v", c)
	}
	if !slices.Equal(ids(c["prompt_token_ids"]), prompt) {
		t.Fatal("prompt_token_ids differ from the prompt")
	}
	if text := c["text"].(string); text != testModel(t).Tokenizer.Decode(out) || !regexp.MustCompile(`^( [A-Za-z]{2,10}){12}$`).MatchString(text) {
		t.Fatalf("text %q", text)
	}
	u := m["usage"].(map[string]any)
	if u["prompt_tokens"] != 40.0 || u["completion_tokens"] != 12.0 || u["total_tokens"] != 52.0 ||
		u["prompt_tokens_details"].(map[string]any)["cached_tokens"] != 0.0 {
		t.Fatalf("usage %v", u)
	}

	// The same prompt again: two full blocks of 16 come from the prefix cache, and the
	// output is the same. Without return_token_ids the ids are null, as in vLLM.
	_, b = post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":12,"ignore_eos":true}`, jsonIDs(prompt)))
	m = decodeMap(t, b)
	c = m["choices"].([]any)[0].(map[string]any)
	if c["token_ids"] != nil || c["prompt_token_ids"] != nil || c["text"] != testModel(t).Tokenizer.Decode(out) {
		t.Fatalf("second response %s", b)
	}
	if cached := m["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"]; cached != 32.0 {
		t.Fatalf("cached_tokens %v, want 32", cached)
	}
}

func TestStringPromptAndContinuation(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	_, b := post(t, hs.URL, `{"prompt":"The capital of France is","max_tokens":20,"ignore_eos":true,"return_token_ids":true}`)
	c := decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
	prompt := ids(c["prompt_token_ids"])
	if !slices.Equal(prompt, testModel(t).Tokenizer.Encode("The capital of France is")) {
		t.Fatalf("string prompt tokenized to %v", prompt)
	}
	full := ids(c["token_ids"])
	// Re-sent with 7 of its tokens appended, the request continues the same stream.
	cont := append(append([]uint32{}, prompt...), full[:7]...)
	_, b = post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":13,"ignore_eos":true,"return_token_ids":true}`, jsonIDs(cont)))
	c = decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
	if got := ids(c["token_ids"]); !slices.Equal(got, full[7:]) {
		t.Fatalf("continuation %v, want %v", got, full[7:])
	}
	// A batch of one prompt is one prompt.
	_, b = post(t, hs.URL, fmt.Sprintf(`{"prompt":[%s],"max_tokens":20,"ignore_eos":true,"return_token_ids":true}`, jsonIDs(prompt)))
	c = decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
	if got := ids(c["token_ids"]); !slices.Equal(got, full) {
		t.Fatalf("batch of one: %v", got)
	}
}

type sseEvent struct {
	raw  string
	data map[string]any
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var evs []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("SSE line %q", line)
		}
		payload := strings.TrimPrefix(line, "data: ")
		ev := sseEvent{raw: payload}
		if payload != "[DONE]" {
			ev.data = decodeMap(t, []byte(payload))
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestCompletionStreaming(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	prompt := promptIDs(20)
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(
		`{"prompt":%s,"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`, jsonIDs(prompt))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	evs := readSSE(t, resp.Body)
	if len(evs) != 8+2 || evs[len(evs)-1].raw != "[DONE]" {
		t.Fatalf("%d events, last %q", len(evs), evs[len(evs)-1].raw)
	}
	var all []uint32
	var text strings.Builder
	for i, ev := range evs[:8] {
		d := ev.data
		if _, ok := d["usage"]; !ok || d["usage"] != nil {
			t.Fatalf("chunk %d: usage must be present and null: %s", i, ev.raw)
		}
		c := d["choices"].([]any)[0].(map[string]any)
		if got := keys(c); !slices.Equal(got, []string{"finish_reason", "index", "logprobs", "prompt_token_ids", "stop_reason", "text", "token_ids"}) {
			t.Fatalf("chunk keys %v", got)
		}
		if (i == 0) != (c["prompt_token_ids"] != nil) {
			t.Fatalf("chunk %d prompt_token_ids %v", i, c["prompt_token_ids"])
		}
		if (i == 7) != (c["finish_reason"] != nil) {
			t.Fatalf("chunk %d finish_reason %v", i, c["finish_reason"])
		}
		all = append(all, ids(c["token_ids"])...)
		text.WriteString(c["text"].(string))
	}
	if evs[7].data["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" {
		t.Fatal("last content chunk is not finish_reason length")
	}
	if text.String() != testModel(t).Tokenizer.Decode(all) {
		t.Fatalf("streamed text %q does not decode the streamed ids", text.String())
	}
	u := evs[8].data
	if len(u["choices"].([]any)) != 0 || u["usage"].(map[string]any)["completion_tokens"] != 8.0 {
		t.Fatalf("usage chunk %s", evs[8].raw)
	}
}

func TestStopTokenNotInText(t *testing.T) {
	opts := testOptions(t)
	opts.Engine.MeanOutputTokens = 4
	_, hs := startServer(t, opts)
	eos := testModel(t).EOSTokenIDs[0]
	for i := 0; i < 10; i++ {
		_, b := post(t, hs.URL, fmt.Sprintf(`{"prompt":[%d,5,6],"max_tokens":200,"return_token_ids":true}`, 77+i))
		c := decodeMap(t, b)["choices"].([]any)[0].(map[string]any)
		toks := ids(c["token_ids"])
		if c["finish_reason"] != "stop" {
			continue
		}
		if toks[len(toks)-1] != eos || c["stop_reason"] != nil {
			t.Fatalf("stop without EOS: %v", c)
		}
		if c["text"] != testModel(t).Tokenizer.Decode(toks[:len(toks)-1]) {
			t.Fatalf("EOS leaked into the text %q", c["text"])
		}
		return
	}
	t.Fatal("no request ended on EOS with a mean output of 4 tokens")
}

func TestBadRequests(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	for _, tc := range []struct {
		body, param, msg string
		status           int
	}{
		{`{"prompt":[1,2],"model":"other"}`, "model", "The model `other` does not exist.", 404},
		{`{"prompt":{"a":1}}`, "prompt", "must be a string or an array of token ids, got an object", 400},
		{`{"prompt":[1,"x"]}`, "prompt", "batched prompts are not supported", 400},
		{`{"prompt":[[1],[2]]}`, "prompt", "batched prompts are not supported", 400},
		{`{"prompt":[1.5]}`, "prompt", "must be a token id", 400},
		{`{"prompt":[true]}`, "prompt", "got a boolean", 400},
		{`{"prompt":[999999999]}`, "prompt", "Token id 999999999 is out of vocabulary", 400},
		{`{"prompt":[]}`, "prompt", "must be provided and non-empty", 400},
		{`{"prompt":""}`, "prompt", "must be provided and non-empty", 400},
		{`{}`, "prompt", "must be provided and non-empty", 400},
		{`{"prompt":[1],"max_tokens":0}`, "max_tokens", "at least 1, got 0", 400},
		{`{"prompt":[1],"max_tokens":"x"}`, "max_tokens", "must be an integer", 400},
		{`{"prompt":[1],"max_tokens":5000}`, "max_tokens", "maximum context length is 2048 tokens. However, you requested 5001 tokens (1 in the messages, 5000 in the completion)", 400},
		{`{"prompt":[1],"max_tokens":9223372036854775807,"ignore_eos":true}`, "max_tokens", "maximum context length is 2048 tokens", 400},
		{`{"prompt":[1],"min_tokens":20}`, "min_tokens", "less than or equal to max_tokens=16, got 20", 400},
		{`{"prompt":[1],"stream_options":{"include_usage":true}}`, "stream_options", "Stream options can only be defined when `stream=True`.", 400},
		{`{"prompt":[1],"n":2}`, "n", "n must be 1", 400},
		{`{"prompt":[1],"logprobs":21}`, "logprobs", "greater than max allowed: 20", 400},
		{`{"prompt":[1],"logprobs":-2}`, "logprobs", "must be a positive value", 400},
		{`{"prompt":[1],"prompt_logprobs":1,"stream":true}`, "prompt_logprobs", "not available when `stream=True`", 400},
		{`{"prompt":[1],"stop":["x"]}`, "stop", "use stop_token_ids", 400},
		{`{"prompt":[1],"temperature":-1}`, "temperature", "non-negative", 400},
		{`{"prompt":[1],"top_p":0}`, "top_p", "(0, 1]", 400},
		{`{"prompt":[1],"stop_token_ids":[-1]}`, "stop_token_ids", "out of range", 400},
		{`{"prompt":[1]`, "", "invalid JSON body", 400},
		{`{"prompt":[1]} x`, "", "invalid JSON body", 400},
	} {
		resp, b := post(t, hs.URL, tc.body)
		var er errorResponse
		if err := json.Unmarshal(b, &er); err != nil {
			t.Fatalf("%s: %v: %s", tc.body, err, b)
		}
		param := ""
		if er.Error.Param != nil {
			param = *er.Error.Param
		}
		if resp.StatusCode != tc.status || er.Error.Code != tc.status || param != tc.param || !strings.Contains(er.Error.Message, tc.msg) ||
			er.Error.Type == "" {
			t.Errorf("%s: %d %s, want %d param %q message containing %q", tc.body, resp.StatusCode, b, tc.status, tc.param, tc.msg)
		}
	}
	// Accepted though ignored: sampling knobs, empty stop, explicit null max_tokens.
	resp, b := post(t, hs.URL, `{"prompt":[1,2,3],"temperature":0.7,"top_p":0.9,"seed":-5,"stop":[],"max_tokens":null,"ignore_eos":false,"user":"x"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestDisconnectAborts: closing the connection aborts the request in the engine.
func TestDisconnectAborts(t *testing.T) {
	opts := testOptions(t)
	opts.Engine.SpeedupRatio = 1
	s, hs := startServer(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/completions",
		strings.NewReader(`{"prompt":[1,2,3,4,5],"max_tokens":1500,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	if st := s.stats.Load(); st.Running != 1 || st.ActiveBlocks == 0 {
		t.Fatalf("while streaming: %+v", st)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.stats.Load()
		if st.Running == 0 && st.ActiveBlocks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request not aborted: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if g := s.stats.Load().GenerationTokens; g >= 1500 {
		t.Fatalf("request ran to completion (%d tokens)", g)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	_, hs := startServer(t, testOptions(t))
	resp, err := http.Get(hs.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := decodeMap(t, b)
	card := m["data"].([]any)[0].(map[string]any)
	if m["object"] != "list" || card["id"] != "turbine-mock" || card["object"] != "model" || card["owned_by"] != "vllm" ||
		card["root"] != "builtin:cl100k_base" || card["max_model_len"] != 2048.0 || len(card["permission"].([]any)) != 1 {
		t.Fatalf("models %s", b)
	}

	// A fixed workload, then /metrics against testdata/metrics.golden (-update rewrites).
	prompt := jsonIDs(promptIDs(40))
	post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":5,"ignore_eos":true}`, prompt))
	post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":3,"ignore_eos":true}`, prompt))
	golden(t, hs.URL+"/metrics", "metrics.golden")
}

func TestNewValidation(t *testing.T) {
	opts := testOptions(t)
	opts.Model = nil
	if _, err := New(opts); err == nil {
		t.Fatal("missing model accepted")
	}
	opts = testOptions(t)
	opts.Engine.BlockSize = 0
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "--block-size") {
		t.Fatalf("bad engine config: %v", err)
	}
	opts = testOptions(t)
	opts.Engine.EnablePrefixCaching = false
	opts.KVEvents, _ = kvevents.ParseConfig(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:0"}`)
	if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "prefix caching") {
		t.Fatalf("events without prefix caching: %v", err)
	}
}
