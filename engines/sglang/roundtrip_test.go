package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// mock is the mock engine's real server in SGLang's dialect, with the rids posted to
// /abort_request recorded.
type mock struct {
	srv     *server.Server
	url     string
	mu      sync.Mutex
	aborted []string
}

func (m *mock) abortedRIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.aborted)
}

func startMock(t *testing.T, speedup float64, incremental bool) *mock {
	t.Helper()
	m := &mock{}
	m.srv, m.url = enginetest.StartMock(t, server.Options{Params: server.Params{Engine: enginetest.MockConfig(speedup, 7), Dialect: server.DialectSGLang,
		IncrementalStreamingOutput: incremental}}, m.recordAborts)
	return m
}

// recordAborts records the rids posted to /abort_request before h answers.
func (m *mock) recordAborts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort_request" {
			var a struct {
				RID string `json:"rid"`
			}
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &a)
			m.mu.Lock()
			m.aborted = append(m.aborted, a.RID)
			m.mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		h.ServeHTTP(w, r)
	})
}

// generateFull asks the mock for a non-streamed answer.
func generateFull(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, m
}

func toIDs(v any) []uint32 {
	var out []uint32
	for _, x := range v.([]any) {
		out = append(out, uint32(x.(float64)))
	}
	return out
}

func TestRoundTripAgainstMock(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%v", incremental), func(t *testing.T) {
			m := startMock(t, 1000, incremental)
			c, err := New(m.url, nil, Options{IncrementalOutput: incremental})
			if err != nil {
				t.Fatal(err)
			}
			ctx := enginetest.Ctx(t)
			seed := int64(11)
			p := enginetest.Prompt(40)
			s, err := c.Generate(ctx, GenerateRequest{RID: "a", InputIDs: p,
				Sampling: SamplingParams{MaxNewTokens: 20, IgnoreEOS: true, Seed: &seed}})
			if err != nil {
				t.Fatal(err)
			}
			chunks, err := enginetest.Collect(s.Recv, s.Close)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint32
			for _, ch := range chunks[:len(chunks)-1] {
				if ch.FinishReason != "" || len(ch.TokenIDs) == 0 {
					t.Fatalf("chunk %+v before the last", ch)
				}
				got = append(got, ch.TokenIDs...)
			}
			last := chunks[len(chunks)-1]
			got = append(got, last.TokenIDs...)
			if last.FinishReason != "length" || last.PromptTokens != 40 || last.CompletionTokens != 20 || len(got) != 20 {
				t.Fatalf("last chunk %+v, %d tokens", last, len(got))
			}
			// The same seed without streaming: the same tokens.
			status, full := generateFull(t, m.url, fmt.Sprintf(`{"rid":"b","input_ids":%s,"sampling_params":{"max_new_tokens":20,"ignore_eos":true,"sampling_seed":11}}`, jsonIDs(p)))
			if status != 200 || !slices.Equal(toIDs(full["output_ids"]), got) {
				t.Fatalf("non-streamed %d %v, streamed %v", status, full, got)
			}
			meta := full["meta_info"].(map[string]any)
			if fr := meta["finish_reason"].(map[string]any); fr["type"] != "length" || fr["length"] != 20.0 || meta["cached_tokens"] != 32.0 {
				t.Fatalf("meta_info %v (the second request reuses the prompt's two full blocks)", meta)
			}

			// A stop token: the request ends on it, reported as matched.
			stopAt := got[5]
			s, err = c.Generate(ctx, GenerateRequest{RID: "c", InputIDs: p,
				Sampling: SamplingParams{MaxNewTokens: 20, IgnoreEOS: true, Seed: &seed, StopTokenIDs: []uint32{stopAt}}})
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
			if last.FinishReason != "stop" || !last.HasStopTokenID || last.StopTokenID != stopAt ||
				stopped[len(stopped)-1] != stopAt || !slices.Equal(stopped, got[:len(stopped)]) {
				t.Fatalf("stop on %d: %v, last %+v", stopAt, stopped, last)
			}
			if len(m.abortedRIDs()) != 0 {
				t.Fatalf("finished requests were aborted: %v", m.abortedRIDs())
			}
		})
	}
}

func jsonIDs(ids []uint32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

func TestModeMismatchAgainstMock(t *testing.T) {
	m := startMock(t, 1000, false)
	c, _ := New(m.url, nil, Options{IncrementalOutput: true})
	s, err := c.Generate(enginetest.Ctx(t), GenerateRequest{RID: "x", InputIDs: enginetest.Prompt(5), Sampling: SamplingParams{MaxNewTokens: 5, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enginetest.Collect(s.Recv, s.Close); err == nil || !strings.Contains(err.Error(), "Options.IncrementalOutput must be false") {
		t.Fatalf("error %v", err)
	}
}

// TestCloseAborts: a caller that stops reading closes the stream; the client posts
// /abort_request and the engine frees the request.
func TestCloseAborts(t *testing.T) {
	m := startMock(t, 1, false)
	c, _ := New(m.url, nil, Options{})
	s, err := c.Generate(enginetest.Ctx(t), GenerateRequest{RID: "long", InputIDs: enginetest.Prompt(40), Sampling: SamplingParams{MaxNewTokens: 1500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err := s.Recv(); err != nil || len(ch.TokenIDs) == 0 {
		t.Fatalf("first chunk %+v %v", ch, err)
	}
	if st := m.srv.Stats(); st.Running != 1 || st.ActiveBlocks == 0 {
		t.Fatalf("while streaming: %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := m.abortedRIDs(); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("aborted %v", got)
	}
	// The mock answers /abort_request once the engine applied it.
	if st := m.srv.Stats(); st.Running != 0 || st.Waiting != 0 || st.ActiveBlocks != 0 || st.GenerationTokens >= 1500 {
		t.Fatalf("after close: %+v", st)
	}
	if _, err := s.Recv(); err == nil {
		t.Fatal("Recv after Close succeeded")
	}
}

// TestAbortFromElsewhere: /abort_request from another client ends the stream with an
// abort finish.
func TestAbortFromElsewhere(t *testing.T) {
	m := startMock(t, 1, false)
	c, _ := New(m.url, nil, Options{})
	ctx := enginetest.Ctx(t)
	s, err := c.Generate(ctx, GenerateRequest{RID: "victim", InputIDs: enginetest.Prompt(8), Sampling: SamplingParams{MaxNewTokens: 1500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	for {
		ch, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended with %v before an abort finish", err)
		}
		if ch.FinishReason != "" {
			if ch.FinishReason != "abort" || ch.AbortMessage == "" {
				t.Fatalf("last chunk %+v", ch)
			}
			break
		}
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last chunk: %v", err)
	}
}

func TestCancelAborts(t *testing.T) {
	m := startMock(t, 1, false)
	c, _ := New(m.url, nil, Options{})
	ctx, cancel := context.WithCancel(enginetest.Ctx(t))
	e, _ := NewEngine(c, 16)
	chunks := 0
	err := e.Generate(ctx, "cancelled", enginetest.Prompt(20), &messages.SamplingParams{MaxTokens: 1500, IgnoreEos: true},
		func(ch engines.Chunk) error {
			chunks++
			cancel()
			return nil
		})
	if !errors.Is(err, context.Canceled) || chunks != 1 {
		t.Fatalf("Generate: %v after %d chunks", err, chunks)
	}
	if got := m.abortedRIDs(); !slices.Equal(got, []string{"cancelled"}) {
		t.Fatalf("aborted %v", got)
	}
	if st := m.srv.Stats(); st.Running != 0 || st.ActiveBlocks != 0 {
		t.Fatalf("after cancel: %+v", st)
	}
}

func TestEngineAdapterAgainstMock(t *testing.T) {
	m := startMock(t, 1000, false)
	c, _ := New(m.url, nil, Options{})
	e, err := NewEngine(c, 16)
	if err != nil {
		t.Fatal(err)
	}
	ctx := enginetest.Ctx(t)
	if err := e.Health(ctx); err != nil {
		t.Fatal(err)
	}
	var got []engines.Chunk
	err = e.Generate(ctx, "r1", enginetest.Prompt(33), &messages.SamplingParams{MaxTokens: 7, IgnoreEos: true},
		func(ch engines.Chunk) error { got = append(got, ch); return nil })
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ch := range got {
		n += len(ch.TokenIDs)
	}
	last := got[len(got)-1]
	if n != 7 || last.FinishReason != "length" || last.PromptTokens != 33 || last.CompletionTokens != 7 {
		t.Fatalf("chunks %+v", got)
	}
	l, err := e.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.TotalBlocks != 512 || l.Running != 0 || l.Waiting != 0 || l.ActiveBlocks != 0 || l.KvUsage != 0 {
		t.Fatalf("idle load %v", l)
	}
	// fn's error stops the request and is returned.
	boom := errors.New("boom")
	err = e.Generate(ctx, "r2", enginetest.Prompt(10), &messages.SamplingParams{MaxTokens: 500, IgnoreEos: true},
		func(engines.Chunk) error { return boom })
	if !errors.Is(err, boom) || !slices.Contains(m.abortedRIDs(), "r2") {
		t.Fatalf("Generate: %v, aborted %v", err, m.abortedRIDs())
	}
	mi, err := c.ModelInfo(ctx)
	if err != nil || !mi.IsGeneration || mi.ModelPath != "m" {
		t.Fatalf("%+v %v", mi, err)
	}
}

func TestLoadWhileBusy(t *testing.T) {
	m := startMock(t, 1, false)
	c, _ := New(m.url, nil, Options{})
	e, _ := NewEngine(c, 16)
	ctx := enginetest.Ctx(t)
	s, err := c.Generate(ctx, GenerateRequest{RID: "busy", InputIDs: enginetest.Prompt(40), Sampling: SamplingParams{MaxNewTokens: 1500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	l, err := e.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 40 prompt tokens and at least one generated: three blocks of 16 or more.
	if l.Running != 1 || l.TotalBlocks != 512 || l.ActiveBlocks < 3 || l.KvUsage < 3.0/512 {
		t.Fatalf("busy load %v", l)
	}
}

func TestMockErrors(t *testing.T) {
	m := startMock(t, 1000, false)
	c, _ := New(m.url, nil, Options{})
	ctx := enginetest.Ctx(t)
	cases := []struct {
		name string
		req  GenerateRequest
		want string
	}{
		{"too long", GenerateRequest{RID: "l", InputIDs: enginetest.Prompt(4096), Sampling: SamplingParams{MaxNewTokens: 1}}, "longer than the model's context length"},
		{"unknown sampling key", GenerateRequest{RID: "k", InputIDs: enginetest.Prompt(3), Sampling: SamplingParams{MaxNewTokens: 1, Extra: map[string]any{"bogus": 1}}}, "unexpected keyword argument 'bogus'"},
		{"out of vocabulary", GenerateRequest{RID: "v", InputIDs: []uint32{1 << 30}, Sampling: SamplingParams{MaxNewTokens: 1}}, "out of vocabulary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Generate(ctx, tc.req)
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

func TestServerGoneIsAnError(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	c, _ := New(url, nil, Options{})
	ctx := enginetest.Ctx(t)
	if err := c.Health(ctx); err == nil {
		t.Fatal("health of a closed server")
	}
	if _, err := c.Load(ctx); err == nil {
		t.Fatal("load of a closed server")
	}
}

// TestCloseWhileReceiving: Close from another goroutine ends a Recv that waits.
func TestCloseWhileReceiving(t *testing.T) {
	m := startMock(t, 1, false)
	c, _ := New(m.url, nil, Options{})
	s, err := c.Generate(enginetest.Ctx(t), GenerateRequest{RID: "bg", InputIDs: enginetest.Prompt(8), Sampling: SamplingParams{MaxNewTokens: 1500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := m.abortedRIDs(); !slices.Equal(got, []string{"bg"}) {
		t.Fatalf("aborted %v", got)
	}
}
