package mocker

import (
	"math"
	"slices"
	"testing"
)

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func TestEmbed(t *testing.T) {
	cases := []struct {
		name             string
		tokens           []uint32
		size, dimensions int
		wantLen          int
	}{
		{"one token", []uint32{7}, 8, 0, 8},
		{"prompt", []uint32{1, 2, 3, 4, 5}, 1024, 0, 1024},
		{"matryoshka", []uint32{1, 2, 3, 4, 5}, 1024, 256, 256},
		{"dimensions past the size", []uint32{1, 2}, 16, 64, 16},
		{"size one", []uint32{9, 9}, 1, 0, 1},
		{"no tokens", nil, 16, 0, 0},
		{"no size", []uint32{1}, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Embed(c.tokens, c.size, c.dimensions)
			if len(v) != c.wantLen {
				t.Fatalf("len %d, want %d", len(v), c.wantLen)
			}
			if c.wantLen == 0 {
				return
			}
			if n := norm(v); math.Abs(n-1) > 1e-6 {
				t.Errorf("norm %v, want 1", n)
			}
			if again := Embed(slices.Clone(c.tokens), c.size, c.dimensions); !slices.Equal(v, again) {
				t.Error("not deterministic")
			}
		})
	}
}

// A truncated vector is the full vector's first elements, renormalised.
func TestEmbedTruncationRenormalises(t *testing.T) {
	tokens := []uint32{11, 22, 33}
	full := Embed(tokens, 64, 0)
	cut := Embed(tokens, 64, 16)
	n := norm(full[:16])
	for j := range cut {
		if want := float64(full[j]) / n; math.Abs(float64(cut[j])-want) > 1e-6 {
			t.Fatalf("element %d: %v, want %v", j, cut[j], want)
		}
	}
}

// Different inputs, including a reordering, give clearly different vectors.
func TestEmbedDistinguishesInputs(t *testing.T) {
	inputs := [][]uint32{{1, 2, 3}, {3, 2, 1}, {1, 2, 4}, {1, 2, 3, 3}, {1}}
	for i := range inputs {
		for j := i + 1; j < len(inputs); j++ {
			a, b := Embed(inputs[i], 256, 0), Embed(inputs[j], 256, 0)
			var dot float64
			for k := range a {
				dot += float64(a[k]) * float64(b[k])
			}
			if dot > 0.99 {
				t.Errorf("%v and %v: cosine %v", inputs[i], inputs[j], dot)
			}
		}
	}
}
