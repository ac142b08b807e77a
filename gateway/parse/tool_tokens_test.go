package parse

import (
	"encoding/json"
	"testing"
)

// tokenTestTools offers the named functions with no parameters schema.
func tokenTestTools(names ...string) []Tool {
	out := make([]Tool, len(names))
	for i, n := range names {
		out[i] = Tool{Name: n}
	}
	return out
}

// checkStreamedBroken is checkCut, and asserts that the case is one: g.want has a call
// whose arguments are not JSON (the text streamed before the call broke) and counts it
// as malformed.
func checkStreamedBroken(t *testing.T, mk func() Parser, g golden) {
	t.Helper()
	checkCut(t, mk, g)
	if g.malformed == 0 {
		t.Fatalf("%s: a broken call counts as malformed", g.name)
	}
	broken := false
	for _, c := range g.want.Calls {
		broken = broken || !json.Valid([]byte(c.Arguments))
	}
	if !broken {
		t.Fatalf("%s: no call with broken arguments in %+v: use checkGolden", g.name, g.want)
	}
}

func TestCutAtMarker(t *testing.T) {
	marks := []string{"<|a|>", "<|bb|>"}
	for _, c := range []struct {
		s       string
		at, lim int
		m       string
	}{
		{"plain", -1, 5, ""},
		{"x<|a|>y", 1, 1, "<|a|>"},
		{"x<|bb|><|a|>", 1, 1, "<|bb|>"},
		{"x <", -1, 2, ""},
		{"x <|b", -1, 2, ""},
		{"a < b <|", -1, 6, ""},
		{"<|c|> and <", -1, 10, ""},
		{"<x", -1, 2, ""},
	} {
		at, m, lim := cutAtMarker(c.s, marks)
		if at != c.at || m != c.m || lim != c.lim {
			t.Errorf("cutAtMarker(%q) = %d %q %d, want %d %q %d", c.s, at, m, lim, c.at, c.m, c.lim)
		}
	}
}
