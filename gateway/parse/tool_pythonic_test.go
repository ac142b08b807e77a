package parse

import "testing"

// Outputs in the format of Llama 3.2's and Llama 4's pythonic tool calls (llama-models
// text_prompt_format.md, llama4 prompt_format.md) and the cases of vLLM's pythonic tests
// (tests/tool_parsers/test_pythonic_tool_parser.py, test_llama4_pythonic_tool_parser.py).
func TestPythonicGolden(t *testing.T) {
	mk := toolParser(t, "pythonic")
	for _, g := range []golden{
		{name: "text", output: "How can I help you today?", want: Result{Content: "How can I help you today?"}},
		{name: "one call", output: "[get_weather(city='San Francisco', metric='celsius')]",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "San Francisco", "metric": "celsius"}`)}}},
		{name: "two calls, all literal kinds",
			output: `[get_weather(city="LA", metric='C'), register_user(name='John Doe', age=37, address={'city': 'San Francisco', "state": 'CA', 1: (2, 3.5)}, role=None, passed_test=True, aliases=['John', 'Johnny', -1.5e3, False])]`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "LA", "metric": "C"}`),
				call(1, "register_user", `{"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA", "1": [2, 3.5]}, "role": null, "passed_test": true, "aliases": ["John", "Johnny", -1.5e3, false]}`)}}},
		{name: "no space between calls", output: "[get_weather(city='LA',metric='C'),register_user(name='Doe',age=9)]",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "LA", "metric": "C"}`), call(1, "register_user", `{"name": "Doe", "age": 9}`)}}},
		{name: "escapes", output: `[get_weather(city='Martha\'s Vineyard', metric='\"cool units\"', state="tab\there\\ \u00e9\x41\N")]`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Martha's Vineyard", "metric": "\"cool units\"", "state": "tab\there\\ éA\\N"}`)}}},
		{name: "brackets and quotes in strings", output: `[search(query="f(a=1), [x] {y} ')'")]`,
			want: Result{Calls: []Call{call(0, "search", `{"query": "f(a=1), [x] {y} ')'"}`)}}},
		{name: "empty containers and no arguments", output: "[write_file(meta={}, tags=[]), get_time()]",
			want: Result{Calls: []Call{call(0, "write_file", `{"meta": {}, "tags": []}`), call(1, "get_time", `{}`)}}},
		{name: "numbers in Python forms", output: "[write_file(ratio=.5, mode=1_000, tags=[5., +2, 1E3, 0.25])]",
			want: Result{Calls: []Call{call(0, "write_file", `{"ratio": 0.5, "mode": 1000, "tags": [5, 2, 1E3, 0.25]}`)}}},
		{name: "unicode and newlines around", output: " \n[search(query='東京の天気 🌧', limit=3,)]\n",
			want: Result{Calls: []Call{call(0, "search", `{"query": "東京の天気 🌧", "limit": 3}`)}}},
		{name: "python tags", output: "<|python_start|>[get_weather(city='LA', metric='C')]<|python_end|>",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "LA", "metric": "C"}`)}}},
		{name: "text then python tags", output: "Here's a call: <|python_start|>[get_weather(city='Tokyo', tags=[1, 2, 3])]<|python_end|>",
			want: Result{Content: "Here's a call:", Calls: []Call{call(0, "get_weather", `{"city": "Tokyo", "tags": [1, 2, 3]}`)}}},
		{name: "bracketed text", output: "[1] See the footnote.", want: Result{Content: "[1] See the footnote."}},
		{name: "markdown link", output: "[link](https://example.com) here", want: Result{Content: "[link](https://example.com) here"}},
		{name: "empty list", output: "[] nothing", want: Result{Content: "[] nothing"}},
		{name: "unknown first call", output: "[rm(path='/')] done",
			want: Result{Content: "[rm(path='/')] done"}, malformed: 1},
		{name: "unknown later call", output: "[get_time(), rm(path='/', x=[1, ')']), search(query='a')]",
			want: Result{Content: "rm(path='/', x=[1, ')'])", Calls: []Call{call(0, "get_time", `{}`), call(1, "search", `{"query": "a"}`)}}, malformed: 1},
		{name: "positional argument", output: "[get_time(5)]",
			want: Result{Calls: []Call{call(0, "get_time", ``)}, Content: "5)]"}, malformed: 1},
		{name: "cut in the name", output: "[get_wea", want: Result{Content: "[get_wea"}},
		{name: "cut in the second name", output: "[get_time(), sea",
			want: Result{Content: "sea", Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
	} {
		if g.name == "positional argument" {
			checkCut(t, mk, g)
			continue
		}
		checkGolden(t, mk, g)
	}
	for _, g := range []golden{
		{name: "cut in a value", output: "[get_weather(city='San Francisco', metric='cel",
			want: Result{Content: "metric='cel", Calls: []Call{call(0, "get_weather", `{"city": "San Francisco"`)}}, malformed: 1},
		{name: "bad value", output: "[get_weather(city=San, metric='C')] after",
			want: Result{Content: "city=San, metric='C')] after", Calls: []Call{call(0, "get_weather", "")}}, malformed: 1},
	} {
		checkCut(t, mk, g)
	}
}

func TestPyToJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`'a'`, `"a"`}, {`"it's"`, `"it's"`}, {`'\x00\a\v\101\u263a\U0001F327'`, `"\u0000\u0007\u000bA☺🌧"`},
		{`'\ud83d'`, `"\ud83d"`}, {`'a\
b'`, `"ab"`}, {"True", "true"}, {"None", "null"}, {"null", "null"}, {"-0", "-0"}, {"1.0", "1.0"},
		{"(1)", "1"}, {"(1,)", "[1]"}, {"()", "[]"}, {"[ 1 ,2 ]", "[1, 2]"}, {"{'a': [True, None]}", `{"a": [true, null]}`},
		{"{1.5: 2, None: 3}", `{"1.5": 2, "null": 3}`}, {"1e400", "1e400"}, {"-1e-3", "-1e-3"}, {"+.5e+1", "5"}, {"0x10", ""}, {"inf", ""}, {"abc", ""},
		{"'unterminated", ""}, {"[1, 2", ""}, {"{'a' 1}", ""}, {"{[1]: 2}", ""}, {"1 2", ""}, {"'a\nb'", ""},
	} {
		got, ok := pyToJSON(nil, c.in)
		if c.want == "" {
			if ok {
				t.Errorf("pyToJSON(%q) = %s, want an error", c.in, got)
			}
			continue
		}
		if !ok || string(got) != c.want {
			t.Errorf("pyToJSON(%q) = %s %v, want %s", c.in, got, ok, c.want)
		}
	}
}
