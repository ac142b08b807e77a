package vllm

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines/internal/enginehttp"
)

func TestCompletionBodyIsTheRequestAsJSON(t *testing.T) {
	seed, temp, topP := int64(-3), 0.7, 1e-3
	for _, r := range []CompletionRequest{
		{PromptTokenIDs: []uint32{1}, MaxTokens: 1},
		{Model: "m \"q\"", PromptTokenIDs: []uint32{0, 4294967295, 7}, MaxTokens: 5, MinTokens: 2, IgnoreEOS: true,
			StopTokenIDs: []uint32{2, 3}, Seed: &seed, Temperature: &temp, TopP: &topP,
			Extra: map[string]any{"kv_transfer_params": map[string]any{"a": 1}, "prompt": "overridden", "z": nil}},
	} {
		b, err := completionBody(r)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := map[string]any{}
		for k, v := range r.Extra {
			want[k] = v
		}
		if r.Model != "" {
			want["model"] = r.Model
		}
		want["prompt"] = r.PromptTokenIDs
		want["max_tokens"] = r.MaxTokens
		if r.MinTokens > 0 {
			want["min_tokens"] = r.MinTokens
		}
		if r.IgnoreEOS {
			want["ignore_eos"] = true
		}
		if len(r.StopTokenIDs) > 0 {
			want["stop_token_ids"] = r.StopTokenIDs
		}
		if r.Seed != nil {
			want["seed"] = *r.Seed
		}
		if r.Temperature != nil {
			want["temperature"] = *r.Temperature
		}
		if r.TopP != nil {
			want["top_p"] = *r.TopP
		}
		want["stream"] = true
		want["stream_options"] = map[string]any{"include_usage": true}
		want["return_token_ids"] = true
		wb, _ := json.Marshal(want)
		var wantTree map[string]any
		_ = json.Unmarshal(wb, &wantTree)
		if !reflect.DeepEqual(got, wantTree) {
			t.Errorf("body %s\nwant  %s", b, wb)
		}
	}
}

func TestCutPromptTokenIDs(t *testing.T) {
	for _, tc := range []struct {
		frame string
		ids   []uint32
		ok    bool
		// skip: skipPromptTokenIDs cuts the frame (it checks the array's bytes only).
		skip bool
	}{
		{`{"choices":[{"text":"a","prompt_token_ids":[1,2,3],"token_ids":[4]}]}`, []uint32{1, 2, 3}, true, true},
		{`{"choices":[{"prompt_token_ids": [ 0, 4294967295 ]}]}`, []uint32{0, 4294967295}, true, true},
		{`{"choices":[{"prompt_token_ids":[]}]}`, []uint32{}, true, true},
		{`{"choices":[{"prompt_token_ids":[4294967296]}]}`, nil, false, true},
		{`{"choices":[{"prompt_token_ids":[01]}]}`, nil, false, true},
		{`{"choices":[{"prompt_token_ids":[1,]}]}`, nil, false, true},
		{`{"choices":[{"prompt_token_ids":[1 2]}]}`, nil, false, true},
		{`{"choices":[{"prompt_token_ids":[1.5]}]}`, nil, false, false},
		{`{"choices":[{"prompt_token_ids":[-1]}]}`, nil, false, false},
		{`{"choices":[{"prompt_token_ids":["1"]}]}`, nil, false, false},
		{`{"choices":[{"prompt_token_ids":[[1],2]}]}`, nil, false, false},
		{`{"choices":[{"prompt_token_ids":null}]}`, nil, false, false},
		{`{"choices":[{"text":"\"prompt_token_ids\":[9]"}]}`, nil, false, false},
		{`{"choices":[{"prompt_token_ids":[1]},{"prompt_token_ids":[2]}]}`, nil, false, false},
		{`{"choices":[{"text":"x"}]}`, nil, false, false},
	} {
		skipCut, skipped := skipPromptTokenIDs([]byte(tc.frame))
		ids, cut, ok := cutPromptTokenIDs([]byte(tc.frame))
		if skipped != tc.skip || (ok && string(skipCut) != string(cut)) {
			t.Errorf("%s: skipped %v (%s), want %v and the cut %s", tc.frame, skipped, skipCut, tc.skip, cut)
		}
		if ok != tc.ok || !slices.Equal(ids, tc.ids) {
			t.Errorf("%s: ids %v ok %v, want %v %v", tc.frame, ids, ok, tc.ids, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		// The cut frame is the same JSON with [] for the ids.
		var orig, got map[string]any
		if err := json.Unmarshal([]byte(tc.frame), &orig); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(cut, &got); err != nil {
			t.Fatalf("%s: cut frame %s: %v", tc.frame, cut, err)
		}
		orig["choices"].([]any)[0].(map[string]any)["prompt_token_ids"] = []any{}
		if !reflect.DeepEqual(orig, got) {
			t.Errorf("%s: cut frame %s", tc.frame, cut)
		}
	}
}

// BenchmarkCutPromptTokenIDs reads the prompt ids of a first stream frame of a 4,096-token
// prompt; reports µs per frame.
func BenchmarkCutPromptTokenIDs(b *testing.B) {
	ids := make([]uint32, 4096)
	for i := range ids {
		ids[i] = uint32(i*7919) % 100000
	}
	frame, _ := json.Marshal(map[string]any{"id": "cmpl-1", "choices": []any{map[string]any{
		"index": 0, "text": "a", "token_ids": []uint32{5}, "prompt_token_ids": ids, "finish_reason": nil}}})
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := cutPromptTokenIDs(frame); !ok {
			b.Fatal("not cut")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/frame")
}

// BenchmarkFirstFrame reads and decodes the first stream frame of a 4,096-token prompt as
// the worker does (an SSE reader made for the stream, its first event, its decoding, the
// reader released),
// with the prompt's ids read and ignored (the worker's case); reports µs per frame.
func BenchmarkFirstFrame(b *testing.B) {
	ids := make([]uint32, 4096)
	for i := range ids {
		ids[i] = uint32(i*7919) % 100000
	}
	frame, _ := json.Marshal(map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "text": "a", "token_ids": []uint32{5}, "prompt_token_ids": ids,
			"logprobs": nil, "finish_reason": nil, "stop_reason": nil}}, "usage": nil})
	body := append(append([]byte("data: "), frame...), "\n\n"...)
	for _, v := range []struct {
		name   string
		decode func([]byte) (*Chunk, *enginehttp.Usage, error)
	}{{"prompt-read", decodeFrame}, {"prompt-ignored", decodeFrameIgnoringPrompt}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				sse := enginehttp.NewSSEReader(bytes.NewReader(body), "vllm", maxFrameBytes)
				data, err := sse.Next()
				if err != nil {
					b.Fatal(err)
				}
				if ch, _, err := v.decode(data); err != nil || len(ch.TokenIDs) != 1 {
					b.Fatal(ch, err)
				}
				sse.Release()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/frame")
		})
	}
}
