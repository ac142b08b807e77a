package model

import (
	"math"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// dtypeTable maps config.json dtype names (lower case, without a "torch." prefix) to the
// canonical name and the element size in bytes.
var dtypeTable = []struct {
	names     []string
	canonical string
	bytes     int
}{
	{[]string{"bfloat16", "bf16"}, "bfloat16", 2},
	{[]string{"float16", "half", "fp16"}, "float16", 2},
	{[]string{"float32", "float", "fp32"}, "float32", 4},
	{[]string{"float8_e4m3fn"}, "float8_e4m3fn", 1},
	{[]string{"float8_e4m3fnuz"}, "float8_e4m3fnuz", 1},
	{[]string{"float8_e5m2"}, "float8_e5m2", 1},
	{[]string{"float8_e5m2fnuz"}, "float8_e5m2fnuz", 1},
}

// DtypeBytes returns the element size in bytes of a config.json dtype name (torch_dtype
// or dtype): 2 for bfloat16 and float16, 4 for float32, 1 for the float8 variants;
// false for a name it does not know. Names are matched without case and without a
// "torch." prefix.
func DtypeBytes(name string) (int, bool) {
	_, n, ok := canonicalDtype(name)
	return n, ok
}

func canonicalDtype(name string) (string, int, bool) {
	s := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(name)), "torch.")
	for _, d := range dtypeTable {
		for _, n := range d.names {
			if s == n {
				return d.canonical, d.bytes, true
			}
		}
	}
	return "", 0, false
}

func dtypeNames() string {
	var names []string
	for _, d := range dtypeTable {
		names = append(names, d.canonical)
	}
	return strings.Join(names, ", ")
}

// KVBytesPerToken is the KV cache size of one token in bytes, over the whole model
// (before any tensor-parallel split), in the model dtype: 2 (K and V) × NumLayers ×
// NumKVHeads × HeadDim × DtypeBytes. With MLA it is NumLayers × (KVLoraRank +
// QKRopeHeadDim) × DtypeBytes: vLLM's MLA cache keeps one latent and one rotary key per
// layer, no separate V. 0 when the dtype is unknown. A float32 checkpoint served by vLLM
// with --dtype auto runs in float16, so its cache is half this; KVBytesPerTokenAt(2)
// gives that.
func (m Config) KVBytesPerToken() int64 { return m.KVBytesPerTokenAt(m.DtypeBytes) }

// KVBytesPerTokenAt is KVBytesPerToken with elementBytes bytes per cached element (e.g.
// 1 for --kv-cache-dtype fp8); 0 when elementBytes <= 0 or the product overflows.
func (m Config) KVBytesPerTokenAt(elementBytes int) int64 {
	if elementBytes <= 0 {
		return 0
	}
	n, _ := m.kvBytesPerToken(int64(elementBytes))
	return n
}

func (m Config) kvBytesPerToken(elementBytes int64) (int64, bool) {
	if m.MLA.KVLoraRank > 0 {
		return mul(int64(m.NumLayers), int64(m.MLA.KVLoraRank)+int64(m.MLA.QKRopeHeadDim), elementBytes)
	}
	return mul(2, int64(m.NumLayers), int64(m.NumKVHeads), int64(m.HeadDim), elementBytes)
}

// NumParameters estimates the language model's parameter count with the dense
// transformer formula; with H = HiddenSize, L = NumLayers, d = HeadDim, V = VocabSize,
// k = 3 for a gated MLP and 2 otherwise:
//
//	embeddings:        V·H, twice unless TieWordEmbeddings (the output projection)
//	attention / layer: H·d·(2·NumAttentionHeads + 2·NumKVHeads)  (q, o; k, v)
//	norms:             2·H per layer, H after the last (norm weights)
//	dense MLP / layer: k·H·IntermediateSize
//	MoE MLP / layer:   NumExperts·k·H·ExpertIntermediateSize + H·NumExperts (router)
//	                   + k·H·SharedIntermediateSize (+ H for a SharedExpertGate)
//
// MoE layers are all layers but MoE.DenseLayers. Biases, learned position embeddings,
// per-head q/k norms and vision towers are not counted: the figure is exact for Llama,
// Mistral and Mixtral layouts (8,030,261,248 for Llama-3.1-8B) and a little low for
// others (OPT-125m: 123.6M of 125.2M). It is 0 (unknown) when VocabSize or an MLP width
// it needs is 0, or the model uses MLA, whose projections this formula does not describe.
func (m Config) NumParameters() int64 {
	n, ok := m.numParameters()
	if !ok {
		return 0
	}
	return n
}

// numParameters returns the estimate, 0 when unknown; false on overflow.
func (m Config) numParameters() (int64, bool) {
	if m.VocabSize == 0 || m.MLA.KVLoraRank > 0 {
		return 0, true
	}
	h, l := int64(m.HiddenSize), int64(m.NumLayers)
	k := int64(2)
	if m.GatedMLP {
		k = 3
	}
	numDense, numSparse := l, int64(0)
	if m.MoE.NumExperts > 0 {
		numDense = int64(len(m.MoE.DenseLayers))
		numSparse = l - numDense
	}
	if (numDense > 0 && m.IntermediateSize == 0) || (numSparse > 0 && m.MoE.ExpertIntermediateSize == 0) {
		return 0, true
	}
	embeddings := int64(2)
	if m.TieWordEmbeddings {
		embeddings = 1
	}
	var t total
	t.add(embeddings, int64(m.VocabSize), h)
	t.add(l, h, int64(m.HeadDim), 2*int64(m.NumAttentionHeads)+2*int64(m.NumKVHeads))
	t.add(2*l+1, h)
	t.add(numDense, k, h, int64(m.IntermediateSize))
	t.add(numSparse, int64(m.MoE.NumExperts), k, h, int64(m.MoE.ExpertIntermediateSize))
	t.add(numSparse, h, int64(m.MoE.NumExperts))
	t.add(numSparse, k, h, int64(m.MoE.SharedIntermediateSize))
	if m.MoE.SharedExpertGate {
		t.add(numSparse, h)
	}
	return t.n, !t.overflow
}

// Proto returns the card's architecture figures.
func (m Config) Proto() *messages.ModelArchitecture {
	return &messages.ModelArchitecture{
		Architecture:      m.Architecture,
		NumLayers:         int32(m.NumLayers),
		NumAttentionHeads: int32(m.NumAttentionHeads),
		NumKvHeads:        int32(m.NumKVHeads),
		HeadDim:           int32(m.HeadDim),
		HiddenSize:        int32(m.HiddenSize),
		Dtype:             m.Dtype,
		KvBytesPerToken:   m.KVBytesPerToken(),
		NumParameters:     m.NumParameters(),
	}
}

// mul multiplies non-negative factors; false on overflow or a negative factor.
func mul(xs ...int64) (int64, bool) {
	p := int64(1)
	for _, x := range xs {
		if x < 0 || (x != 0 && p > math.MaxInt64/x) {
			return 0, false
		}
		p *= x
	}
	return p, true
}

// total is a sum of non-negative products that remembers an overflow.
type total struct {
	n        int64
	overflow bool
}

// add adds the product of factors to t.
func (t *total) add(factors ...int64) {
	p, ok := mul(factors...)
	if !ok || t.n > math.MaxInt64-p {
		t.overflow = true
		return
	}
	t.n += p
}
