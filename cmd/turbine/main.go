// Command turbine is Turbine's one binary; each subcommand is its own package.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/cmd/turbine/bench"
	"github.com/turbine-llm/turbine/cmd/turbine/chaos"
	"github.com/turbine-llm/turbine/cmd/turbine/configure"
	"github.com/turbine-llm/turbine/cmd/turbine/epp"
	"github.com/turbine-llm/turbine/cmd/turbine/frontend"
	"github.com/turbine-llm/turbine/cmd/turbine/kvbm"
	"github.com/turbine-llm/turbine/cmd/turbine/mocker"
	"github.com/turbine-llm/turbine/cmd/turbine/node"
	"github.com/turbine-llm/turbine/cmd/turbine/planner"
	"github.com/turbine-llm/turbine/cmd/turbine/profile"
	"github.com/turbine-llm/turbine/cmd/turbine/serve"
)

// command is one subcommand: Run gets the arguments after the subcommand's name.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "run a whole service in one process: gateway, router and mock-engine workers", serve.Run},
	{"frontend", "run a cluster frontend: OpenAI API for every model, hosting the routers", frontend.Run},
	{"node", "run a machine's node agent and its workers (engines pinned to GPUs)", node.Run},
	{"kvbm", "run a node's KV block manager on its own (host-memory and disk tiers for its engines' KV blocks)", kvbm.Run},
	{"mocker", "run the mock engine (vLLM HTTP dialect and KV events, no GPU)", mocker.Run},
	{"bench", "measure an OpenAI-compatible endpoint under a trace or a synthetic load", bench.Run},
	{"planner", "run the planner: size every model's worker pools to its load, starting and draining workers", planner.Run},
	{"profile", "sweep an engine's TTFT and ITL over prompt lengths and batches, and write its profile", profile.Run},
	{"epp", "run the endpoint picker of a Gateway API Inference Extension gateway (Envoy ext_proc)", epp.Run},
	{"chaos", "run a cluster in network namespaces under a trace and a nemesis, and check every request", chaos.Run},
	{"configure", "search prefill/decode layouts for a GPU count by simulating a workload on an engine profile", configure.Run},
}

func main() {
	// Every /metrics endpoint of the binary writes # HELP and # TYPE lines.
	metrics.ExposeMetadata(true)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			if err := c.run(context.Background(), args[1:], stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "turbine %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "turbine: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: turbine <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'turbine <command> -h' for a command's flags. Every flag can also be set with\nthe environment variable TURBINE_<FLAG> (upper case, '-' as '_').")
}
