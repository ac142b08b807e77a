// Package profile is `turbine profile`: it sweeps one worker's engine over prompt
// lengths and over batches of sequences of several context lengths, and writes an engine
// profile (planner.Profile, docs/reference.md §27.1) that the planner, the configurator
// and the mock engine (`turbine mocker --profile`) read.
//
// Targets: by default it launches mock engines itself (`turbine mocker`, one per
// --tensor-parallel-sizes entry, started and stopped in turn); with --url it measures an
// OpenAI-compatible engine already running (vLLM, SGLang, another mock engine), of the
// one tensor-parallel size --tensor-parallel-size says.
//
// Measurements (each through the engine's /v1/completions, streaming, prompts of random
// token ids so that no request finds another's blocks in the prefix cache):
//
//   - prefill: each prompt length alone on the idle engine, --repeats times, max_tokens
//     1; the median TTFT is the point's ttft_ms (the least, for mock engines run at a
//     speedup: see TTFTMillis);
//   - decode: for each context and batch size, a batch of concurrent requests with
//     ignore_eos and enough output for all of them to decode together for --decode-tokens
//     steps; the point's itl_ms is the median over requests of their mean gap in that
//     steady window (SteadyITL), its kv_usage the mean of the engine's KV usage gauge
//     sampled meanwhile, or computed from context × batch when the engine has none.
//
// A mock engine run --speedup-ratio R times faster gives times R times shorter: they are
// multiplied back by R, after taking out what HTTP and the engine loop add (measured on
// an extra mock engine a million times faster, whose modelled time vanishes), which a
// faster engine does not shorten. The host's timer still lengthens short steps (docs/
// reference.md §7, "What the host adds"); R is best kept where a decode step lasts
// several milliseconds of real time.
//
// The sweep's pure parts (the plan, the figures of a point, the fits) are in plan.go;
// sweep.go sends the requests; engine.go starts mock engines and reads /metrics.
package profile

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/planner"
)

// EngineMocker is --engine's default: the mock engine, launched by the command.
const EngineMocker = "mocker"

// engineNames are the names --engine takes (the profile's engine field).
var engineNames = []string{EngineMocker, "vllm", "sglang", "trtllm"}

// Defaults of a mock engine the command launches (mocker.DefaultConfig), and of an
// engine at --url whose /metrics does not say.
const (
	defaultMaxNumSeqs          = 256
	defaultMaxNumBatchedTokens = 8192
	// defaultMaxTokenID bounds the random prompt token ids: ordinary ids of any
	// vocabulary of 91,000 or more, as bench's synthesized prompts.
	defaultMaxTokenID = 91000
	// answerTimeout bounds the first look at an engine at --url.
	answerTimeout = 10 * time.Second
)

// Options are the command's flags.
type Options struct {
	Engine              string
	URL                 string
	Model               string
	Tokenizer           string
	TensorParallelSizes string // mock engines: comma-separated
	TensorParallelSize  int    // --url: the engine's
	SpeedupRatio        float64
	BlockSize           int // 0: the mock engine's 64, or the engine's /metrics
	NumGPUBlocks        int // mock engines: one GPU's KV blocks
	KVBlocks            int // --url: the engine's KV blocks (0: its /metrics)
	MaxNumSeqs          int // 0: 256
	MaxNumBatchedTokens int // 0: 8192
	MaxModelLen         int // 0: the mock engine's 32768, or the engine's /v1/models
	MockerProfile       string
	MockerExecutable    string
	ISLs, Contexts      string
	Batches             string
	Repeats             int
	DecodeTokens        int
	Quick               bool
	Out, Plot           string
	Force               bool
	Seed                uint64
	MaxTokenID          int
	Timeout             time.Duration
	ReadyTimeout        time.Duration

	// Parsed by validate.
	sizes []int
	grid  Grid
	// given lists the flags set on the command line or in the environment.
	given map[string]bool
	// terminal: draw a live progress bar on stderr (set by Run from stderr).
	terminal bool
}

// Defaults returns the flags' defaults.
func Defaults() Options {
	c := mocker.DefaultConfig()
	return Options{Engine: EngineMocker, Model: "turbine-mock", Tokenizer: "builtin:cl100k_base", TensorParallelSizes: "1,2,4",
		TensorParallelSize: 1, SpeedupRatio: 1, NumGPUBlocks: c.NumGPUBlocks, Repeats: 3, DecodeTokens: 32,
		Out: "profile.json", Seed: 1, MaxTokenID: defaultMaxTokenID, Timeout: 10 * time.Minute, ReadyTimeout: 2 * time.Minute}
}

func (o *Options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Engine, "engine", o.Engine, "the engine profiled, "+strings.Join(engineNames, ", ")+
		": mocker launches mock engines (turbine mocker); with --url, required: the engine there (the name is recorded in the profile)")
	fs.StringVar(&o.URL, "url", o.URL, "base `URL` of an OpenAI-compatible engine already running (http://host:port), profiled at --tensor-parallel-size")
	fs.StringVar(&o.Model, "model", o.Model, "served model name (with --url: default the engine's only model)")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "mock engines: their tokenizer")
	fs.StringVar(&o.TensorParallelSizes, "tensor-parallel-sizes", o.TensorParallelSizes, "mock engines: comma-separated tensor-parallel sizes, one engine each")
	fs.IntVar(&o.TensorParallelSize, "tensor-parallel-size", o.TensorParallelSize, "--url: the engine's tensor-parallel size (GPUs)")
	fs.Float64Var(&o.SpeedupRatio, "speedup-ratio", o.SpeedupRatio,
		"mock engines run this many times faster; measured times are multiplied back by it (the output says so)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV block size in tokens (mock engines: 64; --url: the engine's /metrics)")
	fs.IntVar(&o.NumGPUBlocks, "num-gpu-blocks", o.NumGPUBlocks, "mock engines: one GPU's KV blocks (a TP-n engine gets n times as many)")
	fs.IntVar(&o.KVBlocks, "kv-blocks", o.KVBlocks, "--url: the engine's KV blocks (default: its /metrics, vllm:cache_config_info)")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "running sequences at most: the largest decode batch (default 256, vLLM's)")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "tokens per engine step (default 8192); sizes each batch's output")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "context length in tokens (mock engines: 32768; --url: the engine's /v1/models)")
	fs.StringVar(&o.MockerProfile, "mocker-profile", o.MockerProfile, "mock engines: play this profile `file` (turbine mocker --profile), e.g. to check a profile round trip")
	fs.StringVar(&o.MockerExecutable, "mocker-executable", o.MockerExecutable, "the turbine binary that runs the mock engines (default: this one)")
	fs.StringVar(&o.ISLs, "isl", o.ISLs, "prefill: comma-separated prompt lengths (default 128,256,…,16384 up to --max-model-len)")
	fs.StringVar(&o.Contexts, "contexts", o.Contexts, "decode: comma-separated contexts in tokens (default 512,1024,…,8192)")
	fs.StringVar(&o.Batches, "batches", o.Batches, "decode: comma-separated batch sizes (default 1,2,4,… up to --max-num-seqs)")
	fs.IntVar(&o.Repeats, "repeats", o.Repeats, "prefill: requests per prompt length (the median TTFT is kept)")
	fs.IntVar(&o.DecodeTokens, "decode-tokens", o.DecodeTokens, "decode: steady steps measured per point (at least 2)")
	fs.BoolVar(&o.Quick, "quick", o.Quick, "a few points only (prompt lengths 1024 and 4096, contexts 512 and 2048, batches 1 and 8, 3 repeats, 8 steps): a smoke test")
	fs.StringVar(&o.Out, "out", o.Out, "profile `file` to write (JSON)")
	fs.StringVar(&o.Plot, "plot", o.Plot, "also draw the profile to this SVG `file`: TTFT against ISL and ITL against KV usage per context, per tensor-parallel size")
	fs.BoolVar(&o.Force, "force", o.Force, "overwrite --out and --plot when they exist")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the random prompts")
	fs.IntVar(&o.MaxTokenID, "max-token-id", o.MaxTokenID, "prompt token ids are drawn below this (at least 1001; the model's vocabulary must hold them)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "longest one measurement (a request, a decode batch) may take")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "mock engines: longest wait for one to be ready")
}

// Run is `turbine profile`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	fs := flag.NewFlagSet("turbine profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.flags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: turbine profile [flags]   sweep an engine and write its profile (docs/reference.md §27.1)

  turbine profile --speedup-ratio 4 --plot profile.svg        mock engines of 1, 2 and 4 GPUs
  turbine profile --url http://gpu-host:8000 --engine vllm --tensor-parallel-size 2

Every flag can also be set with TURBINE_<FLAG> (upper case, '-' as '_'). Flags:
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
	if err := o.validate(); err != nil {
		return err
	}
	o.terminal = isTerminal(stderr)
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return o.run(ctx, stdout, stderr)
}

// validate checks the flags; errors name the flag.
func (o *Options) validate() error {
	switch {
	case !slices.Contains(engineNames, o.Engine):
		return fmt.Errorf("--engine %q: want one of %s", o.Engine, strings.Join(engineNames, ", "))
	case o.URL == "" && o.Engine != EngineMocker:
		return fmt.Errorf("--engine %s: give its --url (turbine profile launches only the mock engine)", o.Engine)
	case o.URL != "" && !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://"):
		return fmt.Errorf("--url %q: want http://host:port", o.URL)
	case o.URL != "" && o.SpeedupRatio != 1:
		return fmt.Errorf("--speedup-ratio %g: only for the mock engines turbine profile launches (an engine at --url runs as it runs)", o.SpeedupRatio)
	case o.URL != "" && o.MockerProfile != "":
		return errors.New("--mocker-profile: only for the mock engines turbine profile launches")
	case mocker.CheckSpeedupRatio(o.SpeedupRatio) != nil:
		return fmt.Errorf("--speedup-ratio %g: %v", o.SpeedupRatio, mocker.CheckSpeedupRatio(o.SpeedupRatio))
	case o.TensorParallelSize < 1 || o.TensorParallelSize > mocker.MaxTensorParallelSize:
		return fmt.Errorf("--tensor-parallel-size %d: want 1..%d", o.TensorParallelSize, mocker.MaxTensorParallelSize)
	case o.BlockSize < 0 || o.BlockSize > 4096:
		return fmt.Errorf("--block-size %d: want 1..4096 (0: the default)", o.BlockSize)
	case o.NumGPUBlocks < 1:
		return fmt.Errorf("--num-gpu-blocks %d: want at least 1", o.NumGPUBlocks)
	case o.KVBlocks < 0 || o.MaxNumSeqs < 0 || o.MaxNumBatchedTokens < 0 || o.MaxModelLen < 0:
		return fmt.Errorf("--kv-blocks %d, --max-num-seqs %d, --max-num-batched-tokens %d, --max-model-len %d: none may be negative (0: the default)",
			o.KVBlocks, o.MaxNumSeqs, o.MaxNumBatchedTokens, o.MaxModelLen)
	case o.Repeats < 1:
		return fmt.Errorf("--repeats %d: want at least 1", o.Repeats)
	case o.DecodeTokens < 2:
		return fmt.Errorf("--decode-tokens %d: want at least 2", o.DecodeTokens)
	case o.MaxTokenID <= firstToken:
		return fmt.Errorf("--max-token-id %d: want above %d", o.MaxTokenID, firstToken)
	case o.Timeout <= 0 || o.ReadyTimeout <= 0:
		return fmt.Errorf("--timeout %v and --ready-timeout %v: want both above 0", o.Timeout, o.ReadyTimeout)
	case o.Out == "":
		return errors.New("--out: empty (the profile has to go somewhere)")
	case o.Plot != "" && o.Plot == o.Out:
		return fmt.Errorf("--plot %s: the same file as --out", o.Plot)
	case o.URL != "" && !o.given["engine"]:
		return fmt.Errorf("--url %s: name its engine with --engine (%s), which the profile records", o.URL, strings.Join(engineNames, ", "))
	}
	for _, f := range []struct{ flag, path string }{{"--out", o.Out}, {"--plot", o.Plot}} {
		if f.path == "" || o.Force {
			continue
		}
		if _, err := os.Lstat(f.path); err == nil {
			return fmt.Errorf("%s %s: the file exists; give --force to overwrite it", f.flag, f.path)
		}
	}
	if o.URL == "" {
		sizes, err := parseList("--tensor-parallel-sizes", o.TensorParallelSizes)
		if err != nil {
			return err
		}
		for _, n := range sizes {
			if n > mocker.MaxTensorParallelSize {
				return fmt.Errorf("--tensor-parallel-sizes %q: %d: want 1..%d", o.TensorParallelSizes, n, mocker.MaxTensorParallelSize)
			}
		}
		o.sizes = sizes
		if o.MockerExecutable == "" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("--mocker-executable: find this binary: %w", err)
			}
			if strings.HasSuffix(exe, ".test") {
				return fmt.Errorf("--mocker-executable: this is a test binary (%s); give the turbine binary", exe)
			}
			o.MockerExecutable = exe
		}
		if o.MockerProfile != "" {
			if _, err := planner.LoadProfile(o.MockerProfile); err != nil {
				return fmt.Errorf("--mocker-profile %s: %w", o.MockerProfile, err)
			}
		}
	} else {
		o.sizes = []int{o.TensorParallelSize}
	}
	g := DefaultGrid()
	if o.Quick {
		g = QuickGrid()
	}
	if o.given["repeats"] || !o.Quick {
		g.Repeats = o.Repeats
	}
	if o.given["decode-tokens"] || !o.Quick {
		g.Window = o.DecodeTokens
	}
	for _, l := range []struct {
		flag, value string
		into        *[]int
	}{{"--isl", o.ISLs, &g.ISLs}, {"--contexts", o.Contexts, &g.Contexts}, {"--batches", o.Batches, &g.Batches}} {
		if l.value == "" {
			continue
		}
		v, err := parseList(l.flag, l.value)
		if err != nil {
			return err
		}
		*l.into = v
	}
	o.grid = g
	return nil
}

// parseList parses comma-separated positive integers, sorted and distinct; errors name
// the flag.
func parseList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: %q is not a positive integer", flagName, s, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %q: want at least one value", flagName, s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// The mock engines' limits: the flags', else the mock engine's defaults.
func (o *Options) blockSize() int  { return orDefault(o.BlockSize, mocker.DefaultConfig().BlockSize) }
func (o *Options) maxNumSeqs() int { return orDefault(o.MaxNumSeqs, defaultMaxNumSeqs) }
func (o *Options) maxNumBatchedTokens() int {
	return orDefault(o.MaxNumBatchedTokens, defaultMaxNumBatchedTokens)
}
func (o *Options) maxModelLen() int {
	return orDefault(o.MaxModelLen, mocker.DefaultConfig().MaxModelLen)
}
func (o *Options) model() string { return o.Model }

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// httpClient carries a decode batch's concurrent streams on kept-alive connections.
func httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2048, 1024
	return &http.Client{Transport: tr}
}

// entryRun is one tensor-parallel size's sweep: its plan, how it went.
type entryRun struct {
	tp     int
	plan   Plan
	counts counts
	// usageSampled: the engine had a KV usage gauge.
	usageSampled bool
}

func (o *Options) run(ctx context.Context, stdout, stderr io.Writer) error {
	start := time.Now()
	hc := httpClient()
	pr := &prompts{rng: rand.New(rand.NewPCG(o.Seed, 0x70726f66696c65)), max: o.MaxTokenID}
	prof := &planner.Profile{Version: planner.ProfileVersion, Engine: o.Engine}
	var runs []entryRun
	var err error
	if o.URL != "" {
		runs, err = o.runURL(ctx, hc, pr, prof, stderr)
	} else {
		runs, err = o.runMock(ctx, hc, pr, prof, stderr)
	}
	if err != nil {
		return err
	}
	if err := o.write(prof, stdout); err != nil {
		return err
	}
	report(stdout, o, prof, runs, time.Since(start))
	return nil
}

// runURL profiles the engine at --url.
func (o *Options) runURL(ctx context.Context, hc *http.Client, pr *prompts, prof *planner.Profile, stderr io.Writer) ([]entryRun, error) {
	ms, err := models(ctx, hc, o.URL, answerTimeout)
	if err != nil {
		return nil, fmt.Errorf("--url %s: %w: %v", o.URL, errNoAnswer, err)
	}
	model := ""
	maxLen := 0
	if o.given["model"] {
		model = o.Model
		for _, m := range ms {
			if m.ID == model {
				maxLen = m.MaxModelLen
			}
		}
	} else if len(ms) == 1 {
		model, maxLen = ms[0].ID, ms[0].MaxModelLen
	} else {
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		return nil, fmt.Errorf("--url %s serves %d models (%s): name one with --model", o.URL, len(ms), strings.Join(ids, ", "))
	}
	sctx, cancel := context.WithTimeout(ctx, answerTimeout)
	in, scrapeErr := scrape(sctx, hc, o.URL)
	cancel()
	lim := Limits{BlockSize: o.BlockSize, KVBlocks: o.KVBlocks, MaxNumSeqs: o.maxNumSeqs(),
		MaxNumBatchedTokens: o.maxNumBatchedTokens(), MaxModelLen: o.MaxModelLen}
	if lim.MaxModelLen == 0 {
		lim.MaxModelLen = maxLen
	}
	if lim.BlockSize == 0 {
		lim.BlockSize = in.BlockSize
	}
	if lim.KVBlocks == 0 {
		lim.KVBlocks = in.KVBlocks
		if in.BlockSize > 0 && lim.BlockSize != in.BlockSize { // SGLang's count is in tokens
			lim.KVBlocks = in.KVBlocks * in.BlockSize / lim.BlockSize
		}
	}
	why := ""
	if scrapeErr != nil {
		why = fmt.Sprintf(" (its /metrics: %v)", scrapeErr)
	}
	switch {
	case lim.MaxModelLen == 0:
		return nil, fmt.Errorf("--url %s: /v1/models gives no max_model_len for %s: give --max-model-len", o.URL, model)
	case lim.BlockSize == 0 || lim.KVBlocks == 0:
		return nil, fmt.Errorf("--url %s: the engine does not say its KV block size and blocks%s: give --block-size and --kv-blocks", o.URL, why)
	}
	if !o.given["max-num-seqs"] {
		fmt.Fprintf(stderr, "profile: max_num_seqs %d assumed (an engine's /metrics does not say it): give --max-num-seqs if the engine runs another\n", lim.MaxNumSeqs)
	}
	plan, err := NewPlan(o.grid, lim)
	if err != nil {
		return nil, err
	}
	prof.Model, prof.BlockSize = model, lim.BlockSize
	t := &target{tp: o.TensorParallelSize, base: o.URL, hc: hc, lim: lim, speedup: 1, sampleUsage: in.HasUsage,
		client: &bench.Client{HTTP: hc, URL: o.URL, Model: model}}
	fmt.Fprintf(stderr, "profile: %s at %s, model %s, TP %d: %d KV blocks of %d tokens, %d prompt lengths and %d decode points\n",
		o.Engine, o.URL, model, t.tp, lim.KVBlocks, lim.BlockSize, len(plan.ISLs), len(plan.Decode))
	bar := newBar(stderr, plan.Steps(), o.terminal)
	ep, c, err := sweep(ctx, t, plan, pr, o.Timeout, bar.step)
	bar.finish()
	if err != nil {
		return nil, err
	}
	prof.Parallel = []planner.EngineProfile{ep}
	return []entryRun{{tp: t.tp, plan: plan, counts: c, usageSampled: in.HasUsage}}, nil
}

// runMock launches a mock engine per tensor-parallel size in turn and profiles it.
func (o *Options) runMock(ctx context.Context, hc *http.Client, pr *prompts, prof *planner.Profile, stderr io.Writer) ([]entryRun, error) {
	var mockProf *planner.Profile
	if o.MockerProfile != "" {
		p, err := planner.LoadProfile(o.MockerProfile)
		if err != nil {
			return nil, fmt.Errorf("--mocker-profile %s: %w", o.MockerProfile, err)
		}
		mockProf = p
	}
	runs := make([]entryRun, len(o.sizes))
	total := 0
	var params []mockRun
	for i, tp := range o.sizes {
		p, err := o.mockParams(tp, o.SpeedupRatio, mockProf)
		if err != nil {
			return nil, err
		}
		e := p.Engine
		lim := Limits{KVBlocks: e.NumGPUBlocks, BlockSize: e.BlockSize, MaxNumSeqs: e.MaxNumSeqs,
			MaxNumBatchedTokens: e.MaxNumBatchedTokens, MaxModelLen: e.MaxModelLen}
		plan, err := NewPlan(o.grid, lim)
		if err != nil {
			return nil, fmt.Errorf("TP %d: %w", tp, err)
		}
		runs[i] = entryRun{tp: tp, plan: plan}
		params = append(params, mockRun{lim: lim, run: &runs[i], p: p})
		total += plan.Steps()
	}
	prof.Model, prof.BlockSize = o.Model, params[0].lim.BlockSize
	var overhead *bench.Client
	if o.SpeedupRatio != 1 {
		p, err := o.mockParams(1, mocker.MaxSpeedupRatio, nil)
		if err != nil {
			return nil, err
		}
		p.Engine.MaxModelLen = params[0].p.Engine.MaxModelLen
		p.Engine.NumGPUBlocks = max(p.Engine.NumGPUBlocks, ceilDiv(p.Engine.MaxModelLen, p.Engine.BlockSize))
		fmt.Fprintf(stderr, "profile: starting a mock engine %g times faster, to measure what HTTP and the engine loop add to a TTFT\n", mocker.MaxSpeedupRatio)
		eng, err := o.startMock(ctx, p)
		if err != nil {
			return nil, err
		}
		defer eng.stop()
		overhead = &bench.Client{HTTP: hc, URL: eng.base, Model: o.Model}
	}
	bar := newBar(stderr, total, o.terminal)
	defer bar.finish()
	for _, m := range params {
		tp := m.run.tp
		bar.note(fmt.Sprintf("profile: TP %d: starting a mock engine (%d KV blocks of %d tokens, max %d sequences, speedup %g): %d prompt lengths and %d decode points",
			tp, m.lim.KVBlocks, m.lim.BlockSize, m.lim.MaxNumSeqs, o.SpeedupRatio, len(m.run.plan.ISLs), len(m.run.plan.Decode)))
		eng, err := o.startMock(ctx, m.p)
		if err != nil {
			return nil, fmt.Errorf("TP %d: %w", tp, err)
		}
		sctx, cancel := context.WithTimeout(ctx, answerTimeout)
		in, err := scrape(sctx, hc, eng.base)
		cancel()
		if err == nil && in.KVBlocks != 0 && in.KVBlocks != m.lim.KVBlocks {
			eng.stop()
			return nil, fmt.Errorf("TP %d: the mock engine reports %d KV blocks, started with %d", tp, in.KVBlocks, m.lim.KVBlocks)
		}
		t := &target{tp: tp, base: eng.base, hc: hc, lim: m.lim, speedup: o.SpeedupRatio, overhead: overhead,
			sampleUsage: err == nil && in.HasUsage, client: &bench.Client{HTTP: hc, URL: eng.base, Model: o.Model}}
		ep, c, err := sweep(ctx, t, m.run.plan, pr, o.Timeout, bar.step)
		eng.stop()
		if err != nil {
			return nil, fmt.Errorf("%w; the engine's last lines:\n%s", err, eng.tail)
		}
		m.run.counts, m.run.usageSampled = c, t.sampleUsage
		prof.Parallel = append(prof.Parallel, ep)
	}
	return runs, nil
}

type mockRun struct {
	lim Limits
	run *entryRun
	p   server.Params
}

// write writes the profile to --out (and the plot to --plot). A file that appeared
// since the flags were checked is not overwritten without --force: the profile then
// goes to stdout, so that the sweep is not lost.
func (o *Options) write(prof *planner.Profile, stdout io.Writer) error {
	var buf bytes.Buffer
	if err := prof.Encode(&buf); err != nil {
		return fmt.Errorf("profile: the measured profile is not valid: %w", err)
	}
	if err := writeFile(o.Out, buf.Bytes(), o.Force); err != nil {
		_, _ = stdout.Write(buf.Bytes())
		return fmt.Errorf("--out %s: %w (the profile is on stdout)", o.Out, err)
	}
	if o.Plot != "" {
		var svg bytes.Buffer
		if err := Plot(&svg, prof); err != nil {
			return fmt.Errorf("--plot %s: %w", o.Plot, err)
		}
		if err := writeFile(o.Plot, svg.Bytes(), o.Force); err != nil {
			return fmt.Errorf("--plot %s: %w", o.Plot, err)
		}
	}
	return nil
}

// writeFile writes data to path: created anew, or replaced when force.
func writeFile(path string, data []byte, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("the file exists (created while the sweep ran); give --force to overwrite it")
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// finite reports whether v is a usable figure.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
