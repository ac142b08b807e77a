package launcher

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/turbine-llm/turbine/engines"
)

// Engine names, as `turbine node --engine` and messages.StartWorker.engine spell them.
const (
	EngineMocker = "mocker" // turbine's own mock engine (Mocker), no GPU
	EngineVLLM   = "vllm"   // vLLM's OpenAI server (`vllm serve`)
	EngineSGLang = "sglang" // SGLang (`python -m sglang.launch_server`)
	EngineTRTLLM = "trtllm" // TensorRT-LLM's OpenAI server (`trtllm-serve`)
)

// Engines lists the engine names New launches, in the order help texts name them.
var Engines = []string{EngineVLLM, EngineSGLang, EngineTRTLLM}

// Role is a worker's part in disaggregated serving: "" (aggregated: prefill and decode),
// RolePrefill or RoleDecode.
type Role string

// Roles of disaggregated serving.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Bootstrapper is engines.Bootstrapper: launchers whose prefill engines advertise a
// bootstrap address (SGLang, and the mock engine in SGLang's dialect) implement it.
type Bootstrapper = engines.Bootstrapper

// Default executables.
const (
	DefaultVLLMExecutable   = "vllm"
	DefaultTRTLLMExecutable = "trtllm-serve"
	DefaultPython           = "python3"
	// DefaultKVEventBufferSize is trtllm-serve's kv_cache_config.event_buffer_max_size
	// (KV events kept between two polls of POST /kv_cache_events; 0 turns events off).
	DefaultKVEventBufferSize = 16384
)

// Spec is an engine-neutral description of one worker's engine process. Zero limits
// leave the engine's own default (the engine derives it from the model or the GPU);
// BlockSize is always rendered, since KV-aware routing needs the engine's block size to be
// the router's.
//
// Data parallelism: Turbine runs one engine per worker and subscribes to one KV event
// publisher per engine. An engine started with data parallelism through Extra (vLLM's
// --data-parallel-size, SGLang's --dp-size with --enable-dp-attention) publishes each
// rank's events on the endpoint's port + rank; only rank 0's reach the router.
type Spec struct {
	// Engine is EngineVLLM, EngineSGLang or EngineTRTLLM.
	Engine string
	// ModelPath is the model folder or hub name the engine loads (vLLM's positional model,
	// SGLang's --model-path, trtllm-serve's positional model).
	ModelPath string
	// ServedModelName is the model id clients name (default: ModelPath, as vLLM and SGLang
	// do). trtllm-serve has no such flag: it serves the folder's base name, which the
	// client sends (TRTLLM).
	ServedModelName string
	// TensorParallelSize is the number of GPUs the engine shards the model over (≥ 1).
	TensorParallelSize int
	// GPUMemoryUtilization is the fraction (0, 1] of GPU memory the engine may take for
	// weights and KV cache (vLLM's --gpu-memory-utilization, SGLang's
	// --mem-fraction-static, TensorRT-LLM's free_gpu_memory_fraction, which counts the
	// memory left after the weights). 0: the engine's default.
	GPUMemoryUtilization float64
	// BlockSize is the KV block size in tokens (vLLM's --block-size, SGLang's --page-size,
	// TensorRT-LLM's tokens_per_block).
	BlockSize int
	// MaxModelLen is the context length in tokens (prompt + output); 0: derived by the
	// engine from the model's config.json.
	MaxModelLen int
	// MaxNumSeqs is the most requests running at once; 0: the engine's default.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the most tokens one engine step computes (SGLang: the chunked
	// prefill size, which must be a multiple of BlockSize); 0: the engine's default.
	MaxNumBatchedTokens int
	// Role is the worker's part in disaggregated serving ("" for aggregated).
	Role Role
	// BootstrapPort is an SGLang prefill engine's --disaggregation-bootstrap-port; 0
	// picks a free one at each Command (Bootstrap names it). Other engines ignore it.
	BootstrapPort int
	// Executable runs vLLM (default "vllm") or trtllm-serve (default "trtllm-serve"); a
	// name is looked up on PATH when the engine starts.
	Executable string
	// Python runs SGLang's launch_server module (default "python3").
	Python string
	// KVEventBufferSize is TensorRT-LLM's event_buffer_max_size (default
	// DefaultKVEventBufferSize).
	KVEventBufferSize int
	// TempDir is where TRTLLM writes its extra_llm_api_options file (default os.TempDir()).
	TempDir string
	// ReasoningParser is the model's reasoning parser by vLLM's name ("" for none). vLLM
	// and SGLang are told it so that a structured-output constraint applies after the
	// chain of thought, not to it (docs/reference.md §16); Turbine parses the output
	// itself either way.
	ReasoningParser string
	// Extra arguments, appended to the engine's command line untouched.
	Extra []string
}

// sglangReasoningParsers maps vLLM's reasoning parser names to SGLang's
// (sglang/srt/parser/reasoning_parser.py); a name SGLang lacks is not passed.
var sglangReasoningParsers = map[string]string{
	"deepseek_r1": "deepseek-r1", "qwen3": "qwen3", "kimi_k2": "kimi_k2", "glm45": "glm45", "openai_gptoss": "gpt-oss",
}

// Validate checks a spec; errors name the field that is wrong.
func (s *Spec) Validate() error {
	switch {
	case s.ModelPath == "":
		return errors.New("launcher: spec without a model path")
	case s.TensorParallelSize < 1:
		return fmt.Errorf("launcher: tensor parallel size %d: want ≥ 1 (real engines run on GPUs)", s.TensorParallelSize)
	case math.IsNaN(s.GPUMemoryUtilization) || s.GPUMemoryUtilization < 0 || s.GPUMemoryUtilization > 1:
		return fmt.Errorf("launcher: GPU memory utilization %g: want 0 (engine default) or a fraction in (0, 1]", s.GPUMemoryUtilization)
	case s.BlockSize < 1:
		return fmt.Errorf("launcher: KV block size %d: want ≥ 1", s.BlockSize)
	case s.MaxModelLen < 0 || s.MaxNumSeqs < 0 || s.MaxNumBatchedTokens < 0 || s.KVEventBufferSize < 0:
		return errors.New("launcher: max model length, max sequences, max batched tokens and KV event buffer size must not be negative")
	case s.Role != "" && s.Role != RolePrefill && s.Role != RoleDecode:
		return fmt.Errorf("launcher: role %q: want \"\", %q or %q", s.Role, RolePrefill, RoleDecode)
	case s.BootstrapPort < 0 || s.BootstrapPort > 65535:
		return fmt.Errorf("launcher: bootstrap port %d out of range 0-65535", s.BootstrapPort)
	}
	return nil
}

// withDefaults returns s with its empty fields defaulted.
func (s Spec) withDefaults() Spec {
	if s.ServedModelName == "" {
		s.ServedModelName = s.ModelPath
	}
	if s.Python == "" {
		s.Python = DefaultPython
	}
	if s.KVEventBufferSize == 0 {
		s.KVEventBufferSize = DefaultKVEventBufferSize
	}
	return s
}

// New returns the launcher of the engine spec names: *VLLM, *SGLang or *TRTLLM. Errors:
// an invalid spec (Validate), an unknown engine (EngineMocker included: the mock engine
// is built as a Mocker), a limit the engine refuses, and for TRTLLM a temporary file that
// cannot be written. A TRTLLM launcher holds a file until its Close.
func New(spec Spec) (engines.Launcher, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.withDefaults()
	switch spec.Engine {
	case EngineVLLM:
		if spec.Executable == "" {
			spec.Executable = DefaultVLLMExecutable
		}
		return &VLLM{spec: spec}, nil
	case EngineSGLang:
		return newSGLang(spec)
	case EngineTRTLLM:
		if spec.Executable == "" {
			spec.Executable = DefaultTRTLLMExecutable
		}
		return newTRTLLM(spec)
	case EngineMocker:
		return nil, errors.New("launcher: the mock engine is launched by a Mocker, not from a Spec")
	}
	return nil, fmt.Errorf("launcher: unknown engine %q (want %s)", spec.Engine, strings.Join(Engines, ", "))
}
