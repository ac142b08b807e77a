package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// TestCanarySchedule walks the canary core through a script on a virtual clock.
func TestCanarySchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	c := &canary{interval: 10 * time.Second}
	c.reset(at(0))
	type step struct {
		name    string
		do      func() bool // returns the value to check
		want    bool
		healthy bool
	}
	steps := []step{
		{"not due before the interval", func() bool { return c.due(at(9), 0) }, false, true},
		{"not due with a request in flight", func() bool { return c.due(at(20), 1) }, false, true},
		{"due after the interval idle", func() bool { return c.due(at(10), 0) }, true, true},
		{"not due while one runs", func() bool { c.start(); return c.due(at(11), 0) }, false, true},
		{"failure flips the verdict", func() bool { return c.finish(at(13), errors.New("timeout")) }, true, false},
		{"next one failedRetry after the failure", func() bool { return c.due(at(14), 0) }, false, false},
		{"due again", func() bool { return c.due(at(15), 0) }, true, false},
		{"second failure changes nothing", func() bool { c.start(); return c.finish(at(24), errors.New("refused")) }, false, false},
		{"a pass brings it back", func() bool { c.start(); return c.finish(at(34), nil) }, true, true},
		{"activity postpones the next", func() bool { c.touch(at(40)); return c.due(at(49), 0) }, false, true},
		{"off never runs", func() bool { return (&canary{}).due(at(1000), 0) }, false, true},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want || c.healthy() != s.healthy {
			t.Fatalf("%s: got %v healthy %v, want %v healthy %v", s.name, got, c.healthy(), s.want, s.healthy)
		}
	}
}

// scriptedEngine answers Generate with gen and records the request.
type scriptedEngine struct {
	deadEngine
	gen      func(ctx context.Context, fn func(engines.Chunk) error) error
	tokens   []uint32
	sampling *messages.SamplingParams
}

func (e *scriptedEngine) Generate(ctx context.Context, _ string, tokens []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	e.tokens, e.sampling = tokens, s
	return e.gen(ctx, fn)
}

func TestRunCanary(t *testing.T) {
	for _, tc := range []struct {
		name string
		gen  func(ctx context.Context, fn func(engines.Chunk) error) error
		err  string
	}{
		{"one token", func(_ context.Context, fn func(engines.Chunk) error) error {
			return fn(engines.Chunk{TokenIDs: []uint32{7}, FinishReason: "length"})
		}, ""},
		{"engine error", func(context.Context, func(engines.Chunk) error) error { return errors.New("connection refused") }, "connection refused"},
		{"no finish", func(_ context.Context, fn func(engines.Chunk) error) error {
			return fn(engines.Chunk{TokenIDs: []uint32{7}})
		}, "without a finish reason"},
		// A hung engine: the timeout (1 ns) has passed by the time the engine looks.
		{"hung", func(ctx context.Context, _ func(engines.Chunk) error) error { <-ctx.Done(); return ctx.Err() }, "no answer within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &scriptedEngine{gen: tc.gen}
			timeout := time.Minute
			if tc.name == "hung" {
				timeout = time.Nanosecond
			}
			err := runCanary(context.Background(), e, "canary-1", 5, timeout)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if len(e.tokens) != 1 || e.tokens[0] != 5 || e.sampling.MaxTokens != 1 || !e.sampling.IgnoreEos {
				t.Errorf("canary request: tokens %v sampling %v", e.tokens, e.sampling)
			}
		})
	}
}
