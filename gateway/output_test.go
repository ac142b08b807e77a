package gateway

import (
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// TestTextOutput drives the pure token→text core directly.
func TestTextOutput(t *testing.T) {
	c := func(text, reason string) *messages.TokenChunk {
		return &messages.TokenChunk{TokenIds: toks(text), FinishReason: reason}
	}
	eos := &messages.TokenChunk{TokenIds: []uint32{fakeEOS}}
	cases := []struct {
		name       string
		stops      []string
		minTokens  int
		chunks     []*messages.TokenChunk
		wantText   string
		wantFinish string
		wantTokens int
	}{
		{"plain", nil, 0, []*messages.TokenChunk{c("ab", ""), c("c", "length")}, "abc", "length", 3},
		{"stop across chunks", []string{"XY"}, 0, []*messages.TokenChunk{c("aX", ""), c("Yb", ""), c("", "stop")}, "a", "stop", 3},
		{"held text flushed at the end", []string{"XY"}, 0, []*messages.TokenChunk{c("aX", "stop")}, "aX", "stop", 2},
		{"eos ends", nil, 0, []*messages.TokenChunk{c("ab", ""), eos, c("zz", "stop")}, "ab", "stop", 3},
		{"eos flushes held stop prefix", []string{"XY"}, 0, []*messages.TokenChunk{c("aX", ""), eos}, "aX", "stop", 3},
		{"min_tokens defers stop strings", []string{"a"}, 2, []*messages.TokenChunk{c("ab", ""), c("ca", ""), c("d", "stop")}, "abc", "stop", 4},
		{"min_tokens defers eos", nil, 3, []*messages.TokenChunk{{TokenIds: []uint32{fakeEOS}}, c("ab", ""), eos}, "ab", "stop", 4},
		{"chunks after the end are ignored", nil, 0, []*messages.TokenChunk{c("a", "stop"), c("b", "stop")}, "a", "stop", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stops StopMatcher
			if tc.stops != nil {
				stops = &fakeStopMatcher{stops: tc.stops}
			}
			out := newTextOutput(&fakeDetokenizer{tok: fakeTokenizer{}, skipSpecial: true}, stops, []uint32{fakeEOS}, tc.minTokens)
			text := ""
			for _, ch := range tc.chunks {
				s, err := out.push(ch)
				if err != nil {
					t.Fatal(err)
				}
				text += s
			}
			if text != tc.wantText || out.finishReason != tc.wantFinish || out.completionTokens != tc.wantTokens {
				t.Errorf("got %q %q %d tokens; want %q %q %d", text, out.finishReason, out.completionTokens, tc.wantText, tc.wantFinish, tc.wantTokens)
			}
		})
	}
}

func TestCompletionBudget(t *testing.T) {
	cases := []struct {
		ctx, prompt int
		max         int64
		want        int32
		err         bool
	}{
		{0, 10, 0, 0, false},     // unknown context: engine default
		{0, 10, 50, 50, false},   // unknown context: as asked
		{100, 10, 0, 90, false},  // what is left
		{100, 10, 90, 90, false}, // exactly fills
		{100, 10, 91, 0, true},   // one too many
		{100, 100, 0, 0, true},   // prompt fills the context
		{100, 99, 0, 1, false},
	}
	for _, c := range cases {
		got, err := completionBudget(c.ctx, c.prompt, c.max, "max_tokens", false, "messages")
		if got != c.want || (err != nil) != c.err {
			t.Errorf("ctx %d prompt %d max %d: got %d, %v", c.ctx, c.prompt, c.max, got, err)
		}
		if err != nil && err.Kind != KindContextLengthExceeded {
			t.Errorf("kind %s", err.Kind)
		}
	}
	// vLLM names both of OpenAI's fields; an API with only max_tokens (Anthropic's) names
	// it alone.
	for _, c := range []struct {
		own  bool
		want string
	}{{false, "'max_tokens' or 'max_completion_tokens' is too large: 91."}, {true, "'max_tokens' is too large: 91."}} {
		_, err := completionBudget(100, 10, 91, "max_tokens", c.own, "messages")
		if err == nil || !strings.HasPrefix(err.Message, c.want) || err.Param != "max_tokens" {
			t.Errorf("own name %v: %v, want a message starting %q and param max_tokens", c.own, err, c.want)
		}
	}
}
