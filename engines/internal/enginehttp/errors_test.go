package enginehttp

import (
	"strings"
	"testing"
)

func TestDecodeError(t *testing.T) {
	sglang := []Shape{ErrorObject, ErrorText, TopLevel, Detail}
	trtllm := []Shape{TopLevel, ErrorText, ErrorObject, Detail}
	vllm := []Shape{ErrorObject, TopLevel, Detail}
	cases := []struct {
		name   string
		body   string
		shapes []Shape
		want   ErrorFields
	}{
		{"error object", `{"error":{"message":"bad","type":"BadRequestError","param":"max_tokens","code":400}}`, vllm,
			ErrorFields{Message: "bad", Type: "BadRequestError", Param: "max_tokens"}},
		{"error object, null param", `{"error":{"message":"bad","type":"T","param":null}}`, vllm,
			ErrorFields{Message: "bad", Type: "T"}},
		{"error text", `{"error":"prompt is too long"}`, trtllm, ErrorFields{Message: "prompt is too long"}},
		{"error text not read where the engine does not send it", `{"error":"x"}`, vllm, ErrorFields{Message: `{"error":"x"}`}},
		{"top level", `{"object":"error","message":"m","type":"Bad Request","param":null,"code":400}`, sglang,
			ErrorFields{Message: "m", Type: "Bad Request"}},
		{"detail", `{"detail":"Not Found"}`, sglang, ErrorFields{Message: "Not Found"}},
		{"detail list", `{"detail":[{"loc":["body"],"msg":"field required"}]}`, vllm,
			ErrorFields{Message: "[map[loc:[body] msg:field required]]"}},
		{"first shape wins (SGLang reads the error object first)", `{"error":{"message":"inner"},"message":"outer"}`, sglang,
			ErrorFields{Message: "inner"}},
		{"first shape wins (trtllm-serve reads the top level first)", `{"error":{"message":"inner"},"message":"outer"}`, trtllm,
			ErrorFields{Message: "outer"}},
		{"empty inner message falls through", `{"error":{"message":""},"detail":"d"}`, sglang, ErrorFields{Message: "d"}},
		{"null error is no text", `{"error":null,"message":"m"}`, sglang, ErrorFields{Message: "m"}},
		{"not JSON kept as text", "  Internal Server Error\n", sglang, ErrorFields{Message: "Internal Server Error"}},
		{"no shape matches", `{"status":"bad"}`, trtllm, ErrorFields{Message: `{"status":"bad"}`}},
		{"empty", "", vllm, ErrorFields{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecodeError([]byte(tc.body), tc.shapes...); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeAnswerFallsBackToTheStatusText(t *testing.T) {
	for _, body := range []string{"", "  ", `{"error":""}`} {
		f := DecodeAnswer(503, []byte(body), ErrorText)
		if f.Message != "Service Unavailable" {
			t.Errorf("%q: message %q", body, f.Message)
		}
	}
	if f := DecodeAnswer(400, []byte(`{"error":"x"}`), ErrorText); f.Message != "x" {
		t.Errorf("message %q", f.Message)
	}
	if f := DecodeAnswer(400, []byte(strings.Repeat("a", 10)), Detail); f.Message != "aaaaaaaaaa" {
		t.Errorf("message %q", f.Message)
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		status    int
		typ, want string
	}{
		{400, "BadRequestError", "eng: engine answered 400 BadRequestError: m"},
		{503, "", "eng: engine answered 503: m"},
		{0, "", "eng: engine answered an error frame: m"},
	} {
		if got := ErrorMessage("eng", tc.status, tc.typ, "m"); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
