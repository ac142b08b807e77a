package enginetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// SamplingRoundTrip runs every SamplingCase through the adapter connect returns, against
// a mock engine speaking dialect: a case in refused must fail (the adapter's second
// guard; the mock engine would refuse it too), every other must generate. Then it checks
// what the mock engine makes observable: logit_bias +100 forces its token;
// allowed_token_ids (unless refused) keeps every token in the list; cache_salt (unless
// refused) finds the prompt's blocks cached under the same salt only.
func SamplingRoundTrip(t *testing.T, dialect server.DialectName, connect func(url string) engines.Engine, refused ...string) {
	t.Helper()
	_, url := StartMock(t, server.Options{Params: server.Params{Engine: MockConfig(1000, 5), Dialect: dialect}}, nil)
	e := connect(url)
	gen := func(id string, prompt []uint32, s *messages.SamplingParams) ([]uint32, engines.Chunk, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var toks []uint32
		var last engines.Chunk
		err := e.Generate(ctx, id, prompt, s, func(c engines.Chunk) error {
			toks, last = append(toks, c.TokenIDs...), c
			return nil
		})
		return toks, last, err
	}
	for i, c := range SamplingCases() {
		_, last, err := gen("case-"+c.Name, Prompt(20+i), c.Sampling)
		switch {
		case slices.Contains(refused, c.Name) && err == nil:
			t.Errorf("%s: accepted, want the adapter's refusal", c.Name)
		case !slices.Contains(refused, c.Name) && err != nil:
			t.Errorf("%s: %v", c.Name, err)
		case err == nil && last.FinishReason == "":
			t.Errorf("%s: no finish reason", c.Name)
		}
	}
	base := &messages.SamplingParams{MaxTokens: 8, IgnoreEos: true}
	s := proto.Clone(base).(*messages.SamplingParams)
	s.LogitBias = map[uint32]float64{1000: 100}
	if toks, _, err := gen("forced", Prompt(30), s); err != nil || len(toks) != 8 || slices.IndexFunc(toks, func(t uint32) bool { return t != 1000 }) >= 0 {
		t.Errorf("logit_bias {1000: +100}: %v %v, want eight 1000s", toks, err)
	}
	if !slices.Contains(refused, "allowed_token_ids") {
		s := proto.Clone(base).(*messages.SamplingParams)
		s.AllowedTokenIds = []uint32{1001, 1002}
		toks, _, err := gen("allowed", Prompt(30), s)
		if err != nil || len(toks) != 8 || slices.IndexFunc(toks, func(t uint32) bool { return t != 1001 && t != 1002 }) >= 0 {
			t.Errorf("allowed_token_ids [1001 1002]: %v %v", toks, err)
		}
	}
	if !slices.Contains(refused, "cache_salt") {
		prompt := Prompt(200)[100:] // six blocks of 16 and four tokens, unlike any prompt above
		for i, tc := range []struct {
			salt   string
			cached int
		}{{"a", 0}, {"a", 96}, {"b", 0}, {"", 0}, {"b", 96}} {
			s := proto.Clone(base).(*messages.SamplingParams)
			s.MaxTokens, s.CacheSalt = 1, tc.salt
			_, last, err := gen("salt-"+string(rune('0'+i)), prompt, s)
			if err != nil || last.CachedTokens != tc.cached {
				t.Errorf("request %d, salt %q: %d cached tokens (%v), want %d", i, tc.salt, last.CachedTokens, err, tc.cached)
			}
		}
	}
}
