package parse

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// golden is one parser case: a model output and what any chunking of it must give.
type golden struct {
	name   string
	output string
	want   Result
	// malformed is the Malformed count expected.
	malformed int
}

// run feeds text to a new parser in the given chunks and collects the result.
func run(mk func() Parser, chunks []string) (Result, []Event, int) {
	p := mk()
	var evs []Event
	for _, c := range chunks {
		evs = p.Push(c, evs)
	}
	evs = p.Finish(evs)
	return Collect(evs), evs, p.Malformed()
}

// chunkings returns ways to cut s: whole, byte by byte, every single cut, every pair of
// cuts when s is short, and random cuts (seeded).
func chunkings(s string) [][]string {
	out := [][]string{{s}}
	bytes := make([]string, len(s))
	for i := range len(s) {
		bytes[i] = s[i : i+1]
	}
	out = append(out, bytes)
	for i := 1; i < len(s); i++ {
		out = append(out, []string{s[:i], s[i:]})
	}
	if len(s) <= 160 {
		for i := 1; i < len(s); i++ {
			for j := i + 1; j < len(s); j++ {
				out = append(out, []string{s[:i], s[i:j], s[j:]})
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(s))))
	for range 64 {
		var cs []string
		for rest := s; rest != ""; {
			n := min(len(rest), 1+rng.IntN(8))
			cs = append(cs, rest[:n])
			rest = rest[n:]
		}
		out = append(out, cs)
	}
	return out
}

// checkGolden asserts that every chunking of g.output gives g.want and g.malformed, and
// that tool-call arguments are valid JSON objects.
func checkGolden(t *testing.T, mk func() Parser, g golden) {
	t.Helper()
	for _, cs := range chunkings(g.output) {
		got, evs, bad := run(mk, cs)
		if !reflect.DeepEqual(normalize(got), normalize(g.want)) || bad != g.malformed {
			t.Fatalf("%s: chunks %q\n got %+v (malformed %d)\nwant %+v (malformed %d)\nevents %+v",
				g.name, cs, got, bad, g.want, g.malformed, evs)
		}
		checkEventOrder(t, g.name, evs)
	}
	for i, c := range g.want.Calls {
		var v map[string]any
		if err := json.Unmarshal([]byte(c.Arguments), &v); err != nil {
			t.Fatalf("%s: call %d arguments %q are not a JSON object: %v", g.name, i, c.Arguments, err)
		}
	}
}

// normalize makes empty and nil call lists equal.
func normalize(r Result) Result {
	if len(r.Calls) == 0 {
		r.Calls = nil
	}
	return r
}

// checkEventOrder asserts that each call starts before its arguments, indexes start at 0
// and grow by one, and no event has empty text except KindToolCall.
func checkEventOrder(t *testing.T, name string, evs []Event) {
	t.Helper()
	next := 0
	for _, e := range evs {
		switch e.Kind {
		case KindToolCall:
			if e.Index != next || e.Name == "" || e.ID == "" {
				t.Fatalf("%s: tool call event %+v, want index %d with a name and id", name, e, next)
			}
			next++
		case KindToolArgs:
			if e.Index != next-1 {
				t.Fatalf("%s: arguments event %+v not for the open call %d", name, e, next-1)
			}
			if e.Text == "" {
				t.Fatalf("%s: empty arguments event", name)
			}
		case KindContent, KindReasoning:
			if e.Text == "" {
				t.Fatalf("%s: empty %s event", name, e.Kind)
			}
		default:
			t.Fatalf("%s: event of unknown kind %+v", name, e)
		}
	}
}

// accounted asserts the fuzzing property: every word (maximal run of letters and digits)
// of input outside the format's markers appears in the parsed output's text (content,
// reasoning, call names, arguments). A parser may re-encode arguments (XML or Python
// calls to JSON) but must not lose what the model wrote.
func accounted(t *testing.T, input string, markers []string, r Result) {
	t.Helper()
	stripped := input
	for _, m := range markers {
		stripped = strings.ReplaceAll(stripped, m, " ")
	}
	var all strings.Builder
	all.WriteString(r.Content)
	all.WriteString(" ")
	all.WriteString(r.Reasoning)
	for _, c := range r.Calls {
		all.WriteString(" " + c.Name + " " + c.Arguments)
	}
	out := all.String()
	for _, w := range strings.FieldsFunc(stripped, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) }) {
		if !strings.Contains(out, w) {
			t.Fatalf("word %q of the output is lost: input %q, parsed %+v", w, input, r)
		}
	}
}

// fuzzChunks cuts s at the positions the fuzzer's cut bytes pick.
func fuzzChunks(s string, cuts []byte) []string {
	var out []string
	rest := s
	for _, c := range cuts {
		if rest == "" {
			break
		}
		n := 1 + int(c)%len(rest)
		out = append(out, rest[:n])
		rest = rest[n:]
	}
	if rest != "" {
		out = append(out, rest)
	}
	return out
}
