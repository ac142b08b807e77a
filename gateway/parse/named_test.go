package parse

import "testing"

func TestNamedCallGolden(t *testing.T) {
	mk := func() Parser { return NewNamedCall("get_weather", callTools()) }
	for _, g := range []golden{
		{name: "object", output: `{"city": "Paris", "unit": "celsius"}`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Paris", "unit": "celsius"}`)}}},
		{name: "whitespace around", output: "\n  {\"city\": \"a}\\\"{\", \"days\": [1, {\"x\": \"東京\"}]}\n\n",
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "a}\"{", "days": [1, {"x": "東京"}]}`)}}},
		{name: "empty object", output: "{}", want: Result{Calls: []Call{call(0, "get_weather", `{}`)}}},
		{name: "text after", output: `{"city": "Rome"} and more`,
			want: Result{Content: "and more", Calls: []Call{call(0, "get_weather", `{"city": "Rome"}`)}}},
		{name: "not an object", output: " [1, 2]", want: Result{Content: " [1, 2]"}, malformed: 1},
		{name: "empty", output: "", want: Result{}},
	} {
		checkGolden(t, mk, g)
	}
	checkGolden(t, func() Parser { return NewNamedCall("nope", callTools()) }, golden{name: "unknown function",
		output: `{"a": 1}`, want: Result{Content: `{"a": 1}`}, malformed: 1})
	for _, g := range []golden{
		{name: "cut", output: `{"city": "Par`, want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Par`)}}, malformed: 1},
		{name: "invalid", output: `{"city": Paris}`, want: Result{Calls: []Call{call(0, "get_weather", `{"city": Paris}`)}}, malformed: 1},
	} {
		checkCut(t, mk, g)
	}
}

// Outputs in the shape RequiredSchema constrains an engine to (vLLM's tool_choice
// "required").
func TestRequiredCallsGolden(t *testing.T) {
	mk := func() Parser { return NewRequiredCalls(callTools()) }
	for _, g := range []golden{
		{name: "one call", output: `[{"name": "get_weather", "parameters": {"city": "Paris"}}]`,
			want: Result{Calls: []Call{call(0, "get_weather", `{"city": "Paris"}`)}}},
		{name: "two calls, whitespace", output: "[\n  {\"name\": \"search\", \"parameters\": {\"query\": \"[x] {y}\"}},\n  {\"parameters\": {}, \"name\": \"get_time\"}\n]\n",
			want: Result{Calls: []Call{call(0, "search", `{"query": "[x] {y}"}`), call(1, "get_time", `{}`)}}},
		{name: "arguments key", output: `[{"name": "get_time", "arguments": {}}]`,
			want: Result{Calls: []Call{call(0, "get_time", `{}`)}}},
		{name: "unknown function", output: `[{"name": "nope", "parameters": {}}, {"name": "get_time", "parameters": {}}]`,
			want: Result{Content: `{"name": "nope", "parameters": {}}`, Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "not an array", output: `{"name": "get_time", "parameters": {}}`,
			want: Result{Content: `{"name": "get_time", "parameters": {}}`}, malformed: 1},
		{name: "junk in the array", output: `[{"name": "get_time", "parameters": {}} x]`,
			want: Result{Content: "x]", Calls: []Call{call(0, "get_time", `{}`)}}, malformed: 1},
		{name: "cut before the arguments", output: `[{"name": "get_time", "para`,
			want: Result{Content: `{"name": "get_time", "para`}, malformed: 1},
	} {
		checkGolden(t, mk, g)
	}
	checkCut(t, mk, golden{name: "cut in the arguments", output: `[{"name": "search", "parameters": {"query": "ca`,
		want: Result{Calls: []Call{call(0, "search", `{"query": "ca`)}}, malformed: 1})
}
