package model

import (
	"testing"
)

// TestContinueFinal is the decision table of continue_final_message: the rendered chat
// is cut after the last occurrence of the final message's content, keeping its trailing
// white space only where the template kept it (as HF transformers does).
func TestContinueFinal(t *testing.T) {
	msg := func(content string) []ChatMessage {
		return []ChatMessage{{Role: "user", Content: "hi"}, {Role: "assistant", Content: content}}
	}
	cases := []struct {
		name, rendered string
		msgs           []ChatMessage
		want           string // "" for an error
	}{
		{"cut after the content", "<u>hi</u><a>The answer is</a>", msg("The answer is"), "<u>hi</u><a>The answer is"},
		{"last occurrence", "<u>hi</u><a>hi</a>", msg("hi"), "<u>hi</u><a>hi"},
		{"trailing space kept by the template", "<a>Sure: </a>", msg("Sure: "), "<a>Sure: "},
		{"trailing space trimmed by the template", "<a>Sure:</a>", msg("Sure: "), "<a>Sure:"},
		{"leading space", "<a> Well</a>", msg(" Well"), "<a> Well"},
		{"content dropped by the template", "<u>hi</u><a></a>", msg("Hello"), ""},
		{"empty content", "<u>hi</u><a></a>", msg("  "), ""},
		{"no messages", "x", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := continueFinal(c.rendered, c.msgs)
			if c.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestRequestChatTemplate renders with a request's template instead of the model's, and
// refuses one that does not parse.
func TestRequestChatTemplate(t *testing.T) {
	m, err := LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := ParseChatTemplate("{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}{% if add_generation_prompt %}assistant={% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []ChatMessage{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Hel"}}
	for _, c := range []struct {
		in   ChatTemplateInput
		want string
	}{
		{ChatTemplateInput{Messages: msgs[:1], AddGenerationPrompt: true, Template: tmpl}, "user=hi;assistant="},
		{ChatTemplateInput{Messages: msgs, Template: tmpl, ContinueFinalMessage: true}, "user=hi;assistant=Hel"},
		{ChatTemplateInput{Messages: msgs, ContinueFinalMessage: true}, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHel"},
	} {
		got, err := m.RenderChat(c.in)
		if err != nil || got != c.want {
			t.Errorf("got %q, %v; want %q", got, err, c.want)
		}
	}
	if _, err := m.RenderChat(ChatTemplateInput{Messages: msgs, AddGenerationPrompt: true, ContinueFinalMessage: true}); err == nil {
		t.Error("continue_final_message with add_generation_prompt rendered")
	}
	if _, err := ParseChatTemplate("{% if messages %}unclosed"); err == nil {
		t.Error("a template that does not parse was accepted")
	}
}
