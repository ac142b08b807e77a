package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/vllm"
)

func poolingOptions(t *testing.T, d DialectName) Options {
	o := testOptions(t)
	o.Dialect, o.Runner, o.EmbeddingSize = d, RunnerPooling, 64
	return o
}

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Each dialect's engine adapter reads the mock pooling engine's embeddings: the
// vector is mocker.Embed of the tokens.
func TestPoolingEmbeddingsThroughAdapters(t *testing.T) {
	for _, c := range []struct {
		dialect DialectName
		connect func(url string) engines.Engine
	}{
		{DialectVLLM, func(url string) engines.Engine { return vllm.Connect(url, vllm.EngineOptions{Model: "turbine-mock"}) }},
		{DialectSGLang, func(url string) engines.Engine { return sglang.Connect(url, 16) }},
	} {
		t.Run(string(c.dialect), func(t *testing.T) {
			_, hs := startServer(t, poolingOptions(t, c.dialect))
			e := c.connect(hs.URL).(engines.Embedder)
			tokens := []uint32{100, 200, 300}
			for _, dims := range []int{0, 16} {
				v, n, err := e.Embed(context.Background(), "r", tokens, dims)
				if err != nil {
					t.Fatal(err)
				}
				if want := mocker.Embed(tokens, 64, dims); !slices.Equal(v, want) || n != 3 {
					t.Errorf("dims %d: %d elements, %d tokens; want %d", dims, len(v), n, len(want))
				}
			}
		})
	}
}

// The answers' shapes: vLLM's EmbeddingResponse (id, created), SGLang's (neither);
// base64 and batches of text.
func TestPoolingEmbeddingsAnswers(t *testing.T) {
	for _, d := range []DialectName{DialectVLLM, DialectSGLang} {
		_, hs := startServer(t, poolingOptions(t, d))
		status, body := postBody(t, hs.URL+"/v1/embeddings", `{"model":"turbine-mock","input":["hello","world"],"encoding_format":"base64"}`)
		var a map[string]any
		if status != 200 || json.Unmarshal([]byte(body), &a) != nil {
			t.Fatalf("%s: %d %s", d, status, body)
		}
		_, hasID := a["id"]
		data, _ := a["data"].([]any)
		if hasID != (d == DialectVLLM) || a["object"] != "list" || len(data) != 2 {
			t.Errorf("%s: %s", d, body)
		}
		for i, it := range data {
			e := it.(map[string]any)
			s, ok := e["embedding"].(string)
			if !ok || len(s) != base64.StdEncoding.EncodedLen(4*64) || e["index"] != float64(i) {
				t.Errorf("%s: data[%d] %v", d, i, e)
			}
		}
	}
}

func TestPoolingRefusals(t *testing.T) {
	_, pool := startServer(t, poolingOptions(t, DialectVLLM))
	if status, body := postBody(t, pool.URL+"/v1/completions", `{"model":"turbine-mock","prompt":"hi"}`); status != 400 ||
		!strings.Contains(body, "The model does not support Completions API") {
		t.Errorf("completions on a pooling engine: %d %s", status, body)
	}
	_, sgl := startServer(t, poolingOptions(t, DialectSGLang))
	if status, body := postBody(t, sgl.URL+"/generate", `{"input_ids":[1,2],"sampling_params":{"max_new_tokens":1}}`); status != 400 {
		t.Errorf("generate on an SGLang pooling engine: %d %s", status, body)
	}
	_, gen := startServer(t, testOptions(t))
	if status, body := postBody(t, gen.URL+"/v1/embeddings", `{"model":"turbine-mock","input":"hi"}`); status != 400 ||
		!strings.Contains(body, "The model does not support Embeddings API") {
		t.Errorf("embeddings on a generating engine: %d %s", status, body)
	}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"trtllm", func(o *Options) { o.Dialect = DialectTRTLLM }, "trtllm-serve serves no embeddings"},
		{"prefill role", func(o *Options) { o.Role = RolePrefill }, "no disaggregated role"},
		{"unknown runner", func(o *Options) { o.Runner = "embed" }, `runner "embed"`},
		{"negative size", func(o *Options) { o.EmbeddingSize = -1 }, "--embedding-size -1"},
	} {
		o := poolingOptions(t, DialectVLLM)
		c.edit(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
