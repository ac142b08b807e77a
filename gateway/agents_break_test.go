package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// Hostile and sloppy requests to the agent APIs (chat tools, the Responses API, the
// Messages API): each must be refused with a 400 in the API's own error shape, and no
// request may cost the server more than its size warrants (docs/reference.md §15–17).

// checkAPIError asserts that rr is a 400 in the error shape of the API at path: OpenAI's
// {"error": {"message", "type", "param", "code"}}, or Anthropic's {"type": "error",
// "error": {"type", "message"}} under /v1/messages.
func checkAPIError(t *testing.T, path string, rr *httptest.ResponseRecorder) {
	t.Helper()
	body := rr.Body.Bytes()
	if code := rr.Code; code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %.300s", code, body)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("error body is not JSON: %.300s", body)
	}
	if strings.HasPrefix(path, "/v1/messages") {
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Fatalf("not an Anthropic error body: %.300s", body)
		}
		return
	}
	var e struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		t.Fatalf("not an OpenAI error body: %.300s", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Fatalf("OpenAI error body without %q: %.300s", k, body)
		}
	}
}

// nestedSchema is an object schema whose property "a" nests depth levels deep.
func nestedSchema(depth int) string {
	return strings.Repeat(`{"type":"object","required":["a"],"properties":{"a":`, depth) + `{"type":"string"}` + strings.Repeat(`}}`, depth)
}

// TestBreakDeepSchemaRefused: a JSON Schema nested hundreds of levels deep (a 40 KB body)
// is refused before it is compiled (MaxSchemaDepth): compiling costs time that
// grows faster than the square of the depth, spent while parsing the body, which
// nothing cancels when the client goes away. Real tool and output schemas nest a few
// levels (OpenAI's structured outputs allow 10).
func TestBreakDeepSchemaRefused(t *testing.T) {
	deep := nestedSchema(700)
	for _, c := range []struct{ name, path, body string }{
		// tool_choice "none" keeps the tools out of the prompt (and the prompt short).
		{"chat tool parameters", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],"tool_choice":"none",
			"tools":[{"type":"function","function":{"name":"f","parameters":` + deep + `}}]}`},
		{"chat response_format", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
			"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + deep + `}}}`},
		{"responses text.format", responsesPath, `{"model":"agent","input":"hi",
			"text":{"format":{"type":"json_schema","name":"x","schema":` + deep + `}}}`},
		{"messages input_schema", anthMessagesPath, `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
			"tool_choice":{"type":"none"},"tools":[{"name":"f","input_schema":` + deep + `}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, c.path, c.body)
			checkAPIError(t, c.path, rr)
			if strings.Contains(rr.Body.String(), "context length") {
				t.Fatalf("refused for its length, not for its schema: %.300s", rr.Body)
			}
		})
	}
}

// toolsBody is a request body offering n functions named f0, f1, ...: pre, then n items
// (item formatted with the index), then "]}".
func toolsBody(n int, pre, item string) []byte {
	var b bytes.Buffer
	b.WriteString(pre)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, item, i)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestBreakManyToolsLinear: reading the offered functions costs time in proportion to
// their number (a body within --max-body-bytes holds 80,000 of them, all parsed before
// the context-length check refuses the prompt). The test compares the parse time of
// 32,000 functions with that of 4,000: about 8 times when linear, 40 to 55 times with a
// pairwise duplicate-name check. The small count's time is the best of three runs, and
// the large one's is measured again before failing, so that a busy machine does not
// fail it.
func TestBreakManyToolsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("parses bodies of 32,000 functions")
	}
	for _, c := range []struct {
		name, pre, item string
		parse           func([]byte) *APIError
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[`, `{"type":"function","function":{"name":"f%d"}}`,
			func(b []byte) *APIError { _, e := parseChatRequest(b); return e }},
		{"responses", `{"model":"m","input":"x","tools":[`, `{"type":"function","name":"f%d"}`,
			func(b []byte) *APIError { _, e := parseResponsesRequest(b); return e }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cost := func(n, runs int) time.Duration {
				body := toolsBody(n, c.pre, c.item)
				best := time.Duration(1<<63 - 1)
				for range runs {
					runtime.GC()
					start := time.Now()
					if e := c.parse(body); e != nil {
						t.Fatalf("%d tools: %v", n, e)
					}
					best = min(best, time.Since(start))
				}
				return best
			}
			small, large := cost(4000, 3), cost(32000, 1)
			if float64(large)/float64(small) > 24 {
				large = min(large, cost(32000, 1)) // once more before failing
			}
			if ratio := float64(large) / float64(small); ratio > 24 {
				t.Errorf("parsing 32,000 functions took %v, 4,000 took %v: %.0f times for 8 times the functions (quadratic in their number)", large, small, ratio)
			}
		})
	}
}

// TestBreakCollectLinear: collecting an answer's events joins a tool call's argument
// fragments in time and memory linear in their length. A coding agent's file write
// streams one fragment per token, so a quadratic join (copying the arguments at every
// fragment) would cost gigabytes at the end of every such answer.
func TestBreakCollectLinear(t *testing.T) {
	const n = 32000
	evs := []parse.Event{{Kind: parse.KindToolCall, Index: 0, ID: "call_0", Name: "write_file"}}
	for range n {
		evs = append(evs, parse.Event{Kind: parse.KindToolArgs, Index: 0, Text: "abcd"})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := parse.Collect(evs)
	runtime.ReadMemStats(&after)
	if len(r.Calls) != 1 || len(r.Calls[0].Arguments) != 4*n {
		t.Fatalf("collected %+v", r.Calls)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*4*n {
		t.Errorf("collecting %d argument fragments (%d bytes) allocated %d bytes", n, 4*n, alloc)
	}
}

// TestBreakToolNamesRefused: a function name must be 1 to 64 letters, digits, '_' or
// '-', as OpenAI's API requires (Anthropic's: 1 to 64, newer models 128, of the same
// characters). Other names cannot come back as calls: the parsers drop calls whose name
// holds '<', '>', quotes or white space (Qwen3-Coder's XML format) or is over 256
// bytes, and a name holding a format's marker ("<tool_call>") ends the model's
// reasoning where it mentions the tool, so the answer is garbled rather than refused.
func TestBreakToolNamesRefused(t *testing.T) {
	names := map[string]string{
		"space":   "get weather",
		"quote":   `get"weather`,
		"marker":  "<tool_call>",
		"NUL":     "get\x00weather",
		"newline": "get\nweather",
		"long":    strings.Repeat("f", 300),
	}
	for label, name := range names {
		n, _ := json.Marshal(name)
		for _, c := range []struct{ api, path, body string }{
			{"chat", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],
				"tools":[{"type":"function","function":{"name":` + string(n) + `,"parameters":{"type":"object"}}}]}`},
			{"responses", responsesPath, `{"model":"agent","input":"hi",
				"tools":[{"type":"function","name":` + string(n) + `,"parameters":{"type":"object"}}]}`},
			{"messages", anthMessagesPath, `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
				"tools":[{"name":` + string(n) + `,"input_schema":{"type":"object"}}]}`},
		} {
			t.Run(c.api+"/"+label, func(t *testing.T) {
				rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, c.path, c.body)
				checkAPIError(t, c.path, rr)
			})
		}
	}
}

// TestBreakWrongTypesRefused: members of the wrong type, and tool results that answer no
// call, are 400s, not silently ignored.
func TestBreakWrongTypesRefused(t *testing.T) {
	for _, c := range []struct{ name, path, body string }{
		// OpenAI: "messages with role 'tool' must be a response to a preceeding message
		// with 'tool_calls'"; the Responses and Messages APIs refuse the same already.
		{"chat: tool message answering no call", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"tool","tool_call_id":"call_nope","content":"42"}]}`},
		{"chat: tool message after an assistant without calls", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","content":"hello"},{"role":"tool","tool_call_id":"call_nope","content":"42"}]}`},
		{"chat: assistant tool call of type other than function", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"},
			{"role":"assistant","tool_calls":[{"id":"c1","type":"banana","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"42"}]}`},
		{"responses: reasoning summary a string", responsesPath, `{"model":"agent","input":[{"type":"reasoning","summary":"thought"},
			{"role":"user","content":"hi"}]}`},
		{"messages: metadata.user_id a number", anthMessagesPath, `{"model":"agent","max_tokens":16,"metadata":{"user_id":5},
			"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rr := serve(newTestServer(t, agentBackend(helloScript()...)), http.MethodPost, c.path, c.body)
			checkAPIError(t, c.path, rr)
		})
	}
}

// TestBreakRequiredKeepsRootRefs: under tool_choice "required" a function's parameters
// become one branch of an array schema (parse.RequiredSchema), so a reference to the
// parameters' own root ("#", the usual way to write a recursive schema such as a tree)
// would point at the array of calls instead. Such a request is either refused, or the
// constraint the engine gets still accepts a call whose arguments are valid against the
// function's own schema.
func TestBreakRequiredKeepsRootRefs(t *testing.T) {
	const params = `{"type":"object","properties":{"label":{"type":"string"},"child":{"$ref":"#"}}}`
	for _, c := range []struct{ name, path, body string }{
		{"chat", chatPath, `{"model":"agent","messages":[{"role":"user","content":"hi"}],"tool_choice":"required",
			"tools":[{"type":"function","function":{"name":"tree","parameters":` + params + `}}]}`},
		{"messages any", anthMessagesPath, `{"model":"agent","max_tokens":16,"messages":[{"role":"user","content":"hi"}],
			"tool_choice":{"type":"any"},"tools":[{"name":"tree","input_schema":` + params + `}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := agentBackend(helloScript()...)
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code == http.StatusBadRequest {
				checkAPIError(t, c.path, rr)
				return
			}
			gen := b.generated()
			if len(gen) != 1 || gen[0].Sampling.GetStructured().GetJsonSchema() == "" {
				t.Fatalf("status %d and no JSON Schema constraint reached the engine: %.300s", rr.Code, rr.Body)
			}
			text := gen[0].Sampling.GetStructured().GetJsonSchema()
			schema, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			comp := jsonschema.NewCompiler()
			if err := comp.AddResource("turbine:required", schema); err != nil {
				t.Fatal(err)
			}
			sch, err := comp.Compile("turbine:required")
			if err != nil {
				t.Fatalf("the engine's schema does not compile: %v\n%s", err, text)
			}
			// Valid against the function's own parameters: a node with a child node.
			call, _ := jsonschema.UnmarshalJSON(strings.NewReader(`[{"name":"tree","parameters":{"label":"root","child":{"label":"leaf"}}}]`))
			if err := sch.Validate(call); err != nil {
				t.Errorf("the engine's constraint refuses a call valid against the function's parameters: %v\nschema: %s", err, text)
			}
		})
	}
}
