package enginehttp

import (
	"regexp"
	"testing"
)

func TestChoiceRegex(t *testing.T) {
	cases := []struct {
		choices []string
		want    string
		match   []string
		not     []string
	}{
		{[]string{"yes", "no"}, `(yes|no)`, []string{"yes", "no"}, []string{"ye", "yesno", "", "maybe"}},
		{[]string{"a.b", "(x|y)*", "$5^"}, `(a\.b|\(x\|y\)\*|\$5\^)`, []string{"a.b", "(x|y)*", "$5^"}, []string{"axb", "x", "xy"}},
		{[]string{`back\slash`, "[set]{2}", "q?+"}, `(back\\slash|\[set\]\{2\}|q\?\+)`, []string{`back\slash`, "[set]{2}", "q?+"}, []string{"backslash", "ss", "q"}},
		{[]string{"two\nlines\t!", "é ü"}, `(two\nlines\t!|é ü)`, []string{"two\nlines\t!", "é ü"}, []string{`two\nlines`}},
		{[]string{""}, `()`, []string{""}, []string{"a"}},
	}
	for _, c := range cases {
		got := ChoiceRegex(c.choices)
		if got != c.want {
			t.Errorf("ChoiceRegex(%q) = %q, want %q", c.choices, got, c.want)
			continue
		}
		// Go's syntax reads these escapes as the engines' do: match the whole output.
		re := regexp.MustCompile(`^(?:` + got + `)$`)
		for _, m := range c.match {
			if !re.MatchString(m) {
				t.Errorf("%s does not match %q", got, m)
			}
		}
		for _, m := range c.not {
			if re.MatchString(m) {
				t.Errorf("%s matches %q", got, m)
			}
		}
	}
}
