package preprocess

import (
	"strings"
	"testing"
)

func BenchmarkZZEnglish(b *testing.B) {
	tok := builtinModel(b, "cl100k_base").Tokenizer
	g := loadGolden(b, "qwen3")
	var parts []string
	for _, c := range g.Encode {
		if c.Name == "paragraph" || c.Name == "code" || c.Name == "ascii" || c.Name == "contractions" {
			parts = append(parts, c.Text)
		}
	}
	text := strings.Repeat(strings.Join(parts, "\n"), 100)
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
