package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// The Messages API's rendering of parsed events: SSE event sequences and bodies (golden:
// testdata/anthropic/answer_*.txt), and the invariant that a stream, accumulated as
// Anthropic's SDKs anthAccumulate it, is the message the non-streaming answer returns.

// anthAnswerCase is one answer: the events of each engine chunk (the last one finishes) and
// how it ended.
type anthAnswerCase struct {
	name   string
	chunks [][]parse.Event
	end    ending
	fail   *APIError // a failure after the chunks, instead of the end
}

func anthText(s string) parse.Event  { return parse.Event{Kind: parse.KindContent, Text: s} }
func anthThink(s string) parse.Event { return parse.Event{Kind: parse.KindReasoning, Text: s} }
func anthCall(i int, id, name string) parse.Event {
	return parse.Event{Kind: parse.KindToolCall, Index: i, ID: id, Name: name}
}
func anthArgs(i int, s string) parse.Event {
	return parse.Event{Kind: parse.KindToolArgs, Index: i, Text: s}
}

var anthAnswerUsage = Usage{PromptTokens: 30, CompletionTokens: 12, TotalTokens: 42, PromptTokensDetails: PromptTokensDetails{CachedTokens: 16}}

var anthAnswerCases = []anthAnswerCase{
	{name: "text", chunks: [][]parse.Event{{anthText("Hel")}, {anthText("lo"), anthText(" there")}, {anthText("!")}},
		end: ending{Finish: "stop", Usage: anthAnswerUsage}},
	{name: "thinking_text_tools", chunks: [][]parse.Event{
		{anthThink("Two "), anthThink("cities.")},
		{anthText("Checking.")},
		{anthCall(0, "chatcmpl-tool-0a1b", "get_weather"), anthArgs(0, `{"city": `)},
		{anthArgs(0, `"Paris"}`), anthCall(1, "chatcmpl-tool-2c3d", "get_weather")},
		{anthArgs(1, `{"city": "Oslo", "unit": "c"}`)},
	}, end: ending{Finish: "tool_calls", Usage: anthAnswerUsage, Info: &TurbineInfo{WorkerID: "worker-a", RequestID: "req-1", CachedTokens: 16}}},
	{name: "stop_sequence", chunks: [][]parse.Event{{anthText("one, two")}, {anthText(",")}},
		end: ending{Finish: "stop", StopString: " three", Usage: anthAnswerUsage}},
	{name: "max_tokens", chunks: [][]parse.Event{{anthThink("still thinking")}, {}},
		end: ending{Finish: "length", Usage: anthAnswerUsage}},
	{name: "empty", chunks: [][]parse.Event{{}}, end: ending{Finish: "stop", Usage: Usage{PromptTokens: 5, CompletionTokens: 1, TotalTokens: 6}}},
	{name: "model_ids", chunks: [][]parse.Event{{anthCall(0, "functions.get_time:0", "get_time"), anthArgs(0, `{}`)}},
		end: ending{Finish: "tool_calls", Usage: anthAnswerUsage}},
	{name: "failure", chunks: [][]parse.Event{{anthText("partial")}, {anthCall(0, "chatcmpl-tool-ff", "get_time")}},
		fail: newError(KindEngineError, "", "The engine failed the request.")},
}

// anthRenderStream writes c as a stream and returns the SSE body.
func anthRenderStream(t *testing.T, c anthAnswerCase) string {
	t.Helper()
	rr := newRecorder()
	sse, err := startSSE(rr)
	if err != nil {
		t.Fatal(err)
	}
	a := messagesAPI.answer(answerInfo{ID: "req-1", Created: 1, Model: "tiny", PromptTokens: 30})
	if err := a.streamStart(sse); err != nil {
		t.Fatal(err)
	}
	last := len(c.chunks) - 1
	for i, evs := range c.chunks {
		if i == last && c.fail == nil {
			break
		}
		if len(evs) > 0 {
			if err := a.streamEvents(sse, evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.fail != nil {
		if err := a.streamFail(sse, c.fail); err != nil {
			t.Fatal(err)
		}
		return rr.Body.String()
	}
	end := c.end
	end.Last = c.chunks[last]
	if err := a.streamEnd(sse, &end); err != nil {
		t.Fatal(err)
	}
	return rr.Body.String()
}

// anthRenderBody writes c as one body.
func anthRenderBody(t *testing.T, c anthAnswerCase) string {
	t.Helper()
	var all []parse.Event
	for _, evs := range c.chunks {
		all = append(all, evs...)
	}
	end := c.end
	end.Result = parse.Collect(all)
	rr := newRecorder()
	a := messagesAPI.answer(answerInfo{ID: "req-1", Created: 1, Model: "tiny", PromptTokens: 30})
	if err := a.respond(rr, &end); err != nil {
		t.Fatal(err)
	}
	if rr.Code != http.StatusOK {
		t.Fatalf("status %d", rr.Code)
	}
	return rr.Body.String()
}

func TestAnthropicAnswerGolden(t *testing.T) {
	for _, c := range anthAnswerCases {
		out := "--- stream\n" + anthRenderStream(t, c)
		if c.fail == nil {
			out += "--- body\n" + anthRenderBody(t, c)
		}
		checkGolden(t, "anthropic/answer_"+c.name+".txt", []byte(out))
	}
}

// anthSseEvent is one named event of a stream.
type anthSseEvent struct {
	name string
	data map[string]any
}

// anthropicEvents splits a stream into its events, checking the framing: every frame is
// "event: NAME\ndata: {json}\n\n" and the data's type is the event's name.
func anthropicEvents(t *testing.T, body string) []anthSseEvent {
	t.Helper()
	var out []anthSseEvent
	for _, f := range strings.SplitAfter(body, "\n\n") {
		if f == "" {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(f, "\n\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("bad frame %q", f)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &data); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		name := strings.TrimPrefix(lines[0], "event: ")
		if data["type"] != name {
			t.Fatalf("event %s carries type %v", name, data["type"])
		}
		out = append(out, anthSseEvent{name, data})
	}
	return out
}

// anthAccumulate folds a stream's events into the message, as Anthropic's SDKs do, checking
// the order rules on the way: message_start first; each block started once, at the next
// index, its deltas of its own type, stopped once, one block open at a time;
// message_delta after every block stopped, message_stop last.
func anthAccumulate(t *testing.T, evs []anthSseEvent) map[string]any {
	t.Helper()
	if len(evs) < 3 || evs[0].name != "message_start" || evs[len(evs)-1].name != "message_stop" || evs[len(evs)-2].name != "message_delta" {
		t.Fatalf("event sequence %v", evs)
	}
	msg := evs[0].data["message"].(map[string]any)
	if len(msg["content"].([]any)) != 0 || msg["stop_reason"] != nil {
		t.Errorf("message_start %v", msg)
	}
	var blocks []map[string]any
	jsonBuf := map[int]string{}
	open := -1
	for _, e := range evs[1 : len(evs)-2] {
		idx := int(e.data["index"].(float64))
		switch e.name {
		case "content_block_start":
			if open >= 0 || idx != len(blocks) {
				t.Fatalf("block %d starts while %d is open (%d started)", idx, open, len(blocks))
			}
			blocks = append(blocks, e.data["content_block"].(map[string]any))
			open = idx
		case "content_block_delta":
			if idx != open {
				t.Fatalf("delta for block %d while %d is open", idx, open)
			}
			b, d := blocks[idx], e.data["delta"].(map[string]any)
			switch want := map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}[b["type"].(string)]; {
			case d["type"] != want:
				t.Fatalf("%v delta in a %v block", d["type"], b["type"])
			case want == "text_delta":
				b["text"] = b["text"].(string) + d["text"].(string)
			case want == "thinking_delta":
				b["thinking"] = b["thinking"].(string) + d["thinking"].(string)
			default:
				jsonBuf[idx] += d["partial_json"].(string)
			}
		case "content_block_stop":
			if idx != open {
				t.Fatalf("stop of block %d while %d is open", idx, open)
			}
			open = -1
		default:
			t.Fatalf("unexpected event %s", e.name)
		}
	}
	if open >= 0 {
		t.Fatalf("block %d never stopped", open)
	}
	for idx, s := range jsonBuf {
		var input any
		if err := json.Unmarshal([]byte(s), &input); err != nil {
			t.Fatalf("block %d input %q: %v", idx, s, err)
		}
		blocks[idx]["input"] = input
	}
	content := make([]any, len(blocks))
	for i, b := range blocks {
		content[i] = b
	}
	msg["content"] = content
	md := evs[len(evs)-2].data
	delta := md["delta"].(map[string]any)
	msg["stop_reason"], msg["stop_sequence"] = delta["stop_reason"], delta["stop_sequence"]
	usage := msg["usage"].(map[string]any)
	for k, v := range md["usage"].(map[string]any) {
		usage[k] = v
	}
	if tb, ok := md["turbine"]; ok {
		msg["turbine"] = tb
	}
	return msg
}

func TestAnthropicStreamMatchesBody(t *testing.T) {
	for _, c := range anthAnswerCases {
		if c.fail != nil {
			continue
		}
		streamed := anthAccumulate(t, anthropicEvents(t, anthRenderStream(t, c)))
		var body map[string]any
		if err := json.Unmarshal([]byte(anthRenderBody(t, c)), &body); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(streamed, body) {
			a, _ := json.Marshal(streamed)
			b, _ := json.Marshal(body)
			t.Errorf("%s: the stream accumulates to\n%s\nthe body is\n%s", c.name, a, b)
		}
	}
}

func TestAnthropicStreamFailure(t *testing.T) {
	for _, c := range anthAnswerCases {
		if c.fail == nil {
			continue
		}
		evs := anthropicEvents(t, anthRenderStream(t, c))
		last := evs[len(evs)-1]
		e, _ := last.data["error"].(map[string]any)
		if last.name != "error" || e["type"] != "api_error" || e["message"] != c.fail.Message {
			t.Errorf("%s: last event %s %v", c.name, last.name, last.data)
		}
	}
}

// TestAnthropicUsage: the prompt splits into input_tokens and cache_read_input_tokens,
// never below zero.
func TestAnthropicUsage(t *testing.T) {
	for _, tc := range []struct {
		in   Usage
		want anthropicUsage
	}{
		{Usage{PromptTokens: 30, CompletionTokens: 5, PromptTokensDetails: PromptTokensDetails{CachedTokens: 16}}, anthropicUsage{InputTokens: 14, CacheReadInputTokens: 16, OutputTokens: 5}},
		{Usage{PromptTokens: 30, CompletionTokens: 5}, anthropicUsage{InputTokens: 30, OutputTokens: 5}},
		{Usage{PromptTokens: 10, CompletionTokens: 1, PromptTokensDetails: PromptTokensDetails{CachedTokens: 12}}, anthropicUsage{InputTokens: 0, CacheReadInputTokens: 10, OutputTokens: 1}},
	} {
		if got := anthropicUsageOf(tc.in); got != tc.want {
			t.Errorf("%+v: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestAnthropicStopReason(t *testing.T) {
	for _, tc := range []struct {
		end          ending
		reason, stop string
	}{
		{ending{Finish: "stop"}, "end_turn", ""},
		{ending{Finish: "stop", StopString: "END"}, "stop_sequence", "END"},
		{ending{Finish: "length"}, "max_tokens", ""},
		{ending{Finish: "tool_calls"}, "tool_use", ""},
		{ending{Finish: "tool_calls", StopString: "END"}, "tool_use", ""},
	} {
		reason, seq := stopReason(&tc.end)
		stop := ""
		if seq != nil {
			stop = *seq
		}
		if reason != tc.reason || stop != tc.stop {
			t.Errorf("%+v: %s %q, want %s %q", tc.end, reason, stop, tc.reason, tc.stop)
		}
	}
}
