package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Tests with the real preprocessing (the embedded offline cl100k_base tokenizer, its
// ChatML template, the real detokenizer and stop matcher) instead of the fakes.

const builtinSource = "builtin:cl100k_base"

func builtinModel(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.LoadModel(builtinSource)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// builtinServer serves model "chatml" with the default (real) preprocessing. It renders
// requests' own chat templates (Config.TrustRequestChatTemplate), which the tests of
// templates send; TestRequestChatTemplateTrust checks the default refusal.
func builtinServer(t *testing.T, steps ...step) (*Server, *fakeBackend) {
	t.Helper()
	b := newFakeBackend(steps...)
	b.cards = []*messages.ModelCard{{Model: "chatml", Tokenizer: builtinSource, ContextLength: 8192, KvBlockSize: 16}}
	s, err := New(Config{Now: func() time.Time { return testTime }, TrustRequestChatTemplate: true}, b)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// oneByOne scripts the engine sending text one token per chunk, then finishing.
func oneByOne(m *model.Model, text string, end ...uint32) []step {
	var steps []step
	for _, id := range m.Tokenizer.Encode(text) {
		steps = append(steps, step{chunk: &messages.TokenChunk{TokenIds: []uint32{id}}})
	}
	return append(steps, step{chunk: &messages.TokenChunk{TokenIds: end, FinishReason: "stop"}})
}

func TestBuiltinChat(t *testing.T) {
	m := builtinModel(t)
	imEnd := m.EOSTokenIDs[0]
	s, b := builtinServer(t, oneByOne(m, "Hello, world!", imEnd)...)
	rr := serve(s, http.MethodPost, chatPath, `{"model":"chatml","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`)
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), `"content":"Hello, world!"`) {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	prompt := m.Tokenizer.Decode(b.generated()[0].TokenIDs)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	if prompt != want {
		t.Errorf("templated prompt %q, want %q", prompt, want)
	}
	b.checkClosed(t)
}

func TestBuiltinStreamMultibyteAndStop(t *testing.T) {
	m := builtinModel(t)
	text := "Olá 🙂 — 42°C. END and more"
	if n := len(m.Tokenizer.Encode("🙂")); n < 2 {
		t.Fatalf("the emoji is %d token(s); the test needs one split over several", n)
	}
	s, b := builtinServer(t, oneByOne(m, text)...)
	rr := serve(s, http.MethodPost, chatPath, `{"model":"chatml","stream":true,"stop":["END"],"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	res := checkStream(t, rr.Body.String(), true, true)
	if res.text != "Olá 🙂 — 42°C. " || res.finish != "stop" {
		t.Errorf("streamed %q finish %q", res.text, res.finish)
	}
	if strings.Contains(rr.Body.String(), "\uFFFD") || strings.Contains(rr.Body.String(), `\ufffd`) {
		t.Errorf("a partial character reached the client: %s", rr.Body.String())
	}
	// Generation stopped at the stop string: tokens after "END" were never read.
	read := b.streams[0].next
	total := len(m.Tokenizer.Encode(text)) + 1
	if read >= total || res.usage.CompletionTokens != read {
		t.Errorf("read %d of %d steps, completion_tokens %d", read, total, res.usage.CompletionTokens)
	}
	b.checkClosed(t)
}

func TestBuiltinCompletionsTokenPrompt(t *testing.T) {
	m := builtinModel(t)
	s, b := builtinServer(t, oneByOne(m, " jumps over the lazy dog", m.EOSTokenIDs...)...)
	ids := m.Tokenizer.Encode("The quick brown fox")
	body := `{"model":"chatml","prompt":[` + strings.Join(strings.Fields(strings.Trim(fmt.Sprint(ids), "[]")), ",") + `]}`
	rr := serve(s, http.MethodPost, compPath, body)
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), `"text":" jumps over the lazy dog"`) {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	if got := b.generated()[0].TokenIDs; fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("token prompt %v, want %v", got, ids)
	}
	// A token id outside cl100k_base's vocabulary is refused.
	rr = serve(s, http.MethodPost, compPath, `{"model":"chatml","prompt":[1,999999]}`)
	if rr.Code != 400 || !strings.Contains(rr.Body.String(), `"param":"prompt[1]"`) {
		t.Errorf("out-of-vocabulary id: %d %s", rr.Code, rr.Body.String())
	}
}
