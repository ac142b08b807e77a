package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// canary decides when an idle engine gets a one-token canary request and whether the
// last one passed (docs/reference.md §10). It is a pure core: the actor passes the time in.
// A failed canary keeps the worker out of routing; since it then gets no request it
// stays idle, and the next canary, failedRetry later (or one interval, if shorter), may
// bring it back.
type canary struct {
	interval   time.Duration // 0: off
	lastActive time.Time     // last request start or end, canary or engine (re)start
	running    bool
	failed     bool
}

// touch records engine activity at now (a request started or ended, an engine started).
func (c *canary) touch(now time.Time) { c.lastActive = now }

// due reports whether a canary should start at now: on, none running, no request in
// flight, and the engine silent for at least the interval (failedRetry after a failed
// canary, when that is shorter).
func (c *canary) due(now time.Time, inflight int) bool {
	wait := c.interval
	if c.failed {
		wait = min(wait, failedRetry)
	}
	return c.interval > 0 && !c.running && inflight == 0 && now.Sub(c.lastActive) >= wait
}

// start marks a canary running.
func (c *canary) start() { c.running = true }

// finish records a canary's outcome at now; changed is true when the verdict flipped.
func (c *canary) finish(now time.Time, err error) (changed bool) {
	was := c.failed
	c.running, c.failed, c.lastActive = false, err != nil, now
	return was != c.failed
}

// reset forgets the verdict (a new engine process started at now).
func (c *canary) reset(now time.Time) { c.running, c.failed, c.lastActive = false, false, now }

// healthy reports whether the last canary passed (or none ran).
func (c *canary) healthy() bool { return !c.failed }

// runCanary sends engine a one-token request (prompt: token id tok; max_tokens 1,
// ignore_eos) under request id id and waits at most timeout. It returns nil when a chunk
// with a finish reason came back, else what went wrong.
func runCanary(ctx context.Context, engine engines.Engine, id string, tok uint32, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	finished := false
	err := engine.Generate(ctx, id, []uint32{tok}, &messages.SamplingParams{MaxTokens: 1, IgnoreEos: true},
		func(c engines.Chunk) error {
			finished = finished || c.FinishReason != ""
			return nil
		})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("worker: canary %s: no answer within %v", id, timeout)
	case err != nil:
		return fmt.Errorf("worker: canary %s: %w", id, err)
	case !finished:
		return fmt.Errorf("worker: canary %s: the stream ended without a finish reason", id)
	}
	return nil
}
