package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// want is what a fixture folder must read as. Expected KV bytes and parameter counts are
// worked out by hand in the comments (see NumParameters for the formula).
type want struct {
	arch                       string
	layers, heads, kvHeads, hd int
	hidden                     int
	dtype                      string
	kvBytes                    int64
	params                     int64
	context                    int
	eos                        []uint32
}

func TestReadFolder(t *testing.T) {
	tests := []struct {
		dir  string
		want want
	}{
		{"qwen3-8b", want{
			arch: "Qwen3ForCausalLM", layers: 36, heads: 32, kvHeads: 8, hd: 128, hidden: 4096, dtype: "bfloat16",
			kvBytes: 147456, // 2 × 36 layers × 8 kv heads × 128 × 2 bytes
			// 2·151936·4096 (untied) + 36·4096·128·(64+16) + (2·36+1)·4096 + 36·3·4096·12288
			params:  8190726144,
			context: 40960,
			eos:     []uint32{151645, 151643}, // generation_config.json wins over config.json's 151645
		}},
		{"llama-3.1-8b-instruct", want{
			arch: "LlamaForCausalLM", layers: 32, heads: 32, kvHeads: 8, hd: 128, hidden: 4096, dtype: "bfloat16",
			kvBytes: 131072, // 2 × 32 × 8 × 128 × 2
			// 2·128256·4096 + 32·4096·128·80 + 65·4096 + 32·3·4096·14336: Meta's published 8,030,261,248
			params:  8030261248,
			context: 131072, // llama3 rope scaling: max_position_embeddings already counts it
			eos:     []uint32{128001, 128008, 128009},
		}},
		{"mistral-7b-v0.1", want{
			arch: "MistralForCausalLM", layers: 32, heads: 32, kvHeads: 8, hd: 128, hidden: 4096, dtype: "bfloat16",
			kvBytes: 131072, // 2 × 32 × 8 × 128 × 2
			// 2·32000·4096 + 32·4096·128·80 + 65·4096 + 32·3·4096·14336 = 7,241,732,096
			params:  7241732096,
			context: 32768, // the 4096 sliding window does not shorten it
			eos:     []uint32{2},
		}},
		{"opt-125m", want{
			arch: "OPTForCausalLM", layers: 12, heads: 12, kvHeads: 12, hd: 64, hidden: 768, dtype: "float16",
			kvBytes: 36864, // 2 × 12 × 12 kv heads (no GQA) × 64 (768/12) × 2
			// tied: 50272·768 + 12·768·64·48 + 25·768 + 12·2·768·3072 (relu: two matrices)
			params:  123562752,
			context: 2048,
			eos:     []uint32{2}, // no generation_config.json: config.json's eos_token_id
		}},
		{"mistral-small-3.1-24b-instruct", want{
			arch: "Mistral3ForConditionalGeneration", layers: 40, heads: 32, kvHeads: 8, hd: 128, hidden: 5120,
			dtype:   "bfloat16", // top level; text_config has none
			kvBytes: 163840,     // 2 × 40 × 8 × 128 (explicit head_dim, not 5120/32) × 2
			// language model only: 2·131072·5120 + 40·5120·128·80 + 81·5120 + 40·3·5120·32768
			params:  23572403200,
			context: 131072,
			eos:     []uint32{2},
		}},
		{"mixtral-8x7b-instruct", want{
			arch: "MixtralForCausalLM", layers: 32, heads: 32, kvHeads: 8, hd: 128, hidden: 4096, dtype: "bfloat16",
			kvBytes: 131072, // 2 × 32 × 8 × 128 × 2
			// 2·32000·4096 + 32·4096·128·80 + 65·4096 + 32·(8·3·4096·14336 + 4096·8): 46.7B
			params:  46702792704,
			context: 32768,
			eos:     []uint32{2},
		}},
		{"qwen3-30b-a3b", want{
			arch: "Qwen3MoeForCausalLM", layers: 48, heads: 32, kvHeads: 4, hd: 128, hidden: 2048, dtype: "bfloat16",
			kvBytes: 98304, // 2 × 48 × 4 × 128 × 2
			// 2·151936·2048 + 48·2048·128·72 + 97·2048 + 48·(128·3·2048·768 + 2048·128): 30.5B
			params:  30532110336,
			context: 40960,
			eos:     []uint32{151645, 151643},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			m, err := ReadFolder(filepath.Join("testdata", tt.dir))
			if err != nil {
				t.Fatal(err)
			}
			got := want{
				arch: m.Architecture, layers: m.NumLayers, heads: m.NumAttentionHeads, kvHeads: m.NumKVHeads,
				hd: m.HeadDim, hidden: m.HiddenSize, dtype: m.Dtype, kvBytes: m.KVBytesPerToken(),
				params: m.NumParameters(), context: m.ContextLength, eos: m.EOSTokenIDs,
			}
			if !equalWant(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			p := m.Proto()
			if p.KvBytesPerToken != tt.want.kvBytes || p.NumParameters != tt.want.params ||
				int(p.NumLayers) != tt.want.layers || p.Architecture != tt.want.arch || p.Dtype != tt.want.dtype {
				t.Errorf("Proto() = %v, disagrees with %+v", p, tt.want)
			}
		})
	}
}

func equalWant(a, b want) bool { return reflect.DeepEqual(a, b) }

func TestReadFolderErrors(t *testing.T) {
	tests := []struct {
		dir  string
		want []string // substrings of the error
	}{
		{"bad-no-config", []string{"config.json", "no such file"}},
		{"bad-malformed", []string{"config.json", "not a JSON object"}},
		{"bad-zero-heads", []string{"config.json", "num_attention_heads", "must be positive"}},
		{"bad-kv-heads", []string{"config.json", "num_key_value_heads", "5 does not divide num_attention_heads 32"}},
		{"bad-generation-config", []string{"generation_config.json", "eos_token_id", `"</s>"`}},
		{"does-not-exist", []string{"does-not-exist", "config.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			_, err := ReadFolder(filepath.Join("testdata", tt.dir))
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if !strings.HasPrefix(err.Error(), "model: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// fixture returns config.json of a fixture folder with edit applied to the decoded
// object (nil edit: unchanged).
func fixture(t *testing.T, dir string, edit func(top map[string]any)) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return data
	}
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	edit(top)
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func set(kv ...any) func(map[string]any) {
	return func(top map[string]any) {
		for i := 0; i < len(kv); i += 2 {
			top[kv[i].(string)] = kv[i+1]
		}
	}
}

func del(keys ...string) func(map[string]any) {
	return func(top map[string]any) {
		for _, k := range keys {
			delete(top, k)
		}
	}
}

func obj(kv ...any) map[string]any {
	m := map[string]any{}
	set(kv...)(m)
	return m
}

func TestContextLength(t *testing.T) {
	tests := []struct {
		name string
		dir  string
		edit func(map[string]any)
		want int
	}{
		{"qwen3 as published", "qwen3-8b", nil, 40960},
		// Qwen's model card: add YaRN to reach 131072 tokens.
		{"yarn from original_max_position_embeddings", "qwen3-8b",
			set("rope_scaling", obj("rope_type", "yarn", "factor", 4.0, "original_max_position_embeddings", 32768)), 131072},
		{"yarn without original_max_position_embeddings", "qwen3-8b",
			set("rope_scaling", obj("rope_type", "yarn", "factor", 2.0)), 81920},
		{"old type key", "qwen3-8b", set("rope_scaling", obj("type", "linear", "factor", 2.0)), 81920},
		{"dynamic", "qwen3-8b", set("rope_scaling", obj("rope_type", "dynamic", "factor", 1.5)), 61440},
		{"default type has no factor", "qwen3-8b", set("rope_scaling", obj("rope_type", "default")), 40960},
		{"mrope has no factor", "qwen3-8b", set("rope_scaling", obj("type", "mrope", "mrope_section", []any{16, 24, 24})), 40960},
		{"longrope is already counted", "qwen3-8b", set("rope_scaling", obj("rope_type", "longrope", "factor", 4.0)), 40960},
		{"llama3 is already counted", "llama-3.1-8b-instruct", nil, 131072},
		{"transformers v5 rope_parameters", "qwen3-8b",
			set("rope_parameters", obj("rope_type", "yarn", "factor", 4.0, "original_max_position_embeddings", 32768, "rope_theta", 1e6)), 131072},
		{"rope_parameters by layer type", "qwen3-8b",
			set("rope_parameters", obj("full_attention", obj("rope_type", "linear", "factor", 2.0), "sliding_attention", obj("rope_type", "default"))), 81920},
		{"gemma3 is already counted", "qwen3-8b",
			set("model_type", "gemma3_text", "rope_scaling", obj("rope_type", "linear", "factor", 8.0)), 40960},
		{"smallest length key wins", "qwen3-8b", set("seq_length", 8192), 8192},
		{"GPT-2 n_positions", "opt-125m", func(top map[string]any) {
			delete(top, "max_position_embeddings")
			top["n_positions"] = 1024
		}, 1024},
		{"no length key", "qwen3-8b", del("max_position_embeddings"), 0},
		{"text_config wins over the top level", "mistral-small-3.1-24b-instruct", set("max_position_embeddings", 4096), 131072},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseConfig(fixture(t, tt.dir, tt.edit), "config.json")
			if err != nil {
				t.Fatal(err)
			}
			if m.ContextLength != tt.want {
				t.Errorf("ContextLength = %d, want %d", m.ContextLength, tt.want)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	text := func(edit func(map[string]any)) func(map[string]any) {
		return func(top map[string]any) { edit(top["text_config"].(map[string]any)) }
	}
	tests := []struct {
		name string
		dir  string
		edit func(map[string]any)
		want string
	}{
		{"zero layers", "qwen3-8b", set("num_hidden_layers", 0), "num_hidden_layers: must be positive, got 0"},
		{"missing layers", "qwen3-8b", del("num_hidden_layers"), "num_hidden_layers: missing"},
		{"negative hidden size", "qwen3-8b", set("hidden_size", -4096), "hidden_size: -4096 is negative"},
		{"zero kv heads", "qwen3-8b", set("num_key_value_heads", 0), "num_key_value_heads: must be positive"},
		{"kv heads above heads", "qwen3-8b", set("num_key_value_heads", 64), "num_key_value_heads: 64 does not divide num_attention_heads 32"},
		{"zero head_dim", "qwen3-8b", set("head_dim", 0), "head_dim: must be positive"},
		{"hidden not divisible without head_dim", "mistral-7b-v0.1", set("hidden_size", 4100),
			"hidden_size: 4100 is not divisible by num_attention_heads 32 and head_dim is absent"},
		{"string count", "qwen3-8b", set("num_hidden_layers", "36"), `num_hidden_layers: want an integer, got "36"`},
		{"fractional count", "qwen3-8b", set("num_hidden_layers", 36.5), "num_hidden_layers: want an integer, got 36.5"},
		{"huge count", "qwen3-8b", set("vocab_size", 1e12), "vocab_size: 1000000000000 is out of range"},
		{"zero context", "qwen3-8b", set("max_position_embeddings", 0), "max_position_embeddings: must be positive"},
		{"negative context", "qwen3-8b", set("max_position_embeddings", -1), "max_position_embeddings: -1 is negative"},
		{"unknown dtype", "qwen3-8b", set("torch_dtype", "int3"), `torch_dtype: unknown dtype "int3"`},
		{"dtype not a string", "qwen3-8b", set("torch_dtype", 16), "torch_dtype: want a string, got 16"},
		{"architectures not a list", "qwen3-8b", set("architectures", "Qwen3ForCausalLM"), "architectures: want a list of strings"},
		{"tie not a bool", "qwen3-8b", set("tie_word_embeddings", "no"), "tie_word_embeddings: want true or false"},
		{"eos not an id", "qwen3-8b", set("eos_token_id", []any{151645, "x"}), "eos_token_id: want an integer or a list of integers"},
		{"eos out of range", "qwen3-8b", set("eos_token_id", -1), "eos_token_id: token id -1 is out of range"},
		{"rope factor zero", "qwen3-8b", set("rope_scaling", obj("rope_type", "linear", "factor", 0)), "rope_scaling.factor: 0 must be positive"},
		{"rope scaling not an object", "qwen3-8b", set("rope_scaling", 4), "rope_scaling: not a JSON object"},
		{"scaled context too large", "qwen3-8b", set("rope_scaling", obj("rope_type", "linear", "factor", 1e6)), "rope_scaling: scaled context length"},
		{"text_config not an object", "qwen3-8b", set("text_config", []any{1}), "text_config: not a JSON object"},
		{"zero heads in text_config", "mistral-small-3.1-24b-instruct", text(set("num_attention_heads", 0)),
			"text_config.num_attention_heads: must be positive"},
		{"missing in text_config and top level", "mistral-small-3.1-24b-instruct", text(del("num_hidden_layers")),
			"num_hidden_layers: missing (looked for num_hidden_layers, n_layer in text_config and at the top level)"},
		{"experts per token above experts", "mixtral-8x7b-instruct", set("num_experts_per_tok", 9), "num_experts_per_tok: 9 exceeds the 8 experts"},
		{"mlp_only_layers beyond the layers", "qwen3-30b-a3b", set("mlp_only_layers", []any{48}), "mlp_only_layers: layer 48 is beyond the 48 layers"},
		{"quantization_config not an object", "qwen3-8b", set("quantization_config", "fp8"), "quantization_config: not a quantization config"},
		{"kv bytes overflow", "qwen3-8b", set("num_hidden_layers", 1<<30, "num_key_value_heads", 1<<5, "num_attention_heads", 1<<30, "head_dim", 1<<30),
			"overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(fixture(t, tt.dir, tt.edit), "/models/x/config.json")
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "model: /models/x/config.json: ") {
				t.Errorf("error %q, want it to name the file and contain %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigFigures(t *testing.T) {
	tests := []struct {
		name  string
		dir   string
		edit  func(map[string]any)
		check func(t *testing.T, m Config)
	}{
		{"newer dtype key", "qwen3-8b", func(top map[string]any) { delete(top, "torch_dtype"); top["dtype"] = "float16" },
			func(t *testing.T, m Config) {
				eq(t, "Dtype", m.Dtype, "float16")
				eq(t, "KV", m.KVBytesPerToken(), int64(147456))
			}},
		{"torch. prefix and float32", "qwen3-8b", set("torch_dtype", "torch.float32"),
			func(t *testing.T, m Config) {
				eq(t, "Dtype", m.Dtype, "float32")
				eq(t, "KV", m.KVBytesPerToken(), int64(2*36*8*128*4))
			}},
		{"float8 checkpoint", "qwen3-8b", set("torch_dtype", "float8_e4m3fn"),
			func(t *testing.T, m Config) { eq(t, "KV", m.KVBytesPerToken(), int64(2*36*8*128*1)) }},
		{"no dtype: KV bytes unknown", "qwen3-8b", del("torch_dtype"),
			func(t *testing.T, m Config) {
				eq(t, "Dtype", m.Dtype, "")
				eq(t, "KV", m.KVBytesPerToken(), int64(0))
				eq(t, "KV at fp8", m.KVBytesPerTokenAt(1), int64(2*36*8*128))
			}},
		{"compressed-tensors fp8 KV is recorded, not applied", "qwen3-8b",
			set("quantization_config", obj("quant_method", "compressed-tensors", "kv_cache_scheme", obj("num_bits", 8, "type", "float", "strategy", "tensor"))),
			func(t *testing.T, m Config) {
				eq(t, "KVCacheDtype", m.KVCacheDtype, "fp8")
				eq(t, "KV", m.KVBytesPerToken(), int64(147456))
				eq(t, "KV at fp8", m.KVBytesPerTokenAt(1), int64(147456/2))
			}},
		{"modelopt fp8 KV", "qwen3-8b", set("quantization_config", obj("quant_method", "modelopt", "kv_cache_quant_algo", "FP8")),
			func(t *testing.T, m Config) { eq(t, "KVCacheDtype", m.KVCacheDtype, "fp8") }},
		{"fp8 weights only", "qwen3-8b", set("quantization_config", obj("quant_method", "fp8", "weight_block_size", []any{128, 128})),
			func(t *testing.T, m Config) { eq(t, "KVCacheDtype", m.KVCacheDtype, "") }},
		{"no GQA without num_key_value_heads", "mistral-7b-v0.1", del("num_key_value_heads"),
			func(t *testing.T, m Config) {
				eq(t, "NumKVHeads", m.NumKVHeads, 32)
				eq(t, "KV", m.KVBytesPerToken(), int64(2*32*32*128*2))
			}},
		{"integral float count", "qwen3-8b", set("num_hidden_layers", 36.0),
			func(t *testing.T, m Config) { eq(t, "NumLayers", m.NumLayers, 36) }},
		{"GPT-2 key names", "opt-125m", func(top map[string]any) {
			for from, to := range map[string]string{"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd", "ffn_dim": "n_inner"} {
				top[to] = top[from]
				delete(top, from)
			}
		}, func(t *testing.T, m Config) {
			eq(t, "params", m.NumParameters(), int64(123562752))
			eq(t, "KV", m.KVBytesPerToken(), int64(36864))
		}},
		{"no vocab_size: no parameter estimate", "qwen3-8b", del("vocab_size"),
			func(t *testing.T, m Config) { eq(t, "params", m.NumParameters(), int64(0)) }},
		{"tied embeddings", "qwen3-8b", set("tie_word_embeddings", true),
			func(t *testing.T, m Config) { eq(t, "params", m.NumParameters(), int64(8190726144-151936*4096)) }},
		{"llama defaults to untied", "llama-3.1-8b-instruct", del("tie_word_embeddings"),
			func(t *testing.T, m Config) { eq(t, "params", m.NumParameters(), int64(8030261248)) }},
		{"no eos anywhere", "qwen3-8b", del("eos_token_id"),
			func(t *testing.T, m Config) { eq(t, "EOS", len(m.EOSTokenIDs), 0) }},
		{"Qwen2-MoE layout: sparse step, dense layers and a gated shared expert", "qwen3-30b-a3b",
			set("decoder_sparse_step", 2, "mlp_only_layers", []any{1}, "shared_expert_intermediate_size", 5632),
			func(t *testing.T, m Config) {
				// decoder_sparse_step 2 makes the even layers dense; mlp_only_layers adds 1.
				wantDense := []int{0, 1}
				for i := 2; i < 48; i += 2 {
					wantDense = append(wantDense, i)
				}
				if !slices.Equal(m.MoE.DenseLayers, wantDense) {
					t.Errorf("DenseLayers = %v, want %v", m.MoE.DenseLayers, wantDense)
				}
				// 25 dense layers of 3·2048·6144, 23 sparse of experts, router, shared expert and its gate.
				want := int64(2*151936*2048 + 48*2048*128*72 + 97*2048 +
					25*3*2048*6144 + 23*(128*3*2048*768+2048*128+3*2048*5632+2048))
				eq(t, "params", m.NumParameters(), want)
			}},
		{"DeepSeek shared experts and first dense layers", "qwen3-30b-a3b",
			set("n_shared_experts", 2, "first_k_dense_replace", 3),
			func(t *testing.T, m Config) {
				eq(t, "shared", m.MoE.SharedIntermediateSize, 2*768)
				eq(t, "dense", len(m.MoE.DenseLayers), 3)
				want := int64(2*151936*2048 + 48*2048*128*72 + 97*2048 +
					3*3*2048*6144 + 45*(128*3*2048*768+2048*128+3*2048*1536))
				eq(t, "params", m.NumParameters(), want)
			}},
		{"multi-head latent attention", "qwen3-8b", set("kv_lora_rank", 512, "qk_rope_head_dim", 64),
			func(t *testing.T, m Config) {
				eq(t, "KV", m.KVBytesPerToken(), int64(36*(512+64)*2)) // one latent and one rotary key per layer
				eq(t, "params", m.NumParameters(), int64(0))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseConfig(fixture(t, tt.dir, tt.edit), "config.json")
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestParseGenerationConfig(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint32
		wantErr string
	}{
		{`{"eos_token_id": 2}`, []uint32{2}, ""},
		{`{"eos_token_id": [128001, 128008, 128009]}`, []uint32{128001, 128008, 128009}, ""},
		{`{"eos_token_id": null, "temperature": 0.6}`, nil, ""},
		{`{"do_sample": true}`, nil, ""},
		{`{"eos_token_id": "</s>"}`, nil, `eos_token_id: want an integer or a list of integers, got "</s>"`},
		{`{"eos_token_id": [1, 2.5]}`, nil, "eos_token_id: want an integer"},
		{`{"eos_token_id": 4294967296}`, nil, "eos_token_id: token id 4294967296 is out of range"},
		{`[2]`, nil, "gen.json: not a JSON object"},
		{`null`, nil, "gen.json: not a JSON object"},
	}
	for _, tt := range tests {
		got, err := ParseGenerationConfig([]byte(tt.in), "gen.json")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// A generation_config.json without eos_token_id leaves config.json's in place.
func TestGenerationConfigWithoutEOS(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ConfigFile, fixture(t, "qwen3-8b", nil))
	writeFile(t, dir, GenerationConfigFile, []byte(`{"temperature": 0.6}`))
	m, err := ReadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.EOSTokenIDs, []uint32{151645}) {
		t.Errorf("EOSTokenIDs = %v, want config.json's [151645]", m.EOSTokenIDs)
	}
}

func TestDtypeBytes(t *testing.T) {
	tests := []struct {
		name string
		want int
		ok   bool
	}{
		{"bfloat16", 2, true}, {"float16", 2, true}, {"half", 2, true}, {"torch.bfloat16", 2, true},
		{"float32", 4, true}, {"float", 4, true}, {"Float32", 4, true},
		{"float8_e4m3fn", 1, true}, {"float8_e5m2", 1, true}, {"float8_e4m3fnuz", 1, true},
		{"int8", 0, false}, {"", 0, false}, {"auto", 0, false},
	}
	for _, tt := range tests {
		got, ok := DtypeBytes(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("DtypeBytes(%q) = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func writeFile(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// modelFolder copies a fixture into a temporary folder with stand-in tokenizer files
// (the digest covers their bytes; nothing here parses them).
func modelFolder(t *testing.T, fixtureDir string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{ConfigFile, GenerationConfigFile} {
		data, err := os.ReadFile(filepath.Join("testdata", fixtureDir, name))
		if err == nil {
			writeFile(t, dir, name, data)
		}
	}
	writeFile(t, dir, "tokenizer.json", []byte(`{"model": {"type": "BPE"}}`))
	writeFile(t, dir, "tokenizer_config.json", []byte(`{"eos_token": "<|im_end|>"}`))
	return dir
}

func TestFromFolder(t *testing.T) {
	dir := modelFolder(t, "qwen3-8b")
	card, err := FromFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := SourceDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if card.Tokenizer != dir || card.TokenizerDigest != digest || !IsTokenizerDigest(digest) {
		t.Errorf("tokenizer %q digest %q, want %q %q", card.Tokenizer, card.TokenizerDigest, dir, digest)
	}
	if card.ContextLength != 40960 || !slices.Equal(card.EosTokenIds, []uint32{151645, 151643}) {
		t.Errorf("context %d eos %v", card.ContextLength, card.EosTokenIds)
	}
	a := card.Architecture
	if a.GetArchitecture() != "Qwen3ForCausalLM" || a.GetNumLayers() != 36 || a.GetNumAttentionHeads() != 32 ||
		a.GetNumKvHeads() != 8 || a.GetHeadDim() != 128 || a.GetHiddenSize() != 4096 || a.GetDtype() != "bfloat16" ||
		a.GetKvBytesPerToken() != 147456 || a.GetNumParameters() != 8190726144 {
		t.Errorf("architecture %v", a)
	}
	if card.Model != "" || card.Engine != "" || card.KvBlockSize != 0 || card.TotalKvBlocks != 0 {
		t.Errorf("FromFolder set what the caller owns: %v", card)
	}
}

func TestFromFolderErrors(t *testing.T) {
	noTokenizer := modelFolder(t, "qwen3-8b")
	if err := os.Remove(filepath.Join(noTokenizer, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	badConfig := modelFolder(t, "bad-zero-heads")
	tests := []struct {
		name, dir string
		want      []string
	}{
		{"no tokenizer.json", noTokenizer, []string{"model: tokenizer digest", "tokenizer.json"}},
		{"bad config.json", badConfig, []string{"config.json", "num_attention_heads"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromFolder(tt.dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}
