// Package chaos is `turbine chaos`: a cluster of hosts in network namespaces under a
// replayed trace and a nemesis on a seeded schedule, checked afterwards for every
// request (package chaos; docs/chaos.md). It needs root, iproute2 and nftables.
package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/turbine-llm/turbine/chaos"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/internal/consultest"
)

// ErrFailed is returned when the run completed and the checker found a violation.
var ErrFailed = errors.New("chaos: the checker found violations (verdict.txt)")

// Run parses args and runs the rig.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := chaos.DefaultConfig()
	fs := flag.NewFlagSet("turbine chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the nemesis's schedule and the client's disconnects (the same seed replays the same schedule)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the load runs")
	fs.DurationVar(&cfg.Quiet, "quiet", cfg.Quiet, "the load's last stretch without nemesis events")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long the cluster may take afterwards to let go of every request")
	fs.DurationVar(&cfg.MeanGap, "mean-gap", cfg.MeanGap, "mean time between nemesis events")
	fs.StringVar(&cfg.Trace, "trace", "", "trace replayed (Mooncake .jsonl or Azure .csv; default: the Mooncake conversation trace under ../shared/data)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "requests per second the trace is scaled to")
	fs.IntVar(&cfg.MaxPrompt, "max-prompt", cfg.MaxPrompt, "prompts cut to this many tokens")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "output tokens asked at most (the trace's, capped)")
	fs.Float64Var(&cfg.Disconnect, "disconnect", cfg.Disconnect, "share of requests the client cuts on purpose")
	fs.Float64Var(&cfg.SpeedupRatio, "speedup-ratio", cfg.SpeedupRatio, "the mock engines' speed-up")
	fs.IntVar(&cfg.MigrationLimit, "migration-limit", cfg.MigrationLimit, "the frontends' --migration-limit; the checker fails a request migrated more often")
	fs.StringVar(&cfg.Out, "out", "chaos-out", "folder of records.jsonl, plan.txt, verdict.txt, timeline.svg and logs/")
	fs.StringVar(&cfg.Prefix, "netns-prefix", cfg.Prefix, "prefix of the network namespaces (at most 5 bytes)")
	weights := fs.String("weights", "", "the nemesis's kinds drawn more, less or not at all: kind=weight,… over the defaults ("+defaultWeights()+")")
	consul := fs.String("consul", "", "Consul executable (default $TURBINE_CONSUL, else consul on PATH, else the build scripts/ensure-consul.sh caches)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: turbine chaos [flags]

Runs Consul, two frontends and four nodes (an aggregated pool and a 1P2D pool of mock
engines) each in its own network namespace, replays a trace through the frontends while
a nemesis kills, pauses and partitions them and fills the block managers' disks of the
aggregated nodes on a seeded schedule, then checks every
request against an undisturbed engine's tokens and prints
"requests N, ok N, failed N, lost N, duplicated N, leaked N". Needs root, iproute2 and
nftables. Flags:
`)
		fs.PrintDefaults()
	}
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	var err error
	if cfg.Weights, err = chaos.ParseWeights(*weights); err != nil {
		return fmt.Errorf("--weights: %w", err)
	}
	if cfg.Bin, err = os.Executable(); err != nil {
		return err
	}
	if cfg.Consul = *consul; cfg.Consul == "" {
		if cfg.Consul, err = consultest.Find(); err != nil {
			return fmt.Errorf("turbine chaos: %w (run scripts/ensure-consul.sh once, or give --consul)", err)
		}
	}
	if cfg.Trace == "" {
		cfg.Trace = findTrace()
	}
	cfg.Log = stderr
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	v, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, v.Line())
	fmt.Fprintln(stdout, v.Detail())
	for i, p := range v.Problems {
		if i == 20 {
			fmt.Fprintf(stdout, "… %d more in %s\n", len(v.Problems)-i, filepath.Join(cfg.Out, "verdict.txt"))
			break
		}
		fmt.Fprintln(stdout, p)
	}
	fmt.Fprintf(stdout, "seed %d; plot %s\n", cfg.Seed, filepath.Join(cfg.Out, "timeline.svg"))
	if !v.Pass() {
		return ErrFailed
	}
	return nil
}

// findTrace looks for the Mooncake conversation trace in ../shared/data from the
// working folder and its parents.
func findTrace() string {
	const name = "mooncake_fast25_conversation_trace.jsonl"
	dir, _ := os.Getwd()
	for range 6 {
		p := filepath.Join(dir, "..", "shared", "data", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if strings.Count(dir, string(filepath.Separator)) <= 1 {
			break
		}
		dir = filepath.Dir(dir)
	}
	return filepath.Join("..", "shared", "data", name)
}

// defaultWeights lists chaos.DefaultWeights as --weights spells them.
func defaultWeights() string {
	parts := make([]string, len(chaos.DefaultWeights))
	for k, w := range chaos.DefaultWeights {
		parts[k] = fmt.Sprintf("%s=%g", chaos.Kind(k), w)
	}
	return strings.Join(parts, ",")
}
