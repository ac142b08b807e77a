package main

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/turbine-llm/turbine/engines/mocker"
)

// `turbine serve --runner pooling` serves embeddings to the OpenAI Go SDK, as floats and
// as base64, and refuses chat on the embedding model.
func TestServePoolingEmbeddingsSDK(t *testing.T) {
	s := startServe(t, 2, "--runner", "pooling")
	client := sdk(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	texts := []string{"The quick brown fox", "jumps over", "the lazy dog", "The quick brown fox"}
	embed := func(format openai.EmbeddingNewParamsEncodingFormat, input openai.EmbeddingNewParamsInputUnion) *openai.CreateEmbeddingResponse {
		t.Helper()
		res, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "turbine-mock", Input: input, EncodingFormat: format})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		return res
	}
	floats := embed(openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts})
	b64 := embed(openai.EmbeddingNewParamsEncodingFormatBase64, openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts})
	if len(floats.Data) != len(texts) || len(b64.Data) != len(texts) || floats.Model != "turbine-mock" {
		t.Fatalf("%d and %d entries for %d inputs, model %q", len(floats.Data), len(b64.Data), len(texts), floats.Model)
	}
	if floats.Usage.PromptTokens <= 0 || floats.Usage.TotalTokens != floats.Usage.PromptTokens || b64.Usage.PromptTokens != floats.Usage.PromptTokens {
		t.Errorf("usage %+v and %+v", floats.Usage, b64.Usage)
	}
	for i, d := range floats.Data {
		v, w := d.Embedding, b64.Data[i].Embedding
		if d.Index != int64(i) || len(v) != mocker.DefaultEmbeddingSize || len(w) != len(v) {
			t.Fatalf("data[%d]: index %d, %d and %d elements", i, d.Index, len(v), len(w))
		}
		var n float64
		for j := range v {
			n += v[j] * v[j]
			if float32(v[j]) != float32(w[j]) {
				t.Fatalf("data[%d][%d]: float %v, base64 %v", i, j, v[j], w[j])
			}
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("data[%d]: norm² %v", i, n)
		}
	}
	same := func(a, b []float64) bool {
		for j := range a {
			if float32(a[j]) != float32(b[j]) {
				return false
			}
		}
		return true
	}
	if !same(floats.Data[0].Embedding, floats.Data[3].Embedding) || same(floats.Data[0].Embedding, floats.Data[1].Embedding) {
		t.Error("equal texts must embed alike (on any worker), different ones not")
	}
	// Token ids: one list, and a batch of lists; the same ids give the same vector.
	one := embed(openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{10, 20, 30}})
	batch := embed(openai.EmbeddingNewParamsEncodingFormatBase64, openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1, 2}, {10, 20, 30}}})
	if len(batch.Data) != 2 || !same(one.Data[0].Embedding, batch.Data[1].Embedding) || one.Usage.PromptTokens != 3 || batch.Usage.PromptTokens != 5 {
		t.Errorf("token inputs: %d entries, usage %+v and %+v", len(batch.Data), one.Usage, batch.Usage)
	}
	// The embedding model refuses chat, with a 400.
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "turbine-mock",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Errorf("chat on an embedding model: %v", err)
	}
}
