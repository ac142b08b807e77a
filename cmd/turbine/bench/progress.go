package bench

import (
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/turbine-llm/turbine/bench"
)

// barRefresh is how often the runner feeds a live progress bar.
const barRefresh = 200 * time.Millisecond

// barThrottle is the least time between two redraws of a live bar.
var barThrottle = barRefresh / 2

// isTerminal reports whether w is a terminal (a live bar is drawn only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// barTitle is the name a bar shows: the run's label, or "bench" when the label is the
// (long) workload description.
func barTitle(label, workload string) string {
	if label == workload {
		return "bench"
	}
	return label
}

// progress shows a run's progress on w: a live bar when w is a terminal, plain lines
// every interval otherwise (none when interval is 0).
type progress struct {
	w        io.Writer
	interval time.Duration
	title    string
	bar      *progressbar.ProgressBar // nil: plain lines
}

func newProgress(w io.Writer, interval time.Duration, total int, title string, terminal bool) *progress {
	p := &progress{w: w, interval: interval, title: title}
	if terminal && interval > 0 {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(title),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(barThrottle),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
			progressbar.OptionSetRenderBlankState(true))
	}
	return p
}

// runner sets r's progress reporting.
func (p *progress) runner(r *bench.Runner) {
	if p.bar == nil {
		r.Progress, r.ProgressEvery = p.w, p.interval
		return
	}
	r.ProgressEvery, r.Observe = barRefresh, p.observe
}

// observe draws a runner state on the bar.
func (p *progress) observe(s bench.ProgressState) {
	ttft := "-"
	if !math.IsNaN(s.TTFTP50) {
		ttft = fmt.Sprintf("%.1f ms", s.TTFTP50)
	}
	p.bar.Describe(fmt.Sprintf("%s: %d in flight, %d errors, TTFT p50 %s", p.title, s.InFlight, s.Errors, ttft))
	_ = p.bar.Set(s.Done)
}

// simulated returns the progress callback of a simulated run: the bar, or a plain line
// at every tenth of the requests (a simulation runs faster than any interval).
func (p *progress) simulated() func(done, total int) {
	if p.bar != nil {
		return func(done, _ int) { _ = p.bar.Set(done) }
	}
	if p.interval <= 0 {
		return nil
	}
	next := 0
	return func(done, total int) {
		if done >= next || done == total {
			fmt.Fprintf(p.w, "bench: %d/%d simulated\n", done, total)
			next = done + max(total/10, 1)
		}
	}
}

// finish completes the bar (a no-op for plain lines).
func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
