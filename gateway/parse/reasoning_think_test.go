package parse

import (
	"strings"
	"testing"
)

// reasoningCase is a golden case of a reasoning parser with the prompt the output
// continues.
type reasoningCase struct {
	prompt string
	golden
}

// checkReasoning runs checkGolden for each case on the reasoning parser called name.
func checkReasoning(t *testing.T, name string, cases []reasoningCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mk := func() Parser {
				p, err := NewReasoningParser(name, Options{Prompt: c.prompt})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			checkGolden(t, mk, c.golden)
		})
	}
}

func TestMarkerScan(t *testing.T) {
	sc := newMarkerScan("<think>", "</think>", "[THINK]")
	for _, c := range []struct {
		s       string
		at      int
		marker  string
		partial int
	}{
		{"", -1, "", 0},
		{"plain text", -1, "", 0},
		{"a<think>b", 1, "<think>", 0},
		{"a</think>b<think>", 1, "</think>", 0},
		{"x[THINK]", 1, "[THINK]", 0},
		{"a < b </thinking", -1, "", 0},
		{"abc</thi", -1, "", 5},
		{"abc<", -1, "", 1},
		{"abc[THIN", -1, "", 5},
		{"<thin<think>", 5, "<think>", 0},
		{"[[THINK", -1, "", 6},
	} {
		at, m, partial := sc.next(c.s)
		if at != c.at || m != c.marker || partial != c.partial {
			t.Errorf("next(%q) = %d, %q, %d; want %d, %q, %d", c.s, at, m, partial, c.at, c.marker, c.partial)
		}
	}
}

// TestThinkLeadingSpace checks that whitespace before a leading start marker is dropped
// with it, up to maxLeadingSpace bytes; a longer run is text.
func TestThinkLeadingSpace(t *testing.T) {
	long := strings.Repeat(" ", maxLeadingSpace+1)
	checkReasoning(t, "deepseek_r1", []reasoningCase{
		{golden: golden{name: "short run dropped", output: "\n\n<think>a</think>b",
			want: Result{Reasoning: "a", Content: "b"}}},
		{golden: golden{name: "long run kept", output: long + "<think>a</think>b",
			want: Result{Reasoning: long + "a", Content: "b"}}},
		{golden: golden{name: "whitespace only", output: "\n\n",
			want: Result{Reasoning: "\n\n"}}},
		{golden: golden{name: "whitespace before the end", output: "\n</think>b",
			want: Result{Reasoning: "\n", Content: "b"}}},
	})
}

// TestThinkMarkersRegistered checks that every think family registers its markers, so a
// detokenizer that drops special tokens keeps them.
func TestThinkMarkersRegistered(t *testing.T) {
	for name, want := range map[string][]string{
		"deepseek_r1": {"<think>", "</think>"},
		"qwen3":       {"<think>", "</think>", "<tool_call>"},
		"mistral":     {"[THINK]", "[/THINK]", "[TOOL_CALLS]"},
		"kimi_k2":     {"<think>", "</think>", "<|tool_calls_section_begin|>"},
		"glm45":       {"<think>", "</think>", "<tool_call>"},
	} {
		got := Markers("", name)
		for _, m := range want {
			if !strings.Contains(strings.Join(got, "\x00")+"\x00", m+"\x00") {
				t.Errorf("Markers(%q) = %q, missing %q", name, got, m)
			}
		}
	}
}
