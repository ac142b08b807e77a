package vllm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeFrame: a stream frame from an engine is external input. decodeFrame never
// panics, and what it makes of a frame is what encoding/json makes of it: the first
// frame's prompt_token_ids, which it reads by hand for speed, are the ids encoding/json
// finds in the first choice (the reference), and every other field is decoded by
// encoding/json itself.
func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"text":"Hi","token_ids":[13],"prompt_token_ids":[1, 2,3],"finish_reason":null,"stop_reason":null,"logprobs":null}],"usage":null}`))
	f.Add([]byte(`{"choices":[{"text":"","token_ids":[],"prompt_token_ids":[],"finish_reason":"length","stop_reason":7}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	f.Add([]byte(`{"error":{"message":"m","type":"BadRequestError","param":null,"code":400}}`))
	f.Add([]byte(`{"choices":[{"text":"a","token_ids":[5],"finish_reason":"stop","stop_reason":"</s>"}],"kv_transfer_params":{"prompt_token_ids":[9]}}`))
	f.Add([]byte(`{"choices":[{"text":"a","token_ids":[5],"prompt_token_ids":[4294967295,0]}]}`))
	// The key in another case than the byte search's: the cut falls elsewhere.
	f.Add([]byte(`{"choices":[{"Prompt_token_ids":[5],"token_ids":[1],"finish_reason":"length"}],"kv_transfer_params":{"prompt_token_ids":[1,` + "\t" + `2]}}`))
	f.Add([]byte(`{"choices":[{"Prompt_token_ids":[5],"token_ids":[1],"finish_reason":"length"}],"kv_transfer_params":{"prompt_token_ids":[4294967296]}}`))
	f.Add([]byte(`{"choices":[{"Prompt_token_ids":[5],"token_ids":[1],"logprobs":{"prompt_token_ids":[1,2]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, _, err := decodeFrame(data)
		ignoringPrompt(t, data, ch, err)
		if err != nil || ch == nil {
			return
		}
		var ref struct {
			Choices []struct {
				PromptTokenIDs []uint32 `json:"prompt_token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("decoded a frame encoding/json refuses (%v): %q", err, data)
		}
		want := ref.Choices[0].PromptTokenIDs
		if len(want) == 0 && len(ch.PromptTokenIDs) == 0 {
			return
		}
		if !reflect.DeepEqual(ch.PromptTokenIDs, want) {
			t.Fatalf("prompt_token_ids %v; encoding/json reads %v in %q", ch.PromptTokenIDs, want, data)
		}
	})
}

// ignoringPrompt checks decodeFrameIgnoringPrompt against decodeFrame's answer (ch, err) for
// data: where decodeFrame decodes the frame, it decodes the same chunk without the
// prompt's ids; it may decode more frames, but only frames that differ from one
// decodeFrame decodes in the prompt_token_ids array alone, whose bytes it does not parse.
func ignoringPrompt(t *testing.T, data []byte, ch *Chunk, err error) {
	t.Helper()
	got, _, gotErr := decodeFrameIgnoringPrompt(data)
	if got != nil && got.PromptTokenIDs != nil {
		t.Fatalf("prompt ids %v kept in %q", got.PromptTokenIDs, data)
	}
	if err == nil {
		if gotErr != nil {
			t.Fatalf("refused (%v) a frame decodeFrame decodes: %q", gotErr, data)
		}
		if ch != nil {
			want := *ch
			want.PromptTokenIDs = nil
			if got == nil || !reflect.DeepEqual(*got, want) {
				t.Fatalf("chunk %+v, decodeFrame's %+v, in %q", got, want, data)
			}
		}
		return
	}
	if gotErr == nil {
		cut, ok := skipPromptTokenIDs(data)
		if !ok {
			t.Fatalf("decoded %q, which decodeFrame refuses (%v), without skipping its prompt ids", data, err)
		}
		if _, _, err := decodeFrame(cut); err != nil {
			t.Fatalf("decoded %q, which differs from a frame decodeFrame decodes in more than the prompt's ids (%v)", data, err)
		}
	}
}
