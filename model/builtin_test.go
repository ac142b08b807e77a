package model

import (
	"math/rand"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
)

func builtinModel(tb testing.TB, name string) *Model {
	tb.Helper()
	m, err := LoadModel(BuiltinPrefix + name)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

var builtinNamesList = []string{"cl100k_base", "o200k_base"}

// tiktokenReference builds github.com/pkoukk/tiktoken-go's encoder for a builtin
// encoding, with the same special tokens, as an independent implementation to compare
// against.
func tiktokenReference(tb testing.TB, name string) *tiktoken.Tiktoken {
	tb.Helper()
	tiktokenRefsMu.Lock()
	defer tiktokenRefsMu.Unlock()
	if ref, ok := tiktokenRefs[name]; ok {
		return ref
	}
	enc := builtinEncodings[name]
	// The ranks are those of the embedded file, as loaded for the builtin model.
	tok := builtinModel(tb, name).Tokenizer.(*bpeTokenizer)
	ranks := make(map[string]int, len(tok.ranks))
	for b, id := range tok.ranks {
		ranks[b] = int(id)
	}
	specials := map[string]int{}
	set := map[string]any{}
	for s, id := range enc.specials {
		specials[s] = int(id)
		set[s] = true
	}
	bpe, err := tiktoken.NewCoreBPE(ranks, specials, enc.pattern)
	if err != nil {
		tb.Fatal(err)
	}
	ref := tiktoken.NewTiktoken(bpe, nil, set)
	tiktokenRefs[name] = ref
	return ref
}

var (
	tiktokenRefsMu sync.Mutex
	tiktokenRefs   = map[string]*tiktoken.Tiktoken{}
)

// randomPools are character pools for random texts: scripts, digits, whitespace,
// punctuation and emoji (with joiners and modifiers).
var randomPools = [][]rune{
	[]rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
	[]rune("0123456789"),
	[]rune(" \t\n  \r\n\u00a0\u3000"),
	[]rune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
	[]rune("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœŒĀāĒēİıŁłŞşŽž\u0301\u0308"),
	[]rune("你好世界今天天气很好我们学习中文字符汉语言文化龘靐齉𠀀𪚥"),
	[]rune("ひらがなカタカナ日本語のテキスト한국어문장입니다"),
	[]rune("АБВГДабвгдеёжзийклмнопрстуфхцчшщъыьэюяαβγδεζηθλμπσφχψωΩ"),
	[]rune("مرحبابالعالمשלוםनमस्तेदुनियाสวัสดี"),
	[]rune("😀😂🎉👍🏽❤️🚀🌍✨🔥👨‍👩‍👧\u200d\ufe0f"),
}

func randomText(r *rand.Rand, n int) string {
	var sb strings.Builder
	for range n {
		pool := randomPools[r.Intn(len(randomPools))]
		sb.WriteRune(pool[r.Intn(len(pool))])
	}
	return sb.String()
}

// TestBuiltinMatchesTiktokenGo compares the builtin encodings with tiktoken-go on the
// golden texts, random texts and long runs of one character.
func TestBuiltinMatchesTiktokenGo(t *testing.T) {
	var texts []string
	for _, name := range realModels {
		for _, c := range loadGolden(t, name).Encode {
			texts = append(texts, c.Text)
		}
	}
	r := rand.New(rand.NewSource(1))
	for range 120 {
		texts = append(texts, randomText(r, 1+r.Intn(200)))
	}
	texts = append(texts, strings.Repeat(" ", 1000)+"x", strings.Repeat("=", 700), strings.Repeat("ab", 300),
		strings.Repeat("\n", 80)+" y", "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>", "<|im_start", "<|endoftext|><|endoftext|>")
	for _, name := range builtinNamesList {
		t.Run(name, func(t *testing.T) {
			tok := builtinModel(t, name).Tokenizer
			ref := tiktokenReference(t, name)
			for _, text := range texts {
				want := ref.Encode(text, []string{"all"}, nil)
				got := tok.Encode(text)
				if len(got) != len(want) {
					t.Errorf("Encode(%q): %d tokens, tiktoken-go %d\n got %v\nwant %v", text, len(got), len(want), got, want)
					continue
				}
				for i := range got {
					if int(got[i]) != want[i] {
						t.Errorf("Encode(%q)\n got %v\nwant %v", text, got, want)
						break
					}
				}
				if dec := tok.Decode(got); dec != text {
					t.Errorf("Decode(Encode(%q)) = %q", text, dec)
				}
			}
		})
	}
}

func TestBuiltinSpecialsAndMetadata(t *testing.T) {
	tests := []struct {
		name                string
		imStart, imEnd, eot uint32
		vocab               int
	}{
		{"cl100k_base", 100264, 100265, 100257, 100277},
		{"o200k_base", 200019, 200020, 199999, 200021},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := builtinModel(t, tc.name)
			tok := m.Tokenizer
			if m.EOSToken != "<|im_end|>" || m.BOSToken != "" || !slices.Equal(m.EOSTokenIDs, []uint32{tc.imEnd, tc.eot}) {
				t.Errorf("BOS %q EOS %q ids %v", m.BOSToken, m.EOSToken, m.EOSTokenIDs)
			}
			if tok.VocabSize() != tc.vocab || m.ContextLength != 0 || len(m.PromptPrefixIDs) != 0 {
				t.Errorf("vocab %d context %d prefix %v", tok.VocabSize(), m.ContextLength, m.PromptPrefixIDs)
			}
			ids := tok.Encode("<|im_start|>user\nhi<|im_end|>\n<|endoftext|>")
			if len(ids) < 4 || ids[0] != tc.imStart || ids[len(ids)-2] == tc.imEnd || ids[len(ids)-1] != tc.eot || !slices.Contains(ids, tc.imEnd) {
				t.Errorf("specials not recognised: %v", ids)
			}
			for _, id := range []uint32{tc.imStart, tc.imEnd, tc.eot} {
				if !tok.IsSpecial(id) {
					t.Errorf("IsSpecial(%d) = false", id)
				}
			}
			if tok.IsSpecial(ids[1]) {
				t.Errorf("IsSpecial(%d) (ordinary) = true", ids[1])
			}
			if b, ok := tok.TokenBytes(tc.imEnd); !ok || string(b) != "<|im_end|>" {
				t.Errorf("TokenBytes(im_end) = %q, %v", b, ok)
			}
			if _, ok := tok.TokenBytes(uint32(tc.vocab)); ok {
				t.Errorf("TokenBytes(vocab size) found a token")
			}
		})
	}
	if _, err := LoadModel("builtin:p50k"); err == nil || !strings.Contains(err.Error(), `unknown builtin tokenizer "builtin:p50k"`) {
		t.Errorf("unknown builtin: %v", err)
	}
}

func TestBuiltinChatTemplate(t *testing.T) {
	m := builtinModel(t, "cl100k_base")
	tests := []struct {
		name string
		in   ChatTemplateInput
		want string
	}{
		{
			name: "chatml",
			in: ChatTemplateInput{Messages: []ChatMessage{
				{Role: "system", Content: "S"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "bye"},
			}, AddGenerationPrompt: true},
			want: "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "no generation prompt",
			in:   ChatTemplateInput{Messages: []ChatMessage{{Role: "user", Content: "hi"}}},
			want: "<|im_start|>user\nhi<|im_end|>\n",
		},
		{
			name: "tools and tool calls",
			in: ChatTemplateInput{
				Messages: []ChatMessage{
					{Role: "system", Content: "S"},
					{Role: "user", Content: "weather?"},
					{Role: "assistant", ToolCalls: []map[string]any{{"id": "c1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris", "unit": "c"}`}}}},
					{Role: "tool", ToolCallID: "c1", Content: "21"},
				},
				Tools:               []byte(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]`),
				AddGenerationPrompt: true,
			},
			want: "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions. Their signatures, one JSON object a line, are within <tools></tools>:\n<tools>\n" +
				`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}` +
				"\n</tools>\n\nTo call a function, write a JSON object with its name and arguments within <tool_call></tool_call>:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nweather?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>tool\n21<|im_end|>\n<|im_start|>assistant\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.RenderChat(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// Tools given as Go maps reach the template with sorted keys.
	got, err := m.ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "q"}},
		[]map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}}, false)
	if err != nil || !strings.Contains(got, `{"function": {"name": "f"}, "type": "function"}`) {
		t.Errorf("ApplyChatTemplate with tool maps = %q, %v", got, err)
	}
	if _, err := m.RenderChat(ChatTemplateInput{Kwargs: map[string]any{"messages": 1}}); err == nil {
		t.Error("a kwarg replacing messages was accepted")
	}
}

type recordingTransport struct {
	mu   sync.Mutex
	urls []string
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.urls = append(rt.urls, req.URL.String())
	rt.mu.Unlock()
	return nil, http.ErrUseLastResponse
}

// TestBuiltinOffline loads the builtin encodings with every HTTP request recorded and
// refused, and tiktoken's download cache pointed at an empty folder: nothing may be
// fetched or written.
func TestBuiltinOffline(t *testing.T) {
	rt := &recordingTransport{}
	saved := http.DefaultTransport
	http.DefaultTransport = rt
	t.Cleanup(func() { http.DefaultTransport = saved })
	cacheDir := t.TempDir()
	t.Setenv("TIKTOKEN_CACHE_DIR", cacheDir)
	t.Setenv("DATA_GYM_CACHE_DIR", cacheDir)
	for _, name := range builtinNamesList {
		m, err := loadUncached(BuiltinPrefix + name)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Tokenizer.Decode(m.Tokenizer.Encode("offline")); got != "offline" {
			t.Errorf("%s round trip = %q", name, got)
		}
	}
	if len(rt.urls) > 0 {
		t.Errorf("HTTP requests while loading builtin encodings: %v", rt.urls)
	}
	if entries, _ := os.ReadDir(cacheDir); len(entries) > 0 {
		t.Errorf("files written to the tiktoken cache: %v", entries)
	}
}
