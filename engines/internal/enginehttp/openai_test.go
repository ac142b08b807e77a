package enginehttp

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestStopReason(t *testing.T) {
	cases := []struct {
		raw     string
		id      uint32
		isID    bool
		str     string
		wantErr bool
	}{
		{"", 0, false, "", false},
		{"null", 0, false, "", false},
		{"7", 7, true, "", false},
		{"4294967295", 4294967295, true, "", false},
		{`"END"`, 0, false, "END", false},
		{"4294967296", 0, false, "", true},
		{"-1", 0, false, "", true},
		{"1.5", 0, false, "", true},
		{"[1]", 0, false, "", true},
	}
	for _, tc := range cases {
		id, isID, str, err := StopReason(json.RawMessage(tc.raw))
		if (err != nil) != tc.wantErr || id != tc.id || isID != tc.isID || str != tc.str {
			t.Errorf("%q: %d %v %q %v", tc.raw, id, isID, str, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "stop_reason "+tc.raw) {
			t.Errorf("%q: error %v", tc.raw, err)
		}
	}
}

func TestUsageCachedTokens(t *testing.T) {
	var u Usage
	if err := json.Unmarshal([]byte(`{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`), &u); err != nil || u.CachedTokens() != 0 {
		t.Fatalf("%+v %v", u, err)
	}
	if err := json.Unmarshal([]byte(`{"prompt_tokens_details":{"cached_tokens":2}}`), &u); err != nil || u.CachedTokens() != 2 {
		t.Fatalf("%+v %v", u, err)
	}
}

func TestCompletionBody(t *testing.T) {
	seed, temp := int64(-3), 0.5
	cases := []struct {
		name    string
		c       Completion
		key     string
		on      bool
		want    string
		wantErr string
	}{
		{"minimal, vLLM's switch", Completion{PromptTokenIDs: []uint32{1}, MaxTokens: 1}, "return_token_ids", true,
			`{"prompt":[1],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`, ""},
		{"everything, trtllm-serve's switch", Completion{Model: "m", PromptTokenIDs: []uint32{0, 4294967295}, MaxTokens: 8,
			MinTokens: 2, IgnoreEOS: true, StopTokenIDs: []uint32{7}, Seed: &seed, Temperature: &temp, TopP: &temp, TopK: 40,
			Extra: map[string]any{"priority": 1, "model": "ignored", "detokenize": true, "stream": false}}, "detokenize", false,
			`{"priority":1,"model":"m","prompt":[0,4294967295],"max_tokens":8,"min_tokens":2,"ignore_eos":true,"stop_token_ids":[7],"seed":-3,"temperature":0.5,"top_p":0.5,"top_k":40,"stream":true,"stream_options":{"include_usage":true},"detokenize":false}`, ""},
		{"extra keys the request leaves unset pass", Completion{PromptTokenIDs: []uint32{1}, MaxTokens: 1,
			Extra: map[string]any{"model": "x", "top_k": 5}}, "return_token_ids", true,
			`{"model":"x","top_k":5,"prompt":[1],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`, ""},
		{"one answer, not a stream", Completion{PromptTokenIDs: []uint32{1}, MaxTokens: 1, NoStream: true,
			Extra: map[string]any{"kv_transfer_params": json.RawMessage(`{"do_remote_decode":true}`), "stream_options": 1}}, "return_token_ids", true,
			`{"kv_transfer_params":{"do_remote_decode":true},"prompt":[1],"max_tokens":1,"stream":false,"return_token_ids":true}`, ""},
		{"NaN", Completion{PromptTokenIDs: []uint32{1}, MaxTokens: 1, TopP: func() *float64 { v := math.NaN(); return &v }()},
			"detokenize", false, "", "top_p: NaN is not a finite number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := CompletionBody(tc.c, tc.key, tc.on)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(b) != tc.want || !json.Valid(b) {
				t.Fatalf("body %s %v\nwant %s", b, err, tc.want)
			}
		})
	}
}
