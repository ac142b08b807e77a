package persona

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
)

// TestConversation: the last turn is read in every family's format: whether it is a
// tool result, the user's question and the result's text.
func TestConversation(t *testing.T) {
	for _, c := range []struct {
		name, prompt string
		afterTool    bool
		user, result string // substrings expected
	}{
		{"raw completion", "Once upon a time", false, "", ""},
		{"chatml question", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", false, "Hi there", ""},
		{"qwen3 result in a user turn", "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny 21\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
			true, "Weather?", "sunny 21"},
		{"qwen3 question after a result", "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\nOK<|im_end|>\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n",
			false, "And tomorrow?", "sunny"},
		{"llama 3.1 ipython", "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"output\": \"rain\"}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
			true, "Weather?", "rain"},
		{"llama 4 tool", "<|header_start|>user<|header_end|>\n\nQ?<|eot|><|header_start|>tool<|header_end|>\n\nfog<|eot|><|header_start|>assistant<|header_end|>\n\n", true, "Q?", "fog"},
		{"harmony", "<|start|>user<|message|>Weather in SF?<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"sunny\": true}<|end|><|start|>assistant",
			true, "Weather in SF?", `{"sunny": true}`},
		{"deepseek", "<｜User｜>Q?<｜Assistant｜><｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>snow<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
			true, "Q?", "snow"},
		{"mistral", "[INST]Q?[/INST][TOOL_CALLS][]</s>[TOOL_RESULTS]{\"content\": 5}[/TOOL_RESULTS]", true, "Q?", `{"content": 5}`},
		{"glm-4.5", "<|user|>\nQ?<|assistant|>\n<tool_call>f\n</tool_call><|observation|>\n<tool_response>\nhail\n</tool_response><|assistant|>", true, "Q?", "hail"},
		{"kimi k2", "<|im_user|>user<|im_middle|>Q?<|im_end|><|im_assistant|>assistant<|im_middle|>x<|im_end|><|im_system|>tool<|im_middle|>## Return of functions.f:0\nsleet<|im_end|><|im_assistant|>assistant<|im_middle|>",
			true, "Q?", "sleet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv := readConversation(c.prompt)
			if conv.afterTool != c.afterTool || !strings.Contains(conv.user, c.user) || !strings.Contains(conv.result, c.result) {
				t.Fatalf("read %+v, want after tool %v, user with %q, result with %q", conv, c.afterTool, c.user, c.result)
			}
		})
	}
}

// TestThinking: the thinking block follows the family's syntax and what the template
// already wrote at the end of the prompt.
func TestThinking(t *testing.T) {
	const q = "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
	for _, c := range []struct {
		name, reasoning, prompt string
		prefix                  string // the answer starts with it
		has                     string // and holds it ("" for nothing)
		lacks                   []string
	}{
		{"qwen3 on", "qwen3", q, "<think>\n", "\n</think>\n\n", nil},
		{"qwen3 off", "qwen3", q + "<think>\n\n</think>\n\n", "", "", []string{"<think>", "</think>"}},
		{"deepseek r1 opened", "deepseek_r1", "<｜User｜>Why?<｜Assistant｜><think>\n", "", "\n</think>\n\n", []string{"<think>"}},
		{"deepseek v3.1 off", "deepseek_r1", "<｜User｜>Why?<｜Assistant｜></think>", "", "", []string{"<think>", "</think>"}},
		{"glm-4.5 off", "glm45", "<|user|>\nWhy?<|assistant|>\n<think></think>", "", "", []string{"<think>", "</think>"}},
		{"kimi k2", "kimi_k2", "<|im_user|>user<|im_middle|>Why?<|im_end|><|im_assistant|>assistant<|im_middle|>", "<think>\n", "</think>", nil},
		{"mistral", "mistral", "[INST]Why?[/INST]", "[THINK]", "[/THINK]", nil},
		{"mistral opened", "mistral", "[INST]Why?[/INST][THINK]", "", "[/THINK]", []string{"[THINK]"}},
		{"gpt-oss", "openai_gptoss", "<|start|>user<|message|>Why?<|end|><|start|>assistant", "<|channel|>analysis<|message|>",
			"<|end|><|start|>assistant<|channel|>final<|message|>", nil},
		{"none", "", q, "", "", []string{"<think>", "</think>"}},
		{"unknown parser", "nonesuch", q, "", "", []string{"<think>", "</think>"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(Input{ReasoningParser: c.reasoning, Prompt: c.prompt, Seed: 3})
			if !strings.HasPrefix(got, c.prefix) || !strings.Contains(got, c.has) {
				t.Fatalf("answer %q: want it to start with %q and hold %q", got, c.prefix, c.has)
			}
			for _, l := range c.lacks {
				if strings.Contains(got, l) {
					t.Fatalf("answer %q holds %q", got, l)
				}
			}
			if c.has != "" && !strings.Contains(got, "Why") {
				t.Fatalf("the thinking of %q does not mention the question", got)
			}
		})
	}
}

// TestDecisions: what each fixture conversation gets, over many seeds: a tool result is
// answered in text that quotes it, a question with tools with one call (sometimes two)
// to a tool the prompt offers, a question without tools in text; the same seed always
// gives the same answer and seeds vary it.
func TestDecisions(t *testing.T) {
	call := regexp.MustCompile(`<tool_call>\n\{"name": "([a-z_]+)", "arguments": \{`)
	for _, c := range loadChats(t) {
		t.Run(c.Name, func(t *testing.T) {
			p := prompt(t, c.Name)
			offered := names(findTools(p))
			conv := readConversation(p)
			afterTool, quoted := conv.afterTool, words(conv.result, 3)
			seen, twice := map[string]bool{}, 0
			for seed := range uint64(64) {
				in := Input{ToolParser: "hermes", ReasoningParser: "qwen3", Prompt: p, Seed: seed}
				got := Plan(in)
				if Plan(in) != got {
					t.Fatalf("seed %d: two answers", seed)
				}
				seen[got] = true
				calls := call.FindAllStringSubmatch(got, -1)
				switch {
				case afterTool:
					if len(calls) > 0 || len(quoted) < 3 || !strings.Contains(got, strings.Join(quoted, " ")) {
						t.Fatalf("seed %d: the answer to a tool result %q calls or does not quote %q", seed, got, quoted)
					}
				case len(offered) > 0:
					if len(calls) == 0 || len(calls) > 2 {
						t.Fatalf("seed %d: %d calls in %q", seed, len(calls), got)
					}
					for _, m := range calls {
						if !slices.Contains(offered, m[1]) {
							t.Fatalf("seed %d: call to %s, not among %v", seed, m[1], offered)
						}
					}
					if len(calls) == 2 {
						twice++
					}
				default:
					if len(calls) > 0 || strings.Contains(got, "<tool_call>") {
						t.Fatalf("seed %d: a call without tools: %q", seed, got)
					}
				}
			}
			if len(seen) < 2 {
				t.Fatalf("64 seeds gave one answer")
			}
			if len(offered) > 0 && !afterTool && (twice == 0 || twice > 32) {
				t.Fatalf("%d of 64 answers made two calls, want some, fewer than half", twice)
			}
		})
	}
}

// TestToolChoice: a question naming a tool calls it ("weather" → get_weather).
func TestToolChoice(t *testing.T) {
	p := prompt(t, "qwen3_tool_result_then_user") // "Then find me a flight ..."
	for seed := range uint64(16) {
		got := Plan(Input{ToolParser: "hermes", Prompt: p, Seed: seed})
		if !strings.HasPrefix(got, "<tool_call>\n{\"name\": \"search_flights\"") {
			t.Fatalf("seed %d: %q does not call search_flights first", seed, got)
		}
	}
}

func names(ts []tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}

// TestStructured: a constraint is answered with an instance of it, after the thinking
// block when there is one; what the generator cannot satisfy gets plain text.
func TestStructured(t *testing.T) {
	const schema = `{"type":"object","properties":{"answer":{"type":"string","minLength":3},"score":{"type":"integer","minimum":1,"maximum":5}},"required":["answer","score"],"additionalProperties":false}`
	sch := compileSchema(t, []byte(schema))
	p := prompt(t, "qwen3_plain")
	for _, c := range []struct {
		name  string
		so    *messages.StructuredOutput
		check func(t *testing.T, out string)
	}{
		{"json schema", &messages.StructuredOutput{JsonSchema: schema}, func(t *testing.T, out string) { validate(t, sch, out) }},
		{"json object", &messages.StructuredOutput{JsonObject: true}, func(t *testing.T, out string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
		}},
		{"choice", &messages.StructuredOutput{Choice: []string{"red", "green", "blue"}}, func(t *testing.T, out string) {
			if !slices.Contains([]string{"red", "green", "blue"}, out) {
				t.Fatalf("%q is not a choice", out)
			}
		}},
		{"regex", &messages.StructuredOutput{Regex: `[A-Z]{2}-\d{3}`}, func(t *testing.T, out string) {
			if !regexp.MustCompile(`^[A-Z]{2}-\d{3}$`).MatchString(out) {
				t.Fatalf("%q does not match", out)
			}
		}},
		{"regex refused: text", &messages.StructuredOutput{Regex: `(a)\1`}, func(t *testing.T, out string) {
			if !strings.HasSuffix(out, ".") {
				t.Fatalf("%q is not the text answer", out)
			}
		}},
		{"grammar: text", &messages.StructuredOutput{Grammar: `root ::= "a"`}, func(t *testing.T, out string) {
			if !strings.HasSuffix(out, ".") {
				t.Fatalf("%q is not the text answer", out)
			}
		}},
		{"tool_choice required", &messages.StructuredOutput{JsonSchema: requiredSchema(t)}, func(t *testing.T, out string) {
			validate(t, compileSchema(t, []byte(requiredSchema(t))), out)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(16) {
				plain := Plan(Input{Prompt: p, Structured: c.so, Seed: seed})
				c.check(t, plain)
				thought := Plan(Input{ToolParser: "hermes", ReasoningParser: "qwen3", Prompt: p, Structured: c.so, Seed: seed})
				body, ok := strings.CutPrefix(thought, "<think>\n")
				_, after, found := strings.Cut(body, "\n</think>\n\n")
				if !ok || !found {
					t.Fatalf("no thinking block before the instance: %q", thought)
				}
				c.check(t, after)
			}
		})
	}
}

// requiredSchema is the gateway's schema for tool_choice "required" over the tools of
// testdata/tools.json.
func requiredSchema(t *testing.T) string {
	t.Helper()
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(toolsJSON(t, "tools.json"), &tools); err != nil {
		t.Fatal(err)
	}
	var ts []parse.ToolSchema
	for _, tl := range tools {
		ts = append(ts, parse.ToolSchema{Name: tl.Function.Name, Parameters: tl.Function.Parameters})
	}
	s, err := parse.RequiredSchema(ts)
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

// TestContinuation: a prompt followed by the first k bytes of its answer (a stream
// resumed on another engine) is answered with the rest of the same answer, for every
// k, in every family's layout: thinking on, off or opened by the template, harmony's
// messages.
func TestContinuation(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    Input
		chats string
	}{
		{"hermes qwen3", Input{ToolParser: "hermes", ReasoningParser: "qwen3"}, "qwen3_tools"},
		{"hermes qwen3 thinking off", Input{ToolParser: "hermes", ReasoningParser: "qwen3"}, "qwen3_tools_no_thinking"},
		{"tool result", Input{ToolParser: "hermes", ReasoningParser: "qwen3"}, "qwen3_tool_result"},
		{"harmony", Input{ToolParser: "openai", ReasoningParser: "openai_gptoss"}, "llama3_1_json_tools"},
		{"deepseek v3.1 closed", Input{ToolParser: "deepseek_v31", ReasoningParser: "deepseek_r1"}, "deepseek_v31_tools"},
		{"pythonic mistral", Input{ToolParser: "pythonic", ReasoningParser: "mistral"}, "llama3_1_json_tools"},
		{"r1 opened", Input{ReasoningParser: "deepseek_r1", Prompt: "<｜User｜>Why is the sky blue?<｜Assistant｜><think>\n"}, ""},
		{"structured", Input{ReasoningParser: "qwen3", Structured: &messages.StructuredOutput{JsonSchema: requiredSchema(t)}}, "qwen3_plain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			if c.chats != "" {
				in.Prompt = prompt(t, c.chats)
			}
			for seed := range uint64(2) {
				in.Seed = seed
				full := Plan(in)
				for k := 0; k <= len(full); k++ {
					if !utf8.ValidString(full[:k]) {
						continue // a decoded prompt never ends inside a character
					}
					resumed := in
					resumed.Prompt = in.Prompt + full[:k]
					if got := Plan(resumed); got != full[k:] {
						t.Fatalf("seed %d, resumed after %q:\n got %q\nwant %q", seed, full[:k], got, full[k:])
					}
				}
			}
		})
	}
}

// TestCoverage: the mock engine writes every format the gateway parses.
func TestCoverage(t *testing.T) {
	for _, n := range parse.ToolParserNames() {
		if !slices.Contains(ToolParsers(), n) {
			t.Errorf("gateway/parse reads tool calls of %q, which Plan does not write", n)
		}
	}
	for _, n := range parse.ReasoningParserNames() {
		if !slices.Contains(ReasoningParsers(), n) {
			t.Errorf("gateway/parse reads reasoning of %q, which Plan does not write", n)
		}
	}
}

// BenchmarkPlan plans an answer to the Qwen3 tools prompt with a long conversation
// before it (about 32k tokens of text).
func BenchmarkPlan(b *testing.B) {
	data := prompt(&testing.T{}, "qwen3_tools")
	head, tail, _ := strings.Cut(data, "<|im_start|>user\n")
	filler := strings.Repeat("<|im_start|>user\nTell me about the history of bridges, {in detail}.<|im_end|>\n<|im_start|>assistant\nBridges were built of wood and stone; {\"a\": 1} shows JSON.<|im_end|>\n", 1000)
	in := Input{ToolParser: "hermes", ReasoningParser: "qwen3", Prompt: head + filler + "<|im_start|>user\n" + tail}
	b.SetBytes(int64(len(in.Prompt)))
	b.ReportAllocs()
	for b.Loop() {
		in.Seed++
		Plan(in)
	}
}
