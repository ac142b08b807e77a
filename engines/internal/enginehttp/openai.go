package enginehttp

import (
	"encoding/json"
	"fmt"
	"math"
)

// Usage is the usage member of an OpenAI-style completion chunk (vLLM, trtllm-serve).
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// CachedTokens is prompt_tokens_details.cached_tokens (0 when absent).
func (u *Usage) CachedTokens() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// StopReason reads a choice's stop_reason (vLLM, trtllm-serve): absent or null, the stop
// token id that ended the request (an integer in 0..2^32-1; isID), or the stop string.
// Errors: any other value.
func StopReason(raw json.RawMessage) (id uint32, isID bool, str string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, "", nil
	}
	var n float64
	switch {
	case json.Unmarshal(raw, &n) == nil && n >= 0 && n <= math.MaxUint32 && n == math.Trunc(n):
		return uint32(n), true, "", nil
	case json.Unmarshal(raw, &str) == nil:
		return 0, false, str, nil
	}
	return 0, false, "", fmt.Errorf("stop_reason %.100s is neither a token id nor a string", raw)
}
