package vllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
)

// startMocker runs the mock engine's real HTTP server.
func startMocker(t *testing.T, speedup float64) (*Client, *server.Server) {
	t.Helper()
	s, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(speedup, 0)}}, nil)
	c, err := New(url+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestAgainstMocker(t *testing.T) {
	c, _ := startMocker(t, 100)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Models(ctx)
	if err != nil || len(ms) != 1 || ms[0].ID != "m" || ms[0].MaxModelLen != 4096 || ms[0].OwnedBy != "vllm" {
		t.Fatalf("models %+v %v", ms, err)
	}
	p := enginetest.Prompt(40)
	st, err := c.Complete(ctx, CompletionRequest{Model: "m", PromptTokenIDs: p, MaxTokens: 10, IgnoreEOS: true, RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := enginetest.Collect(st.Recv, st.Close)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 10 || !slices.Equal(chunks[0].PromptTokenIDs, p) || chunks[1].PromptTokenIDs != nil {
		t.Fatalf("chunks %+v", chunks)
	}
	var ids []uint32
	for i, ch := range chunks {
		if (ch.FinishReason != "") != (i == 9) || (ch.Usage != nil) != (i == 9) {
			t.Fatalf("chunk %d %+v", i, ch)
		}
		ids = append(ids, ch.TokenIDs...)
	}
	last := chunks[9]
	if last.FinishReason != "length" || *last.Usage != (Usage{PromptTokens: 40, CompletionTokens: 10, TotalTokens: 50}) {
		t.Fatalf("last %+v usage %+v", last, last.Usage)
	}

	// Same prompt again: cached tokens reported, same tokens.
	st, err = c.Complete(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 10, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err = enginetest.Collect(st.Recv, st.Close)
	if err != nil {
		t.Fatal(err)
	}
	var again []uint32
	for _, ch := range chunks {
		again = append(again, ch.TokenIDs...)
	}
	if !slices.Equal(again, ids) || chunks[len(chunks)-1].Usage.CachedTokens != 32 {
		t.Fatalf("second run %v cached %d", again, chunks[len(chunks)-1].Usage.CachedTokens)
	}

	// A stop token: reported as stop_reason, last in the ids.
	stop := ids[3]
	st, err = c.Complete(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 10, IgnoreEOS: true, StopTokenIDs: []uint32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err = enginetest.Collect(st.Recv, st.Close)
	if err != nil {
		t.Fatal(err)
	}
	last = chunks[len(chunks)-1]
	if last.FinishReason != "stop" || !last.HasStopTokenID || last.StopTokenID != stop || last.TokenIDs[0] != stop || last.Text != "" {
		t.Fatalf("stop chunk %+v", last)
	}

	l, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Running != 0 || l.Waiting != 0 || l.PrefixCacheQueries != 120 || l.PrefixCacheHits != 64 ||
		l.BlockSize != 16 || l.NumGPUBlocks != 512 || l.KVCacheUsage != 0 {
		t.Fatalf("load %+v", l)
	}
}

func TestEngineErrors(t *testing.T) {
	c, _ := startMocker(t, 100)
	ctx := context.Background()
	_, err := c.Complete(ctx, CompletionRequest{Model: "nope", PromptTokenIDs: enginetest.Prompt(3), MaxTokens: 1})
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 || e.Type != "NotFoundError" || !strings.Contains(e.Error(), "The model `nope` does not exist.") {
		t.Fatalf("unknown model: %v", err)
	}
	_, err = c.Complete(ctx, CompletionRequest{PromptTokenIDs: enginetest.Prompt(3), MaxTokens: 5000})
	if !errors.As(err, &e) || e.Status != 400 || e.Param != "max_tokens" {
		t.Fatalf("too long: %v", err)
	}
	if _, err := c.Complete(ctx, CompletionRequest{MaxTokens: 1}); err == nil {
		t.Fatal("empty prompt accepted")
	}
	if _, err := c.Complete(ctx, CompletionRequest{PromptTokenIDs: enginetest.Prompt(1)}); err == nil {
		t.Fatal("max_tokens 0 accepted")
	}
	for _, u := range []string{"127.0.0.1:80", "ftp://x", "http://"} {
		if _, err := New(u, nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// TestCancelAborts: cancelling the context closes the connection and the engine frees
// the request.
func TestCancelAborts(t *testing.T) {
	c, s := startMocker(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Complete(ctx, CompletionRequest{PromptTokenIDs: enginetest.Prompt(20), MaxTokens: 2000, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Load(context.Background())
	if err != nil || l.Running != 1 || l.KVCacheUsage == 0 {
		t.Fatalf("load while running %+v %v", l, err)
	}
	cancel()
	if _, err := st.Recv(); err == nil {
		t.Fatal("Recv after cancel succeeded")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := c.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if l.Running == 0 && l.KVCacheUsage == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not aborted: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = s
}

// fakeEngine answers /v1/completions with a fixed body.
func fakeEngine(t *testing.T, status int, body string) *Client {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" || r.URL.Path == "/v1/models" {
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(hs.Close)
	c, err := New(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStreamParsing(t *testing.T) {
	const tok = `"token_ids":[7]`
	for _, tc := range []struct {
		name, body string
		wantErr    string
		wantChunks int
	}{
		{"crlf, comments, no space after data:", ": ping\r\ndata:{\"choices\":[{\"text\":\"a\"," + tok + ",\"finish_reason\":\"length\"}]}\r\n\r\ndata: [DONE]\r\n\r\n", "", 1},
		{"usage folded into the last chunk", `data: {"choices":[{"text":"a",` + tok + `,"finish_reason":"stop","stop_reason":"END"}]}` + "\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\ndata: [DONE]\n\n", "", 1},
		{"error frame", `data: {"choices":[{"text":"a",` + tok + `,"finish_reason":null}]}` + "\n\n" +
			`data: {"error":{"message":"boom","type":"InternalServerError","code":500}}` + "\n\ndata: [DONE]\n\n", "engine answered 500 InternalServerError: boom", 1},
		{"cut before DONE", `data: {"choices":[{"text":"a",` + tok + `,"finish_reason":null}]}` + "\n\n", "ended before [DONE]", 1},
		{"DONE without finish", "data: [DONE]\n\n", "before a finish reason", 0},
		{"not JSON", "data: {oops\n\n", "malformed stream frame", 0},
		{"no token ids", `data: {"choices":[{"text":"a","finish_reason":null}]}` + "\n\n", "no token_ids", 0},
		{"bad stop_reason", `data: {"choices":[{"text":"",` + tok + `,"finish_reason":"stop","stop_reason":[1]}]}` + "\n\n", "stop_reason", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeEngine(t, 200, tc.body)
			st, err := c.Complete(context.Background(), CompletionRequest{PromptTokenIDs: []uint32{1}, MaxTokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			chunks, err := enginetest.Collect(st.Recv, st.Close)
			if len(chunks) != tc.wantChunks {
				t.Fatalf("%d chunks, want %d", len(chunks), tc.wantChunks)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "vllm: ") {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	c := fakeEngine(t, 200, `data: {"choices":[{"text":"a",`+tok+`,"finish_reason":"stop","stop_reason":"END"}]}`+"\n\n"+
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`+"\n\ndata: [DONE]\n\n")
	st, _ := c.Complete(context.Background(), CompletionRequest{PromptTokenIDs: []uint32{1}, MaxTokens: 1})
	chunks, _ := enginetest.Collect(st.Recv, st.Close)
	if u := chunks[0].Usage; u == nil || u.CachedTokens != 2 || chunks[0].StopString != "END" {
		t.Fatalf("usage %+v", chunks[0])
	}
}

func TestErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"error":{"message":"bad","type":"BadRequestError","param":"prompt","code":400}}`, "vllm: engine answered 400 BadRequestError (param prompt): bad"},
		{`{"object":"error","message":"old","type":"BadRequestError","code":400}`, "vllm: engine answered 400 BadRequestError: old"},
		{`{"detail":"Not Found"}`, "vllm: engine answered 400: Not Found"},
		{`plain text`, "vllm: engine answered 400: plain text"},
	} {
		c := fakeEngine(t, 400, tc.body)
		_, err := c.Complete(context.Background(), CompletionRequest{PromptTokenIDs: []uint32{1}, MaxTokens: 1})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestLoadParsing(t *testing.T) {
	// vLLM's own exposition: prometheus_client style with two engines (data parallel).
	body := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 100.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 40.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="9000",engine="0"} 1.0
`
	c := fakeEngine(t, 200, body)
	l, err := c.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l.At = time.Time{}
	want := Load{Running: 4, Waiting: 2, KVCacheUsage: 0.375, PrefixCacheQueries: 100, PrefixCacheHits: 40, BlockSize: 16, NumGPUBlocks: 9000}
	if l != want {
		t.Fatalf("load %+v, want %+v", l, want)
	}
	if _, err := fakeEngine(t, 200, "# TYPE x gauge\nx 1\n").Load(context.Background()); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("no vLLM metrics: %v", err)
	}
	if _, err := fakeEngine(t, 200, "vllm:num_requests_running{ 1\n").Load(context.Background()); err == nil {
		t.Fatal("malformed exposition accepted")
	}
	if _, err := fakeEngine(t, 503, "down").Load(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: %v", err)
	}
}

// TestCompleteIgnoringPrompt: with the prompt's ids ignored (as Engine.Generate asks)
// none is read and the output is the same, the chunks still whole once the stream's
// buffer is released.
func TestCompleteIgnoringPrompt(t *testing.T) {
	c, _ := startMocker(t, 100)
	ctx := context.Background()
	p := enginetest.Prompt(40)
	var outputs [2][]uint32
	for i, ignore := range []bool{false, true} {
		st, err := c.Complete(ctx, CompletionRequest{PromptTokenIDs: p, MaxTokens: 10, IgnoreEOS: true, Seed: new(int64), IgnorePromptTokenIDs: ignore})
		if err != nil {
			t.Fatal(err)
		}
		chunks, err := enginetest.Collect(st.Recv, st.Close)
		st.Release()
		if err != nil {
			t.Fatal(err)
		}
		if got := chunks[0].PromptTokenIDs; ignore != (got == nil) || (!ignore && !slices.Equal(got, p)) {
			t.Fatalf("ignore %v: first chunk's prompt ids %v", ignore, got)
		}
		for _, ch := range chunks {
			outputs[i] = append(outputs[i], ch.TokenIDs...)
		}
		if chunks[len(chunks)-1].FinishReason != "length" {
			t.Fatalf("ignore %v: last chunk %+v", ignore, chunks[len(chunks)-1])
		}
	}
	if !slices.Equal(outputs[0], outputs[1]) || len(outputs[0]) != 10 {
		t.Fatalf("output %v read with the prompt's ids, %v without", outputs[0], outputs[1])
	}
}
