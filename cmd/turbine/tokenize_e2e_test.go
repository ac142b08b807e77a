package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// TestE2ETokenize runs POST /tokenize and /detokenize against `turbine serve` with the
// real Qwen3 tokenizer folder and an API key, with a plain HTTP client (the OpenAI SDKs
// have no tokenize call): the key is required; a prompt and a chat tokenize to the
// prompt_tokens that /v1/completions and /v1/chat/completions count for them; tokens
// round-trip through /detokenize; an id outside the vocabulary is a 400.
func TestE2ETokenize(t *testing.T) {
	if turbineBin == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
	const key = "tokenize-key"
	s := startServe(t, 1, "--tokenizer", qwen3ModelDir(t), "--speedup-ratio", "1000", "--api-key", key)
	post := func(path, key string, body any, out any) int {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if out != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("POST %s: %s: %v", path, raw, err)
			}
		}
		if resp.StatusCode != http.StatusOK {
			t.Logf("POST %s: %d %s", path, resp.StatusCode, raw)
		}
		return resp.StatusCode
	}
	type tokenized struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	type usage struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}

	text := "Tokenize me: naïve café, 你好, 🙂 <|im_start|>"
	if code := post("/tokenize", "", map[string]any{"prompt": text}, nil); code != http.StatusUnauthorized {
		t.Errorf("/tokenize without the key: %d, want 401", code)
	}
	if code := post("/detokenize", "wrong", map[string]any{"tokens": []int{1}}, nil); code != http.StatusUnauthorized {
		t.Errorf("/detokenize with a wrong key: %d, want 401", code)
	}

	// A prompt: the model may be omitted (one model is served).
	var tok tokenized
	if code := post("/tokenize", key, map[string]any{"prompt": text, "return_token_strs": true}, &tok); code != http.StatusOK {
		t.Fatalf("/tokenize: %d", code)
	}
	if tok.Count != len(tok.Tokens) || tok.Count == 0 || len(tok.TokenStrs) != tok.Count || tok.MaxModelLen <= 0 {
		t.Errorf("/tokenize answered %+v", tok)
	}
	var comp usage
	if code := post("/v1/completions", key, map[string]any{"model": "turbine-mock", "prompt": text, "max_tokens": 1}, &comp); code != http.StatusOK {
		t.Fatalf("/v1/completions: %d", code)
	}
	if comp.Usage.PromptTokens != tok.Count {
		t.Errorf("/v1/completions counts %d prompt tokens, /tokenize %d", comp.Usage.PromptTokens, tok.Count)
	}
	var back struct {
		Prompt string `json:"prompt"`
	}
	if code := post("/detokenize", key, map[string]any{"model": "turbine-mock", "tokens": tok.Tokens}, &back); code != http.StatusOK || back.Prompt != text {
		t.Errorf("/detokenize: %d %q, want %q", code, back.Prompt, text)
	}

	// A chat, as /v1/chat/completions renders it.
	chat := map[string]any{"model": "turbine-mock", "messages": []map[string]string{
		{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}},
		"chat_template_kwargs": map[string]any{"enable_thinking": false}}
	var chatTok tokenized
	if code := post("/tokenize", key, chat, &chatTok); code != http.StatusOK {
		t.Fatalf("/tokenize (chat): %d", code)
	}
	chat["max_tokens"] = 1
	var chatComp usage
	if code := post("/v1/chat/completions", key, chat, &chatComp); code != http.StatusOK {
		t.Fatalf("/v1/chat/completions: %d", code)
	}
	if chatComp.Usage.PromptTokens != chatTok.Count {
		t.Errorf("/v1/chat/completions counts %d prompt tokens, /tokenize %d", chatComp.Usage.PromptTokens, chatTok.Count)
	}
	var chatBack struct {
		Prompt string `json:"prompt"`
	}
	if code := post("/detokenize", key, map[string]any{"tokens": chatTok.Tokens}, &chatBack); code != http.StatusOK {
		t.Fatalf("/detokenize (chat): %d", code)
	}
	var again tokenized
	if code := post("/tokenize", key, map[string]any{"prompt": chatBack.Prompt, "add_special_tokens": false}, &again); code != http.StatusOK || !reflect.DeepEqual(again.Tokens, chatTok.Tokens) {
		t.Errorf("the chat's text tokenizes to %v, the chat to %v", again.Tokens, chatTok.Tokens)
	}

	if code := post("/detokenize", key, map[string]any{"tokens": []int{1 << 30}}, nil); code != http.StatusBadRequest {
		t.Errorf("/detokenize of an id outside the vocabulary: %d, want 400", code)
	}
	if code := post("/tokenize", key, map[string]any{"model": "no-such-model", "prompt": "x"}, nil); code != http.StatusNotFound {
		t.Errorf("/tokenize of an unknown model: %d, want 404", code)
	}
}
