package persona

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
)

// offered is a fixture's tools as the request gave them: the parsers' options and each
// parameters schema compiled.
type offered struct {
	tools   []parse.Tool
	schemas map[string]*jsonschema.Schema
}

func loadOffered(t *testing.T, file string) offered {
	t.Helper()
	o := offered{schemas: map[string]*jsonschema.Schema{}}
	if file == "" {
		return o
	}
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(toolsJSON(t, file), &tools); err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if len(tl.Function.Parameters) == 0 { // a function without parameters
			tl.Function.Parameters = json.RawMessage(`{"type": "object", "properties": {}}`)
		}
		var params map[string]any
		if err := json.Unmarshal(tl.Function.Parameters, &params); err != nil {
			t.Fatal(err)
		}
		o.tools = append(o.tools, parse.Tool{Name: tl.Function.Name, Parameters: params})
		o.schemas[tl.Function.Name] = compileSchema(t, tl.Function.Parameters)
	}
	return o
}

// parsed runs Plan's answer through the gateway's parsers of the family, fed whole and
// fed in chunks of 1 to 7 bytes, and returns the result (the same both ways).
func parsed(t *testing.T, in Input, o offered) (parse.Result, int) {
	t.Helper()
	out := Plan(in)
	opts := parse.Options{Tools: o.tools, Prompt: in.Prompt}
	mk := func() parse.Parser {
		var rp, tp parse.Parser
		var err error
		if in.ReasoningParser != "" {
			if rp, err = parse.NewReasoningParser(in.ReasoningParser, opts); err != nil {
				t.Fatal(err)
			}
		}
		if in.ToolParser != "" {
			if tp, err = parse.NewToolParser(in.ToolParser, opts); err != nil {
				t.Fatal(err)
			}
		}
		return parse.Chain(rp, tp)
	}
	var results []parse.Result
	var malformed int
	for _, step := range []int{len(out) + 1, 1, 7} {
		p := mk()
		var evs []parse.Event
		for i := 0; i < len(out); {
			n := min(step, len(out)-i)
			if step == 7 {
				n = min(1+i%7, len(out)-i)
			}
			evs = p.Push(out[i:i+n], evs)
			i += n
		}
		evs = p.Finish(evs)
		results = append(results, parse.Collect(evs))
		malformed = p.Malformed()
	}
	for _, r := range results[1:] {
		if r.Content != results[0].Content || r.Reasoning != results[0].Reasoning || !slices.Equal(r.Calls, results[0].Calls) {
			t.Fatalf("answer %q parses differently in chunks:\n%+v\n%+v", out, results[0], r)
		}
	}
	return results[0], malformed
}

// TestRoundTrip: every tool-call format the gateway parses, with every reasoning format
// and with none, on every fixture conversation and several seeds: Plan's answer parses
// back without malformed calls into calls to tools the prompt offers, whose arguments
// are valid against the tool's schema; after a tool result and without tools into text;
// thinking into reasoning where the template left thinking on.
func TestRoundTrip(t *testing.T) {
	for _, tp := range parse.ToolParserNames() {
		for _, rp := range append([]string{""}, parse.ReasoningParserNames()...) {
			t.Run(tp+"+"+rp, func(t *testing.T) {
				for _, c := range loadChats(t) {
					p := prompt(t, c.Name)
					o := loadOffered(t, c.Tools)
					conv := readConversation(p)
					for seed := range uint64(3) {
						in := Input{ToolParser: tp, ReasoningParser: rp, Prompt: p, Seed: seed}
						r, malformed := parsed(t, in, o)
						if malformed != 0 {
							t.Fatalf("%s seed %d: %d malformed calls in %q: %+v", c.Name, seed, malformed, Plan(in), r)
						}
						switch {
						case conv.afterTool || len(o.tools) == 0:
							if len(r.Calls) > 0 || !strings.Contains(r.Content, ".") {
								t.Fatalf("%s seed %d: want a text answer, got %+v from %q", c.Name, seed, r, Plan(in))
							}
						default:
							if len(r.Calls) == 0 || strings.TrimSpace(r.Content) != "" {
								t.Fatalf("%s seed %d: want calls only, got %+v from %q", c.Name, seed, r, Plan(in))
							}
							for _, call := range r.Calls {
								sch, ok := o.schemas[call.Name]
								if !ok {
									t.Fatalf("%s seed %d: call to %s, not offered", c.Name, seed, call.Name)
								}
								validate(t, sch, call.Arguments)
							}
						}
						// The template switches a thinking block off with its closing tag;
						// harmony always has its analysis message.
						st, blocks := thinkStyles[rp]
						thinks := rp != "" && (tp == harmonyTool || !(blocks && strings.HasSuffix(strings.TrimSpace(p), st.close)))
						if thinks != (r.Reasoning != "") {
							t.Fatalf("%s seed %d: reasoning %q, want some: %v (answer %q)", c.Name, seed, r.Reasoning, thinks, Plan(in))
						}
					}
				}
			})
		}
	}
}

// TestRoundTripStructured: tool_choice "required" and a named function arrive as a JSON
// schema constraint; the answer parses back with the gateway's NewRequiredCalls and
// NewNamedCall into valid calls.
func TestRoundTripStructured(t *testing.T) {
	o := loadOffered(t, "tools.json")
	p := prompt(t, "qwen3_tools")
	for seed := range uint64(16) {
		out := Plan(Input{Prompt: p, Structured: structuredJSON(requiredSchema(t)), Seed: seed})
		pr := parse.NewRequiredCalls(parse.Options{Tools: o.tools})
		r := parse.Collect(pr.Finish(pr.Push(out, nil)))
		if pr.Malformed() != 0 || len(r.Calls) == 0 {
			t.Fatalf("seed %d: required calls %q parse to %+v", seed, out, r)
		}
		for _, call := range r.Calls {
			validate(t, o.schemas[call.Name], call.Arguments)
		}
		for _, tl := range o.tools {
			raw, _ := json.Marshal(tl.Parameters)
			out := Plan(Input{Prompt: p, Structured: structuredJSON(string(raw)), Seed: seed})
			pn := parse.NewNamedCall(tl.Name, parse.Options{Tools: o.tools})
			r := parse.Collect(pn.Finish(pn.Push(out, nil)))
			if pn.Malformed() != 0 || len(r.Calls) != 1 || r.Calls[0].Name != tl.Name {
				t.Fatalf("seed %d: named call %q parses to %+v", seed, out, r)
			}
			validate(t, o.schemas[tl.Name], r.Calls[0].Arguments)
		}
	}
}

func structuredJSON(schema string) *messages.StructuredOutput {
	return &messages.StructuredOutput{JsonSchema: schema}
}

// TestRoundTripReasoning: every reasoning format the gateway parses, without a tool
// parser: the thinking block parses back into reasoning, the rest into content.
func TestRoundTripReasoning(t *testing.T) {
	for _, rp := range parse.ReasoningParserNames() {
		for _, name := range []string{"qwen3_plain", "llama3_1_plain", "qwen3_tool_result", "llama3_1_json_tool_result"} {
			in := Input{ReasoningParser: rp, Prompt: prompt(t, name), Seed: 5}
			r, malformed := parsed(t, in, offered{})
			if malformed != 0 || r.Reasoning == "" || !strings.HasSuffix(r.Content, ".") || len(r.Calls) > 0 {
				t.Fatalf("%s on %s: %q parses to %+v (malformed %d)", rp, name, Plan(in), r, malformed)
			}
		}
	}
}
