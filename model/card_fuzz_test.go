package model

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseConfig: any input either fails with an error or gives figures that satisfy
// the card's invariants; nothing panics.
func FuzzParseConfig(f *testing.F) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "*", ConfigFile))
	for _, path := range dirs {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"num_hidden_layers":1,"num_attention_heads":1,"hidden_size":1,"rope_scaling":{"a":{"rope_type":"yarn"}}}`))
	f.Add([]byte(`{"text_config":{"n_layer":2,"n_head":2,"n_embd":4,"num_experts":2,"mlp_only_layers":[1]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseConfig(data, "config.json")
		if err != nil {
			return
		}
		switch {
		case m.NumLayers < 1, m.NumAttentionHeads < 1, m.NumKVHeads < 1, m.HeadDim < 1, m.HiddenSize < 1:
			t.Fatalf("non-positive figure accepted: %+v", m)
		case m.NumAttentionHeads%m.NumKVHeads != 0:
			t.Fatalf("kv heads %d do not divide heads %d", m.NumKVHeads, m.NumAttentionHeads)
		case m.ContextLength < 0, m.KVBytesPerToken() < 0, m.NumParameters() < 0:
			t.Fatalf("negative total: %+v", m)
		case m.MoE.NumExpertsPerToken > m.MoE.NumExperts:
			t.Fatalf("more experts per token than experts: %+v", m.MoE)
		}
		for _, l := range m.MoE.DenseLayers {
			if l < 0 || l >= m.NumLayers {
				t.Fatalf("dense layer %d outside %d layers", l, m.NumLayers)
			}
		}
		_ = m.Proto()
	})
}
