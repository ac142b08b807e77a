package launcher

import (
	"errors"
	"fmt"
	"math"

	"github.com/turbine-llm/turbine/engines"
)

// Engine names, as `turbine node --engine` and messages.StartWorker.engine spell them
// (engines/registry maps each to its launcher).
const (
	EngineMocker = "mocker" // turbine's own mock engine (engines/mocker/launch), no GPU
	EngineVLLM   = "vllm"   // vLLM's OpenAI server (`vllm serve`, engines/vllm)
	EngineSGLang = "sglang" // SGLang (`python -m sglang.launch_server`, engines/sglang)
	EngineTRTLLM = "trtllm" // TensorRT-LLM's OpenAI server (`trtllm-serve`, engines/trtllm)
)

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
	// Engine is EngineVLLM, EngineSGLang or EngineTRTLLM (engines/registry builds the
	// launcher it names).
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
	// picks a free one at each Command (Bootstrapper names it). Other engines ignore it.
	BootstrapPort int
	// Executable runs vLLM (default vllm.DefaultExecutable) or trtllm-serve (default
	// trtllm.DefaultExecutable); a name is looked up on PATH when the engine starts.
	Executable string
	// Python runs SGLang's launch_server module (default sglang.DefaultPython).
	Python string
	// KVEventBufferSize is TensorRT-LLM's event_buffer_max_size (default
	// trtllm.DefaultKVEventBufferSize).
	KVEventBufferSize int
	// TempDir is where TensorRT-LLM's launcher writes its extra_llm_api_options file
	// (default os.TempDir()).
	TempDir string
	// ReasoningParser is the model's reasoning parser by vLLM's name ("" for none). vLLM
	// and SGLang are told it so that a structured-output constraint applies after the
	// chain of thought, not to it (docs/reference.md §16); Turbine parses the output
	// itself either way.
	ReasoningParser string
	// Pooling starts the engine as an embedding model (`--runner pooling`,
	// docs/reference.md §23): vLLM's --runner pooling, SGLang's --is-embedding;
	// TensorRT-LLM's launcher refuses it (trtllm-serve serves no embeddings).
	Pooling bool
	// MaxLoras is the number of LoRA adapters the engine holds at once (docs/reference.md
	// §26): vLLM's --enable-lora --max-loras (and --max-cpu-loras, the same) with runtime
	// LoRA updating, SGLang's --enable-lora --max-loras-per-batch, TensorRT-LLM's
	// lora_config. 0: adapters off.
	MaxLoras int
	// MaxLoraRank is the largest adapter rank the engine takes (vLLM's --max-lora-rank,
	// SGLang's --max-lora-rank); 0: the engine's default (vLLM 16).
	MaxLoraRank int
	// KVBM is the node's KV block manager the engine offloads KV blocks to
	// (docs/reference.md §9.5); nil: none. vLLM gets LMCache's connector for it; the other
	// engines ignore it.
	KVBM *KVBM
	// Extra arguments, appended to the engine's command line untouched.
	Extra []string
}

// KVBM is how an engine reaches its node's KV block manager through LMCache's remote
// tier (docs/reference.md §9.5).
type KVBM struct {
	// RemoteURL is LMCache's remote_url: lm://HOST:PORT or resp://HOST:PORT.
	RemoteURL string
	// ChunkSize is LMCache's chunk size in tokens (its default 256).
	ChunkSize int
	// LocalCPU: LMCache keeps its own host-memory cache as well; false sends every chunk
	// to the block manager.
	LocalCPU bool
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
	case s.Pooling && s.Role != "":
		return fmt.Errorf("launcher: an embedding model (--runner pooling) has no disaggregated role (got %s)", s.Role)
	case s.MaxLoras < 0 || s.MaxLoraRank < 0:
		return fmt.Errorf("launcher: max LoRA adapters %d and max LoRA rank %d must not be negative (0: adapters off, the engine's rank limit)",
			s.MaxLoras, s.MaxLoraRank)
	}
	return nil
}

// WithDefaults returns s with the engine-neutral defaults filled in (the served model
// name); each engine's launcher fills in its own (executable, interpreter, buffer sizes).
func (s Spec) WithDefaults() Spec {
	if s.ServedModelName == "" {
		s.ServedModelName = s.ModelPath
	}
	return s
}
