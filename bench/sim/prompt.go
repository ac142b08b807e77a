package sim

import (
	"sync"

	"github.com/turbine-llm/turbine/bench"
)

// prompt is a synthesized prompt (tokens), or why it could not be (err). Requests that
// cannot run get neither.
type prompt struct {
	tokens []uint32
	err    error
}

// promptAhead is how many prompts are synthesized ahead of the simulation.
const promptAhead = 64

// startPrompts synthesizes the prompts of reqs in arrival order (order) on a goroutine
// of its own, ahead of the simulation that consumes them: bench.Tokens is a pure
// function of the request, so the run stays deterministic, and on a machine with more
// than one core the synthesis (a random draw per prompt token) overlaps the simulation.
// Every request of order gets exactly one value, in order. stop ends the goroutine and
// waits for it.
func startPrompts(reqs []bench.Request, order []int32, cfg Config) (<-chan prompt, func()) {
	out := make(chan prompt, promptAhead)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, i := range order {
			r := &reqs[i]
			var p prompt
			if invalid(r, &cfg.Engine) == "" {
				p.tokens, p.err = bench.Tokens(*r, cfg.BlockTokens)
			}
			select {
			case out <- p:
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}
