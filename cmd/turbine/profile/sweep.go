package profile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/planner"
)

// target is one engine being profiled.
type target struct {
	tp      int
	base    string
	client  *bench.Client
	hc      *http.Client
	lim     Limits
	speedup float64 // measured times are multiplied back by it (1: as measured)
	// overhead, when not nil, is the engine a million times faster whose TTFTs are what
	// the host adds at each prompt length (taken out before scaling by speedup).
	overhead *bench.Client
	// sampleUsage: the engine's /metrics has a KV usage gauge to sample.
	sampleUsage bool
}

// counts say how a sweep measured its points.
type counts struct {
	sampled, computed int           // decode points whose KV usage was sampled / computed
	short             []string      // decode points whose steady window stayed short
	overhead          []float64     // ms, per prompt length, when an overhead engine was used
	took              time.Duration // the sweep's wall time
}

// prompts draws unique prompts: token ids in [firstToken, maxTokenID), so that no two
// requests share a KV block and every prefill point is computed in full.
type prompts struct {
	mu  sync.Mutex
	rng *rand.Rand
	max int
}

const firstToken = 1000

func (p *prompts) next(n int) []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]uint32, n)
	for i := range out {
		out[i] = firstToken + uint32(p.rng.IntN(p.max-firstToken))
	}
	return out
}

// sweep measures plan on t and returns its engine profile. step is called after each
// measurement (a prefill request, a decode point).
func sweep(ctx context.Context, t *target, plan Plan, pr *prompts, timeout time.Duration, step func(string)) (planner.EngineProfile, counts, error) {
	start := time.Now()
	ep := planner.EngineProfile{TensorParallelSize: t.tp, KVBlocks: t.lim.KVBlocks, MaxNumSeqs: t.lim.MaxNumSeqs}
	var c counts
	for _, isl := range plan.ISLs {
		var overhead time.Duration
		if t.overhead != nil {
			var samples []float64
			for range plan.Repeats {
				r := do(ctx, t.overhead, pr.next(isl), 1, timeout)
				if r.Error != "" {
					return ep, c, fmt.Errorf("overhead engine, ISL %d: request failed: %s %s", isl, r.Error, r.Detail)
				}
				samples = append(samples, float64(r.TTFT))
			}
			overhead = time.Duration(Typical(samples, t.speedup))
			c.overhead = append(c.overhead, float64(overhead)/float64(time.Millisecond))
		}
		var results []bench.Result
		for range plan.Repeats {
			r := do(ctx, t.client, pr.next(isl), 1, timeout)
			results = append(results, r)
			step(fmt.Sprintf("TP %d: prefill ISL %d", t.tp, isl))
			if r.Error != "" {
				break
			}
		}
		ttft, err := TTFTMillis(results, overhead, t.speedup)
		if err != nil {
			return ep, c, fmt.Errorf("TP %d, prefill ISL %d: %w", t.tp, isl, err)
		}
		ep.Prefill = append(ep.Prefill, PrefillPoint(isl, ttft, t.tp))
	}
	for _, pt := range plan.Decode {
		itl, w, samples, err := t.decode(ctx, plan, pt, pr, timeout)
		if err != nil {
			return ep, c, err
		}
		if w.Gaps < plan.Window/2 {
			c.short = append(c.short, fmt.Sprintf("context %d × batch %d: %d steady steps", pt.Context, pt.Batch, w.Gaps))
		}
		usage, sampled := Usage(samples, w, pt.Context, pt.Batch, t.lim.BlockSize, t.lim.KVBlocks)
		if sampled {
			c.sampled++
		} else {
			c.computed++
		}
		ep.Decode = append(ep.Decode, DecodePointOf(pt, usage, itl, t.tp))
		step(fmt.Sprintf("TP %d: decode context %d × batch %d", t.tp, pt.Context, pt.Batch))
	}
	c.took = time.Since(start)
	return ep, c, nil
}

// lengthenings bounds how many times a decode point is run again with more output when
// its steady window came out short.
const lengthenings = 3

// decode measures one decode point (batch, SteadyITL), running it again with twice the
// output beyond the window (Plan.Lengthen) while the steady window holds fewer than
// half the planned steps and the engine has room: the requests of a large batch may
// reach the engine further apart than their prefill alone would put them.
func (t *target) decode(ctx context.Context, plan Plan, pt DecodePoint, pr *prompts, timeout time.Duration) (float64, Window, []UsageSample, error) {
	for attempt := 0; ; attempt++ {
		results, samples, err := t.batch(ctx, pt, pr, timeout)
		if err != nil {
			return 0, Window{}, nil, err
		}
		itl, w, err := SteadyITL(results, t.speedup)
		short := err != nil || w.Gaps < plan.Window/2
		if short && attempt < lengthenings {
			if longer, ok := plan.Lengthen(pt); ok {
				pt = longer
				continue
			}
		}
		if err != nil {
			return 0, w, nil, fmt.Errorf("TP %d, decode context %d × batch %d: %w", t.tp, pt.Context, pt.Batch, err)
		}
		return itl, w, samples, nil
	}
}

// do sends one request within timeout.
func do(ctx context.Context, c *bench.Client, prompt []uint32, maxTokens int, timeout time.Duration) bench.Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.Do(ctx, time.Now(), prompt, maxTokens)
}

// usageEvery is how often a decode batch samples the engine's KV usage.
const usageEvery = 5 * time.Millisecond

// batch runs one decode point: pt.Batch concurrent streaming requests, while the KV
// usage gauge is sampled (when the engine has one). Times are offsets from one origin.
func (t *target) batch(ctx context.Context, pt DecodePoint, pr *prompts, timeout time.Duration) ([]bench.Result, []UsageSample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	origin := time.Now()
	var samples []UsageSample
	done := make(chan struct{})
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		if !t.sampleUsage {
			return
		}
		tick := time.NewTicker(usageEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			in, err := scrape(sctx, t.hc, t.base)
			scancel()
			if err == nil && in.HasUsage {
				samples = append(samples, UsageSample{At: time.Since(origin), Usage: in.Usage})
			}
		}
	}()
	results := make([]bench.Result, pt.Batch)
	var wg sync.WaitGroup
	for i := range pt.Batch {
		p := pr.next(pt.Prompt)
		wg.Go(func() { results[i] = t.client.Do(ctx, origin, p, pt.Output) })
	}
	wg.Wait()
	close(done)
	<-sampler
	for _, r := range results {
		if r.Error != "" {
			return nil, nil, fmt.Errorf("TP %d, decode context %d × batch %d: request failed: %s %s", t.tp, pt.Context, pt.Batch, r.Error, r.Detail)
		}
	}
	return results, samples, nil
}
