package bench

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// Fleet is the service a simulated run or a comparison stands up: the workers, the
// routing policy and the mock engines' settings. Names and defaults are serve's, so that
// the same flags mean the same thing (`turbine serve -h`).
type Fleet struct {
	Workers        int
	PrefillWorkers int    // xPyD prefill workers (0: aggregated); Workers are then the decode workers
	RouterMode     string // a single run's routing policy
	Modes          string // compare: comma-separated routing policies

	Tokenizer           string
	BlockSize           int // tokens per KV block
	NumGPUBlocks        int // KV blocks per engine
	MaxNumSeqs          int
	MaxNumBatchedTokens int // tokens per engine step
	MaxModelLen         int // context length in tokens
	SpeedupRatio        float64
	OverlapWeight       float64
	RouterTemperature   float64

	// Disagg: the router's conditional disaggregation (serve's flags); KVBytesPerToken
	// (bytes) and KVTransferBandwidth (bytes/s): the simulated KV transfer of a
	// disaggregated request (the mock engine's flags).
	Disagg              options.Disagg
	KVBytesPerToken     int64
	KVTransferBandwidth float64

	// Host is the host model a simulation adds to the engines' timing (sim.Host); from
	// its four flags, or from HostFile (--host-model, a host.json of --calibrate).
	Host     sim.Host
	HostFile string

	// KillSpecs are the values of --kill-worker as given (WORKER@TIME, comma-separated);
	// Kills are the workers a simulation kills, and when, parsed from them by validate
	// (faults.go).
	KillSpecs []string
	Kills     []sim.Fault
	// Migration is serve's --migration-limit, for a simulation's flows.
	Migration options.Migration
	// Queue holds serve's busy thresholds and busy queue (--busy-kv-usage,
	// --busy-prefill-tokens, --queue-depth, --queue-timeout), for a simulation's router
	// and flows; its other fields keep their defaults (queue.go).
	Queue options.Admission

	// MaxLoras, LoraLoadMs and RouterLoraLoadMs: the simulated engines' LoRA adapter
	// slots and load time (ms), and the load time the router assumes for a worker that
	// has loaded none (0: the engines'; lora.go).
	MaxLoras         int
	LoraLoadMs       float64
	RouterLoraLoadMs float64
	// Kvbm: the simulated nodes' KV block managers (--kvbm ...; kvbm.go).
	Kvbm KvbmFleet

	ServeExecutable string        // compare: the turbine binary to run serve with ("" this one)
	ReadyTimeout    time.Duration // compare: limit on a serve's start until every worker is ready

	// Profile (--profile, a `turbine profile` file) and TensorParallelSize
	// (--tensor-parallel-size, the GPUs each mock engine plays): the engines' timing and
	// limits, as serve's --mocker-profile and --mocker-tensor-parallel-size
	// (mockerprofile.go, docs/reference.md §27.1).
	Profile            string
	TensorParallelSize int
	// BlockSizeSet, NumGPUBlocksSet and MaxNumSeqsSet say whether those flags were given;
	// mocker holds what resolveMocker settled (the profile's timing).
	BlockSizeSet, NumGPUBlocksSet, MaxNumSeqsSet bool
	mocker                                       mockerResolved
}

// DefaultFleet returns serve's defaults with the given worker count.
func DefaultFleet(workers int) Fleet {
	e, r := options.DefaultEngine(), options.DefaultRouter()
	return Fleet{Workers: workers, RouterMode: r.RouterMode, Modes: "ttft,kv,round-robin,random,cache-aware",
		Tokenizer: e.Tokenizer, BlockSize: e.BlockSize, NumGPUBlocks: e.NumGPUBlocks, MaxNumSeqs: e.MaxNumSeqs,
		MaxNumBatchedTokens: e.MaxNumBatchedTokens, MaxModelLen: e.MaxModelLen, SpeedupRatio: e.SpeedupRatio,
		OverlapWeight: r.OverlapWeight, RouterTemperature: r.RouterTemperature, ReadyTimeout: 2 * time.Minute,
		Disagg: options.DefaultDisagg(), KVBytesPerToken: DefaultKVBytesPerToken, KVTransferBandwidth: sim.DefaultTransferBandwidth,
		Migration: options.DefaultMigration(), Queue: options.DefaultAdmission(), LoraLoadMs: mocker.DefaultConfig().LoraLoadMillis}
}

// DefaultKVBytesPerToken is the simulated model's KV cache size per token in bytes: the
// mock engine's default, Llama-3.1-8B in bfloat16 (2 × 32 layers × 8 KV heads × 128 ×
// 2 bytes).
const DefaultKVBytesPerToken = 131072

// disaggFlags registers the disaggregation flags (router and simulated transfer).
func (f *Fleet) disaggFlags(fs *flag.FlagSet) {
	f.Disagg.Flags(fs)
	fs.Int64Var(&f.KVBytesPerToken, "kv-bytes-per-token", f.KVBytesPerToken, "disaggregated: the model's KV cache `bytes` per token (the KV transfer's size; at most 16 MiB)")
	fs.Float64Var(&f.KVTransferBandwidth, "kv-transfer-bandwidth", f.KVTransferBandwidth, "disaggregated: KV transfer bandwidth between prefill and decode engines, `bytes/s` from 1e6 to 1e13 (times --speedup-ratio, like every engine speed)")
}

// fleetFlagNames are the flags engineFlags registers (a real run refuses them).
var fleetFlagNames = []string{"workers", "prefill-workers", "router-mode", "tokenizer", "block-size", "num-gpu-blocks",
	"max-num-seqs", "max-num-batched-tokens", "max-model-len", "speedup-ratio", "overlap-weight", "router-temperature",
	"max-local-prefill-tokens", "max-prefill-queue-tokens", "enforce-disagg", "kv-bytes-per-token", "kv-transfer-bandwidth",
	"profile", "tensor-parallel-size"}

// engineFlags registers the mock engines' and the router's flags.
func (f *Fleet) engineFlags(fs *flag.FlagSet) {
	options.IntVarTracked(fs, &f.BlockSize, &f.BlockSizeSet, "block-size", "KV block size in tokens (engines and router; with --profile, the profile's unless given)")
	options.IntVarTracked(fs, &f.NumGPUBlocks, &f.NumGPUBlocksSet, "num-gpu-blocks",
		"KV blocks per mock engine; unless given, times --tensor-parallel-size, or --profile's")
	options.IntVarTracked(fs, &f.MaxNumSeqs, &f.MaxNumSeqsSet, "max-num-seqs", "running sequences per engine (with --profile, the profile's unless given)")
	f.mockerFlags(fs)
	fs.IntVar(&f.MaxNumBatchedTokens, "max-num-batched-tokens", f.MaxNumBatchedTokens, "tokens per engine step")
	fs.IntVar(&f.MaxModelLen, "max-model-len", f.MaxModelLen, "context length in tokens (prompt + output); a longer request of the workload is an error")
	fs.Float64Var(&f.SpeedupRatio, "speedup-ratio", f.SpeedupRatio, "mock engine speed relative to the timing model (10 = ten times faster; 0.001 to 1e6)")
	fs.Float64Var(&f.OverlapWeight, "overlap-weight", f.OverlapWeight, "weight of prefill blocks against decode blocks in the kv routing cost")
	fs.Float64Var(&f.RouterTemperature, "router-temperature", f.RouterTemperature, "softmax temperature of the kv routing choice (0 = lowest cost)")
	f.disaggFlags(fs)
}

// simulateFlags registers the flags of `turbine bench --simulate`.
func (f *Fleet) simulateFlags(fs *flag.FlagSet) {
	fs.IntVar(&f.Workers, "workers", f.Workers, "--simulate: number of workers; the decode workers with --prefill-workers")
	fs.IntVar(&f.PrefillWorkers, "prefill-workers", f.PrefillWorkers, "--simulate: number of prefill workers of disaggregated serving (0: aggregated)")
	fs.StringVar(&f.RouterMode, "router-mode", f.RouterMode, "--simulate: routing policy: "+strings.Join(kv.DefaultPolicies().Names(), ", ")+
		" (a policy ending in "+ignoreAdaptersSuffix+" places LoRA adapter requests as if adapters did not matter)")
	f.engineFlags(fs)
	f.hostFlags(fs)
	f.faultFlags(fs)
	f.Migration.Flags(fs)
	f.queueFlags(fs)
	f.loraFleetFlagsOf(fs)
	f.Kvbm.flags(fs)
	for _, name := range slices.Concat(fleetFlagNames, hostFlagNames, faultFlagNames, queueFlagNames) { // a real run refuses them: say so in -h
		if fl := fs.Lookup(name); fl != nil && !strings.HasPrefix(fl.Usage, "--simulate") {
			fl.Usage = "--simulate: " + fl.Usage
		}
	}
}

// compareFlags registers the flags of `turbine bench compare`.
func (f *Fleet) compareFlags(fs *flag.FlagSet) {
	fs.IntVar(&f.Workers, "workers", f.Workers, "number of workers of every serve (or simulated fleet); the decode workers with --prefill-workers")
	fs.IntVar(&f.PrefillWorkers, "prefill-workers", f.PrefillWorkers, "number of prefill workers of disaggregated serving, xPyD (0: aggregated)")
	fs.StringVar(&f.Modes, "modes", f.Modes, "comma-separated routing policies to compare: "+strings.Join(kv.DefaultPolicies().Names(), ", ")+
		" (with --simulate a policy ending in "+ignoreAdaptersSuffix+" places LoRA adapter requests as if adapters did not matter)")
	fs.StringVar(&f.Tokenizer, "tokenizer", f.Tokenizer, "tokenizer of the served model (serve --tokenizer)")
	fs.StringVar(&f.ServeExecutable, "serve-executable", f.ServeExecutable, "turbine binary that runs serve (default: this one)")
	fs.DurationVar(&f.ReadyTimeout, "ready-timeout", f.ReadyTimeout, "limit on a serve's start, until every worker is ready")
	f.engineFlags(fs)
	f.loraFleetFlagsOf(fs)
}

// validate checks the fleet for the given modes; errors name the flag.
func (f *Fleet) validate(modes []string, modesFlag string) error {
	switch {
	case f.Workers < 1:
		return fmt.Errorf("--workers %d: want at least 1", f.Workers)
	case f.PrefillWorkers < 0:
		return fmt.Errorf("--prefill-workers %d: want >= 0", f.PrefillWorkers)
	case f.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v: want > 0", f.ReadyTimeout)
	case f.KVBytesPerToken < 0 || f.KVBytesPerToken > sim.MaxKVBytesPerToken:
		return fmt.Errorf("--kv-bytes-per-token %d: want 0 to %d bytes (16 MiB, about 30 times the largest model's KV cache per token)", f.KVBytesPerToken, sim.MaxKVBytesPerToken)
	case !(f.KVTransferBandwidth >= sim.MinTransferBandwidth && f.KVTransferBandwidth <= sim.MaxTransferBandwidth):
		return fmt.Errorf("--kv-transfer-bandwidth %v: want %g (1 MB/s) to %g (10 TB/s) bytes/s", f.KVTransferBandwidth, sim.MinTransferBandwidth, sim.MaxTransferBandwidth)
	case !(f.SpeedupRatio >= sim.MinSpeedupRatio && f.SpeedupRatio <= sim.MaxSpeedupRatio):
		return fmt.Errorf("--speedup-ratio %v: want %g to %g (above %g a mock engine's step rounds to nothing; a simulation also refuses engines over a thousand times slower than the timing model, whose steps would last minutes of virtual time each)",
			f.SpeedupRatio, float64(sim.MinSpeedupRatio), float64(sim.MaxSpeedupRatio), float64(sim.MaxSpeedupRatio))
	}
	if err := f.resolveMocker(); err != nil {
		return err
	}
	if err := f.Disagg.Validate(); err != nil {
		return err
	}
	if err := f.validateHost(); err != nil {
		return err
	}
	if err := f.validateFaults(); err != nil {
		return err
	}
	if err := f.Migration.Validate(); err != nil {
		return err
	}
	if err := f.Queue.Validate(); err != nil {
		return err
	}
	names := kv.DefaultPolicies().Names()
	for _, m := range modes {
		if p, _ := splitMode(m); !slices.Contains(names, p) {
			return fmt.Errorf("%s %q: want one of %s (each may end in %s under --simulate)", modesFlag, m, strings.Join(names, ", "), ignoreAdaptersSuffix)
		}
	}
	if err := f.validateLora(); err != nil {
		return err
	}
	if _, err := f.Kvbm.config(f); err != nil {
		return err
	}
	e := f.engine()
	if err := e.Validate(); err != nil {
		return err
	}
	policy, _ := splitMode(modes[0])
	r := options.Router{RouterMode: policy, OverlapWeight: f.OverlapWeight, RouterTemperature: f.RouterTemperature}
	return r.Validate()
}

// engine returns the fleet's engine settings in serve's option type.
func (f *Fleet) engine() options.Engine {
	e := options.DefaultEngine()
	e.Tokenizer, e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs = f.Tokenizer, f.BlockSize, f.NumGPUBlocks, f.MaxNumSeqs
	e.MaxNumBatchedTokens, e.MaxModelLen, e.SpeedupRatio = f.MaxNumBatchedTokens, f.MaxModelLen, f.SpeedupRatio
	return e
}

// checkMemory fails when a simulated fleet's memory estimate (sim.MemoryEstimate, with
// every KV cache full) is above sim.DefaultMemoryLimit; the error says how many KV
// blocks per engine would fit.
func (f *Fleet) checkMemory() error {
	engines := f.Workers + f.PrefillWorkers
	est := sim.MemoryEstimate(engines, f.NumGPUBlocks, f.BlockSize)
	if est <= sim.DefaultMemoryLimit {
		return nil
	}
	fit := sort.Search(f.NumGPUBlocks, func(b int) bool { return sim.MemoryEstimate(engines, b+1, f.BlockSize) > sim.DefaultMemoryLimit })
	hint := fmt.Sprintf("lower --num-gpu-blocks to at most %d, or --workers", fit)
	if fit*f.BlockSize < f.MaxModelLen {
		hint = "lower --workers" // fewer blocks could not hold one context of --max-model-len
	}
	return fmt.Errorf("--workers %d, --prefill-workers %d, --num-gpu-blocks %d: a simulated fleet of %d engines needs about %s once the KV caches fill, above the %s a simulation may take: %s",
		f.Workers, f.PrefillWorkers, f.NumGPUBlocks, engines, sim.Bytes(est), sim.Bytes(sim.DefaultMemoryLimit), hint)
}

// parseModes splits a comma-separated list of routing policies; errors name --modes.
func parseModes(s string) ([]string, error) {
	var modes []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if slices.Contains(modes, m) {
			return nil, fmt.Errorf("--modes %q: %s given twice", s, m)
		}
		modes = append(modes, m)
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("--modes %q: want at least one routing policy", s)
	}
	return modes, nil
}

// checkFits fails when a request of reqs needs more than --max-model-len tokens (its
// prompt plus its output), which the engines would refuse.
func (f *Fleet) checkFits(reqs []bench.Request) error {
	for i, r := range reqs {
		if need := r.InputLength + max(r.OutputLength, 1); need > f.MaxModelLen {
			return fmt.Errorf("--max-model-len %d: request %d needs %d tokens (%d prompt + %d output); raise it", f.MaxModelLen, i, need, r.InputLength, max(r.OutputLength, 1))
		}
	}
	return nil
}

// serveArgs are the arguments of `turbine serve` for one routing mode: the fleet's
// settings, the model, a free port and JSON logs (read for the URL and kept for errors).
func (f *Fleet) serveArgs(mode, model string) []string {
	ff := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	layout := []string{"--workers", strconv.Itoa(f.Workers)}
	if f.PrefillWorkers > 0 {
		layout = []string{"--workers", "0", "--prefill-workers", strconv.Itoa(f.PrefillWorkers), "--decode-workers", strconv.Itoa(f.Workers)}
	}
	args := append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--log-format", "json"}, append(layout, "--router-mode", mode, "--model", model, "--tokenizer", f.Tokenizer,
		"--block-size", strconv.Itoa(f.BlockSize), "--num-gpu-blocks", strconv.Itoa(f.NumGPUBlocks),
		"--max-num-seqs", strconv.Itoa(f.MaxNumSeqs), "--max-num-batched-tokens", strconv.Itoa(f.MaxNumBatchedTokens),
		"--max-model-len", strconv.Itoa(f.MaxModelLen), "--speedup-ratio", ff(f.SpeedupRatio),
		"--overlap-weight", ff(f.OverlapWeight), "--router-temperature", ff(f.RouterTemperature),
		"--ready-timeout", f.ReadyTimeout.String(),
		"--max-local-prefill-tokens", strconv.Itoa(f.Disagg.MaxLocalPrefillTokens),
		"--max-prefill-queue-tokens", strconv.FormatInt(f.Disagg.MaxPrefillQueueTokens, 10),
		"--enforce-disagg="+strconv.FormatBool(f.Disagg.EnforceDisagg),
		"--kv-bytes-per-token", strconv.FormatInt(f.KVBytesPerToken, 10), "--kv-transfer-bandwidth", ff(f.KVTransferBandwidth))...)
	return append(args, f.mockerServeArgs()...)
}

// pooledCacheTokens is the KV memory of every engine of the fleet together, in tokens:
// (workers + prefill workers) × --num-gpu-blocks × --block-size, the capacity of the
// pooled-cache ceiling (bench.CeilingPooled). Prefill workers count: a prompt is
// computed, and hits, on the prefill worker that prefills it (or on its decode worker,
// when the router prefills it there).
func (f *Fleet) pooledCacheTokens() int64 {
	return int64(f.Workers+f.PrefillWorkers) * int64(f.NumGPUBlocks) * int64(f.BlockSize)
}

// workers describes the fleet's layout ("8 workers", "2 prefill + 6 decode workers").
func (f *Fleet) workers() string {
	if f.PrefillWorkers > 0 {
		return fmt.Sprintf("%d prefill + %d decode workers", f.PrefillWorkers, f.Workers)
	}
	if f.Workers == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", f.Workers)
}
