package server

// JSON shapes of vLLM's OpenAI-compatible server (vllm/entrypoints/openai: completion
// and engine protocol). Field order follows vLLM's declarations so bodies read the same.

// completionRequest holds the fields of vLLM's CompletionRequest this engine reads;
// other fields are ignored, as vLLM does. Fields whose absence and null differ are raw.
type completionRequest struct {
	Model          *string        `json:"model"`
	Prompt         rawJSON        `json:"prompt"`
	MaxTokens      rawJSON        `json:"max_tokens"`
	MinTokens      *int           `json:"min_tokens"`
	N              *int           `json:"n"`
	Echo           *bool          `json:"echo"`
	Logprobs       *int           `json:"logprobs"`
	Stop           rawJSON        `json:"stop"`
	Stream         *bool          `json:"stream"`
	StreamOptions  *streamOptions `json:"stream_options"`
	Seed           *int64         `json:"seed"`
	Temperature    *float64       `json:"temperature"`
	TopP           *float64       `json:"top_p"`
	IgnoreEOS      *bool          `json:"ignore_eos"`
	StopTokenIDs   []int64        `json:"stop_token_ids"`
	ReturnTokenIDs *bool          `json:"return_token_ids"`
	// Logprobs (logprobs.go): PromptLogprobs is vLLM's prompt_logprobs extra, and
	// ReturnTokensAsTokenIDs names tokens "token_id:ID".
	PromptLogprobs         *int  `json:"prompt_logprobs"`
	ReturnTokensAsTokenIDs *bool `json:"return_tokens_as_token_ids"`
	// KVTransferParams is vLLM's kv_transfer_params (disaggregated serving).
	KVTransferParams rawJSON `json:"kv_transfer_params"`
	// StructuredOutputs is the output constraint (structured.go).
	StructuredOutputs *vllmStructuredOutputs `json:"structured_outputs"`
	// The sampling extras (sampling.go).
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	BadWords          []string           `json:"bad_words"`
	AllowedTokenIDs   []int64            `json:"allowed_token_ids"`
	Priority          *int               `json:"priority"`
	CacheSalt         *string            `json:"cache_salt"`
}

// vllmKVTransferParams is what a prefill leg returns (vLLM's NIXL connector,
// request_finished): the decode leg sends it back unchanged.
type vllmKVTransferParams struct {
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
}

type streamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats *bool `json:"continuous_usage_stats"`
}

// rawJSON keeps a field's raw bytes and whether it was present at all.
type rawJSON struct {
	set bool
	raw []byte
}

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	r.set = true
	r.raw = append([]byte(nil), b...)
	return nil
}

func (r rawJSON) isNull() bool { return r.set && string(r.raw) == "null" }

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type usageInfo struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"`
}

type completionChoice struct {
	Index          int      `json:"index"`
	Text           string   `json:"text"`
	Logprobs       any      `json:"logprobs"`
	FinishReason   *string  `json:"finish_reason"`
	StopReason     *uint32  `json:"stop_reason"`
	TokenIDs       []uint32 `json:"token_ids"`
	PromptLogprobs any      `json:"prompt_logprobs"`
	PromptTokenIDs []uint32 `json:"prompt_token_ids"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       *string            `json:"service_tier"`
	SystemFingerprint *string            `json:"system_fingerprint"`
	Usage             usageInfo          `json:"usage"`
	KVTransferParams  any                `json:"kv_transfer_params"`
}

type streamChoice struct {
	Index          int      `json:"index"`
	Text           string   `json:"text"`
	Logprobs       any      `json:"logprobs"`
	FinishReason   *string  `json:"finish_reason"`
	StopReason     *uint32  `json:"stop_reason"`
	PromptTokenIDs []uint32 `json:"prompt_token_ids"`
	TokenIDs       []uint32 `json:"token_ids"`
}

// streamChunk is a streamed chunk; usage is null except with continuous usage stats.
type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usageInfo     `json:"usage"`
	// KVTransferParams is set on the last content chunk of a streamed prefill leg.
	KVTransferParams *vllmKVTransferParams `json:"kv_transfer_params,omitempty"`
}

// usageChunk is the last chunk with stream_options.include_usage (vLLM drops its null
// fields: no choices' content, only usage).
type usageChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   usageInfo      `json:"usage"`
}

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen *int              `json:"max_model_len"` // null for a LoRA adapter
	Permission  []modelPermission `json:"permission"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type errorResponse struct {
	Error errorInfo `json:"error"`
}
