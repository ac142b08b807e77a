package sglang

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
)

// fixtureServer answers POST /generate with a recorded body and records the rids posted
// to /abort_request.
type fixtureServer struct {
	mu      sync.Mutex
	aborted []string
}

func (f *fixtureServer) abortedRIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.aborted...)
}

func startFixture(t *testing.T, status int, contentType string, body []byte) (*fixtureServer, string) {
	t.Helper()
	f := &fixtureServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /generate", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /abort_request", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.aborted = append(f.aborted, string(b))
		f.mu.Unlock()
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return f, hs.URL
}

func TestStreamFixtures(t *testing.T) {
	stop := func(id uint32) Chunk { return Chunk{FinishReason: "stop", StopTokenID: id, HasStopTokenID: true} }
	parisFinal := stop(128009)
	parisFinal.TokenIDs = []uint32{13, 128009}
	parisFinal.PromptTokens, parisFinal.CompletionTokens, parisFinal.CachedTokens = 6, 6, 4
	paris := []Chunk{
		{TokenIDs: []uint32{12366}, PromptTokens: 6, CompletionTokens: 1},
		{TokenIDs: []uint32{374}, PromptTokens: 6, CompletionTokens: 2},
		{TokenIDs: []uint32{279, 6864}, PromptTokens: 6, CompletionTokens: 4},
		parisFinal,
	}
	cases := []struct {
		file        string
		incremental bool
		want        []Chunk
		wantErr     string // substring of the error; "" for none
		wantStatus  int    // for *Error
		wantAbort   bool   // an /abort_request was posted
	}{
		{file: "stream_cumulative.sse", want: paris},
		{file: "stream_incremental.sse", incremental: true, want: paris},
		{file: "stream_length.sse", want: []Chunk{
			{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1},
			{TokenIDs: []uint32{293, 272}, FinishReason: "length", PromptTokens: 6, CompletionTokens: 3},
		}},
		{file: "stream_stop_token.sse", want: []Chunk{{TokenIDs: []uint32{264, 99}, FinishReason: "stop", StopTokenID: 99,
			HasStopTokenID: true, PromptTokens: 6, CompletionTokens: 2}}},
		{file: "stream_stop_string.sse", want: []Chunk{{TokenIDs: []uint32{264, 13}, FinishReason: "stop", StopString: ".",
			PromptTokens: 6, CompletionTokens: 2}}},
		{file: "stream_abort_finish.sse", want: []Chunk{
			{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1},
			{FinishReason: "abort", AbortMessage: "Abort in waiting queue", PromptTokens: 6, CompletionTokens: 1},
		}},
		{file: "stream_abort_status.sse", wantErr: "longer than the model's context length", wantStatus: 400, wantAbort: true},
		{file: "stream_error_frame.sse", want: []Chunk{{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1}},
			wantErr: "Request is disconnected", wantAbort: true},
		{file: "stream_truncated.sse", want: []Chunk{{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1}},
			wantErr: "stream ended before [DONE]", wantAbort: true},
		{file: "stream_garbage.sse", want: []Chunk{{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1}},
			wantErr: "malformed stream chunk", wantAbort: true},
		{file: "stream_done_early.sse", want: []Chunk{{TokenIDs: []uint32{264}, PromptTokens: 6, CompletionTokens: 1}},
			wantErr: "[DONE] before a finish reason", wantAbort: true},
		// The client set for the other mode: each mismatch is reported, not misread.
		{file: "stream_incremental.sse", want: paris[:1], wantErr: "--incremental-streaming-output", wantAbort: true},
		{file: "stream_cumulative.sse", incremental: true, want: paris[:1], wantErr: "cumulative output_ids", wantAbort: true},
	}
	for _, tc := range cases {
		name := tc.file
		if tc.incremental {
			name += "/incremental-client"
		}
		t.Run(name, func(t *testing.T) {
			fs, url := startFixture(t, 200, "text/event-stream", enginetest.ReadFixture(t, tc.file))
			c, err := New(url, nil, Options{IncrementalOutput: tc.incremental})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := c.Generate(ctx, GenerateRequest{RID: "req-1", InputIDs: []uint32{1, 2, 3}, Sampling: SamplingParams{MaxNewTokens: 8}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := enginetest.Collect(s.Recv, s.Close)
			if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("chunks\n got %+v\nwant %+v", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantStatus != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Status != tc.wantStatus {
					t.Fatalf("error %#v, want *Error with status %d", err, tc.wantStatus)
				}
			}
			aborted := fs.abortedRIDs()
			if tc.wantAbort != (len(aborted) == 1) || (tc.wantAbort && aborted[0] != `{"rid":"req-1","abort_all":false}`) {
				t.Fatalf("abort requests %q, want one: %v", aborted, tc.wantAbort)
			}
		})
	}
}

func TestErrorAnswers(t *testing.T) {
	cases := []struct {
		file, contentType string
		status            int
		wantType, wantMsg string
	}{
		{"error_value.json", "application/json", 400, "", "The input (40000 tokens) is longer than the model's context length (32768 tokens)."},
		{"error_validation.json", "application/json", 400, "Bad Request", "1 validation error for GenerateReqInput\nsampling_params\n  Input should be a valid dictionary"},
		{"error_value.json", "application/json", 500, "", "The input (40000 tokens) is longer than the model's context length (32768 tokens)."},
		{"", "text/plain", 500, "", "Internal Server Error"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.file, tc.status), func(t *testing.T) {
			var body []byte
			if tc.file != "" {
				body = enginetest.ReadFixture(t, tc.file)
			}
			fs, url := startFixture(t, tc.status, tc.contentType, body)
			c, _ := New(url, nil, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Generate(ctx, GenerateRequest{RID: "r", InputIDs: []uint32{1}, Sampling: SamplingParams{MaxNewTokens: 1}})
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Type != tc.wantType || e.Message != tc.wantMsg {
				t.Fatalf("error %#v", err)
			}
			if len(fs.abortedRIDs()) != 0 {
				t.Fatal("an abort was posted for a request the server refused")
			}
		})
	}
}

func TestLoadFromFixtures(t *testing.T) {
	cases := []struct {
		file    string
		want    Load
		wantErr string
	}{
		{file: "metrics_single.txt", want: Load{Running: 24, Queued: 3, TokenUsage: 0.73, UsedTokens: 105728,
			MaxTotalTokens: 144832, CacheHitRate: 0.41}},
		// dp rank 0: the priority aggregate (4) of tp_rank 0; dp rank 1: its aggregate (6).
		{file: "metrics_dp.txt", want: Load{Running: 10, Queued: 7, TokenUsage: 0.6, MaxTotalTokens: 2000}},
		{file: "metrics_disabled.txt", wantErr: "--enable-metrics"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(strings.NewReader(string(enginetest.ReadFixture(t, tc.file))))
			if err != nil {
				t.Fatal(err)
			}
			got, err := LoadFromFamilies(fams, time.Time{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := got.TokenUsage - tc.want.TokenUsage; d > 1e-9 || d < -1e-9 {
				t.Fatalf("token usage %v, want %v", got.TokenUsage, tc.want.TokenUsage)
			}
			got.TokenUsage = tc.want.TokenUsage
			if got != tc.want {
				t.Fatalf("load %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestModelInfoFixture(t *testing.T) {
	body := enginetest.ReadFixture(t, "model_info.json")
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/get_model_info" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	defer hs.Close()
	c, _ := New(hs.URL, nil, Options{})
	mi, err := c.ModelInfo(context.Background())
	if err != nil || mi != (ModelInfo{ModelPath: "Qwen/Qwen3-8B", TokenizerPath: "Qwen/Qwen3-8B", IsGeneration: true, WeightVersion: "default"}) {
		t.Fatalf("%+v %v", mi, err)
	}
}
