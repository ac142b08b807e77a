// Package bench is `turbine bench`: it measures an OpenAI-compatible endpoint under a
// trace (Mooncake JSONL, Azure CSV) or a synthetic workload and writes summary.json,
// requests.csv and plot.svg to --out; `turbine bench plot A.json B.json -o cmp.svg`
// compares runs; `turbine bench compare` runs one workload against a fresh local
// `turbine serve` per routing mode and tabulates the results, or with --find-capacity
// finds each mode's highest request rate that meets an SLO. The measurement itself is
// package github.com/turbine-llm/turbine/bench.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
)

// Options are the flags of `turbine bench`, with their defaults.
type Options struct {
	URL, Model  string
	Trace       string  // Mooncake .jsonl or Azure .csv; "" for a synthetic workload
	BlockTokens int     // tokens per Mooncake hash id
	TimeScale   float64 // arrival multiplier
	Limit       int     // first N trace requests; 0 all
	// ISL and OSL are the synthetic lengths in tokens: N or a distribution
	// (bench.ParseLength: uniform:MIN:MAX, normal:MEAN:SD, lognormal:MEAN:SD).
	ISL, OSL    string
	Rate        float64 // synthetic Poisson arrivals per second; 0 closed loop
	Concurrency int     // most requests in flight; 0 no bound
	Requests    int     // synthetic request count
	RequestsSet bool    // --requests was given (it excludes --duration)
	// Duration > 0 runs a synthetic workload for this long instead of Requests: Poisson
	// arrivals until then (with Rate), or a closed loop that stops sending then.
	Duration time.Duration
	// SharedPrefixGroups and SharedPrefixTokens: synthetic prompts fall into that many
	// groups (drawn by Seed) and begin with their group's prefix of that many tokens.
	SharedPrefixGroups, SharedPrefixTokens int
	// Loras > 0: requests (synthetic, or a trace's) name one of that many LoRA adapters,
	// drawn by Seed with Zipf popularity LoraZipf, but for LoraBaseFraction of them
	// (bench.LoraSpec; lora.go).
	Loras            int
	LoraZipf         float64
	LoraBaseFraction float64
	// Endpoint is bench.EndpointCompletions (token ids) or bench.EndpointChat (text).
	Endpoint         string
	Seed             uint64
	Out, Label       string
	ProgressInterval time.Duration
	Timeout          time.Duration // per request
	// APIKey is sent with every request as "Authorization: Bearer <APIKey>"; "" sends
	// none. From --api-key, else the first key of TURBINE_API_KEY (the serve's
	// comma-separated list), else OPENAI_API_KEY (as the OpenAI SDK).
	APIKey string

	// Simulate replays the workload on a simulated fleet (package bench/sim) described
	// by Fleet instead of sending it to URL.
	Simulate bool
	Fleet    Fleet
	// Calibrate measures the host model of the service at URL (calibrate.go) instead of
	// running a workload.
	Calibrate bool
	// Plan: load ramps, a simulated planner, polling a service's planner and the
	// per-interval report (planner.go).
	Plan Plan

	// FindCapacity (compare): per routing mode, search the arrival time scale for the
	// highest request rate that meets SLO (bench.ParseSLO), to a relative
	// CapacityPrecision (capacity.go).
	FindCapacity      bool
	SLO               string
	CapacityPrecision float64

	// fleetKnown: the service measured is Fleet (a comparison starts its serves), so
	// summaries get the pooled-cache ceiling even of a real run. ceilings, when set, are
	// the hit-rate ceilings of every workload measured (a capacity sweep's probes: the
	// same requests at other times).
	fleetKnown bool
	ceilings   *ceilings

	// given names the flags given on the command line or by their environment variables,
	// as the flag and its value ("--isl 2048", "TURBINE_ISL=2048"): a synthetic-only flag
	// given with --trace, or a trace-only one without, is refused rather than ignored.
	// nil: none is known to be given.
	given map[string]string
}

// syntheticOnlyFlags describe a synthetic workload; a trace gives each request's lengths
// and arrival. traceOnlyFlags select and time a trace.
var (
	syntheticOnlyFlags = []string{"isl", "osl", "rate", "requests", "duration", "shared-prefix-groups", "shared-prefix-tokens"}
	traceOnlyFlags     = []string{"limit", "time-scale"}
)

// setGiven records the flags of fs that were given, after parsing (cli.Parse sets a
// flag from its environment variable unless the command line gives it).
func (o *Options) setGiven(fs *flag.FlagSet) {
	o.given = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(cli.EnvName(f.Name)); ok {
			o.given[f.Name] = fmt.Sprintf("%s=%s", cli.EnvName(f.Name), v)
		}
	})
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = fmt.Sprintf("--%s %s", f.Name, f.Value) })
}

// checkSimulateOnly fails when a flag of a simulation's alone is given to a real run: on
// the command line any of them; through its environment variable one that only `turbine
// bench` reads (the host model's, --kill-worker), since serve's variables
// (TURBINE_WORKERS ...) may be set in the same shell for the serve being measured.
func (o *Options) checkSimulateOnly() error {
	for _, name := range slices.Concat(fleetFlagNames, hostFlagNames, faultFlagNames, queueFlagNames, loraFleetFlags, kvbmFlagNames) {
		g, ok := o.given[name]
		switch {
		case !ok:
		case strings.HasPrefix(g, "--"):
			return fmt.Errorf("--%s: only with --simulate (a real run measures --url as it is)", name)
		case slices.Contains(hostFlagNames, name) || slices.Contains(benchFaultFlagNames, name):
			return fmt.Errorf("%s: only with --simulate (a real run measures --url as it is; unset the variable)", g)
		}
	}
	return nil
}

// DefaultWorkers is the worker count of a simulated run and of a comparison.
const DefaultWorkers = 8

// Defaults are the embedded defaults.
func Defaults() Options {
	return Options{URL: "http://127.0.0.1:8000", BlockTokens: bench.DefaultBlockTokens, TimeScale: 1, ISL: "1024", OSL: "128",
		Requests: 100, Endpoint: bench.EndpointCompletions, Seed: 1, Out: "bench-out", ProgressInterval: 5 * time.Second,
		Timeout: 10 * time.Minute, Fleet: DefaultFleet(DefaultWorkers), CapacityPrecision: DefaultCapacityPrecision,
		LoraZipf: bench.DefaultLoraZipf, Plan: DefaultPlan()}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "url", o.URL, "base URL of the OpenAI-compatible server (without /v1)")
	fs.StringVar(&o.Model, "model", o.Model, "model name sent in every request (required, except with --simulate)")
	workloadFlags(o, fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for summary.json, requests.csv and plot.svg")
	fs.StringVar(&o.Label, "label", o.Label, "name of the run in summaries and plots (default: the workload)")
	fs.StringVar(&o.APIKey, "api-key", o.APIKey, "API `key` sent as \"Authorization: Bearer KEY\" to a server started with --api-key "+
		"(default: $OPENAI_API_KEY, as the OpenAI SDK; --api-key '' sends none)")
	fs.BoolVar(&o.Simulate, "simulate", o.Simulate, "replay the workload on a simulated fleet of mock engines (virtual time; no --url)")
	fs.BoolVar(&o.Calibrate, "calibrate", o.Calibrate, "measure what the host adds to the mock engines' timing at --url (a turbine serve started with the same engine flags) and write host.json to --out, for --simulate --host-model")
	o.Fleet.simulateFlags(fs)
	o.planFlags(fs)
}

// workloadFlags registers the flags that describe the workload and how it is sent.
func workloadFlags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", o.Trace, "trace to replay: Mooncake JSONL (.jsonl) or Azure LLM inference CSV (.csv); empty for a synthetic workload")
	fs.IntVar(&o.BlockTokens, "block-tokens", o.BlockTokens, "prompt tokens per Mooncake hash id")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "multiplier of trace arrival times (0.5 replays twice as fast; no arrival may end up past 720h)")
	fs.IntVar(&o.Limit, "limit", o.Limit, "replay only the trace's first N requests (0: all)")
	fs.StringVar(&o.ISL, "isl", o.ISL, "synthetic input `length` in tokens: N, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD")
	fs.StringVar(&o.OSL, "osl", o.OSL, "synthetic output `length` in tokens: N, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD")
	fs.IntVar(&o.SharedPrefixGroups, "shared-prefix-groups", o.SharedPrefixGroups, "synthetic prompts fall into this many groups (drawn by --seed), each beginning with a prefix of its own (0: none)")
	fs.IntVar(&o.SharedPrefixTokens, "shared-prefix-tokens", o.SharedPrefixTokens, "length of each group's shared prefix in `tokens` (every prompt is longer)")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "synthetic Poisson arrival rate (requests/s, at least 1e-06); 0 sends as fast as --concurrency allows")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "most requests in flight (0: no bound)")
	fs.Var(setInt{&o.Requests, &o.RequestsSet}, "requests", "synthetic request `count` (not with --duration)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "run a synthetic workload this long (at most 720h) instead of --requests: Poisson arrivals until then with --rate, else a closed loop that stops sending then and waits for the answers in flight")
	fs.StringVar(&o.Endpoint, "endpoint", o.Endpoint, "completions: prompts as token ids to /v1/completions; chat: prompts as text (one common word per token) to /v1/chat/completions")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the synthetic arrivals, lengths and prefix groups (and of a simulation's random choices)")
	fs.DurationVar(&o.ProgressInterval, "progress-interval", o.ProgressInterval, "time between progress lines on stderr when it is not a terminal (a terminal gets a live bar); 0: none")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "limit on one request, answer included")
	loraFlags(o, fs)
	o.rampFlags(fs)
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
		if err := o.Fleet.checkMemory(); err != nil {
			return err
		}
	} else {
		if o.Model == "" {
			return errors.New("--model: required")
		}
		if err := checkURL(o.URL); err != nil {
			return err
		}
		if strings.ContainsFunc(o.APIKey, unicode.IsControl) {
			// The key itself is not shown.
			return errors.New("--api-key: the key has a control character (it could not be sent in an Authorization header)")
		}
	}
	return o.validateWorkload()
}

// defaultAPIKey settles APIKey after parsing: a key from TURBINE_API_KEY (the serve's
// variable, a comma-separated list) is its first; without --api-key or TURBINE_API_KEY,
// OPENAI_API_KEY's. White space around the key is dropped (a server trims its header
// values).
func (o *Options) defaultAPIKey() {
	given, ok := o.given["api-key"]
	switch {
	case !ok:
		o.APIKey = os.Getenv("OPENAI_API_KEY")
	case !strings.HasPrefix(given, "--"): // from the environment
		o.APIKey, _, _ = strings.Cut(o.APIKey, ",")
	}
	o.APIKey = strings.TrimSpace(o.APIKey)
}

// checkURL checks --url: an absolute http:// or https:// URL with a host (a base URL:
// no query or fragment).
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("--url %q: %v", s, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("--url %q: want http:// or https://", s)
	case u.Hostname() == "":
		return fmt.Errorf("--url %q: no host (want e.g. http://127.0.0.1:8000)", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("--url %q: want a base URL without user, query or fragment", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--url %q: port %s: want 1 to 65535", s, p)
		}
	}
	return nil
}

// validateSimulate checks what a simulated run cannot do; errors name the flag.
func (o *Options) validateSimulate() error {
	switch {
	case o.Endpoint == bench.EndpointChat:
		return errors.New("--endpoint chat: not with --simulate (a simulation sends token ids; it has no tokenizer)")
	case o.Concurrency != 0:
		return fmt.Errorf("--concurrency %d: not with --simulate (a simulation replays the arrivals as given)", o.Concurrency)
	case o.Trace == "" && o.Rate == 0:
		return errors.New("--rate: want > 0 with --simulate (a simulation replays arrivals; it has no closed loop)")
	case o.Timeout <= 0 || o.Timeout > sim.MaxSimulatedTime:
		return fmt.Errorf("--timeout %v: want above 0 and at most %v with --simulate (100 years, a simulation's longest virtual time)", o.Timeout, sim.MaxSimulatedTime)
	}
	return nil
}

// validateWorkload checks the workload flags; errors name the flag.
func (o *Options) validateWorkload() error {
	if err := bench.CheckLabel(o.Label); err != nil {
		return fmt.Errorf("--label %q: %v", o.Label, err)
	}
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
	case o.Endpoint != bench.EndpointCompletions && o.Endpoint != bench.EndpointChat:
		return fmt.Errorf("--endpoint %q: want %s or %s", o.Endpoint, bench.EndpointCompletions, bench.EndpointChat)
	}
	if err := o.validateLora(); err != nil {
		return err
	}
	if err := o.validatePlan(); err != nil {
		return err
	}
	if o.Trace == "" {
		for _, name := range traceOnlyFlags {
			if g, ok := o.given[name]; ok {
				return fmt.Errorf("%s: only with --trace (a synthetic workload has no trace to select or time)", g)
			}
		}
		return o.validateSynthetic()
	}
	for _, name := range syntheticOnlyFlags {
		if g, ok := o.given[name]; ok {
			return fmt.Errorf("%s: only for a synthetic workload, not with --trace (the trace gives each request's lengths and arrival)", g)
		}
	}
	switch {
	case o.Duration != 0:
		return fmt.Errorf("--duration %v: only for a synthetic workload (a trace is replayed whole, or its first --limit requests)", o.Duration)
	case o.SharedPrefixGroups != 0 || o.SharedPrefixTokens != 0:
		return errors.New("--shared-prefix-groups, --shared-prefix-tokens: only for a synthetic workload (a trace's hash ids say what its prompts share)")
	}
	return nil
}

// Run is `turbine bench [flags]`, `turbine bench plot A.json B.json -o cmp.svg` and
// `turbine bench compare [flags]`. A run writes its files and prints its summary, then
// returns ErrStopped when SIGINT, SIGTERM or ctx stopped it early, else ErrNoSuccess
// when no request succeeded.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "plot":
			return runPlot(args[1:], stderr)
		case "compare":
			return runCompare(ctx, args[1:], stdout, stderr)
		case "fleet":
			return runFleet(args[1:], stdout, stderr)
		case "tiers":
			return runTiers(args[1:], stdout, stderr)
		}
	}
	o := Defaults()
	fs := flag.NewFlagSet("turbine bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags(&o, fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: turbine bench [flags]                 measure --url (or --simulate a fleet)
       turbine bench compare [flags]         the same workload against several routing policies
       turbine bench plot [-o F] A.json ...  CDFs and throughput of earlier runs (SVG or PNG)
       turbine bench fleet [-o F] A.json ... autoscaled runs: intervals within target, GPU-hours, ready workers over time
       turbine bench tiers [-o F] A.json ... --kvbm runs: prefix hit rates by KV tier (a table; stacked bars)
Run 'turbine bench compare -h' for its flags. Flags of turbine bench:
`)
		fs.PrintDefaults()
	}
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	o.setGiven(fs)
	o.defaultAPIKey()
	if o.Calibrate {
		return o.calibrate(ctx, stdout, stderr)
	}
	if !o.Simulate {
		if err := o.checkSimulateOnly(); err != nil {
			return err
		}
	} else if isSet(fs, "url") {
		return errors.New("--url: not with --simulate (the simulated fleet is in this process)")
	} else if isSet(fs, "api-key") {
		return errors.New("--api-key: not with --simulate (the simulated fleet is in this process)")
	} else if err := o.Fleet.loadHost(o.given); err != nil {
		return err
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
	ctx, stop := notifyStop(ctx)
	defer stop()
	var s bench.Summary
	var results []bench.Result
	if o.Simulate {
		s, results, err = o.simulate(ctx, reqs, workload, o.Fleet.RouterMode, o.Label, stderr)
	} else {
		fmt.Fprintf(stderr, "bench: %s (%s) to %s, model %s\n", o.requestCount(reqs), workload, o.URL, o.Model)
		s, results, err = o.measure(ctx, reqs, workload, o.URL, runLabel(o.Label, workload), stderr)
		if err == nil {
			if hint := unauthorizedHint(s, o.APIKey != ""); hint != "" {
				fmt.Fprintln(stderr, hint)
			}
		}
	}
	if err != nil {
		return err
	}
	if err := o.addIntervals(&s, results); err != nil {
		return err
	}
	if err := write(o.Out, s, results); err != nil {
		return err
	}
	if err := writePlanFiles(o.Out, s); err != nil {
		return err
	}
	printSummary(stdout, s, o.Out)
	printPlan(stdout, s)
	if ctx.Err() != nil {
		return stopped(ctx, s)
	}
	return noneSucceeded(s)
}

// ErrStopped is returned by a run stopped before its end by SIGINT or SIGTERM (or by
// its caller's context): its files are written, with the requests sent so far, but it
// is not the measurement asked for.
var ErrStopped = errors.New("stopped")

// stopSignal is the cause of a context that notifyStop cancelled on a signal.
type stopSignal struct{ sig os.Signal }

func (s stopSignal) Error() string { return s.sig.String() + " signal received" }

// notifyStop is signal.NotifyContext for SIGINT and SIGTERM, with a stopSignal naming
// the signal as the context's cause.
func notifyStop(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-c:
			cancel(stopSignal{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(c)
		cancel(nil)
	}
}

// stopped is ErrStopped for the run s of ctx, which ended: what stopped it ("by a signal
// (interrupt)" when notifyStop's signal did) and how many of the requests were answered,
// canceled in flight and not sent.
func stopped(ctx context.Context, s bench.Summary) error {
	by := fmt.Sprintf("(%v)", context.Cause(ctx))
	var sig stopSignal
	if errors.As(context.Cause(ctx), &sig) {
		by = fmt.Sprintf("by a signal (%v)", sig.sig)
	}
	canceled := s.Errors[bench.ErrCanceled]
	var parts []string
	if canceled > 0 {
		parts = append(parts, fmt.Sprintf("%d canceled in flight", canceled))
	}
	if s.NotSent > 0 {
		parts = append(parts, fmt.Sprintf("%d not sent", s.NotSent))
	}
	detail := ""
	if len(parts) > 0 {
		detail = " (" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Errorf("%w %s after %d of %d requests were answered%s", ErrStopped, by, s.Requests-canceled, s.Requests+s.NotSent, detail)
}

// runLabel is a run's label: label (--label, checked by bench.CheckLabel), else the
// workload's description with what bench.CheckLabel refuses (control characters,
// invalid UTF-8, as a trace's file name may have) replaced by U+FFFD, so that
// bench.ReadSummary reads the summary back.
func runLabel(label, workload string) string {
	if label != "" {
		return label
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return unicode.ReplacementChar
		}
		return r // invalid UTF-8 comes as U+FFFD and is written as such
	}, workload)
}

// ErrNoSuccess is returned by a run in which no request succeeded: its files are written
// (they say why), but it measured nothing, and a script must not take it for a result.
var ErrNoSuccess = errors.New("no request succeeded")

// noneSucceeded is ErrNoSuccess, naming the failures, when s has requests and none
// succeeded; nil otherwise.
func noneSucceeded(s bench.Summary) error {
	if s.Requests > 0 && s.Succeeded == 0 {
		return fmt.Errorf("%w: %d of %d failed%s", ErrNoSuccess, s.Failed, s.Requests, errorKinds(s.Errors))
	}
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// unauthorizedHint explains the run's 401 answers (bench.ErrUnauthorized); "" when
// there were none.
func unauthorizedHint(s bench.Summary, keySent bool) string {
	n := s.Errors[bench.ErrUnauthorized]
	if n == 0 {
		return ""
	}
	what := "the server wants an API key and none was sent: give it with --api-key (or TURBINE_API_KEY, OPENAI_API_KEY)"
	if keySent {
		what = "the server refused the API key sent (from --api-key, TURBINE_API_KEY or OPENAI_API_KEY): check it against the server's --api-key"
	}
	return fmt.Sprintf("bench: %d of %d requests answered HTTP 401 (%s): %s", n, s.Requests, bench.ErrUnauthorized, what)
}

// measure sends reqs to url, or for a generated workload (reqs nil) runs its closed
// loop for --duration, and summarizes the answers.
func (o *Options) measure(ctx context.Context, reqs []bench.Request, workload, url, label string, stderr io.Writer) (bench.Summary, []bench.Result, error) {
	runner := &bench.Runner{
		Client: &bench.Client{URL: url, Model: o.Model, HTTP: newHTTPClient(o.Timeout, o.Concurrency), Endpoint: o.Endpoint,
			APIKey: o.APIKey},
		Concurrency: o.Concurrency, BlockTokens: o.BlockTokens,
	}
	total := len(reqs)
	if o.generated() {
		total = -1 // unknown ahead: a live bar spins
	}
	p := newProgress(stderr, o.ProgressInterval, total, barTitle(label, workload), isTerminal(stderr))
	p.runner(runner)
	var outcome bench.Outcome
	var poll *plannerPoll
	if o.Plan.PollPlanner > 0 {
		var stopPoll func()
		poll, stopPoll = o.startPoll(ctx, url, o.Model, time.Now())
		defer stopPoll()
	}
	if o.generated() {
		var err error
		if outcome, reqs, err = o.runGenerated(ctx, runner); err != nil {
			p.finish()
			return bench.Summary{}, nil, err
		}
	} else {
		outcome = runner.Run(ctx, reqs)
	}
	p.finish()
	s := bench.Summarize(outcome)
	s.Workload, s.URL, s.Model, s.Label = workload, url, o.Model, label
	if poll != nil {
		fmt.Fprintf(stderr, "bench: waiting up to %v for the planner to bring every pool back to its minimum\n", o.Plan.Settle)
		poll.settle(ctx, o.Plan.Settle)
		fmt.Fprintln(stderr, poll.describe())
		s.Fleet = poll.report(outcome.Duration.Seconds())
	}
	o.staticFleet(&s)
	if outcome.NotSent > 0 { // stopped: the ceiling of the requests sent
		sent := make([]bench.Request, len(outcome.Results))
		for i, r := range outcome.Results {
			sent[i] = reqs[r.Index]
		}
		reqs = sent
	}
	o.setCeiling(&s, reqs)
	return s, outcome.Results, nil
}

// setCeiling puts the infinite-cache hit rate of reqs (the requests sent) into s, for
// the workloads that have one (hasCeiling), and the pooled-cache one where the fleet is
// known (a simulation, a comparison).
func (o *Options) setCeiling(s *bench.Summary, reqs []bench.Request) {
	if !o.hasCeiling() {
		return
	}
	c := o.ceilings
	if c == nil || c.requests != len(reqs) {
		c = o.ceilingsOf(reqs)
	}
	s.HitRateCeiling = &c.infinite
	if c.pooledTokens > 0 {
		s.HitRateCeilingPooled, s.PooledCacheTokens = &c.pooled, c.pooledTokens
	}
}

// ceilings are a workload's hit-rate ceilings: bench.Ceiling and, when pooledTokens >
// 0, bench.CeilingPooled for a cache of that many tokens.
type ceilings struct {
	requests         int // how many requests they are of
	infinite, pooled float64
	pooledTokens     int64
}

// ceilingsOf computes the ceilings of reqs; the pooled one only where the fleet is known.
func (o *Options) ceilingsOf(reqs []bench.Request) *ceilings {
	c := &ceilings{requests: len(reqs), infinite: bench.Ceiling(reqs, o.BlockTokens)}
	if o.Simulate || o.fleetKnown {
		c.pooledTokens = o.Fleet.pooledCacheTokens()
		c.pooled = bench.CeilingPooled(reqs, o.BlockTokens, c.pooledTokens)
	}
	return c
}

// workload builds the requests the options describe and names them. The requests of a
// generated workload (a synthetic closed loop for a duration) are nil: measure draws
// them as it sends.
func (o *Options) workload() ([]bench.Request, string, error) {
	if o.Trace == "" {
		return o.synthetic()
	}
	reqs, err := bench.ReadTraceFile(o.Trace, o.BlockTokens, o.Limit)
	if err != nil {
		return nil, "", fmt.Errorf("--trace: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	if len(reqs) == 0 {
		return nil, "", fmt.Errorf("--trace %s: no request", o.Trace)
	}
	name := fmt.Sprintf("%s (%d requests, time scale %g)", filepath.Base(o.Trace), len(reqs), o.TimeScale)
	if o.Plan.Ramp != "" {
		if reqs, name, err = o.applyRamp(reqs); err != nil {
			return nil, "", err
		}
	} else if err := bench.Scale(reqs, o.TimeScale); err != nil {
		return nil, "", fmt.Errorf("--time-scale %g with --trace %s: %s", o.TimeScale, o.Trace, strings.TrimPrefix(err.Error(), "bench: "))
	}
	if err := o.assignLoras(reqs); err != nil {
		return nil, "", err
	}
	return reqs, name + o.loraWorkloadName(), nil
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
	notSent := ""
	if s.NotSent > 0 {
		notSent = fmt.Sprintf(" (stopped: %d more not sent)", s.NotSent)
	}
	fmt.Fprintf(w, "%s: %d requests%s, %d ok, %d failed%s, %.1f s\n", s.Label, s.Requests, notSent, s.Succeeded, s.Failed, errorKinds(s.Errors), s.DurationS)
	printDist(w, "TTFT ms ", s.TTFT, "%.1f")
	printDist(w, "ITL ms  ", s.ITL, "%.2f")
	printDist(w, "E2E ms  ", s.E2E, "%.1f")
	fmt.Fprintf(w, "  throughput %.2f requests/s, %.1f output tokens/s\n", s.RequestThroughput, s.OutputThroughput)
	if s.PrefixCacheHitRate != nil {
		fmt.Fprintf(w, "  prefix-cache hit rate %.1f%% (%d of %d prompt tokens)\n", 100**s.PrefixCacheHitRate, s.CachedTokens, s.PromptTokens)
	}
	if s.HitRateCeiling != nil {
		fmt.Fprintf(w, "  hit-rate ceiling %.1f%% (an infinite prefix cache on this workload)\n", 100**s.HitRateCeiling)
	}
	if s.HitRateCeilingPooled != nil {
		fmt.Fprintf(w, "  pooled-cache ceiling %.1f%% (one LRU prefix cache of %d tokens, every engine's KV blocks together)\n",
			100**s.HitRateCeilingPooled, s.PooledCacheTokens)
	}
	printLora(w, s)
	fmt.Fprintf(w, "  written: %s\n", filepath.Join(dir, "{summary.json,requests.csv,plot.svg}"))
}

// printDist prints one latency line; a distribution without samples (no successful
// request, or no second token for ITL) says so instead of printing zeros.
func printDist(w io.Writer, name string, d bench.Dist, f string) {
	if d.Count == 0 {
		fmt.Fprintf(w, "  %s no samples\n", name)
		return
	}
	fmt.Fprintf(w, "  %s p50 "+f+"  p90 "+f+"  p99 "+f+"  mean "+f+"\n", name, d.P50, d.P90, d.P99, d.Mean)
}

// runPlot is `turbine bench plot A.json B.json … -o cmp.svg`.
func runPlot(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("turbine bench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bench.svg", "picture to write: SVG, or PNG when the name ends in .png")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: turbine bench plot [-o cmp.svg|cmp.png] SUMMARY.json ...")
		fs.PrintDefaults()
	}
	files, err := parseFiles(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("plot: no summary.json given")
	}
	format := "svg"
	switch ext := strings.ToLower(filepath.Ext(*out)); ext {
	case ".png":
		format = "png"
	case ".svg":
	default:
		return fmt.Errorf("-o %s: want a .svg or .png file", *out)
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
			return fmt.Errorf("plot: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
		runs = append(runs, s)
	}
	return writeFile(*out, func(w io.Writer) error { return bench.PlotAs(w, runs, format) })
}

// errorKinds lists failures by kind as " (http_400 2, timeout 1)", most first; "" when none.
func errorKinds(m map[string]int) string {
	kinds := make([]string, 0, len(m))
	for k, n := range m {
		if n > 0 {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return ""
	}
	sort.Slice(kinds, func(i, j int) bool {
		if m[kinds[i]] != m[kinds[j]] {
			return m[kinds[i]] > m[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// parseFiles parses fs over args where flags may follow the file names (`-o F A.json
// B.json` or `A.json -o F B.json`) and returns the names in order; flag.ErrHelp when
// -h was asked.
func parseFiles(fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return files, nil
}
