package gateway

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// Events of a parsed answer, for the rendering tests.
func evContent(s string) parse.Event   { return parse.Event{Kind: parse.KindContent, Text: s} }
func evReasoning(s string) parse.Event { return parse.Event{Kind: parse.KindReasoning, Text: s} }
func evArgs(i int, s string) parse.Event {
	return parse.Event{Kind: parse.KindToolArgs, Index: i, Text: s}
}
func evCall(i int, id, name string) parse.Event {
	return parse.Event{Kind: parse.KindToolCall, Index: i, ID: id, Name: name}
}

// renderCase is one answer rendered as a Responses stream and as a body.
type renderCase struct {
	name string
	// body is the request (its fields are repeated in the Response).
	body string
	// batches go through streamEvents one by one; last is the finishing chunk's events.
	batches [][]parse.Event
	last    []parse.Event
	finish  string
	// fail ends the stream with a failure instead (no body is rendered).
	fail *APIError
	// reordered: the stream's items follow the model's order, which the body (reasoning,
	// text, calls) does not.
	reordered bool
}

const (
	renderPlain = `{"model":"tiny","input":"hi"}`
	renderTools = `{"model":"tiny","input":"weather?","instructions":"be brief","max_output_tokens":50,"temperature":0.5,"metadata":{"k":"v"},` +
		`"tools":[{"type":"function","name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}],` +
		`"reasoning":{"effort":"low"}}`
)

var renderCases = []renderCase{
	{name: "text", body: renderPlain, batches: [][]parse.Event{{evContent("Hel")}, {evContent("lo")}}, last: []parse.Event{evContent(" world")}, finish: "stop"},
	{name: "reasoning_text", body: renderTools,
		batches: [][]parse.Event{{evReasoning("Let me")}, {evReasoning(" think.")}, {evContent("\n\n")}, {evContent("Paris is sunny.")}}, finish: "stop"},
	{name: "tool_calls", body: renderTools,
		batches: [][]parse.Event{{evReasoning("Two cities.")}, {evContent("\n\n")}, {evCall(0, "call_a", "get_weather")}, {evArgs(0, `{"city": `)},
			{evArgs(0, `"Paris"}`)}, {evContent("\n")}, {evCall(1, "call_b", "get_weather"), evArgs(1, `{"city": "Rome"}`)}},
		last: []parse.Event{evContent("\n")}, finish: "tool_calls"},
	{name: "text_then_call", body: renderTools,
		batches: [][]parse.Event{{evContent("Let me check.")}, {evCall(0, "call_a", "get_weather")}, {evArgs(0, `{"city":"Oslo"}`)}}, finish: "tool_calls"},
	{name: "batched", body: renderTools,
		batches: [][]parse.Event{{evReasoning("a"), evReasoning("b"), evContent("c"), evContent("d"), evCall(0, "call_a", "get_weather"), evArgs(0, `{"city"`), evArgs(0, `:"X"}`)}},
		finish:  "tool_calls"},
	{name: "length", body: renderTools, batches: [][]parse.Event{{evReasoning("Long thought")}, {evContent("Partial")}}, finish: "length"},
	{name: "length_in_reasoning", body: renderPlain, batches: [][]parse.Event{{evReasoning("Still thinking")}}, finish: "length"},
	{name: "whitespace_only", body: renderPlain, batches: [][]parse.Event{{evContent("\n")}}, last: []parse.Event{evContent(" ")}, finish: "stop"},
	{name: "empty", body: renderPlain, finish: "stop"},
	{name: "text_after_call", body: renderTools, reordered: true,
		batches: [][]parse.Event{{evCall(0, "call_a", "get_weather")}, {evArgs(0, `{"city":"Oslo"}`)}, {evContent("<tool_call>{oops")}}, finish: "tool_calls"},
	{name: "failed", body: renderPlain, batches: [][]parse.Event{{evReasoning("Hmm")}, {evContent("Hel")}},
		fail: newError(KindEngineError, "", "The engine failed the request.")},
}

// renderStream renders c as a stream, as the generation path drives an answer.
func renderStream(t *testing.T, c renderCase) string {
	t.Helper()
	rr := httptest.NewRecorder()
	s, err := startSSE(rr)
	if err != nil {
		t.Fatal(err)
	}
	a := renderAnswer(t, c)
	if err := a.streamStart(s); err != nil {
		t.Fatal(err)
	}
	for _, b := range c.batches {
		if err := a.streamEvents(s, b); err != nil {
			t.Fatal(err)
		}
	}
	if c.fail != nil {
		if len(c.last) > 0 {
			t.Fatal("a failed case has no finishing events")
		}
		err = a.streamFail(s, c.fail)
	} else {
		err = a.streamEnd(s, renderEnding(c))
	}
	if err != nil {
		t.Fatal(err)
	}
	return rr.Body.String()
}

// renderBody renders c as a non-streaming body.
func renderBody(t *testing.T, c renderCase) string {
	t.Helper()
	rr := httptest.NewRecorder()
	if err := renderAnswer(t, c).respond(rr, renderEnding(c)); err != nil {
		t.Fatal(err)
	}
	return rr.Body.String()
}

func renderAnswer(t *testing.T, c renderCase) answer {
	t.Helper()
	req, aerr := parseResponsesRequest([]byte(c.body))
	if aerr != nil {
		t.Fatalf("request: %v", aerr)
	}
	return (&responsesAPI{req: req}).answer(answerInfo{ID: "req-1", Created: testTime.Unix(), Model: "tiny", PromptTokens: 9, Chat: req.chat})
}

func renderEnding(c renderCase) *ending {
	var all []parse.Event
	for _, b := range c.batches {
		all = append(all, b...)
	}
	all = append(all, c.last...)
	return &ending{Finish: c.finish, Usage: Usage{PromptTokens: 9, CompletionTokens: 20, TotalTokens: 29, PromptTokensDetails: PromptTokensDetails{CachedTokens: 2}},
		ReasoningTokens: 5, Result: parse.Collect(all), Last: c.last}
}

// responsesFrame is one event of a Responses stream.
type responsesFrame struct {
	name string
	data string
}

// responsesFrames splits a Responses stream into its events, checking the framing: every
// frame is "event: NAME\ndata: JSON\n\n", its data's type is NAME, sequence numbers count
// from 0, and there is no [DONE].
func responsesFrames(t *testing.T, body string) []responsesFrame {
	t.Helper()
	var out []responsesFrame
	for _, f := range strings.SplitAfter(body, "\n\n") {
		if f == "" {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(f, "\n\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") || !strings.HasSuffix(f, "\n\n") {
			t.Fatalf("bad frame %q", f)
		}
		fr := responsesFrame{name: strings.TrimPrefix(lines[0], "event: "), data: strings.TrimPrefix(lines[1], "data: ")}
		var head struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(fr.data), &head); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		if head.Type != fr.name || head.Seq == nil || *head.Seq != len(out) {
			t.Fatalf("frame %d %q: type %q sequence_number %v", len(out), f, head.Type, head.Seq)
		}
		out = append(out, fr)
	}
	return out
}

// replayed is a stream's output rebuilt from its events the way a client accumulates
// them, checked for consistency on the way.
type replayed struct {
	items    map[int]map[string]any // output_index → the item as output_item.done gave it
	text     map[int]string         // output_index → text or arguments from the deltas
	final    map[string]any         // the terminal event's response
	terminal string
}

func replay(t *testing.T, frames []responsesFrame) replayed {
	t.Helper()
	r := replayed{items: map[int]map[string]any{}, text: map[int]string{}}
	open := map[int]string{} // output_index → item id, between added and done
	for i, f := range frames {
		var ev map[string]any
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatal(err)
		}
		// The official Go SDK decodes every event.
		var sdk responses.ResponseStreamEventUnion
		if err := json.Unmarshal([]byte(f.data), &sdk); err != nil || sdk.Type != f.name {
			t.Fatalf("event %d: the SDK reads %q (%v)", i, sdk.Type, err)
		}
		idx := -1
		if v, ok := ev["output_index"].(float64); ok {
			idx = int(v)
		}
		if r.terminal != "" {
			t.Fatalf("event %q after %s", f.name, r.terminal)
		}
		switch f.name {
		case "response.created", "response.in_progress":
			if i > 1 {
				t.Fatalf("%s at %d", f.name, i)
			}
		case "response.output_item.added":
			if len(open) > 0 || idx != len(r.items) {
				t.Fatalf("item %d added while %v open (%d done)", idx, open, len(r.items))
			}
			open[idx] = ev["item"].(map[string]any)["id"].(string)
		case "response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta":
			if open[idx] == "" || ev["item_id"] != open[idx] {
				t.Fatalf("%s for item %v, open %v", f.name, ev["item_id"], open)
			}
			r.text[idx] += ev["delta"].(string)
		case "response.output_text.done", "response.reasoning_text.done":
			if ev["text"] != r.text[idx] {
				t.Fatalf("%s text %q, deltas %q", f.name, ev["text"], r.text[idx])
			}
		case "response.function_call_arguments.done":
			if ev["arguments"] != r.text[idx] {
				t.Fatalf("%s arguments %q, deltas %q", f.name, ev["arguments"], r.text[idx])
			}
		case "response.content_part.added", "response.content_part.done":
			if open[idx] == "" || ev["item_id"] != open[idx] {
				t.Fatalf("%s for item %v, open %v", f.name, ev["item_id"], open)
			}
		case "response.output_item.done":
			it := ev["item"].(map[string]any)
			if it["id"] != open[idx] {
				t.Fatalf("done item %v, open %v", it["id"], open)
			}
			delete(open, idx)
			r.items[idx] = it
		case "response.completed", "response.incomplete", "response.failed":
			r.terminal = f.name
			r.final = ev["response"].(map[string]any)
		default:
			t.Fatalf("unexpected event %q", f.name)
		}
	}
	if r.terminal == "" {
		t.Fatal("no terminal event")
	}
	return r
}

// TestResponsesRender renders answers as streams and bodies (golden files under
// testdata/responses/) and checks that a client accumulating the stream gets what the
// terminal event and the body say.
func TestResponsesRender(t *testing.T) {
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			stream := renderStream(t, c)
			checkGolden(t, "responses/stream_"+c.name+".txt", []byte(stream))
			r := replay(t, responsesFrames(t, stream))
			output := r.final["output"].([]any)
			for i, it := range output {
				item := it.(map[string]any)
				if c.fail != nil {
					continue // the open item is not done
				}
				if !reflect.DeepEqual(item, r.items[i]) {
					t.Errorf("final item %d %v, done item %v", i, item, r.items[i])
				}
				// The deltas add up to the item's text.
				var text string
				switch item["type"] {
				case "message":
					text = item["content"].([]any)[0].(map[string]any)["text"].(string)
				case "reasoning":
					text = item["content"].([]any)[0].(map[string]any)["text"].(string)
				case "function_call":
					text = item["arguments"].(string)
				}
				if text != r.text[i] {
					t.Errorf("item %d text %q, deltas %q", i, text, r.text[i])
				}
			}
			if c.fail != nil {
				if r.terminal != "response.failed" || r.final["status"] != "failed" {
					t.Errorf("terminal %s status %v", r.terminal, r.final["status"])
				}
				return
			}
			want := "response.completed"
			if c.finish == "length" {
				want = "response.incomplete"
			}
			if r.terminal != want {
				t.Errorf("terminal %s, want %s", r.terminal, want)
			}
			body := renderBody(t, c)
			checkGolden(t, "responses/body_"+c.name+".json", []byte(body))
			var resp responses.Response
			if err := json.Unmarshal([]byte(body), &resp); err != nil {
				t.Fatal(err)
			}
			var full map[string]any
			if err := json.Unmarshal([]byte(body), &full); err != nil {
				t.Fatal(err)
			}
			if !c.reordered && !reflect.DeepEqual(full, r.final) {
				t.Errorf("the stream's final response differs from the body:\n%v\n%v", r.final, full)
			}
			if c.reordered && len(full["output"].([]any)) != len(output) {
				t.Errorf("body has %d items, stream %d", len(full["output"].([]any)), len(output))
			}
		})
	}
}

// TestResponsesRenderSDK reads the rendered bodies with the official Go SDK's types.
func TestResponsesRenderSDK(t *testing.T) {
	c := renderCases[2] // tool_calls
	var resp responses.Response
	if err := json.Unmarshal([]byte(renderBody(t, c)), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.ID != "resp_req-1" || resp.Status != "completed" || len(resp.Output) != 3 || resp.Model != "tiny" ||
		resp.Usage.InputTokens != 9 || resp.Usage.OutputTokens != 20 || resp.Usage.TotalTokens != 29 ||
		resp.Usage.InputTokensDetails.CachedTokens != 2 || resp.Usage.OutputTokensDetails.ReasoningTokens != 5 ||
		resp.Instructions.OfString != "be brief" || resp.MaxOutputTokens != 50 || resp.Temperature != 0.5 ||
		resp.Metadata["k"] != "v" || resp.Reasoning.Effort != "low" || resp.ToolChoice.OfToolChoiceMode != "auto" ||
		len(resp.Tools) != 1 || resp.Tools[0].Name != "get_weather" || !resp.ParallelToolCalls || resp.Text.Format.Type != "text" {
		t.Fatalf("response %s", resp.RawJSON())
	}
	rs := resp.Output[0].AsReasoning()
	fc := resp.Output[1].AsFunctionCall()
	if rs.ID != "rs_req-1_0" || len(rs.Content) != 1 || rs.Content[0].Text != "Two cities." ||
		fc.ID != "fc_req-1_1" || fc.CallID != "call_a" || fc.Name != "get_weather" || fc.Arguments != `{"city": "Paris"}` || fc.Status != "completed" {
		t.Errorf("items %+v %+v", rs, fc)
	}
	if resp.OutputText() != "" {
		t.Errorf("output text %q", resp.OutputText())
	}
	var msg responses.Response
	if err := json.Unmarshal([]byte(renderBody(t, renderCases[1])), &msg); err != nil {
		t.Fatal(err)
	}
	if msg.OutputText() != "\n\nParis is sunny." {
		t.Errorf("output text %q", msg.OutputText())
	}
}

func TestResponsesRenderUsageDoc(t *testing.T) {
	// Output tokens include the reasoning tokens; total is input + output.
	c := renderCases[0]
	var resp struct {
		Usage responseUsage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(renderBody(t, c)), &resp); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%+v", resp.Usage); got != "{InputTokens:9 InputTokensDetails:{CachedTokens:2} OutputTokens:20 OutputTokensDetails:{ReasoningTokens:5} TotalTokens:29}" {
		t.Errorf("usage %s", got)
	}
}

// discardWriter is an http.ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkResponsesStream renders a streamed answer of n tokens (one event each: 1/4
// reasoning, then text, then two tool calls) and reports the cost per token, which must
// not grow with the answer's length.
func BenchmarkResponsesStream(b *testing.B) {
	req, aerr := parseResponsesRequest([]byte(renderTools))
	if aerr != nil {
		b.Fatal(aerr)
	}
	for _, n := range []int{1000, 32000} {
		evs := make([]parse.Event, 0, n)
		for i := range n {
			switch {
			case i < n/4:
				evs = append(evs, evReasoning(" think"))
			case i < n-40:
				evs = append(evs, evContent(" word"))
			case i == n-40:
				evs = append(evs, evCall(0, "call_a", "get_weather"))
			case i == n-20:
				evs = append(evs, evCall(1, "call_b", "get_weather"))
			case i < n-20:
				evs = append(evs, evArgs(0, `"x`))
			default:
				evs = append(evs, evArgs(1, `"y`))
			}
		}
		end := &ending{Finish: "tool_calls", Result: parse.Collect(evs)}
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s, _ := startSSE(&discardWriter{h: http.Header{}})
				a := (&responsesAPI{req: req}).answer(answerInfo{ID: "req-1", Model: "tiny"})
				_ = a.streamStart(s)
				for j := range evs {
					_ = a.streamEvents(s, evs[j:j+1])
				}
				_ = a.streamEnd(s, end)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
		})
	}
}

// TestResponsesDeltaFrame: the hand-written delta frames are what encoding/json writes of
// the delta event shapes, for any text (quotes, control bytes, HTML, invalid UTF-8,
// U+2028).
func TestResponsesDeltaFrame(t *testing.T) {
	texts := []string{"", "plain", `q"uo\te`, "\x00\x01\b\f\n\r\t\x1f\x7f", "<a href='x'>&amp;</a>", "\xff\xfe ok \xc3", "\u2028\u2029",
		"é 日本 🙂", "\\u0000", string([]byte{0xed, 0xa0, 0x80})}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		texts = append(texts, string(b))
	}
	for _, kind := range []parse.Kind{parse.KindReasoning, parse.KindContent, parse.KindToolCall} {
		for _, text := range texts {
			it := &outItem{kind: kind, id: "msg_r\"q_3", index: 3}
			a := &responsesAnswer{seq: 41}
			got, want := httptest.NewRecorder(), httptest.NewRecorder()
			gs, _ := startSSE(got)
			ws, _ := startSSE(want)
			var name string
			var ev any
			switch kind {
			case parse.KindReasoning:
				name = "response.reasoning_text.delta"
				ev = reasoningDeltaEvent{Type: name, SequenceNumber: 41, ItemID: it.id, OutputIndex: 3, Delta: text}
			case parse.KindContent:
				name = "response.output_text.delta"
				ev = textDeltaEvent{Type: name, SequenceNumber: 41, ItemID: it.id, OutputIndex: 3, Delta: text, Logprobs: none}
			default:
				name = "response.function_call_arguments.delta"
				ev = argsDeltaEvent{Type: name, SequenceNumber: 41, ItemID: it.id, OutputIndex: 3, Delta: text}
			}
			if err := a.delta(gs, name, it, text); err != nil {
				t.Fatal(err)
			}
			if err := ws.event(name, ev); err != nil {
				t.Fatal(err)
			}
			if got.Body.String() != want.Body.String() || a.seq != 42 {
				t.Fatalf("text %q:\n got %q\nwant %q", text, got.Body.String(), want.Body.String())
			}
		}
	}
}
