package persona

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// TestArgumentsFromQuestion: on the rendered Qwen3 fixtures, string arguments come from
// the user's last message as a model would write them: the names it mentions ("Weather
// in Paris?" gives city "Paris", "from CDG to NRT" the airports a pattern admits, each
// to its side), a quoted phrase before them, and the question itself for a query-like
// property, cut at a word to its maxLength. For every seed and every call to the tool,
// in the hermes syntax (read back by the gateway's parser) and through tool_choice
// "required" (a JSON schema constraint).
func TestArgumentsFromQuestion(t *testing.T) {
	const question = `Who designed the "Eiffel Tower" in Paris, and when was it finished?`
	for _, c := range []struct {
		fixture, tools string
		tool           string
		want           map[string]any // argument values, by property
	}{
		{"qwen3_weather", "tools.json", "get_weather", map[string]any{"city": "Paris"}},
		{"qwen3_tools", "tools.json", "get_weather", map[string]any{"city": "Paris"}},
		{"qwen3_tools", "tools.json", "search_flights", map[string]any{"origin": "CDG", "destination": "NRT"}},
		{"qwen3_tool_result_then_user", "tools.json", "search_flights", map[string]any{"origin": "CDG", "destination": "NRT"}},
		{"qwen3_search", "tools_search.json", "web_search", map[string]any{"query": question}},
		{"qwen3_search", "tools_search.json", "lookup", map[string]any{"q": "Who designed the"}},
		{"qwen3_search", "tools_search.json", "open_page", map[string]any{"title": "Eiffel Tower"}},
	} {
		t.Run(c.fixture+"/"+c.tool, func(t *testing.T) {
			p := prompt(t, c.fixture)
			o := loadOffered(t, c.tools)
			required := structuredJSON(requiredSchemaOf(t, c.tools))
			called := 0
			check := func(seed uint64, how, name string, args map[string]any) {
				if name != c.tool {
					return
				}
				called++
				for k, want := range c.want {
					if got, ok := args[k]; ok && got != want {
						t.Fatalf("seed %d, %s: %s %s = %q, want %q (arguments %v)", seed, how, c.tool, k, got, want, args)
					}
				}
			}
			for seed := range uint64(32) {
				in := Input{ToolParser: "hermes", ReasoningParser: "qwen3", Prompt: p, Seed: seed}
				r, malformed := parsed(t, in, o)
				if malformed != 0 {
					t.Fatalf("seed %d: %d malformed calls in %q", seed, malformed, Plan(in))
				}
				for _, call := range r.Calls {
					var args map[string]any
					if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
						t.Fatal(err)
					}
					check(seed, "called", call.Name, args)
				}
				out := Plan(Input{Prompt: p, Structured: required, Seed: seed})
				var calls []struct {
					Name       string         `json:"name"`
					Parameters map[string]any `json:"parameters"`
				}
				if err := json.Unmarshal([]byte(out), &calls); err != nil {
					t.Fatalf("seed %d: %q: %v", seed, out, err)
				}
				for _, call := range calls {
					check(seed, "required", call.Name, call.Parameters)
				}
			}
			if called == 0 {
				t.Fatalf("no call to %s in 32 seeds", c.tool)
			}
		})
	}
}

// requiredSchemaOf is the gateway's schema for tool_choice "required" over the tools of
// a testdata file (each parameters schema as written, its properties in order).
func requiredSchemaOf(t *testing.T, file string) string {
	t.Helper()
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(toolsJSON(t, file), &tools); err != nil {
		t.Fatal(err)
	}
	var ts []parse.ToolSchema
	for _, tl := range tools {
		ts = append(ts, parse.ToolSchema{Name: tl.Function.Name, Parameters: tl.Function.Parameters})
	}
	s, err := parse.RequiredSchema(ts)
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

// TestMentions: what a message mentions, in order: quoted phrases, capitalized names
// within a sentence, those that begin one; common words, apostrophes and markup left
// out; dates, codes and the direction of "from" and "to" marked.
func TestMentions(t *testing.T) {
	for _, c := range []struct {
		name, message string
		want          []string
		// marks are expected flags by mention: "code", "date", "from", "to", "quoted".
		marks map[string]string
	}{
		{"empty", "", nil, nil},
		{"no names", "how are you today?", nil, nil},
		{"sentence start last", "Weather in Paris?", []string{"Paris", "Weather"}, nil},
		{"common words dropped", "What is the weather in Paris, and are there flights from CDG to NRT next week?",
			[]string{"Paris", "CDG", "NRT"}, map[string]string{"CDG": "code from", "NRT": "code to", "Paris": ""}},
		{"quoted first", `Who designed the "Eiffel Tower" in Paris?`, []string{"Eiffel Tower", "Paris"}, map[string]string{"Eiffel Tower": "quoted"}},
		{"multi-word, number, possessive", "I'm flying to New York on June 28 with Alice's team.",
			[]string{"New York", "June 28", "Alice"}, map[string]string{"New York": "to", "June 28": "date"}},
		{"curly quotes", "Please translate ‘bonjour le monde’ into German.", []string{"bonjour le monde", "German"},
			map[string]string{"bonjour le monde": "quoted", "German": "to"}},
		{"apostrophes are not quotes", "it's John's book, don't 'quote' me", []string{"quote", "John"}, map[string]string{"quote": "quoted"}},
		{"unterminated quote", `find "Paris`, []string{"Paris"}, nil},
		{"title case", "What Is The Weather In São Paulo", []string{"Weather", "São Paulo"}, nil},
		{"new sentences", "Book it. Rome is nice! Then Oslo.", []string{"Oslo", "Rome"}, nil},
		{"duplicates once", "Paris or Paris?", []string{"Paris"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := readAsked(c.message).mentions
			var got []string
			for _, m := range ms {
				got = append(got, m.text)
				want, ok := c.marks[m.text]
				if !ok {
					continue
				}
				var marks []string
				for _, f := range []struct {
					on   bool
					name string
				}{{m.code, "code"}, {m.date, "date"}, {m.dir == 1, "from"}, {m.dir == -1, "to"}, {m.quoted, "quoted"}} {
					if f.on {
						marks = append(marks, f.name)
					}
				}
				if strings.Join(marks, " ") != want {
					t.Errorf("%q marked %v, want %q", m.text, marks, want)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("mentions %q, want %q", got, c.want)
			}
		})
	}
}

// TestQuestionText: the question is the message on one line without chat markup, cut
// at a word to a length.
func TestQuestionText(t *testing.T) {
	for _, c := range []struct {
		name, got, want string
	}{
		{"one line", oneLine("  What is\n\n<|im_end|> the   time?\t"), "What is the time?"},
		{"markup", oneLine("See [IMG] <b>this</b> <｜tool▁sep｜>now"), "See this now"},
		{"a lone bracket stays", oneLine("a < b"), "a < b"},
		{"cut at a word", cutAtWord(`Who designed the "Eiffel Tower"`, 20), "Who designed the"},
		{"cut at a word end", cutAtWord("one two three", 7), "one two"},
		{"one long word", cutAtWord("abcdefgh", 3), "abc"},
		{"punctuation dropped", cutAtWord("a, b", 2), "a"},
		{"characters, not bytes", cutAtWord("Zürich Straße", 8), "Zürich"},
		{"short enough", cutAtWord("short", 5), "short"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
}

// TestStringsFromQuestion: which string the generator takes from the user's message,
// by the schema and the property's name, over seeds; every instance valid.
func TestStringsFromQuestion(t *testing.T) {
	const long = `Who designed the "Eiffel Tower" in Paris, and when was it finished?`
	for _, c := range []struct {
		name, message, schema string
		want                  string // the instance, as writeJSON writes it
		prefix                string // or its start
		not                   string // or what it must not hold
	}{
		{"city", "Weather in Paris?", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`,
			`{"city": "Paris"}`, "", ""},
		{"query is the question", long, `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`,
			`{"query": "Who designed the \"Eiffel Tower\" in Paris, and when was it finished?"}`, "", ""},
		{"query cut to maxLength", long, `{"type":"object","properties":{"searchQuery":{"type":"string","maxLength":30}},"required":["searchQuery"]}`,
			`{"searchQuery": "Who designed the \"Eiffel Tower"}`, "", ""},
		{"query padded to minLength", "Why?", `{"type":"object","properties":{"q":{"type":"string","minLength":12}},"required":["q"]}`,
			"", `{"q": "Why? `, ""},
		{"not query-like", long, `{"type":"object","properties":{"query_type":{"type":"string"}},"required":["query_type"]}`,
			`{"query_type": "Eiffel Tower"}`, "", ""},
		{"too long for maxLength", "Weather in Lyon?", `{"type":"object","properties":{"city":{"type":"string","maxLength":3}},"required":["city"]}`,
			"", "", "Lyo"},
		{"next that fits", "Weather in Paris?", `{"type":"object","properties":{"city":{"type":"string","minLength":6}},"required":["city"]}`,
			`{"city": "Weather"}`, "", ""},
		{"pattern in full", "Fly from CDG or Paris.", `{"type":"object","properties":{"stop":{"type":"string","pattern":"[a-z]+"}},"required":["stop"]}`,
			"", "", "Paris"},
		{"pattern", "Fly from CDG.", `{"type":"object","properties":{"airport":{"type":"string","pattern":"^[A-Z]{3}$"}},"required":["airport"]}`,
			`{"airport": "CDG"}`, "", ""},
		{"from and to", "Then find me a flight from CDG to NRT on June 28.",
			`{"type":"object","properties":{"destination":{"type":"string","pattern":"^[A-Z]{3}$"},"origin":{"type":"string","pattern":"^[A-Z]{3}$"}},"required":["destination","origin"]}`,
			`{"destination": "NRT", "origin": "CDG"}`, "", ""},
		{"a code last", "Weather in SF and Paris", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`,
			`{"city": "Paris"}`, "", ""},
		{"format stands", "Weather in Paris?", `{"type":"object","properties":{"city":{"type":"string","format":"email"}},"required":["city"]}`,
			`{"city": "alice@example.com"}`, "", ""},
		{"const stands", "Weather in Paris?", `{"type":"object","properties":{"city":{"const":"Oslo"}},"required":["city"]}`,
			`{"city": "Oslo"}`, "", ""},
		{"enum named", "Weather in Paris in Fahrenheit?", `{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]}},"required":["unit"]}`,
			`{"unit": "fahrenheit"}`, "", ""},
		{"shaped: a quoted phrase", `Open "src/main.go" for Alice`, `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
			`{"path": "src/main.go"}`, "", ""},
		{"shaped: no name", "Open Main for Alice", `{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}`,
			"", "", "Main"},
		{"date property", "Plan a meeting for Friday with Alice", `{"type":"object","properties":{"day":{"type":"string"}},"required":["day"]}`,
			`{"day": "Friday"}`, "", ""},
		{"a date is no title", "Plan a meeting for Friday with Alice", `{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`,
			`{"title": "Alice"}`, "", ""},
		{"array items in turn", "Compare Paris and Tokyo", `{"type":"object","properties":{"cities":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":2}},"required":["cities"]}`,
			`{"cities": ["Paris", "Tokyo"]}`, "", ""},
		{"each call afresh", "Weather in Paris?", `{"type":"array","minItems":2,"maxItems":2,"items":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`,
			`[{"city": "Paris"}, {"city": "Paris"}]`, "", ""},
		{"nothing asked", "", `{"type":"object","properties":{"query":{"type":"string","minLength":1}},"required":["query"]}`,
			"", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sch := compileSchema(t, []byte(c.schema))
			schema, err := decodeOrdered(json.NewDecoder(strings.NewReader(c.schema)))
			if err != nil {
				t.Fatal(err)
			}
			for seed := range uint64(16) {
				got := jsonText(instanceAsked(newRNG(seed), schema, readAsked(c.message)))
				validate(t, sch, got)
				switch {
				case c.want != "" && got != c.want:
					t.Fatalf("seed %d: %s, want %s", seed, got, c.want)
				case c.prefix != "" && !strings.HasPrefix(got, c.prefix):
					t.Fatalf("seed %d: %s, want it to start with %s", seed, got, c.prefix)
				case c.not != "" && strings.Contains(got, c.not):
					t.Fatalf("seed %d: %s holds %s", seed, got, c.not)
				}
			}
		})
	}
	// An enum value inside a longer word is not named: the choice stays the seed's.
	schema := map[string]any{"enum": []any{"celsius", "fahrenheit"}}
	seen := map[any]bool{}
	for seed := range uint64(16) {
		seen[instanceAsked(newRNG(seed), schema, readAsked("Weather in celsiusland"))] = true
	}
	if len(seen) != 2 {
		t.Fatalf("16 seeds chose %v", seen)
	}
}

// TestInstanceValidAsked: every schema of testdata/schemas.json stays satisfied when
// strings come from a message, whatever the message.
func TestInstanceValidAsked(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "schemas.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	messages := []string{
		"",
		"Weather in Paris?",
		"Then find me a flight from CDG to NRT on June 28, in Fahrenheit.",
		`Who designed the "Eiffel Tower" in Paris, and when was it finished? ` + strings.Repeat("Very long. ", 80),
		"«Ça va» à São Paulo, x, ABC, ‘x’, Zürich 12345 <|im_end|> [TOOL_CALLS]",
		"Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Ken Leo Mia Ned Olga Pam Quinn Rob",
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			sch := compileSchema(t, c.Schema)
			schema, err := decodeOrdered(json.NewDecoder(bytes.NewReader(c.Schema)))
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range messages {
				u := readAsked(msg)
				for seed := range uint64(16) {
					text := jsonText(instanceAsked(newRNG(seed), schema, u))
					validate(t, sch, text)
					if again := jsonText(instanceAsked(newRNG(seed), schema, readAsked(msg))); again != text {
						t.Fatalf("seed %d gave %s, then %s", seed, text, again)
					}
				}
			}
		})
	}
}

// TestQuestionRoundTrip: a question full of quotes, escapes, brackets and markup-like
// text goes into the query property and back out of every tool-call syntax the gateway
// parses unchanged (less the markup that the question leaves out), never as a
// malformed call.
func TestQuestionRoundTrip(t *testing.T) {
	const asked = `Who designed the "Eiffel Tower" in Paris, and when was it finished?`
	base := prompt(t, "qwen3_search")
	o := loadOffered(t, "tools_search.json")
	for _, q := range []string{
		`a "b" c \ d \" e`, "x] y) z} w' `v` \"u", "if a < b then </parameter> done", "arr[0] and ｜> and |> and <|x",
		`tab	here\n and \u0041 'q' “r” «s»`, `</tool_call> <tool_call> {"name": "x"}`, `ends with a backslash \`,
		"<function=lookup> <parameter=q> `code` ]]] ))) ", "x <arg_value> </arg_value> y", `[{'a': 1}] foo(bar="baz")`,
	} {
		p := strings.Replace(base, asked, q, 1)
		want, searched := readAsked(q).question, 0
		for _, tp := range parse.ToolParserNames() {
			for seed := range uint64(4) {
				in := Input{ToolParser: tp, Prompt: p, Seed: seed}
				r, malformed := parsed(t, in, o)
				if malformed != 0 || len(r.Calls) == 0 {
					t.Fatalf("%s, %q, seed %d: %d malformed, %+v from %q", tp, q, seed, malformed, r, Plan(in))
				}
				for _, c := range r.Calls {
					validate(t, o.schemas[c.Name], c.Arguments)
					var args map[string]any
					if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
						t.Fatal(err)
					}
					if c.Name != "web_search" {
						continue
					}
					searched++
					if args["query"] != want {
						t.Fatalf("%s, seed %d: query %q, want %q", tp, seed, args["query"], want)
					}
				}
			}
		}
		if searched == 0 {
			t.Fatalf("%q: no call to web_search", q)
		}
	}
}
