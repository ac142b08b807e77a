package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// Runner drives a workload against a Client.
type Runner struct {
	Client      *Client
	Concurrency int // most requests in flight; 0: no bound (open loop on arrivals)
	BlockTokens int // tokens per hash id when synthesizing prompts
	// Progress, when set, gets a plain line (ProgressState.String) every ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Observe, when set, gets the run's state every ProgressEvery and once more when the
	// last answer has ended (a live progress bar draws from it). It is called from one
	// goroutine at a time.
	Observe func(ProgressState)
}

// ProgressState is a run's state at one moment.
type ProgressState struct {
	Done, Total int // requests ended (answered or failed), requests in the workload
	InFlight    int // requests sent and not ended
	Errors      int // requests ended with an error
	// TTFTP50 is the median time to first token (ms) of the valid answers so far; NaN
	// before the first.
	TTFTP50 float64
}

// String is the plain progress line.
func (s ProgressState) String() string {
	ttft := "-"
	if !math.IsNaN(s.TTFTP50) {
		ttft = fmt.Sprintf("%.1f ms", s.TTFTP50)
	}
	return fmt.Sprintf("bench: %d/%d done, %d in flight, %d errors, TTFT p50 %s", s.Done, s.Total, s.InFlight, s.Errors, ttft)
}

// Outcome is a finished run: one Result per request, in workload order.
type Outcome struct {
	Results  []Result
	Duration time.Duration // first send → last answer
}

// Run sends each request at its arrival (an offset from the start of the run), waiting
// for a free slot when Concurrency requests are in flight, and returns when every
// answer has ended. Cancelling ctx stops sending; requests in flight end as canceled.
func (r *Runner) Run(ctx context.Context, reqs []Request) Outcome {
	clock := r.Client.clock()
	origin := clock.Now()
	results := make([]Result, len(reqs))
	var p progress
	stop := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.report(clock, &p, stop, len(reqs))
	}()
	var wg sync.WaitGroup
	var slots chan struct{}
	if r.Concurrency > 0 {
		slots = make(chan struct{}, r.Concurrency)
	}
	for i, rq := range reqs {
		if !r.wait(ctx, clock, origin.Add(rq.Arrival), slots) {
			for j := i; j < len(reqs); j++ {
				results[j] = Result{Index: j, InputLength: reqs[j].InputLength, Error: ErrCanceled, Detail: "not sent: the run was stopped"}
			}
			break
		}
		p.start()
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := r.one(ctx, origin, rq)
			res.Index = i
			results[i] = res
			p.finish(res)
			if slots != nil {
				<-slots
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-progressDone
	end := origin
	for _, res := range results {
		end = maxTime(end, origin.Add(res.Start+res.E2E))
	}
	return Outcome{Results: results, Duration: end.Sub(origin)}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// wait blocks until at and then until a slot is free; false when ctx ended first.
func (r *Runner) wait(ctx context.Context, clock Clock, at time.Time, slots chan struct{}) bool {
	if d := at.Sub(clock.Now()); d > 0 {
		select {
		case <-clock.After(d):
		case <-ctx.Done():
			return false
		}
	}
	if slots == nil {
		return ctx.Err() == nil
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) one(ctx context.Context, origin time.Time, rq Request) Result {
	prompt, err := Tokens(rq, r.BlockTokens)
	if err != nil {
		return Result{InputLength: rq.InputLength, Error: ErrWorkload, Detail: err.Error()}
	}
	return r.Client.Do(ctx, origin, prompt, max(rq.OutputLength, 1))
}

// progress is the running state the progress lines show.
type progress struct {
	mu                     sync.Mutex
	done, inFlight, errors int
	ttftMS                 []float64
}

func (p *progress) start() {
	p.mu.Lock()
	p.inFlight++
	p.mu.Unlock()
}

func (p *progress) finish(res Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	p.done++
	if res.Error != "" {
		p.errors++
		return
	}
	p.ttftMS = append(p.ttftMS, ms(res.TTFT))
}

func (p *progress) state(total int) ProgressState {
	p.mu.Lock()
	sorted := slices.Clone(p.ttftMS)
	st := ProgressState{Done: p.done, Total: total, InFlight: p.inFlight, Errors: p.errors}
	p.mu.Unlock()
	slices.Sort(sorted)
	st.TTFTP50 = Percentile(sorted, 50)
	return st
}

func (r *Runner) report(clock Clock, p *progress, stop <-chan struct{}, total int) {
	if (r.Progress == nil && r.Observe == nil) || r.ProgressEvery <= 0 {
		return
	}
	for {
		select {
		case <-stop:
			if r.Observe != nil {
				r.Observe(p.state(total))
			}
			return
		case <-clock.After(r.ProgressEvery):
			st := p.state(total)
			if r.Progress != nil {
				fmt.Fprintln(r.Progress, st)
			}
			if r.Observe != nil {
				r.Observe(st)
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
