package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sseEvents reads every "data:" payload of a stream.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

func postJSON(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func sglangOptions(t *testing.T, incremental bool) Options {
	o := testOptions(t)
	o.Dialect, o.IncrementalStreamingOutput = DialectSGLang, incremental
	return o
}

func TestSGLangGenerateShapes(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%v", incremental), func(t *testing.T) {
			_, hs := startServer(t, sglangOptions(t, incremental))
			body := fmt.Sprintf(`{"rid":"r1","input_ids":%s,"sampling_params":{"max_new_tokens":4,"ignore_eos":true},"stream":true}`, jsonIDs(promptIDs(20)))
			resp, b := postJSON(t, hs.URL+"/generate", body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			evs := sseEvents(t, bytes.NewReader(b))
			if len(evs) != 5 || evs[4] != "[DONE]" {
				t.Fatalf("events %q", evs)
			}
			var all []uint32
			for i, e := range evs[:4] {
				m := decodeMap(t, []byte(e))
				if !slices.Equal(keys(m), []string{"meta_info", "output_ids", "text"}) {
					t.Fatalf("chunk keys %v", keys(m))
				}
				meta := m["meta_info"].(map[string]any)
				if meta["id"] != "r1" || meta["prompt_tokens"] != 20.0 || meta["completion_tokens"] != float64(i+1) ||
					meta["cached_tokens"] != 0.0 || meta["weight_version"] != "default" {
					t.Fatalf("meta_info %v", meta)
				}
				out := ids(m["output_ids"])
				if incremental {
					if len(out) != 1 {
						t.Fatalf("incremental chunk %d: %v", i, out)
					}
					all = append(all, out...)
				} else {
					if len(out) != i+1 || !slices.Equal(out[:i], all) {
						t.Fatalf("cumulative chunk %d: %v after %v", i, out, all)
					}
					all = out
				}
				if i < 3 && meta["finish_reason"] != nil {
					t.Fatalf("finish before the end: %v", meta)
				}
			}
			last := decodeMap(t, []byte(evs[3]))["meta_info"].(map[string]any)
			fr := last["finish_reason"].(map[string]any)
			if fr["type"] != "length" || fr["length"] != 4.0 || len(fr) != 2 || last["e2e_latency"] == nil {
				t.Fatalf("last meta_info %v", last)
			}
			// Not streamed: one dict with everything.
			resp, b = postJSON(t, hs.URL+"/generate", strings.Replace(strings.Replace(body, `"stream":true`, `"stream":false`, 1), `"r1"`, `"r2"`, 1))
			m := decodeMap(t, b)
			if resp.StatusCode != 200 || !slices.Equal(ids(m["output_ids"]), all) ||
				m["meta_info"].(map[string]any)["cached_tokens"] != 16.0 {
				t.Fatalf("not streamed: %d %s (streamed %v)", resp.StatusCode, b, all)
			}
		})
	}
}

func TestSGLangStopAndAbort(t *testing.T) {
	opts := sglangOptions(t, false)
	opts.Engine.SpeedupRatio = 1
	s, hs := startServer(t, opts)
	// A stop token: matched in the finish reason, the last output id.
	_, b := postJSON(t, hs.URL+"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":30,"ignore_eos":true,"sampling_seed":4}}`)
	first := ids(decodeMap(t, b)["output_ids"])
	_, b = postJSON(t, hs.URL+"/generate", fmt.Sprintf(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":30,"ignore_eos":true,"sampling_seed":4,"stop_token_ids":[%d]}}`, first[2]))
	m := decodeMap(t, b)
	out := ids(m["output_ids"])
	fr := m["meta_info"].(map[string]any)["finish_reason"].(map[string]any)
	if fr["type"] != "stop" || fr["matched"] != float64(first[2]) || out[len(out)-1] != first[2] {
		t.Fatalf("stop: %s", b)
	}

	// /abort_request ends another request's stream with an abort finish, then [DONE].
	resp, err := http.Post(hs.URL+"/generate", "application/json",
		strings.NewReader(`{"rid":"victim","input_ids":[1,2,3],"sampling_params":{"max_new_tokens":1500,"ignore_eos":true},"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	ar, ab := postJSON(t, hs.URL+"/abort_request", `{"rid":"victim"}`)
	if ar.StatusCode != 200 || len(ab) != 0 {
		t.Fatalf("abort: %d %s", ar.StatusCode, ab)
	}
	if st := s.stats.Load(); st.Running != 0 || st.ActiveBlocks != 0 {
		t.Fatalf("after /abort_request: %+v", st)
	}
	evs := sseEvents(t, rd)
	if len(evs) < 2 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events after abort %q", evs)
	}
	fr = decodeMap(t, []byte(evs[len(evs)-2]))["meta_info"].(map[string]any)["finish_reason"].(map[string]any)
	if fr["type"] != "abort" || fr["message"] == "" || fr["status_code"] != nil {
		t.Fatalf("abort finish %v", fr)
	}
	// Unknown rids and abort_all are accepted.
	for _, body := range []string{`{"rid":"nobody"}`, `{"abort_all":true}`} {
		if r, b := postJSON(t, hs.URL+"/abort_request", body); r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, r.StatusCode, b)
		}
	}
}

func TestSGLangBadRequests(t *testing.T) {
	_, hs := startServer(t, sglangOptions(t, false))
	for _, tc := range []struct{ body, want string }{
		{`{"sampling_params":{}}`, "Either text, input_ids"},
		{`{"text":"hi","input_ids":[1]}`, "Either text, input_ids"},
		{`{"input_ids":[[1,2],[3]]}`, "batches are not supported"},
		{`{"input_ids":[1],"sampling_params":{"max_tokens":3}}`, "unexpected keyword argument 'max_tokens'"},
		{`{"input_ids":[1],"sampling_params":{"n":2}}`, "n must be 1"},
		{`{"input_ids":[1],"sampling_params":{"stop":["\n"]}}`, "stop strings"},
		{`{"input_ids":[1],"sampling_params":{"top_p":0}}`, "top_p"},
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":2048}}`, "maximum context length"},
		{fmt.Sprintf(`{"input_ids":%s}`, jsonIDs(promptIDs(2048))), "longer than the model's context length"},
		{`{"input_ids":[1],"return_logprob":true,"top_logprobs_num":-1}`, "top_logprobs_num"},
		{`{"input_ids":[1],"return_logprob":true,"top_logprobs_num":21}`, "top_logprobs_num"},
		{`{"input_ids":[1,2],"return_logprob":true,"logprob_start_len":2}`, "logprob_start_len"},
	} {
		resp, b := postJSON(t, hs.URL+"/generate", tc.body)
		m := decodeMap(t, b)
		e, _ := m["error"].(map[string]any)
		if resp.StatusCode != 400 || e == nil || !strings.Contains(e["message"].(string), tc.want) {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
	}
	// A duplicate rid while the first runs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/generate",
		strings.NewReader(`{"rid":"dup","input_ids":[1],"sampling_params":{"max_new_tokens":1000,"ignore_eos":true},"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	r, b := postJSON(t, hs.URL+"/generate", `{"rid":"dup","input_ids":[1]}`)
	if r.StatusCode != 400 || !strings.Contains(string(b), "Duplicate request id dup") {
		t.Fatalf("duplicate: %d %s", r.StatusCode, b)
	}
}

func TestSGLangInfoHealthMetrics(t *testing.T) {
	_, hs := startServer(t, sglangOptions(t, false))
	for _, p := range []string{"/health", "/health_generate"} {
		resp, err := http.Get(hs.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(hs.URL + "/get_model_info")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"model_path":"builtin:cl100k_base","tokenizer_path":"builtin:cl100k_base","is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}` {
		t.Fatalf("model info %s", b)
	}
	// A fixed workload, then /metrics against testdata/sglang_metrics.golden.
	prompt := jsonIDs(promptIDs(40))
	postJSON(t, hs.URL+"/generate", fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":5,"ignore_eos":true}}`, prompt))
	postJSON(t, hs.URL+"/generate", fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":3,"ignore_eos":true}}`, prompt))
	golden(t, hs.URL+"/metrics", "sglang_metrics.golden")
}

func golden(t *testing.T, url, name string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from %s:\n%s", url, path, got)
	}
}

func trtllmOptions(t *testing.T, eventBuffer int) Options {
	o := testOptions(t)
	o.Dialect, o.EventBufferMaxSize, o.PollWait = DialectTRTLLM, eventBuffer, 10*time.Millisecond
	return o
}

func TestTRTLLMCompletionShapes(t *testing.T) {
	_, hs := startServer(t, trtllmOptions(t, 0))
	body := fmt.Sprintf(`{"model":"turbine-mock","prompt":%s,"max_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"detokenize":false}`,
		jsonIDs(promptIDs(20)))
	resp, b := postJSON(t, hs.URL+"/v1/completions", body)
	evs := sseEvents(t, bytes.NewReader(b))
	if resp.StatusCode != 200 || len(evs) != 5 || evs[4] != "[DONE]" {
		t.Fatalf("%d %q", resp.StatusCode, evs)
	}
	for i, e := range evs[:3] {
		m := decodeMap(t, []byte(e))
		if !slices.Equal(keys(m), []string{"choices", "created", "id", "model", "object", "usage"}) || m["usage"] != nil ||
			m["object"] != "text_completion" || !strings.HasPrefix(m["id"].(string), "cmpl-") {
			t.Fatalf("chunk %s", e)
		}
		c := m["choices"].([]any)[0].(map[string]any)
		if !slices.Equal(keys(c), []string{"avg_decoded_tokens_per_iter", "finish_reason", "index", "logprobs", "stop_reason", "text", "token_ids"}) ||
			c["text"] != "" || len(c["token_ids"].([]any)) != 1 || (i < 2) != (c["finish_reason"] == nil) {
			t.Fatalf("choice %s", e)
		}
	}
	u := decodeMap(t, []byte(evs[3]))
	if len(u["choices"].([]any)) != 0 || fmt.Sprint(u["usage"]) != "map[completion_tokens:3 prompt_tokens:20 prompt_tokens_details:map[cached_tokens:0] total_tokens:23]" {
		t.Fatalf("usage chunk %s", evs[3])
	}
	// detokenize left at its default: text, no token ids.
	_, b = postJSON(t, hs.URL+"/v1/completions", `{"model":"m","prompt":[1,2,3],"max_tokens":2,"ignore_eos":true,"stream":true}`)
	c := decodeMap(t, []byte(sseEvents(t, bytes.NewReader(b))[0]))["choices"].([]any)[0].(map[string]any)
	if c["token_ids"] != nil || c["text"] == "" {
		t.Fatalf("detokenized choice %v", c)
	}
}

func TestTRTLLMBadRequests(t *testing.T) {
	_, hs := startServer(t, trtllmOptions(t, 0))
	for _, tc := range []struct {
		body       string
		validation bool
		want       string
	}{
		{`{"prompt":[1]}`, true, "model\n  Field required"},
		{`{"model":"m","prompt":[1],"return_token_ids":true}`, true, "Extra inputs are not permitted"},
		{`{"model":"m","prompt":[1],"stream_options":{"include_usage":true}}`, true, "Stream options can only be defined when stream is true"},
		{`{"model":"m","prompt":[1],"n":2}`, false, "n must be 1"},
		{`{"model":"m","prompt":[1],"max_tokens":2048}`, false, "exceeds max_seq_len"},
	} {
		resp, b := postJSON(t, hs.URL+"/v1/completions", tc.body)
		m := decodeMap(t, b)
		var msg string
		if tc.validation {
			msg, _ = m["error"].(string)
		} else if m["object"] == "error" && m["type"] == "BadRequestError" && m["code"] == 400.0 {
			msg, _ = m["message"].(string)
		}
		if resp.StatusCode != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
	}
}

func TestTRTLLMStatsAndEvents(t *testing.T) {
	_, hs := startServer(t, trtllmOptions(t, 3))
	// Before any request: only the cache's creation, and no iteration stats.
	resp, b := postJSON(t, hs.URL+"/kv_cache_events", "")
	if resp.StatusCode != 200 || string(b) != `[{"event_id":0,"data":{"num_blocks_per_cache_level":[256,0],"type":"created"},"window_size":2048}]` {
		t.Fatalf("events %d %s", resp.StatusCode, b)
	}
	if resp, b := postJSON(t, hs.URL+"/kv_cache_events", ""); string(b) != "[]" {
		t.Fatalf("drained events %d %s", resp.StatusCode, b)
	}
	r, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "[]" {
		t.Fatalf("stats before any step %s", b)
	}
	// Five requests store a block each: the buffer of 3 keeps events 3, 4 and 5.
	var prompts [][]uint32
	for i := range 5 {
		p := make([]uint32, 16)
		for j := range p {
			p[j] = uint32(2000*(i+1) + j)
		}
		prompts = append(prompts, p)
		postJSON(t, hs.URL+"/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%s,"max_tokens":1,"ignore_eos":true}`, jsonIDs(p)))
	}
	_, b = postJSON(t, hs.URL+"/kv_cache_events", "")
	var evs []struct {
		EventID int64 `json:"event_id"`
		Data    struct {
			Type       string  `json:"type"`
			ParentHash *uint64 `json:"parent_hash"`
			Blocks     []struct {
				Tokens []struct {
					TokenID uint32 `json:"token_id"`
				} `json:"tokens"`
				CacheLevel int `json:"cache_level"`
			} `json:"blocks"`
		} `json:"data"`
		WindowSize int `json:"window_size"`
	}
	if err := json.Unmarshal(b, &evs); err != nil || len(evs) != 3 {
		t.Fatalf("events %s %v", b, err)
	}
	for i, e := range evs {
		if e.EventID != int64(i+3) || e.Data.Type != "stored" || e.Data.ParentHash != nil || len(e.Data.Blocks) != 1 || e.WindowSize != 2048 {
			t.Fatalf("event %d: %+v", i, e)
		}
		var toks []uint32
		for _, tok := range e.Data.Blocks[0].Tokens {
			toks = append(toks, tok.TokenID)
		}
		if !slices.Equal(toks, prompts[i+2]) || e.Data.Blocks[0].CacheLevel != 0 {
			t.Fatalf("event %d stores %v, want %v", e.EventID, toks, prompts[i+2])
		}
	}
	r, err = http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var stats []map[string]any
	err = json.NewDecoder(r.Body).Decode(&stats)
	r.Body.Close()
	if err != nil || len(stats) == 0 {
		t.Fatalf("stats %v %v", stats, err)
	}
	kvs := stats[0]["kvCacheStats"].(map[string]any)
	if stats[0]["iter"] != 1.0 || kvs["maxNumBlocks"] != 256.0 || kvs["tokensPerBlock"] != 16.0 || stats[0]["numActiveRequests"] == nil {
		t.Fatalf("stats %v", stats[0])
	}
}

func TestDialectOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Dialect = "tgi" }, `dialect "tgi"`},
		{func(o *Options) { o.EventBufferMaxSize = 5 }, "needs the trtllm dialect"},
		{func(o *Options) { o.Dialect, o.EventBufferMaxSize = DialectTRTLLM, -1 }, "must not be negative"},
		{func(o *Options) {
			o.Dialect, o.EventBufferMaxSize, o.Engine.EnablePrefixCaching = DialectTRTLLM, 5, false
		}, "prefix caching"},
		{func(o *Options) { o.IncrementalStreamingOutput = true }, "SGLang option"},
	} {
		o := testOptions(t)
		tc.mod(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
