package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// seedBodies adds the request bodies of testdata/validation.golden (and a few legal
// ones) to the fuzz corpus.
func seedBodies(f *testing.F, path string) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"stop":["a","b"],"max_tokens":3,"messages":[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"hi"}],"turbine":{"return_worker":true,"overlap_weight":2}}`))
	f.Add([]byte(`{"model":"m","prompt":[[1,2,3]],"max_tokens":2.0}`))
	f.Add([]byte(`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"assistant","tool_calls":[{"id":"1"}]},{"role":"tool","tool_call_id":"1","content":"r"}]}`))
	data, err := os.ReadFile(filepath.Join("testdata", "validation.golden"))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "POST "+path+" "); ok {
			f.Add([]byte(rest))
		}
	}
}

// checkParseError checks that a refusal is a well-formed 4xx catalogue error.
func checkParseError(t *testing.T, e *APIError) {
	if e.Status() < 400 || e.Status() >= 500 {
		t.Fatalf("parse error with status %d: %v", e.Status(), e)
	}
	b, err := encodeJSON(e)
	if err != nil || !json.Valid(b) {
		t.Fatalf("error body %q: %v", b, err)
	}
	if e.Message == "" {
		t.Fatalf("error without message: %+v", e)
	}
}

// checkCommon checks invariants every accepted request (whose body is body) holds. Its
// model is the body's `model`, "" when that is absent or null (answered for the one
// model served: Server.resolveModel).
func checkCommon(t *testing.T, body []byte, c *commonRequest) {
	var top map[string]any
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("accepted a body encoding/json refuses: %v", err)
	}
	if want, _ := top["model"].(string); c.Model != want {
		t.Fatalf("model %q; the body's is %q", c.Model, want)
	}
	if c.MaxTokens < 0 || c.MinTokens < 0 || (c.MaxTokens > 0 && c.MinTokens > c.MaxTokens) {
		t.Fatalf("accepted max_tokens %d min_tokens %d", c.MaxTokens, c.MinTokens)
	}
	if slices.Contains(c.Stop, "") {
		t.Fatal("accepted an empty stop string")
	}
	if c.IncludeUsage && !c.Stream {
		t.Fatal("include_usage without stream")
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) || c.TopP != nil && (*c.TopP <= 0 || *c.TopP > 1) {
		t.Fatalf("accepted temperature %v top_p %v", c.Temperature, c.TopP)
	}
}

func FuzzParseChatRequest(f *testing.F) {
	seedBodies(f, chatPath)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseChatRequest(body)
		if e != nil {
			if req != nil {
				t.Fatal("both a request and an error")
			}
			checkParseError(t, e)
			return
		}
		checkCommon(t, body, &req.commonRequest)
		if len(req.Messages) == 0 {
			t.Fatal("accepted without messages")
		}
		for i, m := range req.Messages {
			if !chatRoles[m.Role] {
				t.Fatalf("message %d: role %q", i, m.Role)
			}
			if m.Content == "" && !(m.Role == "assistant" && len(m.ToolCalls) > 0) {
				t.Fatalf("message %d: empty content accepted", i)
			}
		}
		if !json.Valid(body) {
			t.Fatal("accepted invalid JSON")
		}
	})
}

func FuzzParseCompletionRequest(f *testing.F) {
	seedBodies(f, compPath)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseCompletionRequest(body)
		if e != nil {
			checkParseError(t, e)
			return
		}
		checkCommon(t, body, &req.commonRequest)
		if req.TokenPrompt == (len(req.PromptIDs) == 0) || !req.TokenPrompt && req.PromptText == "" {
			t.Fatalf("accepted prompt text %q ids %v", req.PromptText, req.PromptIDs)
		}
	})
}
