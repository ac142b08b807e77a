package flow

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/messages"
)

func TestFaultOf(t *testing.T) {
	kvErr := "engine: KV transfer failed: sglang: engine answered 500: Decode transfer failed"
	for _, tc := range []struct {
		name string
		ch   *messages.TokenChunk
		want messages.Fault
	}{
		{"tokens", &messages.TokenChunk{TokenIds: []uint32{1}}, messages.Fault_FAULT_NONE},
		{"finish", &messages.TokenChunk{FinishReason: "length"}, messages.Fault_FAULT_NONE},
		{"refused", &messages.TokenChunk{FinishReason: "error", Error: "engine: bad request"}, messages.Fault_FAULT_NONE},
		{"engine died", &messages.TokenChunk{FinishReason: "error", Error: "engine: EOF", Fault: messages.Fault_FAULT_ENGINE_ERROR},
			messages.Fault_FAULT_ENGINE_ERROR},
		{"KV load failure", &messages.TokenChunk{FinishReason: "error", Error: kvErr, Fault: messages.Fault_FAULT_KV_TRANSFER},
			messages.Fault_FAULT_KV_TRANSFER},
		{"KV load failure, not migratable", &messages.TokenChunk{FinishReason: "error", Error: kvErr}, messages.Fault_FAULT_NONE},
		// A worker's own failure is an engine failure, whatever kind it names.
		{"other fault from a worker", &messages.TokenChunk{FinishReason: "error", Error: "x", Fault: messages.Fault_FAULT_STALLED},
			messages.Fault_FAULT_ENGINE_ERROR},
	} {
		if got := faultOf(tc.ch); got != tc.want {
			t.Errorf("%s: faultOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUnmovable(t *testing.T) {
	for _, c := range []struct {
		name string
		sp   *messages.SamplingParams
		want bool
	}{
		{"no sampling", nil, false},
		{"free text", &messages.SamplingParams{MaxTokens: 5}, false},
		{"json schema", &messages.SamplingParams{Structured: &messages.StructuredOutput{JsonSchema: `{}`}}, true},
		{"choice", &messages.SamplingParams{Structured: &messages.StructuredOutput{Choice: []string{"a"}}}, true},
	} {
		if got := unmovable(c.sp); (got != "") != c.want {
			t.Errorf("%s: unmovable = %q, want a reason: %v", c.name, got, c.want)
		}
	}
}

func TestContinuation(t *testing.T) {
	cases := []struct {
		name          string
		max, min      int32
		produced      int
		wantMax, wMin int32
		more          bool
	}{
		{"reduces both", 10, 6, 4, 6, 2, true},
		{"min_tokens not below 0", 10, 2, 4, 6, 0, true},
		{"nothing produced", 10, 3, 0, 10, 3, true},
		{"budget used up", 4, 0, 4, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := &messages.SamplingParams{MaxTokens: c.max, MinTokens: c.min, Seed: proto.Int64(3)}
			produced := make([]uint32, c.produced)
			for i := range produced {
				produced[i] = uint32(50 + i)
			}
			toks, got, more := continuation([]uint32{1, 2}, sp, produced)
			if more != c.more {
				t.Fatalf("more = %v, want %v", more, c.more)
			}
			if sp.MaxTokens != c.max || sp.MinTokens != c.min {
				t.Errorf("the original sampling was changed: %v", sp)
			}
			if !more {
				return
			}
			if got.MaxTokens != c.wantMax || got.MinTokens != c.wMin || got.GetSeed() != 3 {
				t.Errorf("sampling %v, want max %d min %d seed 3", got, c.wantMax, c.wMin)
			}
			if !slices.Equal(toks, append([]uint32{1, 2}, produced...)) {
				t.Errorf("tokens %v", toks)
			}
		})
	}
}

func TestRefusal(t *testing.T) {
	for _, c := range []struct {
		limit, done int
		want        string
	}{{0, 0, "disabled"}, {3, 0, ""}, {3, 2, ""}, {3, 3, "limit (3)"}} {
		got := refusal(c.limit, c.done)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("refusal(%d, %d) = %q, want %q", c.limit, c.done, got, c.want)
		}
	}
}

func TestFinalUsage(t *testing.T) {
	// A continuation's engine counts its own prompt (the original plus earlier output):
	// the finishing chunk covers the whole request instead, its cache hit capped at the
	// original prompt.
	ch := &messages.TokenChunk{PromptTokens: 9, CompletionTokens: 4, CachedTokens: 8}
	finalUsage(ch, 5, 8)
	if ch.PromptTokens != 5 || ch.CompletionTokens != 8 || ch.CachedTokens != 5 {
		t.Errorf("usage %d+%d cached %d, want 5+8 cached 5", ch.PromptTokens, ch.CompletionTokens, ch.CachedTokens)
	}
}

func TestLegSampling(t *testing.T) {
	base := &messages.SamplingParams{MaxTokens: 100, MinTokens: 10, Temperature: proto.Float64(0.5),
		StopTokenIds: []uint32{7}}
	boot := &messages.DisaggParams{BootstrapHost: "h", BootstrapPort: 1, BootstrapRoom: 42}
	p := prefillSampling(base, boot)
	d := decodeSampling(base, `{"a":1}`, nil)
	if p.MaxTokens != 1 || p.MinTokens != 0 || p.GetTemperature() != 0.5 || !slices.Equal(p.StopTokenIds, []uint32{7}) ||
		p.Disagg.Leg != messages.Leg_LEG_PREFILL || p.Disagg.BootstrapHost != "h" || p.Disagg.BootstrapPort != 1 || p.Disagg.BootstrapRoom != 42 {
		t.Errorf("prefill sampling %v", p)
	}
	if d.MaxTokens != 100 || d.MinTokens != 10 || d.Disagg.Leg != messages.Leg_LEG_DECODE || d.Disagg.KvTransferParams != `{"a":1}` ||
		d.Disagg.BootstrapHost != "" {
		t.Errorf("decode sampling %v", d)
	}
	if base.Disagg != nil || base.MaxTokens != 100 || base.MinTokens != 10 {
		t.Errorf("base changed: %v", base)
	}
}

// A resumed leg continues the output's logprobs but does not ask for the prompt's again
// once a chunk (which carried them) was handed on; with nothing produced it asks as the
// first leg did.
func TestContinuationPromptLogprobs(t *testing.T) {
	for _, produced := range []int{0, 2} {
		sp := &messages.SamplingParams{MaxTokens: 10, Logprobs: proto.Int32(2), PromptLogprobs: proto.Int32(1)}
		_, got, _ := continuation([]uint32{1, 2}, sp, make([]uint32, produced))
		if got.GetLogprobs() != 2 || sp.PromptLogprobs == nil {
			t.Fatalf("produced %d: logprobs %v (original %v)", produced, got, sp)
		}
		if (got.PromptLogprobs != nil) != (produced == 0) {
			t.Errorf("produced %d: prompt_logprobs %v", produced, got.PromptLogprobs)
		}
	}
}
