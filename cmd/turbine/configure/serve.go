package configure

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
	"github.com/turbine-llm/turbine/planner"
)

// startServe starts this binary's `turbine serve` for layout l and waits until it serves
// with every worker ready, within --ready-timeout.
func (o *Options) startServe(ctx context.Context, s *setup, l planner.Layout, stderr io.Writer) (*serveproc.Proc, []string, error) {
	prof, err := filepath.Abs(o.Profile)
	if err != nil {
		return nil, nil, err
	}
	args, ok := o.serveArgs(s, l, prof)
	if !ok {
		return nil, nil, fmt.Errorf("layout %s: turbine serve runs one engine configuration, and its prefill and decode engines differ (TP%d, TP%d); start them with turbine node and give --verify URL",
			l, l.PrefillTP, l.TP)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	if strings.HasSuffix(exe, ".test") {
		return nil, nil, fmt.Errorf("%s is a test binary; run the turbine binary", exe)
	}
	args = append(args, "--speedup-ratio", strconv.FormatFloat(o.VerifySpeedup, 'g', -1, 64),
		"--host", "127.0.0.1", "--port", "0", "--log-format", "json")
	fmt.Fprintf(stderr, "configure: starting turbine serve %s\n", shellJoin(args))
	p, err := serveproc.Start(ctx, exe, append([]string{"serve"}, args...), s.card.GetModel(), l.Workers+l.PrefillWorkers, o.ReadyTimeout)
	return p, args, err
}
