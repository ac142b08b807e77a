package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// embedCall is one Embed the fake backend received.
type embedCall struct {
	model, id string
	tokens    []uint32
	dims      int
}

// fakeEmbedder is a fakeBackend that also embeds: input i's vector is [len(tokens),
// first token, dims] scaled to unit norm, from worker "worker-e".
type fakeEmbedder struct {
	*fakeBackend
	mu       sync.Mutex
	calls    []embedCall
	err      error  // returned by every Embed
	engine   string // set as every answer's error
	blockTok uint32 // an input starting with this token waits for its context (0: none)
}

func newFakeEmbedder() *fakeEmbedder {
	b := newFakeBackend()
	b.cards = append(b.cards,
		&messages.ModelCard{Model: "embed", Tokenizer: "fake", ContextLength: 8, Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: 3},
		&messages.ModelCard{Model: "mrl", Tokenizer: "fake", ContextLength: 8, Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: 3,
			IsMatryoshka: true},
		&messages.ModelCard{Model: "mrl-list", Tokenizer: "fake", ContextLength: 8, Runner: messages.Runner_RUNNER_POOLING, EmbeddingSize: 3,
			IsMatryoshka: true, MatryoshkaDimensions: []int32{2}},
	)
	return &fakeEmbedder{fakeBackend: b}
}

func (f *fakeEmbedder) Embed(ctx context.Context, model, requestID string, tokens []uint32, dims int) (*messages.Embedding, error) {
	f.mu.Lock()
	f.calls = append(f.calls, embedCall{model, requestID, slices.Clone(tokens), dims})
	f.mu.Unlock()
	if f.blockTok != 0 && tokens[0] == f.blockTok {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	if f.engine != "" {
		return &messages.Embedding{RequestId: requestID, Error: f.engine, WorkerId: "worker-e"}, nil
	}
	v := []float32{float32(len(tokens)), float32(tokens[0]), float32(dims)}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / math.Sqrt(n))
	}
	return &messages.Embedding{RequestId: requestID, Vector: v, PromptTokens: int32(len(tokens)), WorkerId: "worker-e"}, nil
}

func (f *fakeEmbedder) embedCalls() []embedCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.calls)
	slices.SortFunc(out, func(a, b embedCall) int { return strings.Compare(a.id, b.id) })
	return out
}

// unitVector is fakeEmbedder's vector of tokens.
func unitVector(tokens []uint32, dims int) []float32 {
	e, _ := (&fakeEmbedder{}).Embed(context.Background(), "", "", tokens, dims)
	return e.Vector
}

type embeddingAnswer struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Data    []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens     int  `json:"prompt_tokens"`
		TotalTokens      int  `json:"total_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
	} `json:"usage"`
}

// decodeBase64Floats is a client's reading of encoding_format "base64".
func decodeBase64Floats(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("base64 embedding %q: %v (%d bytes)", s, err, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func TestEmbeddingsInputs(t *testing.T) {
	bos := fakeTokenizer{}.Encode("<|im_start|>")[0]
	cases := []struct {
		name   string
		body   string
		tokens [][]uint32 // sent to the backend, in input order
		dims   int
		base64 bool
	}{
		{"string", `{"model":"embed","input":"hi"}`, [][]uint32{toks("hi")}, 0, false},
		{"strings", `{"model":"embed","input":["hi","abc","x"]}`, [][]uint32{toks("hi"), toks("abc"), toks("x")}, 0, false},
		{"token ids", `{"model":"embed","input":[3,4,5]}`, [][]uint32{{3, 4, 5}}, 0, false},
		{"token id lists", `{"model":"embed","input":[[3,4],[5],[6,7,8]]}`, [][]uint32{{3, 4}, {5}, {6, 7, 8}}, 0, false},
		{"token ids, generic path", `{"model":"embed","input":[3, 4.0, 5]}`, [][]uint32{{3, 4, 5}}, 0, false},
		{"base64", `{"model":"embed","input":["hi","abc"],"encoding_format":"base64"}`, [][]uint32{toks("hi"), toks("abc")}, 0, true},
		{"float explicit, user ignored", `{"model":"embed","input":"hi","encoding_format":"float","user":"u-1"}`, [][]uint32{toks("hi")}, 0, false},
		{"special tokens kept in text", `{"model":"embed","input":"<|im_start|>hi"}`, [][]uint32{append([]uint32{bos}, toks("hi")...)}, 0, false},
		{"truncate keeps the last tokens", `{"model":"embed","input":["abcdef","ab"],"truncate_prompt_tokens":3}`, [][]uint32{toks("def"), toks("ab")}, 0, false},
		{"truncate -1 is the context", `{"model":"embed","input":"abcdefghij","truncate_prompt_tokens":-1}`, [][]uint32{toks("cdefghij")}, 0, false},
		{"full context", `{"model":"embed","input":"abcdefgh"}`, [][]uint32{toks("abcdefgh")}, 0, false},
		{"matryoshka, any size", `{"model":"mrl","input":"hi","dimensions":2}`, [][]uint32{toks("hi")}, 2, false},
		{"matryoshka, listed size", `{"model":"mrl-list","input":"hi","dimensions":2}`, [][]uint32{toks("hi")}, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeEmbedder()
			rr := serve(newTestServer(t, b), http.MethodPost, "/v1/embeddings", c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			var a embeddingAnswer
			if err := json.Unmarshal(rr.Body.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			model := a.Model
			if a.Object != "list" || a.ID != "embd-req-1" || a.Created != testTime.Unix() || a.Usage.CompletionTokens == nil || *a.Usage.CompletionTokens != 0 {
				t.Errorf("answer %s", rr.Body)
			}
			calls := b.embedCalls()
			if len(calls) != len(c.tokens) || len(a.Data) != len(c.tokens) {
				t.Fatalf("%d calls, %d data; want %d: %s", len(calls), len(a.Data), len(c.tokens), rr.Body)
			}
			total := 0
			for i, want := range c.tokens {
				id := "req-1"
				if len(c.tokens) > 1 {
					id = fmt.Sprintf("req-1-%d", i)
				}
				if calls[i].id != id || !slices.Equal(calls[i].tokens, want) || calls[i].dims != c.dims || calls[i].model != model {
					t.Errorf("call %d: %+v; want id %s tokens %v dims %d", i, calls[i], id, want, c.dims)
				}
				d := a.Data[i]
				var got []float32
				if c.base64 {
					var s string
					if err := json.Unmarshal(d.Embedding, &s); err != nil {
						t.Fatalf("data[%d]: %s is not a base64 string", i, d.Embedding)
					}
					got = decodeBase64Floats(t, s)
				} else if err := json.Unmarshal(d.Embedding, &got); err != nil {
					t.Fatalf("data[%d]: %s", i, d.Embedding)
				}
				if d.Object != "embedding" || d.Index != i || !slices.Equal(got, unitVector(want, c.dims)) {
					t.Errorf("data[%d] = %s %d %v; want %v", i, d.Object, d.Index, got, unitVector(want, c.dims))
				}
				total += len(want)
			}
			if a.Usage.PromptTokens != total || a.Usage.TotalTokens != total {
				t.Errorf("usage %+v; want %d tokens", a.Usage, total)
			}
		})
	}
}

func TestEmbeddingsRefusals(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		code       string
		param      string // "" for null
		message    string // a part of it
	}{
		{"not JSON", `{`, 400, "invalid_json", "", "not valid JSON"},
		{"no model", `{"input":"hi"}`, 400, "missing_required_parameter", "model", "'model'"},
		{"no input", `{"model":"embed"}`, 400, "missing_required_parameter", "input", "'input'"},
		{"empty list", `{"model":"embed","input":[]}`, 400, "invalid_value", "input", "empty array"},
		{"empty id list in a batch", `{"model":"embed","input":[[3],[]]}`, 400, "invalid_value", "input[1]", "empty array"},
		{"mixed types", `{"model":"embed","input":["a",3]}`, 400, "invalid_type", "input[1]", "must all be"},
		{"mixed lists", `{"model":"embed","input":[[3],"a"]}`, 400, "invalid_type", "input[1]", "must all be"},
		{"object input", `{"model":"embed","input":{"a":1}}`, 400, "invalid_type", "input", "a string or an array"},
		{"bool items", `{"model":"embed","input":[true]}`, 400, "invalid_type", "input[0]", ""},
		{"negative id", `{"model":"embed","input":[3,-1]}`, 400, "invalid_value", "input[1]", "out of range"},
		{"id out of vocabulary", `{"model":"embed","input":[3,259]}`, 400, "invalid_value", "input", "Token id 259 at input[1] is out of vocabulary (size 259)"},
		{"id out of vocabulary in a batch", `{"model":"embed","input":[[3],[4,1000]]}`, 400, "invalid_value", "input[1]", "Token id 1000"},
		{"too long", `{"model":"embed","input":"abcdefghi"}`, 400, "context_length_exceeded", "input",
			"maximum context length is 8 tokens. However, you requested 9 tokens in the input for embedding generation"},
		{"too long in a batch", `{"model":"embed","input":["a","abcdefghi"]}`, 400, "context_length_exceeded", "input[1]", "9 tokens"},
		{"empty string", `{"model":"embed","input":""}`, 400, "invalid_value", "input", "no tokens"},
		{"bad encoding", `{"model":"embed","input":"hi","encoding_format":"int8"}`, 400, "invalid_value", "encoding_format", "base64"},
		{"dimensions zero", `{"model":"mrl","input":"hi","dimensions":0}`, 400, "invalid_value", "dimensions", "greater than 0"},
		{"dimensions not an integer", `{"model":"mrl","input":"hi","dimensions":"2"}`, 400, "invalid_type", "dimensions", ""},
		{"dimensions without matryoshka", `{"model":"embed","input":"hi","dimensions":2}`, 400, "invalid_value", "dimensions",
			`Model "embed" does not support matryoshka representation`},
		{"dimensions not listed", `{"model":"mrl-list","input":"hi","dimensions":3}`, 400, "invalid_value", "dimensions",
			`Model "mrl-list" only supports [2] matryoshka dimensions`},
		{"truncate zero", `{"model":"embed","input":"hi","truncate_prompt_tokens":0}`, 400, "invalid_value", "truncate_prompt_tokens", ""},
		{"truncate past the context", `{"model":"embed","input":"hi","truncate_prompt_tokens":9}`, 400, "invalid_value", "truncate_prompt_tokens",
			"greater than max_model_len (8)"},
		{"generating model", `{"model":"tiny","input":"hi"}`, 400, "invalid_value", "model", "does not support Embeddings API"},
		{"unknown model", `{"model":"nope","input":"hi"}`, 404, "model_not_found", "model", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeEmbedder()
			rr := serve(newTestServer(t, b), http.MethodPost, "/v1/embeddings", c.body)
			var body errorBody
			if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
				t.Fatalf("%v: %s", err, rr.Body)
			}
			param := ""
			if body.Error.Param != nil {
				param = *body.Error.Param
			}
			if rr.Code != c.status || body.Error.Code != c.code || param != c.param || !strings.Contains(body.Error.Message, c.message) {
				t.Errorf("%d %s; want %d %s param %q message containing %q", rr.Code, rr.Body, c.status, c.code, c.param, c.message)
			}
			if n := len(b.embedCalls()); n != 0 {
				t.Errorf("%d inputs reached the backend", n)
			}
		})
	}
}

// A pooling model refuses the generation endpoints, as vLLM does.
func TestGenerationRefusedOnPoolingModel(t *testing.T) {
	b := newFakeEmbedder()
	s := newTestServer(t, b)
	for _, c := range []struct{ path, body, api string }{
		{"/v1/chat/completions", `{"model":"embed","messages":[{"role":"user","content":"hi"}]}`, "Chat Completions"},
		{"/v1/completions", `{"model":"embed","prompt":"hi"}`, "Completions"},
	} {
		rr := serve(s, http.MethodPost, c.path, c.body)
		var body errorBody
		_ = json.Unmarshal(rr.Body.Bytes(), &body)
		want := "The model does not support " + c.api + ` API: "embed" is served as an embedding model`
		if rr.Code != 400 || !strings.HasPrefix(body.Error.Message, want) || body.Error.Param == nil || *body.Error.Param != "model" {
			t.Errorf("%s: %d %s", c.path, rr.Code, rr.Body)
		}
	}
	if n := len(b.generated()); n != 0 {
		t.Errorf("%d requests reached the backend", n)
	}
}

func TestEmbeddingsFailures(t *testing.T) {
	t.Run("engine error", func(t *testing.T) {
		b := newFakeEmbedder()
		b.engine = "vllm: engine answered 500"
		rr := serve(newTestServer(t, b), http.MethodPost, "/v1/embeddings", `{"model":"embed","input":["a","b"]}`)
		if rr.Code != 500 || !strings.Contains(rr.Body.String(), `"engine_error"`) || strings.Contains(rr.Body.String(), "vllm:") {
			t.Errorf("%d %s", rr.Code, rr.Body)
		}
	})
	t.Run("no workers", func(t *testing.T) {
		b := newFakeEmbedder()
		b.err = fmt.Errorf("%w: busy", ErrAllBusy)
		rr := serve(newTestServer(t, b), http.MethodPost, "/v1/embeddings", `{"model":"embed","input":"a"}`)
		if rr.Code != 503 || rr.Header().Get("Retry-After") == "" || !strings.Contains(rr.Body.String(), "all_workers_busy") {
			t.Errorf("%d %s", rr.Code, rr.Body)
		}
	})
	t.Run("one input fails, the others are cancelled", func(t *testing.T) {
		b := newFakeEmbedder()
		b.blockTok = toks("z")[0]
		b.err = nil
		// "z..." waits for its context; "a" fails with a transport error and must end it.
		fail := &failingEmbedder{fakeEmbedder: b, failTok: toks("a")[0]}
		rr := serve(newTestServer(t, fail), http.MethodPost, "/v1/embeddings", `{"model":"embed","input":["zz","a","zzz"]}`)
		if rr.Code != 502 || !strings.Contains(rr.Body.String(), "backend_unavailable") {
			t.Errorf("%d %s", rr.Code, rr.Body)
		}
	})
	t.Run("backend without embeddings", func(t *testing.T) {
		rr := serve(newTestServer(t, newFakeBackend()), http.MethodPost, "/v1/embeddings", `{"model":"tiny","input":"a"}`)
		if rr.Code != 404 || !strings.Contains(rr.Body.String(), "unknown_url") {
			t.Errorf("%d %s", rr.Code, rr.Body)
		}
	})
}

// failingEmbedder fails the inputs that start with failTok with a transport error.
type failingEmbedder struct {
	*fakeEmbedder
	failTok uint32
}

func (f *failingEmbedder) Embed(ctx context.Context, model, requestID string, tokens []uint32, dims int) (*messages.Embedding, error) {
	if tokens[0] == f.failTok {
		return nil, errors.New("remote: connection refused")
	}
	return f.fakeEmbedder.Embed(ctx, model, requestID, tokens, dims)
}

func TestEmbeddingsMetrics(t *testing.T) {
	b := newFakeEmbedder()
	s := newTestServer(t, b)
	if rr := serve(s, http.MethodPost, "/v1/embeddings", `{"model":"embed","input":["ab","cde"]}`); rr.Code != 200 {
		t.Fatalf("%d %s", rr.Code, rr.Body)
	}
	rr := serve(s, http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`turbine_frontend_requests_total{model="embed",endpoint="embeddings",request_type="unary",status="200"} 1`,
		`turbine_frontend_embedding_inputs_total{model="embed"} 2`,
		`turbine_frontend_embedding_tokens_total{model="embed"} 5`,
	} {
		if !strings.Contains(rr.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestBase64FloatsRoundTrip(t *testing.T) {
	for _, v := range [][]float32{{}, {1}, {0.1, -0.2, float32(math.Pi), -0, math.SmallestNonzeroFloat32, math.MaxFloat32}} {
		if got := decodeBase64Floats(t, encodeBase64Floats(v)); !slices.Equal(got, v) {
			t.Errorf("%v -> %v", v, got)
		}
	}
	// The bytes are little-endian float32: 1.0 is 00 00 80 3f.
	if got := encodeBase64Floats([]float32{1}); got != base64.StdEncoding.EncodeToString([]byte{0, 0, 0x80, 0x3f}) {
		t.Errorf("1.0 encodes as %s", got)
	}
}
