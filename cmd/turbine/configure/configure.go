// Package configure is `turbine configure`: given an engine profile (`turbine profile`),
// a model deployment card, a GPU count, a workload and latency targets, it searches the
// layouts the GPUs allow — aggregated workers and disaggregated xPyD pools, every
// tensor-parallel size of the profile, every replica count — by simulating each on the
// workload (package bench/sim, engines timed by the profile), several at a time, and
// prints the best layouts with their predicted TTFT and ITL percentiles, their goodput
// (requests meeting both targets per second per GPU) and why the others lost
// (docs/reference.md §27.6). --apply prints the winner's `turbine serve` and `turbine
// node` command lines or Kubernetes values; --verify checks the prediction against a
// simulation of the whole workload or against real processes.
//
// The search and the scoring are package planner's pure core (planner/layout.go); this
// package is the shell: it reads the inputs, runs the simulations and writes the report.
package configure

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	benchcmd "github.com/turbine-llm/turbine/cmd/turbine/bench"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
	"github.com/turbine-llm/turbine/planner"
)

// Options are the flags of `turbine configure`, with their defaults in Defaults.
type Options struct {
	// Profile is the engine profile file (required).
	Profile string
	// Model is a model folder (its card: context length, KV bytes per token) or a served
	// model name with the embedded default card (options.DefaultEngine).
	Model string
	// MaxModelLen, MaxNumBatchedTokens and KVBytesPerToken override the card's (0: the
	// card's; a card without KV bytes per token: benchcmd.DefaultKVBytesPerToken).
	MaxModelLen, MaxNumBatchedTokens int
	KVBytesPerToken                  int64
	// KVTransferBandwidth is the disaggregated KV transfer's, bytes/s.
	KVTransferBandwidth float64
	// GPUs bounds every layout's GPUs.
	GPUs int
	// TensorParallelSizes restricts the sizes searched ("1,2"); "": the profile's.
	TensorParallelSizes string
	// Layouts selects the kinds searched: "aggregated", "disaggregated" or both,
	// comma-separated.
	Layouts string
	// Only restricts the search to these layouts (planner.ParseLayout's form,
	// comma-separated); "": every layout.
	Only string
	// RouterMode is the routing policy of every simulated fleet (serve's --router-mode).
	RouterMode string

	// The workload: Trace (Mooncake .jsonl or Azure .csv) with BlockTokens, TimeScale and
	// Limit, or a synthetic one: ISL, OSL (bench.ParseLength), Rate and Requests.
	Trace       string
	BlockTokens int
	TimeScale   float64
	Limit       int
	ISL, OSL    string
	Rate        float64
	Requests    int
	Seed        uint64

	// Targets (ms) and the percentile they hold at.
	TTFTTarget, ITLTarget, Percentile float64
	// Top is how many layouts the table shows (and the search keeps exact).
	Top int
	// Jobs is how many simulations run at once.
	Jobs int
	// Sample is how many requests of the workload each layout's prediction simulates
	// (0: all), in SampleWindows windows spread over the workload.
	Sample, SampleWindows int

	// JSON writes the report as JSON to stdout.
	JSON bool
	// Apply is "", "flags" or "helm": print the winner's command lines or Kubernetes
	// values (docs/reference.md §27.6).
	Apply string
	// Verify is "", "sim" (the winner on the whole workload, simulated), "serve" (a
	// `turbine serve` of the winner started here) or the base URL of a service running
	// the winner, replayed with VerifyRequests requests VerifySpeedup times faster.
	Verify         string
	VerifyRequests int
	VerifySpeedup  float64
	// VerifyHost is what the host of the real processes adds to the mock engines' timing
	// (sim.Host: timer resolution, step overhead), for the simulation the real check is
	// compared with: a mock engine sleeps until each step's modelled end, in whole
	// milliseconds on Linux (docs/reference.md §7).
	VerifyHost   sim.Host
	ReadyTimeout time.Duration

	// given names the flags set on the command line or by environment variable.
	given map[string]bool
}

// Defaults of `turbine configure`, in one place: the targets and the GPU count are the
// planner's (planner.DefaultTTFTTargetMs, DefaultITLTargetMs, DefaultGPUBudget), the
// routing policy and the engine limits serve's.
const (
	// DefaultPercentile is the percentile the targets hold at (p90, as the planner's).
	DefaultPercentile = 90
	// DefaultTop is how many layouts the table shows.
	DefaultTop = 5
	// DefaultSample and DefaultSampleWindows: a layout's prediction simulates 2,000
	// requests in two windows spread over the workload (each after a warm-up of a
	// quarter of its size, simulated and not scored); a smaller workload is simulated
	// whole. On the Mooncake trace this is a fifth of the work of the whole trace per
	// layout, and the predicted goodput lands within 5 % of the whole run's; more,
	// shorter windows start cold more often and predict worse (docs/reference.md
	// §27.6).
	DefaultSample        = 2000
	DefaultSampleWindows = 2
	// DefaultVerifyRequests and DefaultVerifySpeedup: the real-process check replays the
	// workload's first 200 requests with arrivals and engines twice as fast.
	DefaultVerifyRequests = 200
	DefaultVerifySpeedup  = 2
)

// Defaults returns the embedded defaults.
func Defaults() Options {
	e := options.DefaultEngine()
	return Options{Model: e.Model, KVTransferBandwidth: sim.DefaultTransferBandwidth, GPUs: planner.DefaultGPUBudget,
		Layouts: "aggregated,disaggregated", RouterMode: options.DefaultRouter().RouterMode,
		BlockTokens: bench.DefaultBlockTokens, TimeScale: 1, ISL: "1024", OSL: "128", Requests: 1000, Seed: 1,
		TTFTTarget: planner.DefaultTTFTTargetMs, ITLTarget: planner.DefaultITLTargetMs, Percentile: DefaultPercentile,
		Top: DefaultTop, Jobs: runtime.GOMAXPROCS(0), Sample: DefaultSample, SampleWindows: DefaultSampleWindows,
		VerifyRequests: DefaultVerifyRequests, VerifySpeedup: DefaultVerifySpeedup, VerifyHost: sim.Host{TimerResolution: time.Millisecond},
		ReadyTimeout: 2 * time.Minute}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Profile, "profile", o.Profile, "engine profile `file` written by turbine profile (required): each tensor-parallel size's timing, KV blocks and max sequences")
	fs.StringVar(&o.Model, "model", o.Model, "model folder (its config.json gives the context length and KV bytes per token) or served model name with the embedded default card")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "context length in `tokens` (0: the model card's); a longer request of the workload is an error")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "tokens per engine step (0: the model card's)")
	fs.Int64Var(&o.KVBytesPerToken, "kv-bytes-per-token", o.KVBytesPerToken, "disaggregated: the model's KV cache `bytes` per token sent from prefill to decode (0: the model folder's, else 131072)")
	fs.Float64Var(&o.KVTransferBandwidth, "kv-transfer-bandwidth", o.KVTransferBandwidth, "disaggregated: KV transfer bandwidth between prefill and decode engines, `bytes/s`")
	fs.IntVar(&o.GPUs, "gpus", o.GPUs, "GPUs available: every layout searched uses at most this many")
	fs.StringVar(&o.TensorParallelSizes, "tensor-parallel-sizes", o.TensorParallelSizes, "comma-separated tensor-parallel sizes to search (default: every size of the profile)")
	fs.StringVar(&o.Layouts, "layouts", o.Layouts, "layout kinds to search: aggregated, disaggregated or both, comma-separated")
	fs.StringVar(&o.Only, "layout", o.Only, "evaluate only these layouts, comma-separated (4×TP2 aggregated, 1P×TP2+3D×TP1 disaggregated; x for ×), each within --gpus and the sizes searched")
	fs.StringVar(&o.RouterMode, "router-mode", o.RouterMode, "routing policy of the simulated fleets: "+strings.Join(kv.DefaultPolicies().Names(), ", "))
	fs.StringVar(&o.Trace, "trace", o.Trace, "workload trace: Mooncake JSONL (.jsonl) or Azure LLM inference CSV (.csv); empty for a synthetic workload")
	fs.IntVar(&o.BlockTokens, "block-tokens", o.BlockTokens, "prompt tokens per Mooncake hash id")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "multiplier of trace arrival times (0.5 replays twice as fast)")
	fs.IntVar(&o.Limit, "limit", o.Limit, "use only the trace's first N requests (0: all)")
	fs.StringVar(&o.ISL, "isl", o.ISL, "synthetic input `length` in tokens: N, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD")
	fs.StringVar(&o.OSL, "osl", o.OSL, "synthetic output `length` in tokens: N, uniform:MIN:MAX, normal:MEAN:SD or lognormal:MEAN:SD")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "synthetic Poisson arrival rate, requests/s (required without --trace)")
	fs.IntVar(&o.Requests, "requests", o.Requests, "synthetic request count")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the synthetic workload and of the simulations' random choices")
	fs.Float64Var(&o.TTFTTarget, "ttft-target", o.TTFTTarget, "time-to-first-token target in `ms`")
	fs.Float64Var(&o.ITLTarget, "itl-target", o.ITLTarget, "inter-token latency target in `ms` (of each request's mean gap between tokens)")
	fs.Float64Var(&o.Percentile, "percentile", o.Percentile, "percentile at which a layout must meet the targets (90: p90)")
	fs.IntVar(&o.Top, "top", o.Top, "layouts to show (the search keeps this many exact)")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "simulations run at once (default: GOMAXPROCS)")
	fs.IntVar(&o.Sample, "sample", o.Sample, "requests of the workload each layout's prediction simulates, in --sample-windows windows (0: the whole workload)")
	fs.IntVar(&o.SampleWindows, "sample-windows", o.SampleWindows, "windows of consecutive requests the sample is spread over")
	fs.BoolVar(&o.JSON, "json", o.JSON, "write the report as JSON to stdout")
	fs.StringVar(&o.Apply, "apply", o.Apply, "print the best layout's turbine serve and turbine node command lines (flags) or Kubernetes values (helm) to stdout; the ranking goes to stderr")
	fs.StringVar(&o.Verify, "verify", o.Verify, "check the prediction: sim (simulate the best layout on the whole workload), serve (start turbine serve with its flags here and replay a slice), "+
		"or the base URL of a service running it (replay a slice there)")
	fs.IntVar(&o.VerifyRequests, "verify-requests", o.VerifyRequests, "--verify serve or URL: replay the workload's first N requests")
	fs.Float64Var(&o.VerifySpeedup, "verify-speedup", o.VerifySpeedup, "--verify serve or URL: arrivals this many times faster, and mock engines started (serve) or running (URL) with this --speedup-ratio")
	fs.DurationVar(&o.VerifyHost.TimerResolution, "verify-timer-resolution", o.VerifyHost.TimerResolution,
		"--verify serve or URL: the real mock engines' timer resolution, which the simulation they are compared with rounds each step up to (1ms: Go on Linux; 0: exact)")
	fs.DurationVar(&o.VerifyHost.StepOverhead, "verify-step-overhead", o.VerifyHost.StepOverhead,
		"--verify serve or URL: time the real mock engines' host adds to each step, added in the simulation they are compared with (turbine bench --calibrate measures it)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "--verify serve: limit on the serve's start, until every worker is ready")
}

// Flags whose values describe a synthetic workload, and a trace's.
var (
	syntheticFlags = []string{"isl", "osl", "rate", "requests"}
	traceFlags     = []string{"limit", "time-scale", "block-tokens"}
)

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	pos := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch {
	case o.Profile == "":
		return errors.New("--profile: required (an engine profile written by turbine profile)")
	case o.Model == "":
		return errors.New("--model: empty")
	case o.MaxModelLen < 0:
		return fmt.Errorf("--max-model-len %d: want 0 (the card's) or a token count", o.MaxModelLen)
	case o.MaxNumBatchedTokens < 0:
		return fmt.Errorf("--max-num-batched-tokens %d: want 0 (the card's) or a token count", o.MaxNumBatchedTokens)
	case o.KVBytesPerToken < 0 || o.KVBytesPerToken > sim.MaxKVBytesPerToken:
		return fmt.Errorf("--kv-bytes-per-token %d: want 0 (the model's) to %d bytes", o.KVBytesPerToken, sim.MaxKVBytesPerToken)
	case !(o.KVTransferBandwidth >= sim.MinTransferBandwidth && o.KVTransferBandwidth <= sim.MaxTransferBandwidth):
		return fmt.Errorf("--kv-transfer-bandwidth %v: want %g to %g bytes/s", o.KVTransferBandwidth, sim.MinTransferBandwidth, sim.MaxTransferBandwidth)
	case o.GPUs < 1 || o.GPUs > kv.MaxWorkerID+1:
		return fmt.Errorf("--gpus %d: want 1 to %d", o.GPUs, kv.MaxWorkerID+1)
	case !slices.Contains(kv.DefaultPolicies().Names(), o.RouterMode):
		return fmt.Errorf("--router-mode %q: want one of %s", o.RouterMode, strings.Join(kv.DefaultPolicies().Names(), ", "))
	case !pos(o.TTFTTarget):
		return fmt.Errorf("--ttft-target %v: want a number of ms above 0", o.TTFTTarget)
	case !pos(o.ITLTarget):
		return fmt.Errorf("--itl-target %v: want a number of ms above 0", o.ITLTarget)
	case !(o.Percentile > 0 && o.Percentile <= 100):
		return fmt.Errorf("--percentile %v: want above 0, at most 100", o.Percentile)
	case o.Top < 1:
		return fmt.Errorf("--top %d: want at least 1", o.Top)
	case o.Jobs < 1:
		return fmt.Errorf("--jobs %d: want at least 1", o.Jobs)
	case o.Sample < 0:
		return fmt.Errorf("--sample %d: want 0 (the whole workload) or a request count", o.Sample)
	case o.SampleWindows < 1:
		return fmt.Errorf("--sample-windows %d: want at least 1", o.SampleWindows)
	case o.Sample > 0 && o.Sample < o.SampleWindows:
		return fmt.Errorf("--sample %d: want at least one request per window (--sample-windows %d)", o.Sample, o.SampleWindows)
	case o.Apply != "" && o.Apply != "flags" && o.Apply != "helm":
		return fmt.Errorf("--apply %q: want flags or helm", o.Apply)
	case o.VerifyRequests < 1:
		return fmt.Errorf("--verify-requests %d: want at least 1", o.VerifyRequests)
	case !(o.VerifySpeedup >= sim.MinSpeedupRatio && o.VerifySpeedup <= sim.MaxSpeedupRatio):
		return fmt.Errorf("--verify-speedup %v: want %g to %g", o.VerifySpeedup, sim.MinSpeedupRatio, sim.MaxSpeedupRatio)
	case o.VerifyHost.TimerResolution < 0 || o.VerifyHost.TimerResolution > time.Second:
		return fmt.Errorf("--verify-timer-resolution %v: want 0 to 1s", o.VerifyHost.TimerResolution)
	case o.VerifyHost.StepOverhead < 0 || o.VerifyHost.StepOverhead > time.Second:
		return fmt.Errorf("--verify-step-overhead %v: want 0 to 1s", o.VerifyHost.StepOverhead)
	case o.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v: want > 0", o.ReadyTimeout)
	}
	if _, err := o.kinds(); err != nil {
		return err
	}
	if _, err := parseSizes(o.TensorParallelSizes); err != nil {
		return err
	}
	if _, err := o.only(); err != nil {
		return err
	}
	if err := o.validateVerify(); err != nil {
		return err
	}
	return o.validateWorkload()
}

// validateWorkload checks the workload flags: a trace's, or a synthetic workload's.
func (o *Options) validateWorkload() error {
	if o.Trace != "" {
		for _, name := range syntheticFlags {
			if o.given[name] {
				return fmt.Errorf("--%s: only for a synthetic workload, not with --trace (the trace gives each request's lengths and arrival)", name)
			}
		}
		switch {
		case o.BlockTokens < 1:
			return fmt.Errorf("--block-tokens %d: want at least 1", o.BlockTokens)
		case !(o.TimeScale > 0) || math.IsInf(o.TimeScale, 0):
			return fmt.Errorf("--time-scale %v: want a positive number", o.TimeScale)
		case o.Limit < 0:
			return fmt.Errorf("--limit %d: want >= 0 (0: all)", o.Limit)
		}
		return nil
	}
	for _, name := range traceFlags {
		if o.given[name] {
			return fmt.Errorf("--%s: only with --trace", name)
		}
	}
	if _, err := bench.ParseLength(o.ISL); err != nil {
		return fmt.Errorf("--isl: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	if _, err := bench.ParseLength(o.OSL); err != nil {
		return fmt.Errorf("--osl: %s", strings.TrimPrefix(err.Error(), "bench: "))
	}
	switch {
	case !(o.Rate >= bench.MinRate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("--rate %v: want a Poisson arrival rate of at least %g requests/s (a simulation replays arrivals; give --rate or --trace)", o.Rate, bench.MinRate)
	case o.Requests < 1 || o.Requests > bench.MaxSyntheticRequests:
		return fmt.Errorf("--requests %d: want 1 to %d", o.Requests, bench.MaxSyntheticRequests)
	}
	return nil
}

// kinds parses --layouts.
func (o *Options) kinds() (planner.LayoutKinds, error) {
	var k planner.LayoutKinds
	for _, s := range strings.Split(o.Layouts, ",") {
		switch strings.TrimSpace(s) {
		case "aggregated":
			k.Aggregated = true
		case "disaggregated":
			k.Disaggregated = true
		default:
			return k, fmt.Errorf("--layouts %q: want aggregated, disaggregated or both, comma-separated", o.Layouts)
		}
	}
	return k, nil
}

// only parses --layout (nil: every layout).
func (o *Options) only() ([]planner.Layout, error) {
	if strings.TrimSpace(o.Only) == "" {
		return nil, nil
	}
	var out []planner.Layout
	for _, f := range strings.Split(o.Only, ",") {
		l, err := planner.ParseLayout(f)
		if err != nil {
			return nil, fmt.Errorf("--layout: %s", strings.TrimPrefix(err.Error(), "planner: "))
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// parseSizes reads --tensor-parallel-sizes ("" is nil: the profile's).
func parseSizes(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > planner.MaxLayoutTP || slices.Contains(out, n) {
			return nil, fmt.Errorf("--tensor-parallel-sizes %q: want distinct sizes 1..%d, comma-separated", s, planner.MaxLayoutTP)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// targets are the options' latency targets.
func (o *Options) targets() planner.LayoutTargets {
	return planner.LayoutTargets{TTFTMs: o.TTFTTarget, ITLMs: o.ITLTarget, Percentile: o.Percentile}
}

// setup is what a run works from, read and checked from the options.
type setup struct {
	profile  *planner.Profile
	sizes    []int // tensor-parallel sizes searched
	card     *messages.ModelCard
	maxModel int   // context length, tokens
	batched  int   // tokens per engine step
	kvBytes  int64 // KV bytes per token
	reqs     []bench.Request
	workload string        // its description
	span     time.Duration // first to last arrival
}

// prepare loads the profile, the card and the workload; errors name the flag.
func (o *Options) prepare() (*setup, error) {
	s := &setup{}
	p, err := planner.LoadProfile(o.Profile)
	if err != nil {
		return nil, fmt.Errorf("--profile: %s", strings.TrimPrefix(err.Error(), "planner: "))
	}
	s.profile = p
	s.sizes, _ = parseSizes(o.TensorParallelSizes)
	if s.sizes == nil {
		s.sizes = p.TensorParallelSizes()
	}
	for _, tp := range s.sizes {
		if _, err := p.ForTP(tp); err != nil {
			return nil, fmt.Errorf("--tensor-parallel-sizes: %s", strings.TrimPrefix(err.Error(), "planner: "))
		}
	}
	if s.card, err = o.card(); err != nil {
		return nil, err
	}
	s.maxModel, s.batched, s.kvBytes = int(s.card.ContextLength), int(s.card.MaxNumBatchedTokens), s.card.GetArchitecture().GetKvBytesPerToken()
	if o.MaxModelLen > 0 {
		s.maxModel = o.MaxModelLen
	}
	if o.MaxNumBatchedTokens > 0 {
		s.batched = o.MaxNumBatchedTokens
	}
	if o.KVBytesPerToken > 0 {
		s.kvBytes = o.KVBytesPerToken
	}
	if s.kvBytes == 0 {
		s.kvBytes = benchcmd.DefaultKVBytesPerToken
	}
	if s.maxModel < 2 {
		return nil, fmt.Errorf("--max-model-len: the model card names no context length; give one")
	}
	if s.reqs, s.workload, err = o.workload(); err != nil {
		return nil, err
	}
	for i, r := range s.reqs {
		if need := r.InputLength + max(r.OutputLength, 1); need > s.maxModel {
			return nil, fmt.Errorf("--max-model-len %d: request %d needs %d tokens (%d prompt + %d output); raise it", s.maxModel, i, need, r.InputLength, max(r.OutputLength, 1))
		}
	}
	s.span = s.reqs[len(s.reqs)-1].Arrival - s.reqs[0].Arrival
	return s, nil
}

// card is the model deployment card: a model folder's, or the embedded default's under
// the name --model.
func (o *Options) card() (*messages.ModelCard, error) {
	e := options.DefaultEngine()
	if options.IsDir(o.Model) {
		c, err := model.FromFolder(o.Model)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", o.Model, err)
		}
		c.Model, c.MaxNumBatchedTokens = o.Model, int32(e.MaxNumBatchedTokens)
		return c, nil
	}
	e.Model = o.Model
	c, err := e.Card()
	if err != nil {
		return nil, fmt.Errorf("--model %s: the default card: %w", o.Model, err)
	}
	return c, nil
}

// Run is `turbine configure [flags]`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	fs := flag.NewFlagSet("turbine configure", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags(&o, fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: turbine configure --profile FILE [--trace FILE | --isl N --osl N --rate R] [flags]

Searches aggregated and disaggregated layouts of at most --gpus GPUs by simulating each on
the workload with the profile's engines, and prints the best with predicted TTFT and ITL
percentiles, goodput (requests meeting both targets per second per GPU) and why the others
lost. Flags:
`)
		fs.PrintDefaults()
	}
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	o.given = map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := os.LookupEnv(cli.EnvName(f.Name)); ok {
			o.given[f.Name] = true
		}
	})
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return o.run(ctx, stdout, stderr)
}

// run searches, reports, applies and verifies.
func (o *Options) run(ctx context.Context, stdout, stderr io.Writer) error {
	start := time.Now()
	s, err := o.prepare()
	if err != nil {
		return err
	}
	res, err := o.search(ctx, s, stderr)
	if err != nil {
		return err
	}
	rep := o.report(s, res)
	if o.Verify != "" {
		v, err := o.verify(ctx, s, res, stderr)
		if err != nil {
			return err
		}
		rep.Verify = v
	}
	rep.WallS = time.Since(start).Seconds()
	table := stdout
	if o.Apply != "" && !o.JSON {
		table = stderr
	}
	switch {
	case o.JSON:
		if o.Apply != "" {
			rep.Apply = o.applyText(s, res.best())
		}
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	default:
		printReport(table, rep)
	}
	if o.Apply != "" && !o.JSON {
		fmt.Fprint(stdout, o.applyText(s, res.best()))
	}
	return nil
}

// engineConfig is the mock engine of a tensor-parallel size: the profile's entry for it
// (KV blocks, max running sequences, timing), the profile's block size, the card's
// context length and step size; speedup divides its times.
func (s *setup) engineConfig(tp int, speedup float64) (mocker.Config, error) {
	e, err := s.profile.ForTP(tp)
	if err != nil {
		return mocker.Config{}, err
	}
	c := mocker.DefaultConfig()
	c.BlockSize, c.NumGPUBlocks, c.MaxNumSeqs = s.profile.BlockSize, e.KVBlocks, e.MaxNumSeqs
	c.MaxModelLen, c.MaxNumBatchedTokens, c.SpeedupRatio = s.maxModel, s.batched, speedup
	c.Timing = e.Timing() // the curves LoadProfile laid out: no allocation per step
	return c, c.Validate()
}
