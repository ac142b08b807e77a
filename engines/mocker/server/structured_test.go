package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/trtllm"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/messages"
)

// bodyRecorder keeps the bodies of the generation requests a mock engine receives.
type bodyRecorder struct {
	h      http.Handler
	mu     sync.Mutex
	bodies [][]byte
}

func (b *bodyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/completions" || r.URL.Path == "/generate") {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.bodies = append(b.bodies, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	b.h.ServeHTTP(w, r)
}

func (b *bodyRecorder) last(t *testing.T) []byte {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		t.Fatal("no generation request reached the mock engine")
	}
	return b.bodies[len(b.bodies)-1]
}

// TestStructuredRoundTrip sends each output constraint through each engine client to the
// mock engine speaking that client's dialect: the request succeeds, and the mock reads
// back the constraint it was given (mocker.Request.Structured), in the form the dialect
// can carry (SGLang and trtllm-serve take a list of choices as a regex, SGLang JSON
// object mode as the schema {"type":"object"}).
func TestStructuredRoundTrip(t *testing.T) {
	schema := `{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]}`
	choice := []string{"yes", "no", "a.b|c"}
	cases := []struct {
		name string
		so   *messages.StructuredOutput
		// the constraint the mock reads back, per dialect (nil: so itself)
		sglang, trtllm *messages.StructuredOutput
	}{
		{"json schema", &messages.StructuredOutput{JsonSchema: schema}, nil, nil},
		{"json object", &messages.StructuredOutput{JsonObject: true}, &messages.StructuredOutput{JsonSchema: `{"type":"object"}`}, nil},
		{"regex", &messages.StructuredOutput{Regex: `\d{3}-[a-z]+`}, nil, nil},
		{"choice", &messages.StructuredOutput{Choice: choice},
			&messages.StructuredOutput{Regex: enginehttp.ChoiceRegex(choice)}, &messages.StructuredOutput{Regex: enginehttp.ChoiceRegex(choice)}},
		{"grammar", &messages.StructuredOutput{Grammar: `root ::= "a" | "b"`}, nil, nil},
		{"none", nil, nil, nil},
	}
	prompt := promptIDs(12)
	for _, dialect := range Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			o := testOptions(t)
			o.Dialect = dialect
			if dialect == DialectTRTLLM {
				o.EventBufferMaxSize, o.PollWait = 16, 10*time.Millisecond
			}
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			rec := &bodyRecorder{h: s.Handler()}
			hs := httptest.NewServer(rec)
			t.Cleanup(func() {
				hs.Close()
				_ = s.Close()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					want := c.so
					var got *messages.StructuredOutput
					switch dialect {
					case DialectVLLM:
						cl, err := vllm.New(hs.URL, nil)
						if err != nil {
							t.Fatal(err)
						}
						so, err := vllm.StructuredOutputs(c.so)
						if err != nil {
							t.Fatal(err)
						}
						req := vllm.CompletionRequest{Model: "turbine-mock", PromptTokenIDs: prompt, MaxTokens: 2}
						if so != nil {
							req.Extra = map[string]any{"structured_outputs": so}
						}
						st, err := cl.Complete(ctx, req)
						if err != nil {
							t.Fatal(err)
						}
						for {
							ch, err := st.Recv()
							if err == io.EOF || (err == nil && ch.FinishReason != "") {
								break
							}
							if err != nil {
								t.Fatal(err)
							}
						}
						st.Close()
						p, aerr := s.parseCompletion(rec.last(t))
						if aerr != nil {
							t.Fatal(aerr.msg)
						}
						got = p.req.Structured
					case DialectSGLang:
						cl, err := sglang.New(hs.URL, nil, sglang.Options{})
						if err != nil {
							t.Fatal(err)
						}
						e, err := sglang.NewEngine(cl, 16)
						if err != nil {
							t.Fatal(err)
						}
						generate(ctx, t, e, prompt, c.so)
						r, _, _, msg := s.parseSGLang(rec.last(t))
						if msg != "" {
							t.Fatal(msg)
						}
						got = r.Structured
						if c.sglang != nil {
							want = c.sglang
						}
					case DialectTRTLLM:
						cl, err := trtllm.New(hs.URL, nil)
						if err != nil {
							t.Fatal(err)
						}
						e, err := trtllm.NewEngine(cl, trtllm.EngineOptions{Model: "turbine-mock", BlockSize: 16})
						if err != nil {
							t.Fatal(err)
						}
						generate(ctx, t, e, prompt, c.so)
						p, _, msg := s.parseTRTLLM(rec.last(t))
						if msg != "" {
							t.Fatal(msg)
						}
						got = p.req.Structured
						if c.trtllm != nil {
							want = c.trtllm
						}
					}
					if !proto.Equal(got, want) {
						t.Errorf("the mock read %v, want %v", got, want)
					}
				})
			}
		})
	}
}

// generate runs one request on an engine adapter to its end.
func generate(ctx context.Context, t *testing.T, e engines.Engine, prompt []uint32, so *messages.StructuredOutput) {
	t.Helper()
	done := false
	err := e.Generate(ctx, "req-"+strings.ReplaceAll(t.Name(), "/", "-"), prompt,
		&messages.SamplingParams{MaxTokens: 2, Structured: so}, func(ch engines.Chunk) error {
			done = done || ch.FinishReason != ""
			return nil
		})
	if err != nil || !done {
		t.Fatalf("generate: %v (finished %v)", err, done)
	}
}

// TestStructuredRefusals checks what each dialect refuses, as its engine does.
func TestStructuredRefusals(t *testing.T) {
	s, _ := startServer(t, testOptions(t))
	prompt := jsonIDs(promptIDs(4))
	vllmCases := []struct{ body, msg string }{
		{`{"prompt":` + prompt + `,"structured_outputs":{"regex":"a","choice":["b"]}}`, "multiple are specified: regex, choice"},
		{`{"prompt":` + prompt + `,"structured_outputs":{}}`, "none are specified"},
		{`{"prompt":` + prompt + `,"structured_outputs":{"json":[1]}}`, "must be an object"},
		{`{"prompt":` + prompt + `,"structured_outputs":{"structural_tag":"{}"}}`, "structural_tag"},
	}
	for _, c := range vllmCases {
		if _, aerr := s.parseCompletion([]byte(c.body)); aerr == nil || aerr.status != http.StatusBadRequest || !strings.Contains(aerr.msg, c.msg) {
			t.Errorf("vllm %s: %+v, want 400 with %q", c.body, aerr, c.msg)
		}
	}
	sglangCases := []struct{ body, msg string }{
		{`{"input_ids":` + prompt + `,"sampling_params":{"max_new_tokens":2,"regex":"a","ebnf":"root ::= \"a\""}}`, "Only one of regex, json_schema, or ebnf"},
		{`{"input_ids":` + prompt + `,"sampling_params":{"max_new_tokens":2,"json_schema":"[1]"}}`, "json_schema"},
	}
	for _, c := range sglangCases {
		if _, _, _, msg := s.parseSGLang([]byte(c.body)); !strings.Contains(msg, c.msg) || msg == "" {
			t.Errorf("sglang %s: %q, want %q", c.body, msg, c.msg)
		}
	}
	trtllmCases := []struct {
		body, msg  string
		validation bool
	}{
		{`{"model":"m","prompt":` + prompt + `,"response_format":{"type":"json"}}`, "response_format.schema is required", false},
		{`{"model":"m","prompt":` + prompt + `,"response_format":{"type":"regex"}}`, "response_format.regex is required", false},
		{`{"model":"m","prompt":` + prompt + `,"response_format":{"type":"yaml"}}`, "Input should be", true},
	}
	for _, c := range trtllmCases {
		if _, validation, msg := s.parseTRTLLM([]byte(c.body)); !strings.Contains(msg, c.msg) || msg == "" || validation != c.validation {
			t.Errorf("trtllm %s: %q (validation %v), want %q", c.body, msg, validation, c.msg)
		}
	}
	// OpenAI's json_schema wrapper is unwrapped.
	p, _, msg := s.parseTRTLLM([]byte(`{"model":"m","prompt":` + prompt + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer"}}}}`))
	if msg != "" || p.req.Structured.GetJsonSchema() != `{"type":"integer"}` {
		t.Errorf("json_schema: %v %q", p, msg)
	}
}
