package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/model"
)

// The official Anthropic TypeScript SDK against the Messages API over HTTP
// (testdata/sdk/anthropic.mjs): proof that the shapes we write are the ones Anthropic's
// clients parse, streaming and not, with tools.

// npmModules is where scripts/fixtures.sh installs the npm packages:
// ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules.
func npmModules(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("TURBINE_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("no cache folder for the npm packages: %v", err)
		}
		cache = filepath.Join(home, ".cache", "turbine")
	}
	return filepath.Join(cache, "npm", "node_modules")
}

// qwen3Preprocessor is the fake ChatML template with Qwen3's treatment of
// enable_thinking false: the generation prompt holds an empty thinking block, so the
// qwen3 reasoning parser reads the answer as content.
type qwen3Preprocessor struct{ fakePreprocessor }

func (p qwen3Preprocessor) RenderChat(in model.ChatTemplateInput) (string, error) {
	s, err := p.fakePreprocessor.RenderChat(in)
	if on, set := in.Kwargs["enable_thinking"].(bool); err == nil && set && !on && in.AddGenerationPrompt {
		s += "<think>\n\n</think>\n\n"
	}
	return s, err
}

// sdkAgentBackend answers as a Qwen3-style model would, from the prompt: a tool call
// (hermes syntax) when tools are offered, the JSON a forced call is constrained to, an
// answer in text after a tool result, and a greeting otherwise; thinking first unless
// the prompt turned it off. A prompt saying FAIL gets an engine failure mid-answer.
type sdkAgentBackend struct{ *fakeBackend }

func (b sdkAgentBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	prompt := fakeTokenizer{}.Decode(req.TokenIDs)
	think := func(s string) string {
		if strings.HasSuffix(prompt, "</think>\n\n") {
			return ""
		}
		return "<think>\n" + s + "\n</think>\n\n"
	}
	var answer string
	switch schema := req.Sampling.GetStructured().GetJsonSchema(); {
	case strings.Contains(prompt, "FAIL"):
		answer = "FAIL"
	case strings.HasPrefix(schema, `{"type":"array"`):
		answer = think("A tool must be called.") + `[{"name": "get_weather", "parameters": {"city": "Paris"}}]`
	case schema != "":
		answer = think("The time, then.") + `{"tz": "Europe/Paris"}`
	case strings.Contains(prompt, "<|im_start|>tool\n"):
		answer = think("The tool answered.") + "It is 18 C and sunny in Paris."
	case strings.Contains(prompt, "# Tools"):
		answer = think("The user wants the weather.") + "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	default:
		answer = think("A greeting.") + "Hello! How can I help?"
	}
	var steps []step
	if answer == "FAIL" {
		steps = []step{tokens("Hel"), chunk(nil, "error", "engine died")}
	} else {
		for len(answer) > 7 {
			steps = append(steps, tokens(answer[:7]))
			answer = answer[7:]
		}
		steps = append(steps, finish(answer, "stop"))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = append(b.requests, req)
	s := &fakeStream{steps: steps, worker: "worker-a", closed: make(chan struct{})}
	b.streams = append(b.streams, s)
	return s, nil
}

// sdkMessage is a message as the script prints it.
type sdkMessage struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens          int `json:"input_tokens"`
		OutputTokens         int `json:"output_tokens"`
		CacheReadInputTokens int `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Content []struct {
		Type      string         `json:"type"`
		Text      string         `json:"text"`
		Thinking  string         `json:"thinking"`
		Signature *string        `json:"signature"`
		ID        string         `json:"id"`
		Name      string         `json:"name"`
		Input     map[string]any `json:"input"`
	} `json:"content"`
}

// types lists the message's block types.
func (m sdkMessage) types() string {
	var t []string
	for _, b := range m.Content {
		t = append(t, b.Type)
	}
	return strings.Join(t, ",")
}

// block returns the message's first block of type typ.
func (m sdkMessage) block(typ string) (i int, ok bool) {
	for i, b := range m.Content {
		if b.Type == typ {
			return i, true
		}
	}
	return -1, false
}

type sdkFailure struct {
	Thrown bool   `json:"thrown"`
	Class  string `json:"class"`
	Status int    `json:"status"`
	Type   string `json:"type"`
}

func TestAnthropicSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs node")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the Anthropic SDK test needs Node.js (Debian: apt-get install nodejs)")
	}
	modules := npmModules(t)
	if _, err := os.Stat(filepath.Join(modules, "@anthropic-ai", "sdk", "package.json")); err != nil {
		t.Skipf("@anthropic-ai/sdk is not installed under %s: run scripts/fixtures.sh", modules)
	}
	const key = "sk-ant-test"
	b := sdkAgentBackend{agentBackend()}
	// The gateway's own tool call ids, which the answer shows as Anthropic's toolu_ ids.
	s, err := New(Config{Now: func() time.Time { return testTime }, APIKeys: []string{key}}, b,
		append(fakeOptions(qwen3Preprocessor{fakePreprocessor{eos: []uint32{fakeEOS}}}), WithToolCallIDs(newToolCallID))...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	// A bound, not a timing assertion: the script makes about fifteen requests.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "sdk", "anthropic.mjs"), srv.URL, key)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var out struct {
		Auto        sdkMessage `json:"auto"`
		Any         sdkMessage `json:"any"`
		Tool        sdkMessage `json:"tool"`
		None        sdkMessage `json:"none"`
		ResultTurn  sdkMessage `json:"result_turn"`
		ThinkingOn  sdkMessage `json:"thinking_on"`
		ThinkingOff sdkMessage `json:"thinking_off"`
		Stream      struct {
			Message         sdkMessage `json:"message"`
			Text            string     `json:"text"`
			Thinking        string     `json:"thinking"`
			InputJSONEvents int        `json:"input_json_events"`
			Events          []string   `json:"events"`
		} `json:"stream"`
		RawStream struct {
			Events []string `json:"events"`
			Text   string   `json:"text"`
		} `json:"raw_stream"`
		Count struct {
			InputTokens int `json:"input_tokens"`
		} `json:"count"`
		Models []struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		} `json:"models"`
		Model struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"model"`
		UnknownModelInfo sdkFailure `json:"unknown_model_info"`
		UnknownModel     sdkFailure `json:"unknown_model"`
		BadRequest       sdkFailure `json:"bad_request"`
		WrongKey         sdkFailure `json:"wrong_key"`
		StreamFailure    sdkFailure `json:"stream_failure"`
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("script output %s: %v", stdout, err)
	}

	// Tools, auto: thinking, text, then the call, as Anthropic orders blocks.
	m := out.Auto
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "agent" ||
		m.types() != "thinking,text,tool_use" || m.StopReason != "tool_use" || m.StopSequence != nil ||
		m.Usage.InputTokens+m.Usage.CacheReadInputTokens == 0 || m.Usage.OutputTokens == 0 {
		t.Errorf("auto: %+v", m)
	} else {
		use := m.Content[2]
		if !strings.HasPrefix(use.ID, "toolu_") || use.Name != "get_weather" || use.Input["city"] != "Paris" ||
			strings.TrimSpace(m.Content[1].Text) != "Let me check." || strings.TrimSpace(m.Content[0].Thinking) != "The user wants the weather." || m.Content[0].Signature == nil {
			t.Errorf("auto blocks: %+v", m.Content)
		}
	}
	if i, ok := out.Any.block("tool_use"); !ok || out.Any.Content[i].Name != "get_weather" || out.Any.Content[i].Input["city"] != "Paris" || out.Any.StopReason != "tool_use" {
		t.Errorf("tool_choice any: %+v", out.Any)
	}
	if i, ok := out.Tool.block("tool_use"); !ok || out.Tool.Content[i].Name != "get_time" || out.Tool.Content[i].Input["tz"] != "Europe/Paris" || out.Tool.StopReason != "tool_use" {
		t.Errorf("tool_choice tool: %+v", out.Tool)
	}
	if _, ok := out.None.block("tool_use"); ok || out.None.StopReason != "end_turn" {
		t.Errorf("tool_choice none: %+v", out.None)
	}
	if i, ok := out.ResultTurn.block("text"); !ok || strings.TrimSpace(out.ResultTurn.Content[i].Text) != "It is 18 C and sunny in Paris." || out.ResultTurn.StopReason != "end_turn" {
		t.Errorf("tool result turn: %+v", out.ResultTurn)
	}
	if out.ThinkingOn.types() != "thinking,text" || out.ThinkingOff.types() != "text" || out.ThinkingOff.Content[0].Text != "Hello! How can I help?" {
		t.Errorf("thinking on: %+v, off: %+v", out.ThinkingOn, out.ThinkingOff)
	}

	// messages.stream accumulates the same message as create.
	st := out.Stream
	if st.Message.types() != "thinking,text,tool_use" || st.Message.StopReason != "tool_use" || st.Text != st.Message.Content[1].Text ||
		st.Thinking != st.Message.Content[0].Thinking || st.InputJSONEvents == 0 || st.Message.Content[2].Input["city"] != "Paris" {
		t.Errorf("stream: %+v", st)
	}
	if n := len(st.Events); n < 4 || st.Events[0] != "message_start" || st.Events[n-2] != "message_delta" || st.Events[n-1] != "message_stop" {
		t.Errorf("stream events %v", st.Events)
	}
	if rs := out.RawStream; rs.Text != "Hello! How can I help?" || strings.Join(rs.Events, " ") !=
		"message_start content_block_start "+strings.Repeat("content_block_delta ", len(rs.Events)-5)+"content_block_stop message_delta message_stop" {
		t.Errorf("raw stream: %+v", rs)
	}

	// count_tokens counts the prompt the first request sent.
	if out.Count.InputTokens == 0 || out.Count.InputTokens != out.Auto.Usage.InputTokens+out.Auto.Usage.CacheReadInputTokens {
		t.Errorf("count_tokens %d, the message's prompt %d", out.Count.InputTokens, out.Auto.Usage.InputTokens+out.Auto.Usage.CacheReadInputTokens)
	}

	// models.list pages through every model served, in Anthropic's shape.
	var ids []string
	for _, m := range out.Models {
		ids = append(ids, m.ID)
		if m.Type != "model" || m.DisplayName != m.ID || m.CreatedAt != testTime.UTC().Format(time.RFC3339) {
			t.Errorf("models.list: %+v", m)
		}
	}
	cards, _ := b.Models(context.Background())
	var want []string
	for _, c := range cards {
		want = append(want, c.GetModel())
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("models.list, one a page: %v, want %v", ids, want)
	}
	if out.Model.Type != "model" || out.Model.ID != "agent" {
		t.Errorf("models.retrieve: %+v", out.Model)
	}

	for name, c := range map[string]struct {
		got  sdkFailure
		want sdkFailure
	}{
		"unknown model info": {out.UnknownModelInfo, sdkFailure{true, "NotFoundError", 404, "not_found_error"}},
		"unknown model":      {out.UnknownModel, sdkFailure{true, "NotFoundError", 404, "not_found_error"}},
		"bad request":        {out.BadRequest, sdkFailure{true, "BadRequestError", 400, "invalid_request_error"}},
		"wrong key":          {out.WrongKey, sdkFailure{true, "AuthenticationError", 401, "authentication_error"}},
		"stream failure":     {out.StreamFailure, sdkFailure{Thrown: true, Class: "APIError", Type: "api_error"}},
	} {
		if c.got != c.want {
			t.Errorf("%s: %+v, want %+v", name, c.got, c.want)
		}
	}

	// The tool result reached the template after the assistant's call.
	found := false
	for _, g := range b.generated() {
		found = found || strings.Contains(fakeTokenizer{}.Decode(g.TokenIDs), "<|im_start|>tool\n18 C, sunny<|im_end|>")
	}
	if !found {
		t.Errorf("no prompt carried the tool result")
	}
	b.checkClosed(t)
}
