package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// nodeModulesWith returns the node_modules folder that scripts/fixtures.sh installs
// (${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules), skipping the test with
// a clear message when node or the package pkg is missing.
func nodeModulesWith(t *testing.T, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed (%v): the JavaScript SDK test needs Node.js", err)
	}
	cache := os.Getenv("TURBINE_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("no cache folder: %v", err)
		}
		cache = filepath.Join(home, ".cache", "turbine")
	}
	dir := filepath.Join(cache, "npm", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, pkg, "package.json")); err != nil {
		t.Skipf("the npm package %s is not installed in %s (%v): run scripts/fixtures.sh", pkg, dir, err)
	}
	return dir
}

// pickBackend is a fakeBackend whose script depends on the request: the prompt (as the
// fake template renders it) and the output constraint.
type pickBackend struct {
	*fakeBackend
	pick func(prompt string, so *messages.StructuredOutput) []step
}

func (p *pickBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	steps := p.pick(fakeTokenizer{}.Decode(req.TokenIDs), req.Sampling.GetStructured())
	p.mu.Lock()
	p.steps = steps
	p.mu.Unlock()
	return p.fakeBackend.Generate(ctx, req)
}

// nodeItem and nodeResponse are what testdata/sdk/responses.mjs prints of a Response.
type nodeItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	Text      string `json:"text"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type nodeResponse struct {
	ID         string         `json:"id"`
	Object     string         `json:"object"`
	Status     string         `json:"status"`
	Model      string         `json:"model"`
	OutputText string         `json:"output_text"`
	Items      []nodeItem     `json:"items"`
	Usage      map[string]any `json:"usage"`
	Error      any            `json:"error"`
}

// TestNodeSDKResponses runs the official `openai` npm package's Responses client
// (testdata/sdk/responses.mjs) against the gateway: with tools, streaming and not, a
// function_call_output turn, a JSON schema, an error.
func TestNodeSDKResponses(t *testing.T) {
	modules := nodeModulesWith(t, "openai")
	b := &pickBackend{fakeBackend: agentBackend(), pick: func(prompt string, so *messages.StructuredOutput) []step {
		switch {
		case so.GetJsonSchema() != "":
			return []step{tokens("<think>as JSON</think>"), finish(`{"city": "Paris", "temp": 24}`, "stop")}
		case strings.Contains(prompt, "<|im_start|>tool\n"):
			return []step{tokens("<think>Both known.</think>"), finish("Sunny, 24C.", "stop")}
		}
		return agentAnswer
	}}
	srv := httptest.NewServer(newTestServer(t, b))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound on a hung script, not a timing check
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "sdk", "responses.mjs"), srv.URL+"/v1")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var out struct {
		Create nodeResponse `json:"create"`
		Stream struct {
			Final          nodeResponse `json:"final"`
			Types          []string     `json:"types"`
			TextDeltas     string       `json:"text_deltas"`
			ArgumentDeltas string       `json:"argument_deltas"`
		} `json:"stream"`
		RawStream struct {
			Types           []string      `json:"types"`
			SequenceNumbers []int         `json:"sequence_numbers"`
			Completed       *nodeResponse `json:"completed"`
		} `json:"raw_stream"`
		ToolResultTurn nodeResponse `json:"tool_result_turn"`
		JSONSchema     struct {
			OutputText string `json:"output_text"`
			Parsed     struct {
				City string  `json:"city"`
				Temp float64 `json:"temp"`
			} `json:"parsed"`
			Format map[string]any `json:"format"`
		} `json:"json_schema"`
		Error *struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Param  string `json:"param"`
			Type   string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("output %s: %v", stdout, err)
	}

	want := []nodeItem{
		{Type: "reasoning", Text: "\nThe user wants weather.\n"},
		{Type: "message", Status: "completed", Text: "\n\nLet me check."},
		{Type: "function_call", Status: "completed", CallID: "call-0", Name: "get_weather", Arguments: `{"city": "Paris"}`},
		{Type: "function_call", Status: "completed", CallID: "call-1", Name: "get_time", Arguments: `{"tz": "CET"}`},
	}
	// check checks a Response; the SDK adds output_text to those it parses (not to the
	// raw events' ones).
	check := func(name string, r nodeResponse, outputText string) {
		t.Helper()
		items := append([]nodeItem(nil), r.Items...)
		for i := range items {
			items[i].ID = ""
		}
		if r.Object != "response" || r.Status != "completed" || r.Model != "agent" || r.OutputText != outputText ||
			!reflect.DeepEqual(items, want) || r.Usage["total_tokens"] == nil || r.Error != nil {
			t.Errorf("%s: %+v", name, r)
		}
	}
	check("create", out.Create, "\n\nLet me check.")
	check("stream", out.Stream.Final, "\n\nLet me check.")
	if out.RawStream.Completed == nil {
		t.Fatalf("raw stream: no response.completed in %v", out.RawStream.Types)
	}
	check("raw stream", *out.RawStream.Completed, "")
	if n := len(out.Stream.Types); n < 4 || out.Stream.Types[0] != "response.created" || out.Stream.Types[n-1] != "response.completed" ||
		out.Stream.TextDeltas != "\n\nLet me check." || out.Stream.ArgumentDeltas != `{"city": "Paris"}{"tz": "CET"}` {
		t.Errorf("stream events %v, text %q, arguments %q", out.Stream.Types, out.Stream.TextDeltas, out.Stream.ArgumentDeltas)
	}
	for i, s := range out.RawStream.SequenceNumbers {
		if s != i {
			t.Fatalf("sequence numbers %v", out.RawStream.SequenceNumbers)
		}
	}
	if r := out.ToolResultTurn; r.OutputText != "Sunny, 24C." || len(r.Items) != 2 || r.Items[0].Text != "Both known." {
		t.Errorf("tool result turn: %+v", r)
	}
	if j := out.JSONSchema; j.Parsed.City != "Paris" || j.Parsed.Temp != 24 || j.Format["type"] != "json_schema" || j.Format["name"] != "weather" {
		t.Errorf("json schema: %+v", j)
	}
	if e := out.Error; e == nil || e.Status != 400 || e.Code != "unsupported_parameter" || e.Param != "previous_response_id" || e.Type != "invalid_request_error" {
		t.Errorf("error: %+v", e)
	}
	// The tool result turn reached the template: both outputs, after the calls' turn.
	var turn string
	for _, g := range b.generated() {
		p := fakeTokenizer{}.Decode(g.TokenIDs)
		if strings.Contains(p, "<|im_start|>tool\n") {
			turn = p
		}
	}
	for _, s := range []string{`tool` + "\n" + `{"result":"of get_weather"}`, `tool` + "\n" + `{"result":"of get_time"}`, "assistant\n\n\nLet me check."} {
		if !strings.Contains(turn, s) {
			t.Errorf("the tool result turn's prompt lacks %q:\n%s", s, turn)
		}
	}
}
