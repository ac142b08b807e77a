package enginehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
)

func TestErrorMessageField(t *testing.T) {
	for _, tc := range []struct {
		body   string
		shapes []Shape
		want   string
	}{
		{`{"success":false,"error_message":"LoRA adapter a is not loaded.","loaded_adapters":{}}`, []Shape{ErrorObject, ErrorMessageField}, "LoRA adapter a is not loaded."},
		{`{"success":false,"error_message":"x"}`, []Shape{ErrorObject, Detail}, `{"success":false,"error_message":"x"}`}, // not read unless listed
		{`{"success":false,"error_message":"","detail":"d"}`, []Shape{ErrorMessageField, Detail}, "d"},
		{`{"error":{"message":"first"},"error_message":"second"}`, []Shape{ErrorObject, ErrorMessageField}, "first"},
	} {
		if got := DecodeError([]byte(tc.body), tc.shapes...); got.Message != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got.Message, tc.want)
		}
	}
}

func TestRouteMissing(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   bool
	}{
		{404, `{"detail":"Not Found"}`, true},
		{405, `{"detail":"Method Not Allowed"}`, true},
		{404, `{"error":{"message":"The lora adapter 'a' cannot be found.","type":"NotFoundError","code":404}}`, false},
		{404, `{"detail":"The model does not exist"}`, false},
		{400, `{"detail":"Not Found"}`, false},
		{404, `Not Found`, false},
	} {
		if got := RouteMissing(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.body, got, tc.want)
		}
	}
}

// TestPostLora: a 4xx answer is a refusal with the engine's message (a missing route
// aside), other answers the client's error, and a 200 that says it failed a refusal.
func TestPostLora(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		body        string
		wantErr     bool
		wantRefusal string // the refusal's message
	}{
		{"success", 200, "Success: LoRA adapter 'a' added successfully.", false, ""},
		{"success object", 200, `{"success":true,"error_message":null}`, false, ""},
		{"failure with 200", 200, `{"success":false,"error_message":"no slot"}`, true, "no slot"},
		{"refused", 400, `{"error":{"message":"already loaded","type":"InvalidUserInput"}}`, true, "already loaded"},
		{"not found", 404, `{"error":{"message":"cannot be found","type":"NotFoundError"}}`, true, "cannot be found"},
		{"no route", 404, `{"detail":"Not Found"}`, true, ""},
		{"engine failure", 503, `{"error":{"message":"busy"}}`, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			c := testClient(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got = fmt.Sprintf("%s %s %s", r.Method, r.URL.Path, b)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			err := c.PostLora(context.Background(), "/load", LoraRequest{LoraName: "a", LoraPath: "/p"}, "no LoRA API here")
			if got != `POST /base/load {"lora_name":"a","lora_path":"/p"}` {
				t.Fatalf("request %s", got)
			}
			var inv *engines.InvalidRequestError
			refused := errors.As(err, &inv)
			switch {
			case (err != nil) != tc.wantErr:
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			case refused != (tc.wantRefusal != ""):
				t.Fatalf("error %v: refusal %v, want %q", err, refused, tc.wantRefusal)
			case refused && inv.Message != tc.wantRefusal:
				t.Fatalf("refusal %q, want %q", inv.Message, tc.wantRefusal)
			case tc.name == "no route" && !strings.Contains(err.Error(), "no LoRA API here"):
				t.Fatalf("missing route: %v", err)
			}
		})
	}
}
