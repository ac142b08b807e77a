package model

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
)

func tinyTokenizerBytes(tb testing.TB, mutate func(tok map[string]any)) []byte {
	tok := tinyTokenizerJSON()
	if mutate != nil {
		mutate(tok)
	}
	return mustJSON(tb, tok)
}

// FuzzTokenizerJSON: parsing any tokenizer.json must not panic, and a tokenizer that
// loads must encode and decode without panicking.
func FuzzTokenizerJSON(f *testing.F) {
	f.Add(tinyTokenizerBytes(f, nil))
	f.Add(tinyTokenizerBytes(f, func(tok map[string]any) { tok["normalizer"] = map[string]any{"type": "NFC"} }))
	f.Add(tinyTokenizerBytes(f, func(tok map[string]any) {
		tok["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "use_regex": true}
	}))
	f.Add(tinyTokenizerBytes(f, func(tok map[string]any) { tok["model"].(map[string]any)["type"] = "Unigram" }))
	for _, s := range []string{"", "{}", "null", "[]", `{"model": null}`, `{"model": {"type": "BPE"}}`,
		`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a"]]}, "pre_tokenizer": {"type": "ByteLevel"}}`,
		`{"model": {"vocab": {}, "merges": "x"}}`, `{"added_tokens": [{"id": -1}]}`,
		`{"pre_tokenizer": {"type": "Sequence", "pretokenizers": [null, {"type": "Split"}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := parseTokenizerJSON(data, "fuzz/tokenizer.json")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "model: fuzz/tokenizer.json: ") {
				t.Fatalf("error without the prefix and file name: %v", err)
			}
			return
		}
		for _, s := range []string{"hello world", "<|end|> x", "  \n\t你好😀", "\xff\xfe"} {
			ids := spec.tok.Encode(s)
			_ = spec.tok.Decode(ids)
			d := NewDetokenizer(spec.tok, true)
			_ = d.Push(ids...) + d.Flush()
		}
	})
}

// FuzzTokenizerConfig: tokenizer_config.json, config.json and generation_config.json
// parsing must not panic; a chat template that parses must compile without panicking.
func FuzzTokenizerConfig(f *testing.F) {
	f.Add(mustJSON(f, tinyTokenizerConfig()))
	for _, s := range []string{"", "{}", "null", `{"chat_template": [{"name": "default", "template": "{{ x }"}]}`,
		`{"eos_token": {"content": null}}`, `{"model_max_length": 1e400}`, `{"eos_token_id": [1, -2]}`,
		`{"text_config": {"max_position_embeddings": 4096}}`, `{"chat_template": "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"}`,
		`{"additional_special_tokens": [1]}`, `{"max_position_embeddings": -5, "eos_token_id": 3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if cfg, err := parseTokenizerConfig(data, "fuzz/tokenizer_config.json"); err == nil {
			if cfg.modelMaxLength < 0 || cfg.modelMaxLength >= maxSaneContext {
				t.Fatalf("model_max_length %d", cfg.modelMaxLength)
			}
			var m Model
			_ = m.setChatTemplate(cfg.chatTemplate)
		}
		if mc, err := parseLoadConfig(data, "fuzz/config.json"); err == nil && (mc.contextLength < 0 || mc.contextLength >= maxSaneContext) {
			t.Fatalf("context length %d", mc.contextLength)
		}
		_, _ = parseLoadGenerationConfig(data, "fuzz/generation_config.json")
	})
}

// FuzzStopMatcher compares the StopMatcher with the naive reference. The first input
// holds up to 4 stop strings separated by '|'; the second is the text, cut into chunks at
// the positions given by the third.
func FuzzStopMatcher(f *testing.F) {
	f.Add("END|\n\n", "hello\n\nworld END", []byte{3, 1, 7})
	f.Add("aab", "aaaab", []byte{2, 1, 2})
	f.Add("停止|x", "好的停止了", []byte{4, 2})
	f.Fuzz(func(t *testing.T, stopsBlob, text string, cuts []byte) {
		stops := strings.SplitN(stopsBlob, "|", 4)
		var chunks []string
		for _, c := range cuts {
			n := min(int(c)%8, len(text))
			chunks = append(chunks, text[:n])
			text = text[n:]
		}
		chunks = append(chunks, text)
		checkStopMatcher(t, stops, chunks)
	})
}

// FuzzDetokenizer streams ids over byte fragments (valid, truncated and invalid UTF-8)
// and checks the chunks against Decode.
func FuzzDetokenizer(f *testing.F) {
	pieces := []string{"a", "\xe4", "\xbd", "\xa0", "\xf0\x9f", "\x98\x80", "<x>", "\xff", "é", "\xed\xa0"}
	tok := newFake(pieces, 6)
	f.Add([]byte{1, 2, 3, 0, 4, 5, 6, 7})
	f.Add([]byte{4, 6, 5, 9, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		ids := make([]uint32, len(data))
		for i, b := range data {
			ids[i] = uint32(b) % uint32(len(pieces)+1) // one past the end: unknown id
		}
		checkDetokenizerProperty(t, tok, ids, rand.New(rand.NewSource(int64(len(data)))))
	})
}

// FuzzBuiltinRoundTrip: for any text, Decode(Encode(text)) gives the text back (with
// ill-formed UTF-8 replaced), and valid text encodes as tiktoken-go encodes it, for both
// builtin encodings.
func FuzzBuiltinRoundTrip(f *testing.F) {
	for _, s := range []string{"hello world", "<|im_start|>user\nhi<|im_end|>", "  \n\n\t x", "你好😀", "\xff\xe4\xb8",
		strings.Repeat("!", 100), "HelloWorld HELLOworld it'S", "a\u0301B 12345 /\n/"} {
		f.Add(s)
	}
	type pair struct {
		tok Tokenizer
		ref *tiktoken.Tiktoken
	}
	var pairs []pair
	for _, name := range builtinNamesList {
		pairs = append(pairs, pair{builtinModel(f, name).Tokenizer, tiktokenReference(f, name)})
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, p := range pairs {
			ids := p.tok.Encode(text)
			if got, want := p.tok.Decode(ids), string(appendValidUTF8(nil, []byte(text))); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", text, got, want)
			}
			if !utf8.ValidString(text) {
				continue
			}
			want := p.ref.Encode(text, []string{"all"}, nil)
			if len(want) != len(ids) {
				t.Fatalf("Encode(%q) = %v, tiktoken-go %v", text, ids, want)
			}
			for i := range ids {
				if int(ids[i]) != want[i] {
					t.Fatalf("Encode(%q) = %v, tiktoken-go %v", text, ids, want)
				}
			}
		}
	})
}

// TestMergeHeapMatchesSmall runs both byte-pair merge loops on the same pieces (real
// cl100k ranks; random pieces from a small alphabet, so that many merges apply).
func TestMergeHeapMatchesSmall(t *testing.T) {
	tok := builtinModel(t, "cl100k_base").Tokenizer.(*bpeTokenizer)
	r := rand.New(rand.NewSource(13))
	alphabets := []string{" e\nt", "abcde", "=-_ ", "\xe4\xbd\xa0\xe5\xa5\xbd"}
	var s bpeScratch
	for range 5000 {
		alpha := alphabets[r.Intn(len(alphabets))]
		b := make([]byte, 2+r.Intn(smallPiece-1))
		for i := range b {
			b[i] = alpha[r.Intn(len(alpha))]
		}
		piece := string(b)
		small := tok.mergeSmall(piece, nil, &s)
		heap := tok.mergeHeap(piece, nil)
		if len(small) != len(heap) {
			t.Fatalf("piece %q: small %v heap %v", piece, small, heap)
		}
		for i := range small {
			if small[i] != heap[i] {
				t.Fatalf("piece %q: small %v heap %v", piece, small, heap)
			}
		}
	}
}
