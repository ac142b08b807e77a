package enginetest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/messages"
)

// UpdateGolden rewrites golden files instead of comparing with them (go test -update).
var UpdateGolden = flag.Bool("update", false, "rewrite golden files under testdata/")

// SamplingCase is one request of the table over every sampling field
// (docs/reference.md §20): a name and the sampling parameters that set that field (max
// tokens always set).
type SamplingCase struct {
	Name     string
	Sampling *messages.SamplingParams
}

// SamplingCases sets each field of messages.SamplingParams that reaches an engine's
// body on its own, a few of them at their edge values, then those every engine takes
// at once, then all of them at once.
func SamplingCases() []SamplingCase {
	p := func(f func(s *messages.SamplingParams)) *messages.SamplingParams {
		s := &messages.SamplingParams{MaxTokens: 16}
		f(s)
		return s
	}
	return []SamplingCase{
		{"max_tokens", p(func(s *messages.SamplingParams) {})},
		{"min_tokens", p(func(s *messages.SamplingParams) { s.MinTokens = 4 })},
		{"ignore_eos", p(func(s *messages.SamplingParams) { s.IgnoreEos = true })},
		{"stop_token_ids", p(func(s *messages.SamplingParams) { s.StopTokenIds = []uint32{2, 151645} })},
		{"temperature", p(func(s *messages.SamplingParams) { s.Temperature = proto.Float64(0.7) })},
		{"temperature_zero", p(func(s *messages.SamplingParams) { s.Temperature = proto.Float64(0) })},
		{"top_p", p(func(s *messages.SamplingParams) { s.TopP = proto.Float64(0.95) })},
		{"seed", p(func(s *messages.SamplingParams) { s.Seed = proto.Int64(-3) })},
		{"presence_penalty", p(func(s *messages.SamplingParams) { s.PresencePenalty = 0.5 })},
		{"frequency_penalty", p(func(s *messages.SamplingParams) { s.FrequencyPenalty = -0.25 })},
		{"top_k", p(func(s *messages.SamplingParams) { s.TopK = proto.Int32(20) })},
		{"top_k_off_zero", p(func(s *messages.SamplingParams) { s.TopK = proto.Int32(0) })},
		{"top_k_off_minus_one", p(func(s *messages.SamplingParams) { s.TopK = proto.Int32(-1) })},
		{"min_p", p(func(s *messages.SamplingParams) { s.MinP = proto.Float64(0.05) })},
		{"repetition_penalty", p(func(s *messages.SamplingParams) { s.RepetitionPenalty = proto.Float64(1.1) })},
		{"logit_bias", p(func(s *messages.SamplingParams) { s.LogitBias = map[uint32]float64{9: -100, 10: 2.5, 0: 100} })},
		{"bad_words", p(func(s *messages.SamplingParams) { s.BadWords = []string{"foo", "bar baz"} })},
		{"allowed_token_ids", p(func(s *messages.SamplingParams) { s.AllowedTokenIds = []uint32{5, 6, 7} })},
		{"priority", p(func(s *messages.SamplingParams) { s.Priority = proto.Int32(-5) })},
		{"priority_zero", p(func(s *messages.SamplingParams) { s.Priority = proto.Int32(0) })},
		{"cache_salt", p(func(s *messages.SamplingParams) { s.CacheSalt = "tenant-a/0f3c" })},
		{"every_field_of_every_engine", p(func(s *messages.SamplingParams) {
			s.MinTokens, s.IgnoreEos, s.StopTokenIds = 1, true, []uint32{2}
			s.Temperature, s.TopP, s.Seed = proto.Float64(0.5), proto.Float64(0.9), proto.Int64(7)
			s.PresencePenalty, s.FrequencyPenalty = 0.1, 0.2
			s.TopK, s.MinP, s.RepetitionPenalty = proto.Int32(40), proto.Float64(0.01), proto.Float64(1.05)
			s.LogitBias = map[uint32]float64{3: 1}
		})},
		{"everything", p(func(s *messages.SamplingParams) {
			s.MinTokens, s.IgnoreEos, s.StopTokenIds = 1, true, []uint32{2}
			s.Temperature, s.TopP, s.Seed = proto.Float64(0.5), proto.Float64(0.9), proto.Int64(7)
			s.PresencePenalty, s.FrequencyPenalty = 0.1, 0.2
			s.TopK, s.MinP, s.RepetitionPenalty = proto.Int32(40), proto.Float64(0.01), proto.Float64(1.05)
			s.LogitBias = map[uint32]float64{3: 1}
			s.BadWords, s.AllowedTokenIds = []string{"x"}, []uint32{3, 4}
			s.Priority, s.CacheSalt = proto.Int32(1), "s"
		})},
	}
}

// GoldenBodies builds each case's request body with body (an error is written as
// "error: ...") and compares them with the golden file testdata/name, one "# case"
// line followed by the body per case; with -update it rewrites the file.
func GoldenBodies(t *testing.T, name string, body func(s *messages.SamplingParams) ([]byte, error)) {
	t.Helper()
	GoldenBodiesOf(t, name, SamplingCases(), body)
}

// GoldenBodiesOf is GoldenBodies over cases.
func GoldenBodiesOf(t *testing.T, name string, cases []SamplingCase, body func(s *messages.SamplingParams) ([]byte, error)) {
	t.Helper()
	var out bytes.Buffer
	for _, c := range cases {
		b, err := body(c.Sampling)
		fmt.Fprintf(&out, "# %s\n", c.Name)
		if err != nil {
			fmt.Fprintf(&out, "error: %v\n", err)
			continue
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	path := filepath.Join("testdata", name)
	if *UpdateGolden {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("request bodies differ from %s (go test -update rewrites it):\n%s", path, diffLines(want, out.Bytes()))
	}
}

// diffLines lists the lines that differ, by line number.
func diffLines(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	var b bytes.Buffer
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			fmt.Fprintf(&b, "line %d\n want %s\n  got %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}
