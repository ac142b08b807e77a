package persona

import (
	"regexp"
	"testing"
)

// TestGenerateRegex: a generated string matches the whole pattern, for many seeds;
// patterns outside what the walk can satisfy are refused, never answered wrongly.
func TestGenerateRegex(t *testing.T) {
	for _, c := range []struct {
		pattern string
		ok      bool
	}{
		{`[A-Z]{3}`, true},
		{`\d{3}-\d{4}`, true},
		{`(yes|no|maybe)`, true},
		{`[a-z]+@[a-z]+\.(com|org)`, true},
		{`\w+\s\w+`, true},
		{`[^"\\]{2,5}`, true},
		{`https?://[a-z0-9.-]+(/[a-z]*)*`, true},
		{`(?i)hello`, true},
		{`colou?r`, true},
		{`.{3}`, true},
		{`\bword\b`, true},
		{`^$`, true},
		{`-?(0|[1-9][0-9]*)(\.[0-9]+)?`, true},
		{`[\p{Greek}]{2}`, true},
		{`[^\x00-\x{10FFFF}]`, false}, // matches nothing
		{`$a`, false},                 // an anchor the walk cannot honour
		{`(a)\1`, false},              // a back-reference: not RE2
		{`(?=a)a`, false},             // look-ahead: not RE2
		{`a{2000}`, false},            // over the repeat limit
	} {
		re, err := regexp.Compile(`^(?:` + c.pattern + `)$`)
		for seed := range uint64(32) {
			got, ok := generateRegex(newRNG(seed), c.pattern)
			if ok != c.ok {
				t.Fatalf("%q seed %d: %q ok %v, want ok %v", c.pattern, seed, got, ok, c.ok)
			}
			if ok && (err != nil || !re.MatchString(got)) {
				t.Fatalf("%q seed %d: %q does not match", c.pattern, seed, got)
			}
		}
	}
}
