package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
)

// untrustedTemplateMessage is vLLM's answer to a request that brings its own chat
// template to a server started without --trust-request-chat-template.
const untrustedTemplateMessage = "Chat template is passed with request, but --trust-request-chat-template is not set. " +
	"Refused request with untrusted chat template."

// TestRequestChatTemplateTrust checks Config.TrustRequestChatTemplate on chat
// completions and /tokenize: off (the default), a request's own template (chat_template,
// or chat_template_kwargs.chat_template) is a 400 with vLLM's message, before anything
// is compiled, rendered or sent; on, the template is rendered instead of the model's.
func TestRequestChatTemplateTrust(t *testing.T) {
	const (
		msgs     = `"messages":[{"role":"user","content":"hi"}]`
		template = `"chat_template":"{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"`
		rendered = "[user] hi\n[assistant] "
		chatML   = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	)
	cases := []struct {
		name  string
		trust bool
		path  string
		body  string
		// want is the prompt rendered; "" expects the refusal naming param.
		want, param string
	}{
		{name: "chat, untrusted", path: chatPath, body: `{"model":"chatml",` + template + `,` + msgs + `}`, param: "chat_template"},
		{name: "tokenize, untrusted", path: "/tokenize", body: `{"model":"chatml",` + template + `,` + msgs + `}`, param: "chat_template"},
		{name: "chat, untrusted, in the kwargs", path: chatPath,
			body: `{"model":"chatml","chat_template_kwargs":{"chat_template":"{{ messages }}"},` + msgs + `}`, param: "chat_template_kwargs.chat_template"},
		{name: "tokenize, untrusted, in the kwargs", path: "/tokenize",
			body: `{"model":"chatml","chat_template_kwargs":{"chat_template":"x"},` + msgs + `}`, param: "chat_template_kwargs.chat_template"},
		// Refused before it is compiled: not the parse error of a trusted one.
		{name: "chat, untrusted, does not parse", path: chatPath, body: `{"model":"chatml","chat_template":"{% for %}",` + msgs + `}`, param: "chat_template"},
		// null is no template, as in vLLM.
		{name: "chat, untrusted, null", path: chatPath, body: `{"model":"chatml","chat_template":null,` + msgs + `}`, want: chatML},
		{name: "chat, untrusted, null in the kwargs", path: chatPath, body: `{"model":"chatml","chat_template_kwargs":{"chat_template":null},` + msgs + `}`, want: chatML},
		{name: "chat, untrusted, none", path: chatPath, body: `{"model":"chatml",` + msgs + `}`, want: chatML},
		{name: "tokenize, untrusted, none", path: "/tokenize", body: `{"model":"chatml",` + msgs + `}`, want: chatML},
		{name: "chat, trusted", trust: true, path: chatPath, body: `{"model":"chatml",` + template + `,` + msgs + `}`, want: rendered},
		{name: "tokenize, trusted", trust: true, path: "/tokenize", body: `{"model":"chatml",` + template + `,` + msgs + `}`, want: rendered},
	}
	m := builtinModel(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, b := builtinServer(t, finish("", "stop"))
			s.cfg.TrustRequestChatTemplate = c.trust
			rr := serve(s, http.MethodPost, c.path, c.body)
			if c.want == "" {
				var body struct {
					Error struct {
						Message, Type, Code string
						Param               *string
					}
				}
				if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
					t.Fatalf("%d %q: %v", rr.Code, rr.Body.String(), err)
				}
				e := body.Error
				if rr.Code != http.StatusBadRequest || e.Message != untrustedTemplateMessage || e.Type != "invalid_request_error" ||
					e.Code != "unsupported_parameter" || e.Param == nil || *e.Param != c.param {
					t.Errorf("got %d %s; want 400 unsupported_parameter, param %q, vLLM's message", rr.Code, rr.Body.String(), c.param)
				}
				if n := len(b.generated()); n != 0 {
					t.Errorf("%d requests reached the Backend", n)
				}
				return
			}
			if rr.Code != http.StatusOK {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			var ids []uint32
			if c.path == chatPath {
				ids = b.generated()[0].TokenIDs
			} else {
				var tr tokenizeResponse
				if err := json.Unmarshal(rr.Body.Bytes(), &tr); err != nil {
					t.Fatal(err)
				}
				ids = tr.Tokens
			}
			if got := m.Tokenizer.Decode(ids); got != c.want {
				t.Errorf("prompt %q, want %q", got, c.want)
			}
		})
	}
}
