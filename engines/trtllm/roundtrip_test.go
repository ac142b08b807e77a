package trtllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

type mock struct {
	srv *server.Server
	url string
}

// startMock runs the mock engine's real server in trtllm-serve's dialect.
func startMock(t *testing.T, speedup float64, eventBuffer int) *mock {
	t.Helper()
	srv, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(speedup, 3), Dialect: server.DialectTRTLLM,
		EventBufferMaxSize: eventBuffer}, PollWait: 20 * time.Millisecond}, nil)
	return &mock{srv: srv, url: url}
}

func jsonIDs(ids []uint32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// eventually polls cond every few milliseconds until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRoundTripAgainstMock(t *testing.T) {
	m := startMock(t, 1000, 0)
	c, err := New(m.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := enginetest.Ctx(t)
	if ids, err := c.Models(ctx); err != nil || !slices.Equal(ids, []string{"m"}) {
		t.Fatalf("models %v %v", ids, err)
	}
	seed := int64(21)
	p := enginetest.Prompt(40)
	s, err := c.Complete(ctx, CompletionRequest{Model: "m", PromptTokenIDs: p, MaxTokens: 20, IgnoreEOS: true, Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := enginetest.Collect(s.Recv, s.Close)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, ch := range chunks {
		got = append(got, ch.TokenIDs...)
	}
	last := chunks[len(chunks)-1]
	if len(got) != 20 || last.FinishReason != "length" || last.Usage == nil ||
		*last.Usage != (Usage{PromptTokens: 40, CompletionTokens: 20, TotalTokens: 60}) {
		t.Fatalf("%d tokens, last %+v usage %+v", len(got), last, last.Usage)
	}

	// Not streamed, same seed: the same ids, in the non-streamed shape.
	resp, err := http.Post(m.url+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(
		`{"model":"m","prompt":%s,"max_tokens":20,"ignore_eos":true,"seed":21,"detokenize":false}`, jsonIDs(p))))
	if err != nil {
		t.Fatal(err)
	}
	var full struct {
		Choices []struct {
			Text         string   `json:"text"`
			TokenIDs     []uint32 `json:"token_ids"`
			FinishReason string   `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&full)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(full.Choices) != 1 || !slices.Equal(full.Choices[0].TokenIDs, got) ||
		full.Choices[0].Text != "" || full.Usage.CompletionTokens != 20 || full.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Fatalf("non-streamed %d %+v %v, streamed %v", resp.StatusCode, full, err, got)
	}

	// A stop token: trimmed from the ids, named as the stop reason.
	stopAt := got[6]
	cut := slices.Index(got, stopAt)
	s, err = c.Complete(ctx, CompletionRequest{Model: "m", PromptTokenIDs: p, MaxTokens: 20, IgnoreEOS: true, Seed: &seed,
		StopTokenIDs: []uint32{stopAt}})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err = enginetest.Collect(s.Recv, s.Close)
	if err != nil {
		t.Fatal(err)
	}
	var stopped []uint32
	for _, ch := range chunks {
		stopped = append(stopped, ch.TokenIDs...)
	}
	last = chunks[len(chunks)-1]
	if !slices.Equal(stopped, got[:cut]) || last.FinishReason != "stop" || !last.HasStopTokenID || last.StopTokenID != stopAt ||
		last.Usage.CompletionTokens != cut {
		t.Fatalf("stop on %d: %v (want %v), last %+v usage %+v", stopAt, stopped, got[:cut], last, last.Usage)
	}
}

func TestMockRefusals(t *testing.T) {
	m := startMock(t, 1000, 0)
	c, _ := New(m.url, nil)
	ctx := enginetest.Ctx(t)
	cases := []struct {
		name     string
		req      CompletionRequest
		wantType string
		want     string
	}{
		{"unknown field", CompletionRequest{Model: "m", PromptTokenIDs: enginetest.Prompt(3), MaxTokens: 1, Extra: map[string]any{"return_token_ids": true}},
			"", "Extra inputs are not permitted"},
		{"too long", CompletionRequest{Model: "m", PromptTokenIDs: enginetest.Prompt(4096), MaxTokens: 1}, "BadRequestError", "prompt length (4096)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Complete(ctx, tc.req)
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Type != tc.wantType || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("error %#v", err)
			}
		})
	}
}

// TestCloseAborts: closing the stream closes the connection; the server aborts.
func TestCloseAborts(t *testing.T) {
	m := startMock(t, 1, 0)
	c, _ := New(m.url, nil)
	s, err := c.Complete(enginetest.Ctx(t), CompletionRequest{Model: "m", PromptTokenIDs: enginetest.Prompt(40), MaxTokens: 1500, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := s.Recv(); err != nil || len(ch.TokenIDs) == 0 {
		t.Fatalf("first chunk %+v %v", ch, err)
	}
	if st := m.srv.Stats(); st.Running != 1 {
		t.Fatalf("while streaming: %+v", st)
	}
	s.Close()
	eventually(t, "abort after close", func() bool { st := m.srv.Stats(); return st.Running == 0 && st.ActiveBlocks == 0 })
	if g := m.srv.Stats().GenerationTokens; g >= 1500 {
		t.Fatalf("ran to completion: %d tokens", g)
	}
}

// TestEngineStopsMidStream: the server fails inside a stream, which ends without
// [DONE]: an error, not a hang.
func TestEngineStopsMidStream(t *testing.T) {
	m := startMock(t, 1, 0)
	c, _ := New(m.url, nil)
	e, _ := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16})
	defer e.Close()
	chunks := 0
	err := e.Generate(enginetest.Ctx(t), "r", enginetest.Prompt(10), &messages.SamplingParams{MaxTokens: 1500, IgnoreEos: true},
		func(engines.Chunk) error {
			chunks++
			if chunks == 1 {
				go m.srv.Close()
			}
			return nil
		})
	if err == nil || chunks >= 1500 || !strings.Contains(err.Error(), "trtllm: ") {
		t.Fatalf("Generate: %v after %d chunks", err, chunks)
	}
	t.Log(err)
}

func TestEngineAdapterAgainstMock(t *testing.T) {
	m := startMock(t, 1, 0)
	c, _ := New(m.url, nil)
	e, err := NewEngine(c, EngineOptions{Model: "m", BlockSize: 8, StatsInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := enginetest.Ctx(t)
	if err := e.Health(ctx); err != nil {
		t.Fatal(err)
	}
	var got []engines.Chunk
	err = e.Generate(ctx, "r1", enginetest.Prompt(33), &messages.SamplingParams{MaxTokens: 3, IgnoreEos: true},
		func(ch engines.Chunk) error { got = append(got, ch); return nil })
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1]
	if len(got) != 3 || last.FinishReason != "length" || last.PromptTokens != 33 || last.CompletionTokens != 3 {
		t.Fatalf("chunks %+v", got)
	}
	// Busy: the collector sees the running request (blocks of 16 are two of 8).
	s, err := c.Complete(ctx, CompletionRequest{Model: "m", PromptTokenIDs: enginetest.Prompt(40), MaxTokens: 1500, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	var l *messages.WorkerLoad
	eventually(t, "busy load", func() bool {
		l, err = e.Load(ctx)
		return err == nil && l.Running == 1 && l.ActiveBlocks >= 6
	})
	if l.TotalBlocks != 1024 || l.ActiveBlocks%2 != 0 || l.KvUsage <= 0 {
		t.Fatalf("busy load %v", l)
	}
	s.Close()
	eventually(t, "idle load", func() bool {
		l, err = e.Load(ctx)
		return err == nil && l.Running == 0 && l.ActiveBlocks == 0
	})
	if l.TotalBlocks != 1024 {
		t.Fatalf("idle load %v", l)
	}
	e.Close()
	if _, err := e.Load(ctx); err == nil {
		t.Fatal("Load after Close")
	}
}

func TestLoadWaitsForFirstStatsWithinContext(t *testing.T) {
	// A server that never answers /metrics: Load ends with its context.
	block := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer hs.Close()
	defer close(block)
	c, _ := New(hs.URL, nil)
	e, _ := NewEngine(c, EngineOptions{Model: "m", BlockSize: 16})
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.Load(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Load: %v", err)
	}
}

func TestPollKVEventsAgainstMock(t *testing.T) {
	m := startMock(t, 1000, 1000)
	c, _ := New(m.url, nil)
	ctx, cancel := context.WithCancel(enginetest.Ctx(t))
	batches := make(chan kv.Batch, 100)
	done := make(chan error, 1)
	go func() {
		done <- c.PollKVEvents(ctx, PollConfig{BlockSize: 16, Interval: 5 * time.Millisecond}, func(b kv.Batch) { batches <- b })
	}()

	p := enginetest.Prompt(40)
	s, err := c.Complete(ctx, CompletionRequest{Model: "m", PromptTokenIDs: p, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enginetest.Collect(s.Recv, s.Close); err != nil {
		t.Fatal(err)
	}
	// The first batch starts with the cache's creation; the prompt's two full blocks
	// arrive as stored blocks chained from nothing.
	var stored []uint32
	var seqs []uint64
	first := true
	timeout := time.After(10 * time.Second)
	for len(stored) < 32 {
		select {
		case b := <-batches:
			seqs = append(seqs, b.Seq)
			if first && (len(b.Events) == 0 || b.Events[0].Kind != kv.AllBlocksCleared) {
				t.Fatalf("first batch %+v", b)
			}
			first = false
			for _, ev := range b.Events {
				if ev.Kind == kv.BlockStored {
					if ev.BlockSize != 16 || ev.Medium != "GPU" || (len(stored) == 0 && ev.HasParent) {
						t.Fatalf("stored event %+v", ev)
					}
					stored = append(stored, ev.TokenIDs...)
				}
			}
		case err := <-done:
			t.Fatalf("PollKVEvents returned %v", err)
		case <-timeout:
			t.Fatalf("stored tokens %v after 10 s", stored)
		}
	}
	if !slices.Equal(stored[:32], p[:32]) {
		t.Fatalf("stored %v, want the prompt's first 32 tokens", stored[:32])
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("batch numbers %v", seqs)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("PollKVEvents after cancel: %v", err)
	}
}

func TestPollKVEventsWithoutEndpoint(t *testing.T) {
	c, _ := New(serveFixture(t, "/nothing", 200, "text/plain", nil), nil)
	err := c.PollKVEvents(enginetest.Ctx(t), PollConfig{BlockSize: 16}, func(kv.Batch) { t.Fatal("a batch") })
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("error %v", err)
	}
	if err := c.PollKVEvents(enginetest.Ctx(t), PollConfig{}, nil); err == nil {
		t.Fatal("block size 0 accepted")
	}
}
