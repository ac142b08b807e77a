// Package bench is `turbine bench`: it measures an OpenAI-compatible endpoint under a
// trace (Mooncake JSONL, Azure CSV) or a synthetic workload and writes summary.json,
// requests.csv and plot.svg to --out; `turbine bench plot A.json B.json -o cmp.svg`
// compares runs; `turbine bench compare` runs one workload against a fresh local
// `turbine serve` per routing mode and tabulates the results. The measurement itself is
// package github.com/turbine-llm/turbine/bench.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
)

// Options are the flags of `turbine bench`, with their defaults.
type Options struct {
	URL, Model       string
	Trace            string  // Mooncake .jsonl or Azure .csv; "" for a synthetic workload
	BlockTokens      int     // tokens per Mooncake hash id
	TimeScale        float64 // arrival multiplier
	Limit            int     // first N trace requests; 0 all
	ISL, OSL         int     // synthetic lengths
	Rate             float64 // synthetic Poisson arrivals per second; 0 closed loop
	Concurrency      int     // most requests in flight; 0 no bound
	Requests         int     // synthetic request count
	Seed             uint64
	Out, Label       string
	ProgressInterval time.Duration
	Timeout          time.Duration // per request

	// Simulate replays the workload on a simulated fleet (package bench/sim) described
	// by Fleet instead of sending it to URL.
	Simulate bool
	Fleet    Fleet
}

// DefaultWorkers is the worker count of a simulated run and of a comparison.
const DefaultWorkers = 8

// Defaults are the embedded defaults.
func Defaults() Options {
	return Options{URL: "http://127.0.0.1:8000", BlockTokens: bench.DefaultBlockTokens, TimeScale: 1, ISL: 1024, OSL: 128,
		Requests: 100, Seed: 1, Out: "bench-out", ProgressInterval: 5 * time.Second, Timeout: 10 * time.Minute,
		Fleet: DefaultFleet(DefaultWorkers)}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "url", o.URL, "base URL of the OpenAI-compatible server (without /v1)")
	fs.StringVar(&o.Model, "model", o.Model, "model name sent in every request (required, except with --simulate)")
	workloadFlags(o, fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for summary.json, requests.csv and plot.svg")
	fs.StringVar(&o.Label, "label", o.Label, "name of the run in summaries and plots (default: the workload)")
	fs.BoolVar(&o.Simulate, "simulate", o.Simulate, "replay the workload on a simulated fleet of mock engines (virtual time; no --url)")
	o.Fleet.simulateFlags(fs)
}

// workloadFlags registers the flags that describe the workload and how it is sent.
func workloadFlags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", o.Trace, "trace to replay: Mooncake JSONL (.jsonl) or Azure LLM inference CSV (.csv); empty for a synthetic workload")
	fs.IntVar(&o.BlockTokens, "block-tokens", o.BlockTokens, "prompt tokens per Mooncake hash id")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "multiplier of trace arrival times (0.5 replays twice as fast)")
	fs.IntVar(&o.Limit, "limit", o.Limit, "replay only the trace's first N requests (0: all)")
	fs.IntVar(&o.ISL, "isl", o.ISL, "synthetic input length (tokens)")
	fs.IntVar(&o.OSL, "osl", o.OSL, "synthetic output length (tokens)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "synthetic Poisson arrival rate (requests/s); 0 sends as fast as --concurrency allows")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "most requests in flight (0: no bound)")
	fs.IntVar(&o.Requests, "requests", o.Requests, "synthetic request count")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the synthetic arrivals (and of a simulation's random choices)")
	fs.DurationVar(&o.ProgressInterval, "progress-interval", o.ProgressInterval, "time between progress lines on stderr when it is not a terminal (a terminal gets a live bar); 0: none")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "limit on one request, answer included")
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	if o.Simulate {
		if err := o.validateSimulate(); err != nil {
			return err
		}
		if err := o.Fleet.validate([]string{o.Fleet.RouterMode}, "--router-mode"); err != nil {
			return err
		}
	} else {
		switch {
		case o.Model == "":
			return errors.New("--model: required")
		case !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://"):
			return fmt.Errorf("--url %q: want http:// or https://", o.URL)
		}
	}
	return o.validateWorkload()
}

// validateSimulate checks what a simulated run cannot do; errors name the flag.
func (o *Options) validateSimulate() error {
	switch {
	case o.Concurrency != 0:
		return fmt.Errorf("--concurrency %d: not with --simulate (a simulation replays the arrivals as given)", o.Concurrency)
	case o.Trace == "" && o.Rate == 0:
		return errors.New("--rate: want > 0 with --simulate (a simulation replays arrivals; it has no closed loop)")
	}
	return nil
}

// validateWorkload checks the workload flags; errors name the flag.
func (o *Options) validateWorkload() error {
	switch {
	case o.BlockTokens < 1:
		return fmt.Errorf("--block-tokens %d: want at least 1", o.BlockTokens)
	case !(o.TimeScale > 0) || math.IsInf(o.TimeScale, 0):
		return fmt.Errorf("--time-scale %v: want a positive number", o.TimeScale)
	case o.Limit < 0:
		return fmt.Errorf("--limit %d: want >= 0", o.Limit)
	case o.Concurrency < 0:
		return fmt.Errorf("--concurrency %d: want >= 0", o.Concurrency)
	case o.Out == "":
		return errors.New("--out: required")
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %v: want > 0", o.Timeout)
	case o.ProgressInterval < 0:
		return fmt.Errorf("--progress-interval %v: want >= 0", o.ProgressInterval)
	}
	if o.Trace != "" {
		return nil
	}
	switch {
	case o.Requests < 1:
		return fmt.Errorf("--requests %d: want at least 1", o.Requests)
	case o.ISL < 1:
		return fmt.Errorf("--isl %d: want at least 1", o.ISL)
	case o.OSL < 1:
		return fmt.Errorf("--osl %d: want at least 1", o.OSL)
	case !(o.Rate >= 0) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate %v: want >= 0", o.Rate)
	case o.Rate == 0 && o.Concurrency == 0:
		return errors.New("--rate 0 needs --concurrency: a synthetic closed loop is paced by its concurrency")
	}
	return nil
}

// Run is `turbine bench [flags]`, `turbine bench plot A.json B.json -o cmp.svg` and
// `turbine bench compare [flags]`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "plot":
			return runPlot(args[1:], stderr)
		case "compare":
			return runCompare(ctx, args[1:], stdout, stderr)
		}
	}
	o := Defaults()
	fs := flag.NewFlagSet("turbine bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags(&o, fs)
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	if !o.Simulate {
		var err error
		fs.Visit(func(f *flag.Flag) {
			if err == nil && slices.Contains(fleetFlagNames, f.Name) {
				err = fmt.Errorf("--%s: only with --simulate (a real run measures --url as it is)", f.Name)
			}
		})
		if err != nil {
			return err
		}
	} else if isSet(fs, "url") {
		return errors.New("--url: not with --simulate (the simulated fleet is in this process)")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	reqs, workload, err := o.workload()
	if err != nil {
		return err
	}
	if o.Simulate {
		if err := o.Fleet.checkFits(reqs); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("--out %s: %v", o.Out, err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var s bench.Summary
	var results []bench.Result
	if o.Simulate {
		s, results, err = o.simulate(ctx, reqs, workload, o.Fleet.RouterMode, o.Label, stderr)
	} else {
		fmt.Fprintf(stderr, "bench: %d requests (%s) to %s, model %s\n", len(reqs), workload, o.URL, o.Model)
		label := o.Label
		if label == "" {
			label = workload
		}
		s, results = o.measure(ctx, reqs, workload, o.URL, label, stderr)
	}
	if err != nil {
		return err
	}
	if err := write(o.Out, s, results); err != nil {
		return err
	}
	printSummary(stdout, s, o.Out)
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// measure sends reqs to url and summarizes the answers.
func (o *Options) measure(ctx context.Context, reqs []bench.Request, workload, url, label string, stderr io.Writer) (bench.Summary, []bench.Result) {
	runner := &bench.Runner{
		Client:      &bench.Client{URL: url, Model: o.Model, HTTP: newHTTPClient(o.Timeout, o.Concurrency)},
		Concurrency: o.Concurrency, BlockTokens: o.BlockTokens,
	}
	p := newProgress(stderr, o.ProgressInterval, len(reqs), barTitle(label, workload), isTerminal(stderr))
	p.runner(runner)
	outcome := runner.Run(ctx, reqs)
	p.finish()
	s := bench.Summarize(outcome)
	s.Workload, s.URL, s.Model, s.Label = workload, url, o.Model, label
	o.setCeiling(&s, reqs)
	return s, outcome.Results
}

// setCeiling puts the workload's infinite-cache hit rate into s (trace workloads only).
func (o *Options) setCeiling(s *bench.Summary, reqs []bench.Request) {
	if o.Trace != "" {
		c := bench.Ceiling(reqs, o.BlockTokens)
		s.HitRateCeiling = &c
	}
}

// workload builds the requests the options describe and names them.
func (o *Options) workload() ([]bench.Request, string, error) {
	if o.Trace == "" {
		reqs, err := bench.Synthetic(o.Requests, o.ISL, o.OSL, o.BlockTokens, o.Rate, rand.New(rand.NewPCG(o.Seed, 0)))
		name := fmt.Sprintf("synthetic isl %d osl %d", o.ISL, o.OSL)
		if o.Rate > 0 {
			name += fmt.Sprintf(" rate %g/s", o.Rate)
		}
		return reqs, name, err
	}
	f, err := os.Open(o.Trace)
	if err != nil {
		return nil, "", fmt.Errorf("--trace: %v", err)
	}
	defer f.Close()
	var reqs []bench.Request
	switch ext := strings.ToLower(filepath.Ext(o.Trace)); ext {
	case ".jsonl":
		reqs, err = bench.ReadMooncake(f, o.Trace, o.BlockTokens, o.Limit)
	case ".csv":
		reqs, err = bench.ReadAzure(f, o.Trace, o.BlockTokens, o.Limit)
	default:
		return nil, "", fmt.Errorf("--trace %s: want a Mooncake .jsonl or an Azure .csv file", o.Trace)
	}
	if err != nil {
		return nil, "", err
	}
	if len(reqs) == 0 {
		return nil, "", fmt.Errorf("--trace %s: no request", o.Trace)
	}
	bench.Scale(reqs, o.TimeScale)
	return reqs, fmt.Sprintf("%s (%d requests, time scale %g)", filepath.Base(o.Trace), len(reqs), o.TimeScale), nil
}

func write(dir string, s bench.Summary, results []bench.Result) error {
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"summary.json", func(w io.Writer) error { return bench.WriteSummary(w, s) }},
		{"requests.csv", func(w io.Writer) error { return bench.WriteCSV(w, results) }},
		{"plot.svg", func(w io.Writer) error { return bench.Plot(w, []bench.Summary{s}) }},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %v", path, err)
	}
	return f.Close()
}

func printSummary(w io.Writer, s bench.Summary, dir string) {
	fmt.Fprintf(w, "%s: %d requests, %d ok, %d failed %v, %.1f s\n", s.Label, s.Requests, s.Succeeded, s.Failed, s.Errors, s.DurationS)
	fmt.Fprintf(w, "  TTFT ms  p50 %.1f  p90 %.1f  p99 %.1f  mean %.1f\n", s.TTFT.P50, s.TTFT.P90, s.TTFT.P99, s.TTFT.Mean)
	fmt.Fprintf(w, "  ITL ms   p50 %.2f  p90 %.2f  p99 %.2f  mean %.2f\n", s.ITL.P50, s.ITL.P90, s.ITL.P99, s.ITL.Mean)
	fmt.Fprintf(w, "  E2E ms   p50 %.1f  p90 %.1f  p99 %.1f  mean %.1f\n", s.E2E.P50, s.E2E.P90, s.E2E.P99, s.E2E.Mean)
	fmt.Fprintf(w, "  throughput %.2f requests/s, %.1f output tokens/s\n", s.RequestThroughput, s.OutputThroughput)
	if s.PrefixCacheHitRate != nil {
		fmt.Fprintf(w, "  prefix-cache hit rate %.1f%% (%d of %d prompt tokens)\n", 100**s.PrefixCacheHitRate, s.CachedTokens, s.PromptTokens)
	}
	if s.HitRateCeiling != nil {
		fmt.Fprintf(w, "  hit-rate ceiling %.1f%% (an infinite prefix cache on this workload)\n", 100**s.HitRateCeiling)
	}
	fmt.Fprintf(w, "  written: %s\n", filepath.Join(dir, "{summary.json,requests.csv,plot.svg}"))
}

// runPlot is `turbine bench plot A.json B.json … -o cmp.svg`.
func runPlot(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("turbine bench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bench.svg", "SVG file to write")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: turbine bench plot [-o cmp.svg] SUMMARY.json ...")
		fs.PrintDefaults()
	}
	// Flags may follow the files.
	var files []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) == 0 {
		return errors.New("plot: no summary.json given")
	}
	var runs []bench.Summary
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("plot: %v", err)
		}
		s, err := bench.ReadSummary(f, name)
		f.Close()
		if err != nil {
			return err
		}
		runs = append(runs, s)
	}
	return writeFile(*out, func(w io.Writer) error { return bench.Plot(w, runs) })
}
