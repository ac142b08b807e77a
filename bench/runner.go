package bench

import (
	"cmp"
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
	// Done: requests ended (answered or failed); Total: requests in the workload, or in
	// a run of a duration (RunFor), the requests sent so far.
	Done, Total int
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

// Outcome is a finished run: one Result per request sent, in workload order.
type Outcome struct {
	Results  []Result
	Duration time.Duration // first send → last answer or failure
	// NotSent counts the requests of the workload never sent because the run was stopped
	// (its context ended) first; they have no Result. A run of a duration (RunFor) has
	// no such count: 0.
	NotSent int
}

// Run sends each request at its arrival (an offset from the start of the run), waiting
// for a free slot when Concurrency requests are in flight, and returns when every
// answer has ended. Requests are sent in arrival order, those of equal arrivals in the
// order of reqs (as package bench/sim replays them), whatever the order of reqs;
// Outcome.Results has one Result per request sent, in the order of reqs (Result.Index
// is the position in reqs). Cancelling ctx stops sending: requests in flight end as
// canceled (ErrCanceled), and those not sent have no Result (Outcome.NotSent counts
// them).
func (r *Runner) Run(ctx context.Context, reqs []Request) Outcome {
	var order []int // positions in reqs by arrival; nil when reqs is in order
	if !slices.IsSortedFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) }) {
		order = make([]int, len(reqs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival) })
	}
	next := func(i int) (Request, bool) {
		switch {
		case i >= len(reqs):
			return Request{}, false
		case order != nil:
			return reqs[order[i]], true
		}
		return reqs[i], true
	}
	out := r.run(ctx, len(reqs), next, 0)
	if order != nil { // back to the order of reqs
		for k := range out.Results {
			out.Results[k].Index = order[out.Results[k].Index]
		}
		slices.SortFunc(out.Results, func(a, b Result) int { return cmp.Compare(a.Index, b.Index) })
	}
	return out
}

// RunFor runs a closed loop for d: it sends next(0), next(1), … in turn, each when one
// of Concurrency slots is free (and not before its Arrival), until d from the start of
// the run; then it stops sending and waits for the answers in flight, which end
// normally. Outcome.Results has one Result per request sent, in order (a request whose
// turn came at d or later is not in it). Cancelling ctx stops sending at once; requests
// in flight end as canceled. It fails when Concurrency or d is not positive (the loop
// would never wait).
func (r *Runner) RunFor(ctx context.Context, next func(i int) Request, d time.Duration) (Outcome, error) {
	switch {
	case r.Concurrency < 1:
		return Outcome{}, fmt.Errorf("bench: a run of a duration needs a concurrency bound, not %d", r.Concurrency)
	case d <= 0:
		return Outcome{}, fmt.Errorf("bench: run duration %v: want > 0", d)
	}
	return r.run(ctx, -1, func(i int) (Request, bool) { return next(i), true }, d), nil
}

// run sends next(0), next(1), … until next has no more, or stop (> 0) from the start of
// the run has come. total is the number of requests next gives (-1: no end): when ctx
// ends first, those not sent are counted in Outcome.NotSent.
func (r *Runner) run(ctx context.Context, total int, next func(i int) (Request, bool), stop time.Duration) Outcome {
	clock := r.Client.clock()
	origin := clock.Now()
	var mu sync.Mutex // results
	results := make([]Result, 0, max(total, 0))
	var p progress
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.report(clock, &p, done, total)
	}()
	var stopC <-chan time.Time // fires at the stop time
	if stop > 0 {
		stopC = clock.After(stop)
	}
	var wg sync.WaitGroup
	notSent := 0
	var slots chan struct{}
	if r.Concurrency > 0 {
		slots = make(chan struct{}, r.Concurrency)
	}
	for i := 0; ; i++ {
		rq, ok := next(i)
		if !ok {
			break
		}
		switch r.wait(ctx, clock, origin, rq.Arrival, stop, stopC, slots) {
		case waitStopped:
		case waitCanceled:
			notSent = max(total-i, 0)
		default:
			mu.Lock()
			results = append(results, Result{Index: i})
			mu.Unlock()
			p.start()
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := r.one(ctx, origin, rq)
				res.Index = i
				mu.Lock()
				results[i] = res
				mu.Unlock()
				p.finish(res)
				if slots != nil {
					<-slots
				}
			}()
			continue
		}
		break
	}
	wg.Wait()
	close(done)
	<-progressDone
	end := origin
	for _, res := range results {
		end = maxTime(end, origin.Add(res.Start+res.E2E))
	}
	return Outcome{Results: results, Duration: end.Sub(origin), NotSent: notSent}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Outcomes of Runner.wait.
const (
	waitSend     = iota // send the request now (a slot is held)
	waitStopped         // the stop time has come: send nothing more
	waitCanceled        // ctx ended
)

// wait blocks until a slot is free and origin+arrival has come; it says whether to
// send (holding the slot). With stop > 0 it gives waitStopped when stopC fires first,
// or when the send would come at or after the stop time; a slot taken is given back
// whenever it does not say send.
func (r *Runner) wait(ctx context.Context, clock Clock, origin time.Time, arrival, stop time.Duration, stopC <-chan time.Time, slots chan struct{}) int {
	// The slot is taken before the arrival is waited for: requests are sent in arrival
	// order by one goroutine, so the send time is the later of the two either way, and a
	// virtual clock is not moved past an arrival while the requests in flight read it.
	if slots != nil {
		select {
		case slots <- struct{}{}:
		default:
			select {
			case slots <- struct{}{}:
			case <-stopC:
				return waitStopped
			case <-ctx.Done():
				return waitCanceled
			}
		}
	}
	giveBack := func(w int) int {
		if slots != nil {
			<-slots
		}
		return w
	}
	if arrival > 0 { // arrival 0 is due: the clock need not be read
		if d := origin.Add(arrival).Sub(clock.Now()); d > 0 {
			select {
			case <-clock.After(d):
			case <-stopC:
				return giveBack(waitStopped)
			case <-ctx.Done():
				return giveBack(waitCanceled)
			}
		}
	}
	if ctx.Err() != nil {
		return giveBack(waitCanceled)
	}
	if stop > 0 && !clock.Now().Before(origin.Add(stop)) {
		return giveBack(waitStopped)
	}
	return waitSend
}

// one sends rq: as the Client's model, or as its LoRA adapter's name (Request.Lora),
// which is how a request names an adapter to an OpenAI-compatible server.
func (r *Runner) one(ctx context.Context, origin time.Time, rq Request) Result {
	res := r.send(ctx, origin, rq)
	res.Lora = rq.Lora
	return res
}

func (r *Runner) send(ctx context.Context, origin time.Time, rq Request) Result {
	maxTokens := max(rq.OutputLength, 1)
	model := r.Client.Model
	if rq.Lora != "" {
		model = rq.Lora
	}
	if r.Client.Endpoint == EndpointChat {
		text, err := Text(rq, r.BlockTokens)
		if err != nil {
			return Result{InputLength: rq.InputLength, Error: ErrWorkload, Detail: err.Error()}
		}
		return r.Client.chat(ctx, origin, model, text, maxTokens)
	}
	prompt, err := Tokens(rq, r.BlockTokens)
	if err != nil {
		return Result{InputLength: rq.InputLength, Error: ErrWorkload, Detail: err.Error()}
	}
	return r.Client.complete(ctx, origin, model, prompt, maxTokens)
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
	if total < 0 { // a run of a duration: the requests sent so far
		st.Total = p.done + p.inFlight
	}
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
