package epp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		body   string
		want   RequestInfo
		status int
	}{
		{`{"model":"m","stream":true}`, RequestInfo{Model: "m", Stream: true}, 0},
		{` {"model":null}`, RequestInfo{}, 0},
		{`{"prompt":"x"}`, RequestInfo{}, 0},
		{`{"model":3}`, RequestInfo{}, 400},
		{`{"stream":"yes"}`, RequestInfo{}, 400},
		{`{"model":`, RequestInfo{}, 400},
		{`[]`, RequestInfo{}, 400},
		{``, RequestInfo{}, 400},
	} {
		got, err := ParseRequest([]byte(tc.body))
		if status := 0; err != nil {
			status = err.HTTPStatus()
			if status != tc.status {
				t.Errorf("%s: status %d, want %d", tc.body, status, tc.status)
			}
			continue
		}
		if tc.status != 0 || got != tc.want {
			t.Errorf("%s: %+v, want %+v (status %d)", tc.body, got, tc.want, tc.status)
		}
	}
}

func TestChunks(t *testing.T) {
	for _, n := range []int{0, 1, 61999, 62000, 62001, 200_000} {
		body := bytes.Repeat([]byte("x"), n)
		parts := Chunks(body, MaxChunk)
		if !bytes.Equal(bytes.Join(parts, nil), body) || len(parts) != max(1, (n+MaxChunk-1)/MaxChunk) {
			t.Errorf("%d bytes: %d parts", n, len(parts))
		}
		for _, p := range parts {
			if len(p) > MaxChunk {
				t.Errorf("%d bytes: a part of %d", n, len(p))
			}
		}
	}
}

func TestUsage(t *testing.T) {
	sse, err := os.ReadFile(filepath.Join("testdata", "chat_stream_usage.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := UsageFromSSE(sse); !ok || u != (Usage{PromptTokens: 12, CompletionTokens: 7, CachedTokens: 4}) {
		t.Errorf("sse: %+v %v", u, ok)
	}
	if _, ok := UsageFromSSE(sse[:len(sse)/2]); ok {
		t.Error("usage found in a stream cut before it")
	}
	js, err := os.ReadFile(filepath.Join("testdata", "completion.json"))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := UsageFromJSON(js); !ok || u.PromptTokens != 5 || u.CompletionTokens != 3 {
		t.Errorf("json: %+v %v", u, ok)
	}
}

func TestSubsetHint(t *testing.T) {
	md := func(v *structpb.Value) *corev3.Metadata { return subsetMD(v) }
	if _, ok := SubsetHint(nil); ok {
		t.Error("hint without metadata")
	}
	if got, ok := SubsetHint(md(structpb.NewStringValue("a:1, b:2,,"))); !ok || len(got) != 2 || got[1] != "b:2" {
		t.Errorf("comma string: %v", got)
	}
	l, _ := structpb.NewList([]any{"a:1", "b:2,c:3"})
	if got, ok := SubsetHint(md(structpb.NewListValue(l))); !ok || len(got) != 3 {
		t.Errorf("list: %v", got)
	}
	if got, ok := SubsetHint(md(structpb.NewListValue(&structpb.ListValue{}))); !ok || len(got) != 0 {
		t.Errorf("empty: %v %v", got, ok)
	}
}

// FuzzParseRequest: any body parses or is a 400, never a panic.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true}`, `{"model":1}`, `[`, ``, `{"stream":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseRequest(b); err != nil && err.HTTPStatus() != 400 {
			t.Fatalf("status %d", err.HTTPStatus())
		}
	})
}

// FuzzUsage: any answer tail is read without a panic, and counts are what the JSON says.
func FuzzUsage(f *testing.F) {
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`{"usage":{"input_tokens":3}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		UsageFromSSE(b)
		UsageFromJSON(b)
	})
}

// FuzzMachine: any sequence of messages built from the fuzz input drives the Machine
// without a panic, and a request that was picked is released once.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 1, 1, 3, 4, 4, 5}, []byte(`{"model":"m"}`))
	f.Add([]byte{0, 2, 3, 6}, []byte(``))
	f.Fuzz(func(t *testing.T, ops []byte, body []byte) {
		m := NewMachine(MachineConfig{NewRequestID: func() string { return "id" }, MaxBodyBytes: 64})
		released := 0
		handle := func(st Step) Step {
			if st.Done != nil && st.Done.Pick != nil {
				released++
			}
			return st
		}
		for _, op := range ops {
			var st Step
			switch op % 7 {
			case 0:
				st = m.Step(headersMsg("/v1/completions", op&8 != 0, nil))
			case 1:
				st = m.Step(bodyMsg(body, op&8 != 0))
			case 2:
				st = m.Step(&extprocRequestTrailers)
			case 3:
				st = m.Step(respHeadersMsg("200", "text/event-stream", nil))
			case 4:
				st = m.Step(respBodyMsg(string(body), op&8 != 0))
			case 5:
				st = m.Abort()
			case 6:
				st = m.Step(&extprocResponseTrailers)
			}
			handle(st)
			if st.Pick != nil {
				handle(m.Picked(&Pick{Endpoints: []string{"a:1"}}, nil))
			}
		}
		handle(m.Abort())
		if released > 1 {
			t.Fatalf("released %d times", released)
		}
	})
}
