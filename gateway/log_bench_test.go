package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestRequestLogLine(t *testing.T) {
	var buf bytes.Buffer
	b := newFakeBackend(tokens("Hel"), finish("lo", "stop"))
	s, err := New(Config{Logger: zerolog.New(&buf), Now: func() time.Time { return testTime }}, b, fakeOptions(fakePreprocessor{})...)
	if err != nil {
		t.Fatal(err)
	}
	serve(s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	serve(s, http.MethodPost, compPath, `{"model":"tiny","prompt":"hi","best_of":3}`)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one log line per request, got %q", buf.String())
	}
	var ok, bad map[string]any
	if json.Unmarshal([]byte(lines[0]), &ok) != nil || json.Unmarshal([]byte(lines[1]), &bad) != nil {
		t.Fatalf("log lines are not JSON: %q", lines)
	}
	if ok["request_id"] != "req-1" || ok["level"] != "info" || ok["status"] != 200.0 || ok["worker"] != "worker-a" ||
		ok["model"] != "tiny" || ok["completion_tokens"] != 5.0 || ok["endpoint"] != "chat_completions" {
		t.Errorf("success line %v", ok)
	}
	if bad["level"] != "warn" || bad["status"] != 400.0 || bad["error_kind"] != "unsupported" {
		t.Errorf("failure line %v", bad)
	}
}

// BenchmarkParseChatRequest parses a chat body of about 64 KiB (MB/s via SetBytes).
func BenchmarkParseChatRequest(b *testing.B) {
	var msgs []string
	for i := 0; i < 64; i++ {
		msgs = append(msgs, `{"role":"user","content":"`+strings.Repeat("lorem ipsum ", 85)+`"}`)
	}
	body := []byte(`{"model":"m","stream":true,"max_tokens":64,"stop":["\n\n"],"messages":[` + strings.Join(msgs, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseChatRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatStream runs whole streaming chat requests (parse, template, tokenize,
// 32 one-token chunks, SSE) against a scripted backend and reports requests/s.
func BenchmarkChatStream(b *testing.B) {
	var steps []step
	for i := 0; i < 31; i++ {
		steps = append(steps, tokens("x"))
	}
	steps = append(steps, finish("y", "stop"))
	be := newFakeBackend(steps...)
	s, err := New(Config{}, be, fakeOptions(fakePreprocessor{})...)
	if err != nil {
		b.Fatal(err)
	}
	body := `{"model":"org/big-model","stream":true,"stream_options":{"include_usage":true},` + hiChat + `}`
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if rr := serve(s, http.MethodPost, chatPath, body); rr.Code != 200 {
			b.Fatal(rr.Body.String())
		}
		be.mu.Lock()
		be.requests, be.streams = be.requests[:0], be.streams[:0]
		be.mu.Unlock()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
}
