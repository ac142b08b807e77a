package engines

import "github.com/turbine-llm/turbine/messages"

// Engine names as model cards carry them (ModelCard.engine).
const (
	NameVLLM   = "vllm"
	NameSGLang = "sglang"
	NameTRTLLM = "trtllm"
	NameMocker = "mocker"
)

// Names lists every engine name above: the engines a model card, a profile or a worker
// can name.
var Names = []string{NameMocker, NameVLLM, NameSGLang, NameTRTLLM}

// Refusal is a sampling field an engine cannot honour.
type Refusal struct {
	// Field is the request field as the OpenAI API names it ("bad_words").
	Field string
	// Engine is the engine's display name ("SGLang").
	Engine string
	// Reason says why, in a sentence fragment without a final period.
	Reason string
}

// capability is one row of the table: a field, when a request uses it, and the engines
// that cannot honour that use (by card name, with the reason).
type capability struct {
	field   string
	used    func(s *messages.SamplingParams) bool
	refused map[string]string
}

// capabilities is the one table of what each engine cannot do with the sampling fields
// Turbine carries in messages.SamplingParams (docs/reference.md §20). The fields the
// gateway applies itself (stop strings, special tokens in the output, the chat template,
// prompt truncation) are absent: every engine gets them done. vLLM and the mock engine
// honour every field; an engine name this table does not know refuses nothing.
//
// Sources: SGLang python/sglang/srt/sampling/sampling_params.py (SamplingParams: no
// bad_words, no allowed_token_ids; repetition_penalty checked to be in (0, 2]);
// TensorRT-LLM tensorrt_llm/serve/openai_protocol.py (CompletionRequest refuses unknown
// fields: no bad_words, allowed_token_ids or cache_salt; its priority is a float in
// [0, 1] where higher runs first, so vLLM's integer priority has no faithful mapping;
// no prompt_logprobs, and its completions logprobs name the alternative tokens by their
// decoded text: docs/reference.md §21).
var capabilities = []capability{
	{
		field: "bad_words",
		used:  func(s *messages.SamplingParams) bool { return len(s.GetBadWords()) > 0 },
		refused: map[string]string{
			NameSGLang: "SGLang's sampling parameters have no bad_words",
			NameTRTLLM: "trtllm-serve's completions API has no bad_words",
		},
	},
	{
		field: "allowed_token_ids",
		used:  func(s *messages.SamplingParams) bool { return len(s.GetAllowedTokenIds()) > 0 },
		refused: map[string]string{
			NameSGLang: "SGLang's sampling parameters have no allowed_token_ids",
			NameTRTLLM: "trtllm-serve's completions API has no allowed_token_ids",
		},
	},
	{
		field: "repetition_penalty",
		used: func(s *messages.SamplingParams) bool {
			return s.RepetitionPenalty != nil && s.GetRepetitionPenalty() > 2
		},
		refused: map[string]string{
			NameSGLang: "SGLang takes a repetition_penalty in (0, 2] only",
		},
	},
	{
		field: "priority",
		used:  func(s *messages.SamplingParams) bool { return s.GetPriority() != 0 },
		refused: map[string]string{
			NameTRTLLM: "trtllm-serve's priority is a float in [0, 1] where higher runs first, not an integer where lower does",
		},
	},
	{
		field: "prompt_logprobs",
		used:  func(s *messages.SamplingParams) bool { return s.PromptLogprobs != nil },
		refused: map[string]string{
			NameTRTLLM: "trtllm-serve's completions API returns no prompt logprobs (completions echo with logprobs asks for them too)",
		},
	},
	{
		field: "logprobs",
		used:  func(s *messages.SamplingParams) bool { return s.Logprobs != nil },
		refused: map[string]string{
			NameTRTLLM: "trtllm-serve names the alternative tokens in its logprobs by their text, not their ids, and Turbine's TensorRT-LLM adapter does not read them",
		},
	},
	{
		field: "cache_salt",
		used:  func(s *messages.SamplingParams) bool { return s.GetCacheSalt() != "" },
		refused: map[string]string{
			NameTRTLLM: "trtllm-serve's completions API has no cache_salt",
		},
	},
}

// displayNames are the engines' names in messages.
var displayNames = map[string]string{NameVLLM: "vLLM", NameSGLang: "SGLang", NameTRTLLM: "TensorRT-LLM", NameMocker: "the mock engine"}

// Unsupported returns the first field of s, in the table's order, that engine (a model
// card's engine name: "vllm", "sglang", "trtllm", "mocker") cannot honour; ok is false
// when the engine can honour all of them. A nil s uses no field. Pure: no I/O.
func Unsupported(engine string, s *messages.SamplingParams) (r Refusal, ok bool) {
	if s == nil {
		return Refusal{}, false
	}
	for _, c := range capabilities {
		reason, refused := c.refused[engine]
		if refused && c.used(s) {
			return Refusal{Field: c.field, Engine: DisplayName(engine), Reason: reason}, true
		}
	}
	return Refusal{}, false
}
