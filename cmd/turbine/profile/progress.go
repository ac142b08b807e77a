package profile

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
)

// isTerminal reports whether w is a terminal (a live bar is drawn only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// bar shows a sweep's progress on a terminal: one step per measurement. Elsewhere it
// draws nothing and only the notes (one line each) are written.
type bar struct {
	mu sync.Mutex
	w  io.Writer
	pb *progressbar.ProgressBar // nil: not a terminal
}

func newBar(w io.Writer, total int, terminal bool) *bar {
	b := &bar{w: w}
	if terminal {
		b.pb = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("profile"),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }), progressbar.OptionSetRenderBlankState(true))
	}
	return b
}

// step counts one measurement done, described by what.
func (b *bar) step(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil {
		b.pb.Describe(what)
		_ = b.pb.Add(1)
	}
}

// note writes a line (above the bar on a terminal).
func (b *bar) note(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil {
		_ = b.pb.Clear()
	}
	fmt.Fprintln(b.w, line)
	if b.pb != nil {
		_ = b.pb.RenderBlank()
	}
}

func (b *bar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil && !b.pb.IsFinished() {
		_ = b.pb.Finish()
	}
}
