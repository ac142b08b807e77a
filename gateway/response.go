package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/turbine-llm/turbine/messages"
)

// Response bodies and stream chunks, in the shapes of OpenAI's chat completions and
// completions APIs (as vLLM serves them). A request with several choices (n > 1, a batch
// of prompts) renders each through its own responder (index) and merges them (choices.go).

// Usage is OpenAI's usage object. Token counts are in tokens.
type Usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
}

// PromptTokensDetails carries the prompt tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// TurbineInfo is the `turbine` extension object added to a response (and to a stream's
// finishing chunk) when the request asked for it with `turbine.return_worker` or
// `turbine.explain_route`.
type TurbineInfo struct {
	// WorkerID names the worker that served the request.
	WorkerID string `json:"worker_id"`
	// RequestID is the id the request ran under (X-Request-Id).
	RequestID string `json:"request_id"`
	// CachedTokens is the number of prompt tokens the worker found in its prefix cache.
	CachedTokens int `json:"cached_tokens"`
	// Disagg is the disaggregation decision (DisaggInfo.Decision); absent when the
	// backend does not report one.
	Disagg string `json:"disagg,omitempty"`
	// PrefillWorkerID names the worker that ran the prefill leg (Disagg "remote" only).
	PrefillWorkerID string `json:"prefill_worker_id,omitempty"`
	// DecodeWorkerID names the decode worker (absent for Disagg "aggregated").
	DecodeWorkerID string `json:"decode_worker_id,omitempty"`
	// Route is the router's explained decision (`turbine.explain_route`, explain.go);
	// absent unless asked, or when the backend gives none.
	Route *RouteExplanation `json:"route,omitempty"`
}

// usageNull is the JSON null every stream chunk carries when include_usage is on.
var usageNull = json.RawMessage("null")

// ---- chat completions ----

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
	// PromptLogprobs is vLLM's prompt_logprobs (logprobs.go); absent unless asked.
	PromptLogprobs json.RawMessage `json:"prompt_logprobs,omitempty"`
	// PromptTokenIDs (return_token_ids) and PromptText (return_prompt_text) are vLLM's;
	// absent unless asked (vllmfields.go).
	PromptTokenIDs json.RawMessage `json:"prompt_token_ids,omitempty"`
	PromptText     *string         `json:"prompt_text,omitempty"`
	Turbine        *TurbineInfo    `json:"turbine,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatRespMessage `json:"message"`
	Logprobs     any             `json:"logprobs"` // *chatLogprobs (logprobs.go) or nil
	FinishReason string          `json:"finish_reason"`
	// StopReason is vLLM's stop_reason: the stop string or stop token id that ended the
	// answer, else null (vllmfields.go).
	StopReason json.RawMessage `json:"stop_reason"`
	// TokenIDs are the output's token ids (return_token_ids); absent unless asked.
	TokenIDs json.RawMessage `json:"token_ids,omitempty"`
}

// chatRespMessage is the answer's message. Content is null when the model only called
// tools; reasoning (vLLM's field) and reasoning_content (what older clients read) carry
// the same chain of thought, absent when there is none.
type chatRespMessage struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	Reasoning        *string        `json:"reasoning,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
	Refusal          *string        `json:"refusal"`
}

// chatToolCall is one tool call of a message, or (Index set, streams) of a delta: the
// first delta of a call carries id, type and name, later ones argument fragments only.
type chatToolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"` // "function"
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	// Usage is absent without include_usage, null on every chunk with it, and the usage
	// object on the final (choices: []) chunk.
	Usage json.RawMessage `json:"usage,omitempty"`
	// PromptTokenIDs and PromptText are on the first chunk, when asked (as on
	// chatCompletion).
	PromptTokenIDs json.RawMessage `json:"prompt_token_ids,omitempty"`
	PromptText     *string         `json:"prompt_text,omitempty"`
	Turbine        *TurbineInfo    `json:"turbine,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"` // *chatLogprobs (logprobs.go) or nil
	FinishReason *string   `json:"finish_reason"`
	// StopReason is on the finishing chunk only (null or the value), as vLLM sends it.
	StopReason json.RawMessage `json:"stop_reason,omitempty"`
	// TokenIDs are the output token ids new since the last chunk (return_token_ids).
	TokenIDs json.RawMessage `json:"token_ids,omitempty"`
}

type chatDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	Reasoning        *string        `json:"reasoning,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
}

// ---- completions ----

type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "text_completion", also for stream chunks
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	// Usage: always set in a full response; in chunks as chatChunk.Usage.
	Usage   json.RawMessage `json:"usage,omitempty"`
	Turbine *TurbineInfo    `json:"turbine,omitempty"`
}

type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"` // *textLogprobs (logprobs.go) or nil
	FinishReason *string `json:"finish_reason"`
	// StopReason is vLLM's stop_reason (as chatChoice's); null on the chunks before a
	// stream's finishing one, as vLLM sends them.
	StopReason json.RawMessage `json:"stop_reason"`
	// PromptTokenIDs and TokenIDs are vLLM's return_token_ids (in a stream, the prompt's
	// on the choice's first chunk, the output's new ones on each); absent unless asked.
	PromptTokenIDs json.RawMessage `json:"prompt_token_ids,omitempty"`
	TokenIDs       json.RawMessage `json:"token_ids,omitempty"`
	// PromptLogprobs is vLLM's prompt_logprobs (logprobs.go); absent unless asked.
	PromptLogprobs json.RawMessage `json:"prompt_logprobs,omitempty"`
}

// ---- models ----

type modelList struct {
	Object string      `json:"object"` // "list"
	Data   []modelInfo `json:"data"`
}

// modelInfo is one /v1/models entry: OpenAI's fields, then vLLM's (root, parent,
// max_model_len, permission: docs/reference.md §5.1), then Turbine's.
type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root is what the model was loaded from (modelRoot), a LoRA adapter's folder for an
	// adapter; Parent is null but for a LoRA adapter, whose base model it names (as vLLM
	// lists adapters).
	Root   string  `json:"root"`
	Parent *string `json:"parent"`
	// MaxModelLen is the context length in tokens; null when unknown, and for a LoRA
	// adapter (as vLLM lists them: its base model's applies).
	MaxModelLen *int32            `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"` // one, vLLM's default
	// ToolCallParser and ReasoningParser name the model's output parsers (vLLM's names),
	// ParserSource how they were chosen ("flag", "detected"); absent when none.
	ToolCallParser  string `json:"tool_call_parser,omitempty"`
	ReasoningParser string `json:"reasoning_parser,omitempty"`
	ParserSource    string `json:"parser_source,omitempty"`
}

// modelInfoOf is the /v1/models entry of card.
func modelInfoOf(card *messages.ModelCard, created int64, ownedBy string) modelInfo {
	var maxLen *int32
	if n := card.GetContextLength(); n > 0 {
		maxLen = &n
	}
	info := modelInfo{ID: card.GetModel(), Object: "model", Created: created, OwnedBy: ownedBy, Root: modelRoot(card), MaxModelLen: maxLen,
		Permission:     []modelPermission{defaultPermission(card.GetModel(), created)},
		ToolCallParser: card.GetToolCallParser(), ReasoningParser: card.GetReasoningParser(), ParserSource: card.GetParserSource()}
	if a := card.GetLora(); a != nil {
		parent := a.GetParent()
		info.Root, info.Parent, info.MaxModelLen = a.GetPath(), &parent, nil
	}
	return info
}

// responder assembles the bodies and chunks of one request's answer; every chunk has the
// same id, created and model.
type responder struct {
	chat         bool
	id           string
	created      int64
	model        string
	includeUsage bool
	// usageNow, when not nil, is the usage so far that every chunk carries
	// (answerInfo.Usage).
	usageNow func() Usage
	// index is the choice's index (0 unless the request has several choices).
	index int
	// lp renders the choice's logprobs (nil: none asked).
	lp *logprobSink
	// ids renders the choice's token ids (nil: not asked); promptText is the rendered
	// chat prompt (nil unless return_prompt_text); stop is the stop_reason of the
	// finishing chunk (vllmfields.go).
	ids        *tokenIDSink
	promptText *string
	stop       json.RawMessage
}

func mustJSON(v any) json.RawMessage {
	b, err := encodeJSON(v)
	if err != nil {
		panic("gateway: marshal response: " + err.Error())
	}
	return b
}

// chunkUsage is a chunk's usage: null with include_usage, the usage so far with
// continuous_usage_stats too (vLLM's: prompt, completion and total tokens), else absent.
func (r *responder) chunkUsage() json.RawMessage {
	switch {
	case r.usageNow != nil:
		u := r.usageNow()
		return mustJSON(continuousUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens})
	case r.includeUsage:
		return usageNull
	}
	return nil
}

// continuousUsage is a chunk's usage so far (vLLM's continuous_usage_stats).
type continuousUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// first is the chunk that opens a chat stream (delta with the role); completions
// streams have none.
func (r *responder) first() (any, bool) {
	if !r.chat {
		return nil, false
	}
	empty := ""
	return chatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.model,
		Choices: []chatChunkChoice{{Index: r.index, Delta: chatDelta{Role: "assistant", Content: &empty}}},
		Usage:   r.chunkUsage(), PromptTokenIDs: r.ids.promptIDs(), PromptText: r.promptText}, true
}

// chunk is one stream chunk: a chat delta, or for completions its content as text;
// finish is nil except on the stream's finishing chunk, which carries r.stop as its
// stop_reason.
func (r *responder) chunk(d chatDelta, finish *string, info *TurbineInfo) any {
	var stop json.RawMessage
	if finish != nil {
		stop = r.stop
		if stop == nil {
			stop = json.RawMessage("null")
		}
	}
	if r.chat {
		return chatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.model,
			Choices: []chatChunkChoice{{Index: r.index, Delta: d, Logprobs: r.lp.chatChunk(), FinishReason: finish,
				StopReason: stop, TokenIDs: r.ids.pending()}},
			Usage: r.chunkUsage(), Turbine: info}
	}
	text := ""
	if d.Content != nil {
		text = *d.Content
	}
	text, lps := r.lp.textChunk(text)
	return textCompletion{ID: r.id, Object: "text_completion", Created: r.created, Model: r.model,
		Choices: []textChoice{{Index: r.index, Text: text, Logprobs: lps, FinishReason: finish, StopReason: stop,
			PromptTokenIDs: r.ids.promptOnce(), TokenIDs: r.ids.pending()}},
		Usage: r.chunkUsage(), Turbine: info}
}

// usageChunk is the final chunk of a stream with include_usage: no choices, the usage.
func (r *responder) usageChunk(u Usage) any {
	if r.chat {
		return chatChunk{ID: r.id, Object: "chat.completion.chunk", Created: r.created, Model: r.model,
			Choices: []chatChunkChoice{}, Usage: mustJSON(u)}
	}
	return textCompletion{ID: r.id, Object: "text_completion", Created: r.created, Model: r.model,
		Choices: []textChoice{}, Usage: mustJSON(u)}
}

// encodeJSON is json.Marshal without HTML escaping (OpenAI bodies write "<" and ">" as
// is, and messages like "expected a value >= 1" stay readable).
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
