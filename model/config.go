package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// maxCount bounds every count and size read from config.json: the card carries them as
// int32.
const maxCount = math.MaxInt32

// contextKeys are the config.json keys that bound the model length, as vLLM reads them
// (_get_and_verify_max_len): the smallest one present wins.
var contextKeys = []string{"max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
	"model_max_length", "max_sequence_length", "max_seq_length", "seq_len"}

// untiedByDefault are the model types whose transformers config class defaults
// tie_word_embeddings to false (PretrainedConfig's default is true).
var untiedByDefault = []string{"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3"}

// ParseConfig reads the figures of a config.json held in data; name (the file's path)
// prefixes every error. Unknown keys are ignored.
//
// The context length is derived as vLLM does: the smallest of max_position_embeddings,
// n_positions, max_seq_len, seq_length, model_max_length, max_sequence_length,
// max_seq_length and seq_len; then, when rope_scaling (or transformers v5's
// rope_parameters) has a rope_type other than su, longrope and llama3 (whose
// max_position_embeddings already counts the extension) and the model is not a Gemma 3
// (likewise), it is multiplied by the rope factor, starting from
// original_max_position_embeddings for yarn. Sliding windows do not shorten it.
//
// Errors name the key: malformed JSON, a value of the wrong type, a negative or zero
// count, num_key_value_heads not dividing num_attention_heads, hidden_size not
// divisible by num_attention_heads without head_dim, an unknown dtype, figures too large
// for the card.
func ParseConfig(data []byte, name string) (Config, error) {
	p, err := newParser(data, name)
	if err != nil {
		return Config{}, err
	}
	var m Config
	for _, step := range []func(*parser, *Config) error{
		(*parser).identity, (*parser).attention, (*parser).mlp, (*parser).moe, (*parser).mla,
		(*parser).dtypes, (*parser).contextLength, (*parser).eos, (*parser).checkTotals,
	} {
		if err := step(p, &m); err != nil {
			return Config{}, err
		}
	}
	return m, nil
}

// level is one object of config.json that figures are read from: text_config (prefix
// "text_config.") or the top level (prefix "").
type level struct {
	prefix string
	keys   map[string]json.RawMessage
}

type parser struct {
	name   string
	top    level
	levels []level // text_config first when present, then the top level
}

func newParser(data []byte, name string) (*parser, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("model: %s: not a JSON object: %v", name, err)
	}
	if top == nil {
		return nil, fmt.Errorf("model: %s: not a JSON object: null", name)
	}
	p := &parser{name: name, top: level{keys: top}}
	if raw, ok := top["text_config"]; ok && !isNull(raw) {
		var text map[string]json.RawMessage
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, p.errf("text_config", "not a JSON object: %s", excerpt(raw))
		}
		p.levels = append(p.levels, level{prefix: "text_config.", keys: text})
	}
	p.levels = append(p.levels, p.top)
	return p, nil
}

func (p *parser) errf(key, format string, args ...any) error {
	return fmt.Errorf("model: %s: %s: %s", p.name, key, fmt.Sprintf(format, args...))
}

// lookup returns the first of keys present and not null, searching the levels in order,
// with its full key name.
func (p *parser) lookup(keys ...string) (json.RawMessage, string, bool) {
	for _, l := range p.levels {
		if raw, key, ok := l.lookup(keys...); ok {
			return raw, key, true
		}
	}
	return nil, "", false
}

func (l level) lookup(keys ...string) (json.RawMessage, string, bool) {
	for _, k := range keys {
		if raw, ok := l.keys[k]; ok && !isNull(raw) {
			return raw, l.prefix + k, true
		}
	}
	return nil, "", false
}

// count reads an integer in [0, maxCount] from the first of keys present; 0 and "" when
// none is.
func (p *parser) count(keys ...string) (int, string, error) {
	raw, key, ok := p.lookup(keys...)
	if !ok {
		return 0, "", nil
	}
	v, err := p.intValue(raw, key)
	return v, key, err
}

func (p *parser) intValue(raw json.RawMessage, key string) (int, error) {
	v, err := parseInt(raw)
	switch {
	case err != nil:
		return 0, p.errf(key, "%v", err)
	case v < 0:
		return 0, p.errf(key, "%d is negative", v)
	case v > maxCount:
		return 0, p.errf(key, "%d is out of range (at most %d)", v, maxCount)
	}
	return int(v), nil
}

// positive reads a required count that must be at least 1 from the first of keys
// present; an error names the key when none is present or the value is 0.
func (p *parser) positive(keys ...string) (int, string, error) {
	v, key, err := p.count(keys...)
	switch {
	case err != nil:
		return 0, "", err
	case key == "":
		return 0, "", p.errf(keys[0], "missing (looked for %s%s)", strings.Join(keys, ", "), p.where())
	case v == 0:
		return 0, "", p.errf(key, "must be positive, got 0")
	}
	return v, key, nil
}

// where says which objects lookup searches, for an error about a missing key.
func (p *parser) where() string {
	if len(p.levels) > 1 {
		return " in text_config and at the top level"
	}
	return ""
}

func (p *parser) str(keys ...string) (string, string, error) {
	raw, key, ok := p.lookup(keys...)
	if !ok {
		return "", "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "", p.errf(key, "want a string, got %s", excerpt(raw))
	}
	return s, key, nil
}

// identity reads architectures[0] (top level first) and model_type.
func (p *parser) identity(m *Config) error {
	for _, l := range []level{p.top, p.levels[0]} {
		raw, key, ok := l.lookup("architectures")
		if !ok {
			continue
		}
		var archs []string
		if err := json.Unmarshal(raw, &archs); err != nil {
			return p.errf(key, "want a list of strings, got %s", excerpt(raw))
		}
		if len(archs) > 0 {
			m.Architecture = archs[0]
			break
		}
	}
	var err error
	m.ModelType, _, err = p.str("model_type")
	return err
}

// attention reads the layer and head figures and checks them against each other.
func (p *parser) attention(m *Config) error {
	var err error
	var headsKey, hiddenKey string
	if m.NumLayers, _, err = p.positive("num_hidden_layers", "n_layer"); err != nil {
		return err
	}
	if m.NumAttentionHeads, headsKey, err = p.positive("num_attention_heads", "n_head"); err != nil {
		return err
	}
	if m.HiddenSize, hiddenKey, err = p.positive("hidden_size", "n_embd"); err != nil {
		return err
	}
	kvHeads, kvKey, err := p.count("num_key_value_heads")
	switch {
	case err != nil:
		return err
	case kvKey == "":
		m.NumKVHeads = m.NumAttentionHeads
	case kvHeads == 0:
		return p.errf(kvKey, "must be positive, got 0")
	case m.NumAttentionHeads%kvHeads != 0:
		return p.errf(kvKey, "%d does not divide %s %d", kvHeads, headsKey, m.NumAttentionHeads)
	default:
		m.NumKVHeads = kvHeads
	}
	headDim, hdKey, err := p.count("head_dim")
	switch {
	case err != nil:
		return err
	case hdKey == "" && m.HiddenSize%m.NumAttentionHeads != 0:
		return p.errf(hiddenKey, "%d is not divisible by %s %d and head_dim is absent", m.HiddenSize, headsKey, m.NumAttentionHeads)
	case hdKey == "":
		m.HeadDim = m.HiddenSize / m.NumAttentionHeads
	case headDim == 0:
		return p.errf(hdKey, "must be positive, got 0")
	default:
		m.HeadDim = headDim
	}
	return nil
}

// mlp reads the dense MLP width, the vocabulary, weight tying and the activation.
func (p *parser) mlp(m *Config) error {
	var err error
	if m.IntermediateSize, _, err = p.count("intermediate_size", "ffn_dim", "n_inner"); err != nil {
		return err
	}
	if m.VocabSize, _, err = p.count("vocab_size"); err != nil {
		return err
	}
	m.TieWordEmbeddings = !slices.Contains(untiedByDefault, m.ModelType)
	if raw, key, ok := p.lookup("tie_word_embeddings"); ok {
		if err := json.Unmarshal(raw, &m.TieWordEmbeddings); err != nil {
			return p.errf(key, "want true or false, got %s", excerpt(raw))
		}
	}
	act, _, err := p.str("hidden_act", "hidden_activation", "activation_function")
	if err != nil {
		return err
	}
	switch strings.ToLower(act) {
	case "", "silu", "swish", "swiglu", "geglu":
		m.GatedMLP = true
	default:
		m.GatedMLP = strings.HasPrefix(m.ModelType, "gemma")
	}
	return nil
}

// moe reads the mixture-of-experts figures, when the model has routed experts.
func (p *parser) moe(m *Config) error {
	experts, _, err := p.count("num_experts", "num_local_experts", "n_routed_experts")
	if err != nil || experts == 0 {
		return err
	}
	e := MoE{NumExperts: experts}
	perTok, perTokKey, err := p.count("num_experts_per_tok")
	if err != nil {
		return err
	}
	if perTok > experts {
		return p.errf(perTokKey, "%d exceeds the %d experts", perTok, experts)
	}
	e.NumExpertsPerToken = perTok
	moeSize, _, err := p.count("moe_intermediate_size")
	if err != nil {
		return err
	}
	e.ExpertIntermediateSize = moeSize
	if moeSize == 0 {
		e.ExpertIntermediateSize = m.IntermediateSize
	}
	if err := p.sharedExperts(&e, moeSize); err != nil {
		return err
	}
	if e.DenseLayers, err = p.denseLayers(m.NumLayers); err != nil {
		return err
	}
	m.MoE = e
	return nil
}

func (p *parser) sharedExperts(e *MoE, moeSize int) error {
	shared, key, err := p.count("shared_expert_intermediate_size")
	if err != nil {
		return err
	}
	if key != "" {
		e.SharedIntermediateSize, e.SharedExpertGate = shared, shared > 0
		return nil
	}
	n, nKey, err := p.count("n_shared_experts")
	if err != nil {
		return err
	}
	if int64(n)*int64(moeSize) > maxCount {
		return p.errf(nKey, "%d shared experts of %d are out of range", n, moeSize)
	}
	e.SharedIntermediateSize = n * moeSize
	return nil
}

// denseLayers lists the layers whose MLP is dense in an MoE model: mlp_only_layers, the
// first first_k_dense_replace layers, and with decoder_sparse_step s > 1 every layer i
// with (i+1) % s != 0 (Qwen2-MoE's rule).
func (p *parser) denseLayers(numLayers int) ([]int, error) {
	firstK, firstKKey, err := p.count("first_k_dense_replace")
	if err != nil {
		return nil, err
	}
	if firstK > numLayers {
		return nil, p.errf(firstKKey, "%d exceeds the %d layers", firstK, numLayers)
	}
	step, _, err := p.count("decoder_sparse_step")
	if err != nil {
		return nil, err
	}
	only := map[int]bool{}
	if raw, key, ok := p.lookup("mlp_only_layers"); ok {
		var ids []json.RawMessage
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, p.errf(key, "want a list of layer numbers, got %s", excerpt(raw))
		}
		for _, r := range ids {
			i, err := p.intValue(r, key)
			if err != nil {
				return nil, err
			}
			if i >= numLayers {
				return nil, p.errf(key, "layer %d is beyond the %d layers", i, numLayers)
			}
			only[i] = true
		}
	}
	var dense []int
	for i := range numLayers {
		if only[i] || i < firstK || (step > 1 && (i+1)%step != 0) {
			dense = append(dense, i)
		}
	}
	return dense, nil
}

// mla reads multi-head latent attention's cache figures (DeepSeek-V2/V3).
func (p *parser) mla(m *Config) error {
	rank, _, err := p.count("kv_lora_rank")
	if err != nil || rank == 0 {
		return err
	}
	rope, _, err := p.count("qk_rope_head_dim")
	if err != nil {
		return err
	}
	m.MLA = MLA{KVLoraRank: rank, QKRopeHeadDim: rope}
	return nil
}

// dtypes reads torch_dtype (or dtype) and the KV cache quantization the checkpoint
// declares.
func (p *parser) dtypes(m *Config) error {
	s, key, err := p.str("torch_dtype", "dtype")
	if err != nil {
		return err
	}
	if key != "" {
		name, size, ok := canonicalDtype(s)
		if !ok {
			return p.errf(key, "unknown dtype %q (want one of %s)", s, dtypeNames())
		}
		m.Dtype, m.DtypeBytes = name, size
	}
	m.KVCacheDtype, err = p.kvCacheDtype()
	return err
}

// kvCacheDtype reports "fp8" when quantization_config declares an 8-bit floating-point
// KV cache: compressed-tensors' kv_cache_scheme {"num_bits": 8, "type": "float"}, or
// ModelOpt's kv_cache_quant_algo "FP8".
func (p *parser) kvCacheDtype() (string, error) {
	raw, key, ok := p.lookup("quantization_config")
	if !ok {
		return "", nil
	}
	var q struct {
		Scheme *struct {
			NumBits int    `json:"num_bits"`
			Type    string `json:"type"`
		} `json:"kv_cache_scheme"`
		Algo *string `json:"kv_cache_quant_algo"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return "", p.errf(key, "not a quantization config: %v", err)
	}
	switch {
	case q.Scheme != nil && q.Scheme.NumBits == 8 && strings.EqualFold(q.Scheme.Type, "float"):
		return "fp8", nil
	case q.Algo != nil && strings.EqualFold(*q.Algo, "fp8"):
		return "fp8", nil
	}
	return "", nil
}

// contextLength derives the model length as vLLM does (see ParseConfig).
func (p *parser) contextLength(m *Config) error {
	for _, l := range p.levels {
		n, err := p.levelContext(l)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		scaled, err := p.ropeScaled(n, m.ModelType)
		if err != nil {
			return err
		}
		m.ContextLength = scaled
		return nil
	}
	return nil
}

// levelContext returns the smallest of the context keys l holds; 0 when it holds none.
func (p *parser) levelContext(l level) (int, error) {
	n := 0
	for _, k := range contextKeys {
		raw, key, ok := l.lookup(k)
		if !ok {
			continue
		}
		v, err := p.intValue(raw, key)
		if err != nil {
			return 0, err
		}
		if v == 0 {
			return 0, p.errf(key, "must be positive, got 0")
		}
		if n == 0 || v < n {
			n = v
		}
	}
	return n, nil
}

// ropeScaled applies the rope scaling of the config to the length n (see ParseConfig).
func (p *parser) ropeScaled(n int, modelType string) (int, error) {
	raw, key, ok := p.lookup("rope_scaling", "rope_parameters")
	if !ok || strings.Contains(modelType, "gemma3") || strings.Contains(p.topModelType(), "gemma3") {
		return n, nil
	}
	sets, err := ropeSets(raw)
	if err != nil {
		return 0, p.errf(key, "%v", err)
	}
	length, factor := float64(n), 1.0
	for _, rs := range sets {
		if rs.kind == "su" || rs.kind == "longrope" || rs.kind == "llama3" {
			continue
		}
		if rs.factor != nil {
			if !(*rs.factor > 0) || math.IsInf(*rs.factor, 0) {
				return 0, p.errf(key+".factor", "%v must be positive and finite", *rs.factor)
			}
			factor = *rs.factor
		}
		if rs.kind == "yarn" && rs.original != nil {
			if *rs.original <= 0 {
				return 0, p.errf(key+".original_max_position_embeddings", "must be positive, got %v", *rs.original)
			}
			length = *rs.original
		}
	}
	scaled := length * factor
	if scaled < 1 || scaled > maxCount {
		return 0, p.errf(key, "scaled context length %v is out of range", scaled)
	}
	return int(scaled), nil
}

func (p *parser) topModelType() string {
	var s string
	if raw, ok := p.top.keys["model_type"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// ropeSet is one rope scaling parameter set.
type ropeSet struct {
	kind     string
	factor   *float64
	original *float64
}

// ropeSets reads rope_scaling, or rope_parameters which transformers v5 may nest by layer
// type ({"full_attention": {...}, "sliding_attention": {...}}).
func ropeSets(raw json.RawMessage) ([]ropeSet, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %s", excerpt(raw))
	}
	_, hasType := obj["type"]
	_, hasRopeType := obj["rope_type"]
	if !hasType && !hasRopeType && len(obj) > 0 && allObjects(obj) {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var out []ropeSet
		for _, k := range keys {
			rs, err := parseRopeSet(obj[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %v", k, err)
			}
			out = append(out, rs)
		}
		return out, nil
	}
	rs, err := parseRopeSet(raw)
	return []ropeSet{rs}, err
}

func parseRopeSet(raw json.RawMessage) (ropeSet, error) {
	var v struct {
		Type     *string  `json:"type"`
		RopeType *string  `json:"rope_type"`
		Factor   *float64 `json:"factor"`
		Original *float64 `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return ropeSet{}, fmt.Errorf("not a rope scaling object: %v", err)
	}
	rs := ropeSet{kind: "default", factor: v.Factor, original: v.Original}
	switch {
	case v.RopeType != nil:
		rs.kind = *v.RopeType
	case v.Type != nil:
		rs.kind = *v.Type
	}
	return rs, nil
}

func allObjects(obj map[string]json.RawMessage) bool {
	for _, raw := range obj {
		if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
			return false
		}
	}
	return true
}

// eos reads config.json's eos_token_id, top level first (transformers derives the
// generation config from it when generation_config.json is absent).
func (p *parser) eos(m *Config) error {
	for _, l := range []level{p.top, p.levels[0]} {
		raw, key, ok := l.lookup("eos_token_id")
		if !ok {
			continue
		}
		ids, err := parseTokenIDs(raw)
		if err != nil {
			return p.errf(key, "%v", err)
		}
		m.EOSTokenIDs = ids
		return nil
	}
	return nil
}

// checkTotals makes sure the derived totals fit the card.
func (p *parser) checkTotals(m *Config) error {
	if _, ok := m.kvBytesPerToken(int64(max(m.DtypeBytes, 1))); !ok {
		return p.errf("num_hidden_layers", "KV bytes per token of %d layers × %d KV heads × %d head_dim overflow", m.NumLayers, m.NumKVHeads, m.HeadDim)
	}
	if _, ok := m.numParameters(); !ok {
		return p.errf("num_hidden_layers", "the parameter count overflows")
	}
	return nil
}

// ParseGenerationConfig reads eos_token_id (an integer or a list of integers) from a
// generation_config.json held in data; nil when absent or null. name prefixes errors.
func ParseGenerationConfig(data []byte, name string) ([]uint32, error) {
	var c map[string]json.RawMessage
	if err := json.Unmarshal(data, &c); err != nil || c == nil {
		if err == nil {
			err = fmt.Errorf("null")
		}
		return nil, fmt.Errorf("model: %s: not a JSON object: %v", name, err)
	}
	raw, ok := c["eos_token_id"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	ids, err := parseTokenIDs(raw)
	if err != nil {
		return nil, fmt.Errorf("model: %s: eos_token_id: %v", name, err)
	}
	return ids, nil
}

// parseTokenIDs reads a token id written as an integer or a list of integers.
func parseTokenIDs(raw json.RawMessage) ([]uint32, error) {
	var list []json.RawMessage
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("want an integer or a list of integers, got %s", excerpt(raw))
		}
	} else {
		list = []json.RawMessage{raw}
	}
	out := make([]uint32, 0, len(list))
	for _, r := range list {
		id, err := parseInt(r)
		if err != nil {
			return nil, fmt.Errorf("want an integer or a list of integers, got %s", excerpt(raw))
		}
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d is out of range", id)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

// parseInt reads a JSON number that is an integer (4096 or 4096.0).
func parseInt(raw json.RawMessage) (int64, error) {
	s := strings.TrimSpace(string(raw))
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, fmt.Errorf("want an integer, got %s", excerpt(raw))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("want an integer, got %s", excerpt(raw))
	}
	return int64(f), nil
}

func isNull(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) == 0 || string(b) == "null"
}

// excerpt is raw shortened for an error message.
func excerpt(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
