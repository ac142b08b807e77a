package trtllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/kv"
)

// serveFixture answers every request on path with status and body.
func serveFixture(t *testing.T, path string, status int, contentType string, body []byte) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != path {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestStreamFixtures(t *testing.T) {
	first := Chunk{TokenIDs: []uint32{12366}}
	cases := []struct {
		file    string
		want    []Chunk
		wantErr string
	}{
		{file: "stream_stop_token.sse", want: []Chunk{first, {TokenIDs: []uint32{374, 279}},
			{TokenIDs: []uint32{}, FinishReason: "stop", StopTokenID: 99, HasStopTokenID: true,
				Usage: &Usage{PromptTokens: 6, CompletionTokens: 3, TotalTokens: 9, CachedTokens: 4}}}},
		{file: "stream_length.sse", want: []Chunk{first, {TokenIDs: []uint32{374}, FinishReason: "length",
			Usage: &Usage{PromptTokens: 6, CompletionTokens: 2, TotalTokens: 8}}}},
		{file: "stream_eos.sse", want: []Chunk{first, {TokenIDs: []uint32{13}, FinishReason: "stop",
			Usage: &Usage{PromptTokens: 6, CompletionTokens: 2, TotalTokens: 8}}}},
		{file: "stream_no_usage.sse", want: []Chunk{first, {TokenIDs: []uint32{374}, FinishReason: "length"}}},
		{file: "stream_cancelled.sse", want: []Chunk{first, {TokenIDs: []uint32{}, FinishReason: "cancelled",
			Usage: &Usage{PromptTokens: 6, CompletionTokens: 1, TotalTokens: 7}}}},
		{file: "stream_text_only.sse", wantErr: "detokenize"},
		{file: "stream_truncated.sse", want: []Chunk{first}, wantErr: "stream ended before [DONE]"},
		{file: "stream_garbage.sse", want: []Chunk{first}, wantErr: "malformed stream chunk"},
		{file: "stream_done_early.sse", want: []Chunk{first}, wantErr: "[DONE] before a finish reason"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			url := serveFixture(t, "/v1/completions", 200, "text/event-stream", enginetest.ReadFixture(t, tc.file))
			c, err := New(url, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Complete(enginetest.Ctx(t), CompletionRequest{Model: "Qwen3-8B", PromptTokenIDs: []uint32{1, 2}, MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			got, err := enginetest.Collect(s.Recv, s.Close)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("chunks\n got %+v\nwant %+v", got, tc.want)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if strings.Contains(tc.file, "truncated") && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("truncation error %v is not io.ErrUnexpectedEOF", err)
			}
		})
	}
}

func TestErrorAnswers(t *testing.T) {
	cases := []struct {
		file, path, contentType string
		status                  int
		call                    func(*Client) error
		wantType, wantMsg       string
	}{
		{file: "error_bad_request.json", path: "/v1/completions", contentType: "application/json", status: 400,
			wantType: "BadRequestError", wantMsg: "The sum of prompt length (40000) and query length (0) should not exceed max_num_tokens (8192)"},
		{file: "error_bad_request.json", path: "/v1/completions", contentType: "application/json", status: 500,
			wantType: "BadRequestError", wantMsg: "The sum of prompt length (40000) and query length (0) should not exceed max_num_tokens (8192)"},
		{file: "error_validation.json", path: "/v1/completions", contentType: "application/json", status: 400,
			wantMsg: "[{'type': 'extra_forbidden', 'loc': ('body', 'return_token_ids'), 'msg': 'Extra inputs are not permitted', 'input': True}]"},
		{file: "health_503.txt", path: "/health", contentType: "text/plain", status: 503,
			call:    func(c *Client) error { return c.Health(context.Background()) },
			wantMsg: "LLM is unavailable. Please check the server logs for more details."},
		{file: "not_found.json", path: "/kv_cache_events", contentType: "application/json", status: 404,
			call:    func(c *Client) error { _, err := c.KVCacheEvents(context.Background()); return err },
			wantMsg: "Not Found"},
		{path: "/metrics", contentType: "text/plain", status: 500,
			call:    func(c *Client) error { _, err := c.IterationStats(context.Background()); return err },
			wantMsg: "Internal Server Error"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s%s/%d", tc.file, tc.path, tc.status), func(t *testing.T) {
			var body []byte
			if tc.file != "" {
				body = enginetest.ReadFixture(t, tc.file)
			}
			c, _ := New(serveFixture(t, tc.path, tc.status, tc.contentType, body), nil)
			call := tc.call
			if call == nil {
				call = func(c *Client) error {
					_, err := c.Complete(context.Background(), CompletionRequest{Model: "m", PromptTokenIDs: []uint32{1}, MaxTokens: 1})
					return err
				}
			}
			err := call(c)
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Type != tc.wantType || e.Message != tc.wantMsg {
				t.Fatalf("error %#v", err)
			}
		})
	}
}

func TestIterationStatsFixtures(t *testing.T) {
	stats, err := DecodeIterationStats(bytes.NewReader(enginetest.ReadFixture(t, "metrics.json")))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Iter != 41 || stats[0].IterLatencyMS != 16.505143404006958 ||
		stats[0].InflightBatching == nil || stats[0].InflightBatching.NumCtxTokens != 40 || stats[0].GPUMemUsage != 56401920000 {
		t.Fatalf("%+v", stats)
	}
	l, ok := LoadFromStats(stats)
	want := Load{Running: 3, Queued: 0, UsedBlocks: 27, MaxBlocks: 4096, TokensPerBlock: 32, Iter: 42}
	if !ok || l != want {
		t.Fatalf("load %+v, want %+v", l, want)
	}
	if u := l.KVUsage(); math.Abs(u-27.0/4096) > 1e-12 {
		t.Fatalf("usage %v", u)
	}
	w := workerLoad(l, 16) // TensorRT-LLM blocks of 32 tokens are two router blocks of 16
	if w.TotalBlocks != 8192 || w.ActiveBlocks != 54 || w.Running != 3 || w.Waiting != 0 {
		t.Fatalf("worker load %v", w)
	}
	empty, err := DecodeIterationStats(bytes.NewReader(enginetest.ReadFixture(t, "metrics_empty.json")))
	if err != nil || len(empty) != 0 {
		t.Fatalf("%v %v", empty, err)
	}
	if _, ok := LoadFromStats(empty); ok {
		t.Fatal("a load from no stats")
	}
	if _, err := DecodeIterationStats(strings.NewReader(`{"iter":1}`)); err == nil {
		t.Fatal("an object accepted as the stats list")
	}
}

func TestEventConverterFixtures(t *testing.T) {
	conv, err := NewEventConverter(4)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(name string) []KVCacheEvent {
		evs, err := DecodeKVCacheEvents(bytes.NewReader(enginetest.ReadFixture(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	got := conv.Convert(decode("kv_events.json"), 1767225600.5)
	want := []kv.Batch{{Seq: 0, Timestamp: 1767225600.5, DataParallelRank: -1, Events: []kv.Event{
		{Kind: kv.AllBlocksCleared},
		{Kind: kv.BlockStored, EngineHashes: []uint64{11, 12}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
		{Kind: kv.BlockStored, EngineHashes: []uint64{math.MaxUint64}, HasParent: true, ParentHash: 12, TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4, Medium: "GPU"},
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{12, 13}},
		{Kind: kv.AllBlocksCleared}, // event 5 is missing
		{Kind: kv.BlockStored, EngineHashes: []uint64{21}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU"},
		{Kind: kv.BlockStored, EngineHashes: []uint64{22}, HasParent: true, ParentHash: 21, TokenIDs: []uint32{5, 6, 7, 8}, BlockSize: 4, Medium: "CPU_PINNED"},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batches\n got %+v\nwant %+v", got, want)
	}
	if conv.Gaps != 1 {
		t.Fatalf("gaps %d", conv.Gaps)
	}
	if b := conv.Convert(nil, 1); len(b) != 0 {
		t.Fatalf("batches from no events: %+v", b)
	}
	// The engine restarted: its "created" event clears; numbering continues.
	got = conv.Convert(decode("kv_events_restart.json"), 2)
	want = []kv.Batch{{Seq: 1, Timestamp: 2, DataParallelRank: -1, Events: []kv.Event{
		{Kind: kv.AllBlocksCleared},
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{21}},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart\n got %+v\nwant %+v", got, want)
	}
	// A restart whose "created" event was lost: the ids go backwards.
	got = conv.Convert([]KVCacheEvent{{EventID: 0, Data: KVEventData{Type: "removed", BlockHashes: []BlockHash{5}}}}, 3)
	if len(got) != 1 || got[0].Seq != 2 || len(got[0].Events) != 2 || got[0].Events[0].Kind != kv.AllBlocksCleared || conv.Gaps != 2 {
		t.Fatalf("ids backwards: %+v (gaps %d)", got, conv.Gaps)
	}

	// Attention data parallelism: a batch per rank, ids counted per rank.
	dp, _ := NewEventConverter(4)
	got = dp.Convert(decode("kv_events_dp.json"), 4)
	want = []kv.Batch{
		{Seq: 0, Timestamp: 4, DataParallelRank: 1, Events: []kv.Event{
			{Kind: kv.BlockRemoved, EngineHashes: []uint64{1}},
			{Kind: kv.BlockStored, EngineHashes: []uint64{3}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU"},
		}},
		{Seq: 1, Timestamp: 4, DataParallelRank: 0, Events: []kv.Event{{Kind: kv.BlockRemoved, EngineHashes: []uint64{2}}}},
	}
	if !reflect.DeepEqual(got, want) || dp.Gaps != 0 {
		t.Fatalf("dp batches\n got %+v\nwant %+v (gaps %d)", got, want, dp.Gaps)
	}
	if _, err := NewEventConverter(0); err == nil {
		t.Fatal("block size 0 accepted")
	}
}

func TestDecodeKVCacheEventsRefusesBadInput(t *testing.T) {
	for _, in := range []string{`{}`, `[{"event_id":"x"}]`, `[{"event_id":1,"data":{"type":"removed","block_hashes":[18446744073709551616]}}]`,
		`[{"event_id":1,"data":{"type":"removed","block_hashes":["a"]}}]`, `[`} {
		if _, err := DecodeKVCacheEvents(strings.NewReader(in)); err == nil {
			t.Errorf("%s accepted", in)
		}
	}
	evs, err := DecodeKVCacheEvents(strings.NewReader(`[{"event_id":1,"data":{"type":"removed","block_hashes":[-1, 7]}}]`))
	if err != nil || evs[0].Data.BlockHashes[0] != math.MaxUint64 || evs[0].Data.BlockHashes[1] != 7 {
		t.Fatalf("%+v %v", evs, err)
	}
}

func TestCompletionBody(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	seed := int64(5)
	b, err := completionBody(CompletionRequest{Model: "m\"x", PromptTokenIDs: []uint32{1, 4294967295}, MaxTokens: 8, MinTokens: 2,
		IgnoreEOS: true, StopTokenIDs: []uint32{7}, Seed: &seed, Temperature: f(0.5), TopP: f(1), TopK: 40,
		Extra: map[string]any{"priority": 0.5, "detokenize": true, "model": "ignored"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"priority":0.5,"model":"m\"x","prompt":[1,4294967295],"max_tokens":8,"min_tokens":2,"ignore_eos":true,"stop_token_ids":[7],"seed":5,"temperature":0.5,"top_p":1,"top_k":40,"stream":true,"stream_options":{"include_usage":true},"detokenize":false}`
	if string(b) != want {
		t.Fatalf("body\n got %s\nwant %s", b, want)
	}
	c, _ := New("http://127.0.0.1:1", nil)
	for _, r := range []CompletionRequest{{PromptTokenIDs: []uint32{1}, MaxTokens: 1}, {Model: "m", MaxTokens: 1},
		{Model: "m", PromptTokenIDs: []uint32{1}}} {
		if _, err := c.Complete(context.Background(), r); err == nil {
			t.Fatalf("%+v accepted", r)
		}
	}
}
