package model

import (
	"strings"
	"testing"
)

// benchPrompt returns a text of at least 8,192 tokens for tok: the golden texts
// (several languages, code, whitespace, emoji) repeated.
func benchPrompt(tb testing.TB, tok Tokenizer) (string, []uint32) {
	tb.Helper()
	var parts []string
	for _, name := range byteLevelModels {
		for _, c := range loadGolden(tb, name).Encode {
			parts = append(parts, c.Text)
		}
	}
	unit := strings.Join(parts, "\n")
	text := unit
	for len(tok.Encode(text)) < 8192 {
		text += "\n" + unit
	}
	return text, tok.Encode(text)
}

func benchTokenizers(b *testing.B) map[string]Tokenizer {
	out := map[string]Tokenizer{}
	for _, name := range builtinNamesList {
		out[name] = builtinModel(b, name).Tokenizer
	}
	for _, name := range realModels {
		dir := realModelDir(b, name) // skips the benchmark when absent
		m, err := LoadModel(dir)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = m.Tokenizer
	}
	return out
}

var benchOrder = []string{"cl100k_base", "o200k_base", "qwen3", "llama3_1", "llama2", "gemma3", "bert_uncased", "t5_unigram"}

// BenchmarkEncode8k encodes a prompt of at least 8,192 tokens; tiktoken-go on the same
// cl100k text is the reference point.
func BenchmarkEncode8k(b *testing.B) {
	toks := benchTokenizers(b)
	for _, name := range benchOrder {
		tok := toks[name]
		b.Run(name, func(b *testing.B) {
			text, ids := benchPrompt(b, tok)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(text)
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(len(ids)), "tokens/prompt")
		})
	}
	b.Run("tiktoken-go/cl100k_base", func(b *testing.B) {
		ref := tiktokenReference(b, "cl100k_base")
		text, ids := benchPrompt(b, toks["cl100k_base"])
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			ref.Encode(text, []string{"all"}, nil)
		}
		b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
}

// BenchmarkEncodeProse encodes prose, code and CJK (the golden texts of those kinds,
// repeated to about 60 KB), a more typical prompt than BenchmarkEncode8k's mix, which has
// long runs of one character.
func BenchmarkEncodeProse(b *testing.B) {
	toks := benchTokenizers(b)
	var parts []string
	for _, c := range loadGolden(b, "qwen3").Encode {
		switch c.Name {
		case "ascii", "paragraph", "code", "contractions", "cjk", "accented":
			parts = append(parts, c.Text)
		}
	}
	text := strings.Repeat(strings.Join(parts, "\n"), 80)
	for _, name := range benchOrder {
		tok := toks[name]
		b.Run(name, func(b *testing.B) {
			n := len(tok.Encode(text))
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(text)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkDetokenize streams the ids of an 8k-token prompt one token at a time, as the
// gateway does with engine output.
func BenchmarkDetokenize(b *testing.B) {
	toks := benchTokenizers(b)
	for _, name := range benchOrder {
		tok := toks[name]
		b.Run(name, func(b *testing.B) {
			_, ids := benchPrompt(b, tok)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				d := NewDetokenizer(tok, true)
				for _, id := range ids {
					d.Push(id)
				}
				d.Flush()
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkStopMatcher pushes the detokenized chunks of an 8k-token prompt through a
// matcher with 4 stop strings that never match.
func BenchmarkStopMatcher(b *testing.B) {
	tok := builtinModel(b, "cl100k_base").Tokenizer
	_, ids := benchPrompt(b, tok)
	d := NewDetokenizer(tok, false)
	chunks := make([]string, 0, len(ids))
	for _, id := range ids {
		chunks = append(chunks, d.Push(id))
	}
	stops := []string{"<|stop|>", "\n\nUser:", "END OF ANSWER", "Observation:"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := NewStopMatcher(stops)
		for _, c := range chunks {
			s.Push(c)
		}
		s.Flush()
	}
	b.ReportMetric(float64(len(chunks))*float64(b.N)/b.Elapsed().Seconds(), "chunks/s")
}

// BenchmarkLoadQwen3 loads the real Qwen3 tokenizer folder (11 MB tokenizer.json).
func BenchmarkLoadQwen3(b *testing.B) {
	dir := realModelDir(b, "qwen3")
	for b.Loop() {
		if _, err := loadUncached(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
}
