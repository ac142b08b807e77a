package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/turbine-llm/turbine/messages"
)

// File names read from a model folder.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
)

// Config is what a model folder's config.json and generation_config.json say about the
// model. Counts are plain numbers; sizes are in elements unless named in bytes.
type Config struct {
	// Architecture is architectures[0], e.g. "Qwen3ForCausalLM" ("" when absent).
	Architecture string
	// ModelType is the language model's model_type, e.g. "qwen3" ("" when absent).
	ModelType string

	NumLayers         int // num_hidden_layers
	NumAttentionHeads int // num_attention_heads (query heads)
	NumKVHeads        int // num_key_value_heads; NumAttentionHeads without GQA
	HeadDim           int // head_dim, or HiddenSize / NumAttentionHeads
	HiddenSize        int // hidden_size
	IntermediateSize  int // dense MLP width (intermediate_size); 0 when absent
	VocabSize         int // vocab_size; 0 when absent

	// TieWordEmbeddings: the output projection shares the input embedding's weights
	// (tie_word_embeddings; when absent, the transformers default of the model_type).
	TieWordEmbeddings bool
	// GatedMLP: the MLP has three matrices (gate, up, down: SwiGLU/GeGLU) rather than two.
	// From hidden_act / hidden_activation / activation_function: silu, swish, swiglu and
	// geglu are gated, as is every Gemma; an absent activation is taken as gated (the
	// Llama default).
	GatedMLP bool
	// MoE describes the sparse MLP layers; zero for a dense model.
	MoE MoE
	// MLA describes multi-head latent attention (DeepSeek-V2/V3); zero otherwise.
	MLA MLA

	// Dtype is the checkpoint's activation dtype, canonical ("bfloat16", "float16",
	// "float32", "float8_e4m3fn", ...); "" when config.json names none.
	Dtype string
	// DtypeBytes is Dtype's element size in bytes; 0 when Dtype is "".
	DtypeBytes int
	// KVCacheDtype is "fp8" when quantization_config declares an 8-bit floating-point
	// KV cache (compressed-tensors kv_cache_scheme, or ModelOpt kv_cache_quant_algo
	// FP8), else "". It is recorded, not applied: KVBytesPerToken uses DtypeBytes,
	// because vLLM's default --kv-cache-dtype auto stores the cache in the model dtype;
	// a deployment run with --kv-cache-dtype fp8 uses KVBytesPerTokenAt(1).
	KVCacheDtype string

	// ContextLength is the maximum model length in tokens as vLLM derives it from
	// config.json; 0 when config.json names none of the length keys.
	ContextLength int
	// EOSTokenIDs are generation_config.json's eos_token_id, else config.json's; nil
	// when neither names one.
	EOSTokenIDs []uint32
}

// MoE is the sparse (mixture-of-experts) MLP of a model; zero for a dense model.
type MoE struct {
	NumExperts         int // routed experts per MoE layer (num_experts, num_local_experts, n_routed_experts)
	NumExpertsPerToken int // num_experts_per_tok
	// ExpertIntermediateSize is one expert's MLP width (moe_intermediate_size, else
	// intermediate_size).
	ExpertIntermediateSize int
	// SharedIntermediateSize is the total MLP width of the always-active shared experts
	// (shared_expert_intermediate_size, or n_shared_experts × moe_intermediate_size); 0
	// when there are none.
	SharedIntermediateSize int
	// SharedExpertGate: a shared expert is scaled by a learned gate (Qwen2-MoE: present
	// with shared_expert_intermediate_size).
	SharedExpertGate bool
	// DenseLayers lists the layers (0-based) that have a dense MLP instead
	// (mlp_only_layers, the first first_k_dense_replace layers, and those that
	// decoder_sparse_step skips).
	DenseLayers []int
}

// MLA is multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed
// latent and one rotary key per token and layer instead of per-head keys and values. A
// model uses MLA when KVLoraRank > 0.
type MLA struct {
	KVLoraRank    int // kv_lora_rank: width of the compressed KV latent
	QKRopeHeadDim int // qk_rope_head_dim: width of the decoupled rotary key
}

// ReadFolder reads dir/config.json (required) and dir/generation_config.json (optional)
// and returns the model they describe. Errors name the file and, for a bad value, the
// key (e.g. "text_config.num_key_value_heads").
func ReadFolder(dir string) (Config, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", cfgPath, err)
	}
	m, err := ParseConfig(data, cfgPath)
	if err != nil {
		return Config{}, err
	}
	genPath := filepath.Join(dir, GenerationConfigFile)
	data, err = os.ReadFile(genPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return m, nil
	case err != nil:
		return Config{}, fmt.Errorf("model: %s: %w", genPath, err)
	}
	ids, err := ParseGenerationConfig(data, genPath)
	if err != nil {
		return Config{}, err
	}
	if ids != nil {
		m.EOSTokenIDs = ids
	}
	return m, nil
}

// FromFolder reads the model folder dir into a model deployment card: Tokenizer is dir,
// ContextLength, EosTokenIds and Architecture come from ReadFolder, TokenizerDigest from
// SourceDigest(dir), which needs the folder's tokenizer.json and
// tokenizer_config.json. The caller sets what the folder cannot say: Model (the served
// name), Engine, KvBlockSize, TotalKvBlocks, MaxNumSeqs, MaxNumBatchedTokens, and
// ContextLength when it is 0 (config.json names no length) or a flag lowers it.
// Errors: ReadFolder's, and SourceDigest's for missing or oversized tokenizer files.
func FromFolder(dir string) (*messages.ModelCard, error) {
	m, err := ReadFolder(dir)
	if err != nil {
		return nil, err
	}
	digest, err := SourceDigest(dir)
	if err != nil {
		return nil, fmt.Errorf("model: tokenizer digest: %w", err)
	}
	return &messages.ModelCard{
		Tokenizer:       dir,
		ContextLength:   int32(m.ContextLength),
		EosTokenIds:     m.EOSTokenIDs,
		TokenizerDigest: digest,
		Architecture:    m.Proto(),
	}, nil
}

// Pooling is what a model folder's config.json says about the model as an embedding
// model (docs/reference.md §23).
type Pooling struct {
	// HiddenSize is hidden_size (text_config's for a multimodal model): the embedding's
	// size; 0 when absent.
	HiddenSize int
	// IsMatryoshka: is_matryoshka is true, or matryoshka_dimensions is present (vLLM's
	// rule): a request may truncate the embedding (`dimensions`).
	IsMatryoshka bool
	// MatryoshkaDimensions are the truncations allowed (matryoshka_dimensions); nil: any.
	MatryoshkaDimensions []int32
}

// ReadPooling reads dir/config.json's pooling figures. Errors: the file cannot be read,
// is not JSON, or has a malformed is_matryoshka or matryoshka_dimensions.
func ReadPooling(dir string) (Pooling, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Pooling{}, fmt.Errorf("model: %s: %w", path, err)
	}
	var raw struct {
		IsMatryoshka         *bool   `json:"is_matryoshka"`
		MatryoshkaDimensions []int32 `json:"matryoshka_dimensions"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Pooling{}, fmt.Errorf("model: %s: is_matryoshka, matryoshka_dimensions: %w", path, err)
	}
	m, err := ParseConfig(data, path)
	if err != nil {
		return Pooling{}, err
	}
	for _, d := range raw.MatryoshkaDimensions {
		if d < 1 {
			return Pooling{}, fmt.Errorf("model: %s: matryoshka_dimensions: %d is not a positive size", path, d)
		}
	}
	return Pooling{HiddenSize: m.HiddenSize, IsMatryoshka: raw.IsMatryoshka != nil && *raw.IsMatryoshka || raw.MatryoshkaDimensions != nil,
		MatryoshkaDimensions: raw.MatryoshkaDimensions}, nil
}
