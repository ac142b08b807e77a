package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/engines/mocker"
)

// The host model (bench/sim, host.go; docs/reference.md §7): what this machine adds to
// the mock engines' timing model. `turbine bench --calibrate` measures it against a
// running `turbine serve` and writes host.json; `turbine bench --simulate
// --host-model host.json` (or the four flags) adds it to a simulation.

// Calibration workload: every prompt length in tokens, calibrateRepeats times, each
// request with calibrateOutput tokens, sent one at a time after one warm-up request. A
// length that does not fit --max-model-len is left out.
var calibrateLengths = []int{128, 4096, 16384}

const (
	calibrateRepeats = 3
	calibrateOutput  = 64
)

// hostFlagNames are the host model's flags of `turbine bench --simulate` (a real run
// refuses them).
var hostFlagNames = []string{"host-model", "timer-resolution", "step-overhead", "request-overhead", "request-token-overhead"}

// calibrateFlagNames are the fleet flags `--calibrate` takes: the served engines'
// settings, which the timing model needs.
var calibrateFlagNames = []string{"block-size", "num-gpu-blocks", "max-num-batched-tokens", "max-model-len", "speedup-ratio", "timer-resolution"}

// hostFlags registers the host model's flags.
func (f *Fleet) hostFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.HostFile, "host-model", f.HostFile, "`host.json` written by --calibrate: the host model's four figures (not with the four flags that give them)")
	fs.DurationVar(&f.Host.TimerResolution, "timer-resolution", f.Host.TimerResolution, "every simulated step lasts a multiple of this: the engines' timer granularity (1ms for Go on Linux; 0: exact; at most 1h)")
	fs.DurationVar(&f.Host.StepOverhead, "step-overhead", f.Host.StepOverhead, "time added to every simulated engine step (at most 1h)")
	fs.DurationVar(&f.Host.RequestOverhead, "request-overhead", f.Host.RequestOverhead, "host time added to every request's TTFT and E2E: HTTP, JSON, gateway, router, worker (at most 1h)")
	fs.DurationVar(&f.Host.RequestTokenOverhead, "request-token-overhead", f.Host.RequestTokenOverhead, "host time per prompt token added to every request's TTFT and E2E (at most 1ms)")
}

// validateHost checks the host model's figures; errors name the flag. (The figures of
// --host-model are checked as the file is read: HostFile.Host.)
func (f *Fleet) validateHost() error {
	h := f.Host
	for _, c := range []struct {
		name   string
		v, max time.Duration
	}{
		{"timer-resolution", h.TimerResolution, sim.MaxEventDelay},
		{"step-overhead", h.StepOverhead, sim.MaxEventDelay},
		{"request-overhead", h.RequestOverhead, sim.MaxEventDelay},
		{"request-token-overhead", h.RequestTokenOverhead, sim.MaxTokenOverhead},
	} {
		if c.v < 0 || c.v > c.max {
			return fmt.Errorf("--%s %v: want 0 to %v", c.name, c.v, c.max)
		}
	}
	return nil
}

// HostFile is host.json: the host model as --calibrate measured it (its four figures,
// which --simulate --host-model reads) and what it was measured on.
type HostFile struct {
	TimerResolutionMS      float64 `json:"timer_resolution_ms"`
	StepOverheadMS         float64 `json:"step_overhead_ms"`
	RequestOverheadMS      float64 `json:"request_overhead_ms"`
	RequestTokenOverheadUS float64 `json:"request_token_overhead_us"`

	URL   string `json:"url,omitempty"`
	Model string `json:"model,omitempty"`
	// The engine settings the fit assumed (the timing model's), as --calibrate was
	// given them. --simulate --host-model wants the speedup ratio and refuses a file of
	// another one than its own (the step overhead is the engines' at that speed).
	SpeedupRatio        float64          `json:"speedup_ratio,omitempty"`
	BlockSize           int              `json:"block_size,omitempty"`
	NumGPUBlocks        int              `json:"num_gpu_blocks,omitempty"`
	MaxNumBatchedTokens int              `json:"max_num_batched_tokens,omitempty"`
	MaxModelLen         int              `json:"max_model_len,omitempty"`
	MeasuredAt          string           `json:"measured_at,omitempty"` // RFC 3339
	Samples             []HostFileSample `json:"samples,omitempty"`
}

// HostFileSample is one calibration request: latencies in ms.
type HostFileSample struct {
	PromptTokens int     `json:"prompt_tokens"`
	OutputTokens int     `json:"output_tokens"`
	TTFTMS       float64 `json:"ttft_ms"`
	E2EMS        float64 `json:"e2e_ms"`
}

// Host converts the file's four figures; a figure that is not a number from 0 to its
// bound (an hour; a millisecond for request_token_overhead_us) is an error naming its
// field, with the figure as a duration and as the file gives it, in the field's unit.
func (h HostFile) Host() (sim.Host, error) {
	var out sim.Host
	for _, c := range []struct {
		field      string
		x          float64
		unit       time.Duration
		unitName   string
		max        time.Duration
		maxInWords string
		dst        *time.Duration
	}{
		{"timer_resolution_ms", h.TimerResolutionMS, time.Millisecond, "ms", sim.MaxEventDelay, "an hour", &out.TimerResolution},
		{"step_overhead_ms", h.StepOverheadMS, time.Millisecond, "ms", sim.MaxEventDelay, "an hour", &out.StepOverhead},
		{"request_overhead_ms", h.RequestOverheadMS, time.Millisecond, "ms", sim.MaxEventDelay, "an hour", &out.RequestOverhead},
		{"request_token_overhead_us", h.RequestTokenOverheadUS, time.Microsecond, "µs", sim.MaxTokenOverhead, "a millisecond", &out.RequestTokenOverhead},
	} {
		ns := c.x * float64(c.unit)
		switch {
		case math.IsNaN(ns) || math.Abs(ns) > float64(100*c.max): // a duration would not hold it
			return sim.Host{}, fmt.Errorf("%s %v: want a number of 0 to %s (%v %s)", c.field, c.x, c.maxInWords, float64(c.max)/float64(c.unit), c.unitName)
		case ns < 0 || ns > float64(c.max):
			return sim.Host{}, fmt.Errorf("%s %v: want 0 to %v (the file gives %v %s)", c.field, time.Duration(math.Round(ns)), c.max, c.x, c.unitName)
		}
		*c.dst = time.Duration(math.Round(ns))
	}
	return out, nil
}

// hostFileFields are the fields --calibrate always writes to host.json and
// --host-model wants: the four figures and the speedup ratio they were measured at.
var hostFileFields = []string{"timer_resolution_ms", "step_overhead_ms", "request_overhead_ms", "request_token_overhead_us", "speedup_ratio"}

// decodeHostFile reads a host.json: one JSON object of HostFile's fields and no other.
// It returns the file and the names of the fields it gives (not null). Errors say what
// is wrong (the file is not named).
func decodeHostFile(data []byte) (HostFile, map[string]bool, error) {
	var hf HostFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hf); err != nil {
		return HostFile{}, nil, fmt.Errorf("%v (want a host.json of --calibrate)", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return HostFile{}, nil, errors.New("more than one JSON value (want a host.json of --calibrate: one object)")
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(data, &fields) // decoded above; null leaves it nil
	given := map[string]bool{}
	for k, v := range fields {
		given[k] = string(v) != "null"
	}
	return hf, given, nil
}

// checkHostFields fails unless hf gives every one of hostFileFields, as --calibrate
// writes them, and a speedup ratio above 0: a file without them (`{}`, a misspelled
// figure) is not a host model of zeros.
func checkHostFields(hf HostFile, given map[string]bool) error {
	for _, f := range hostFileFields {
		if !given[f] {
			return fmt.Errorf("no %s: not a host.json of --calibrate, which writes %s", f, strings.Join(hostFileFields, ", "))
		}
	}
	if !(hf.SpeedupRatio > 0) {
		return fmt.Errorf("speedup_ratio %v: want the --speedup-ratio it was measured at, above 0", hf.SpeedupRatio)
	}
	return nil
}

// maxHostFile bounds the size of a host.json that --host-model reads.
const maxHostFile = 1 << 20

// loadHost reads --host-model into f.Host; giving it with one of the four figures' flags is an
// error, as is a file that is not a host.json of --calibrate (decodeHostFile), has a
// figure out of bounds or was measured at another --speedup-ratio.
func (f *Fleet) loadHost(given map[string]string) error {
	if f.HostFile == "" {
		return nil
	}
	for _, name := range hostFlagNames[1:] {
		if g, ok := given[name]; ok {
			return fmt.Errorf("%s: not with --host-model %s (the file gives every figure of the host model)", g, f.HostFile)
		}
	}
	file, err := os.Open(f.HostFile)
	if err != nil {
		return fmt.Errorf("--host-model: %v", err)
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxHostFile+1))
	if err != nil {
		return fmt.Errorf("--host-model: %v", err)
	}
	if len(data) > maxHostFile {
		return fmt.Errorf("--host-model %s: larger than %d bytes: not a host.json", f.HostFile, maxHostFile)
	}
	hf, fields, err := decodeHostFile(data)
	if err != nil {
		return fmt.Errorf("--host-model %s: %v", f.HostFile, err)
	}
	h, err := hf.Host()
	if err != nil {
		return fmt.Errorf("--host-model %s: %v", f.HostFile, err)
	}
	if err := checkHostFields(hf, fields); err != nil {
		return fmt.Errorf("--host-model %s: %v", f.HostFile, err)
	}
	if hf.SpeedupRatio != f.SpeedupRatio {
		return fmt.Errorf("--host-model %s: measured at --speedup-ratio %g, and this simulation runs at --speedup-ratio %g: "+
			"what the host adds to a step depends on the engines' speed; simulate at %g, or calibrate again at %g",
			f.HostFile, hf.SpeedupRatio, f.SpeedupRatio, hf.SpeedupRatio, f.SpeedupRatio)
	}
	f.Host = h
	return nil
}

// describeHost says what the host model adds ("none" without one).
func describeHost(h sim.Host) string {
	if h == (sim.Host{}) {
		return "none"
	}
	return fmt.Sprintf("steps rounded up to %v plus %v, requests plus %v and %v per prompt token",
		h.TimerResolution, h.StepOverhead, h.RequestOverhead, h.RequestTokenOverhead)
}

// hostArgs are the --simulate flags that give h.
func hostArgs(h sim.Host) string {
	return fmt.Sprintf("--timer-resolution %v --step-overhead %v --request-overhead %v --request-token-overhead %v",
		h.TimerResolution, h.StepOverhead, h.RequestOverhead, h.RequestTokenOverhead)
}

// TimerResolution is the granularity of the mock engines' timers on this platform, the
// resolution the host model rounds every step up to (sim.TimerWait): 1 ms on Linux,
// where Go's runtime waits for its next timer in epoll_wait, whose timeout is in whole
// milliseconds (runtime/netpoll_epoll.go rounds a wait shorter than that up to 1 ms), and
// 0 (exact) elsewhere. Between two steps an engine process has nothing else to do, so
// its loop's timer fires on that millisecond (measured in a real engine during a run, a
// step's wait was its modelled time rounded up to the millisecond plus 0.23 ms, at the
// median). --timer-resolution overrides it.
func TimerResolution() time.Duration {
	if runtime.GOOS == "linux" {
		return time.Millisecond
	}
	return 0
}

// Calibrate measures the host model of the service client sends to, whose mock engines
// are configured as eng and whose timers have resolution res (TimerResolution): it
// sends one warm-up request, then the calibration requests one at a time (prompts that no cache holds: fresh hash ids of blockTokens tokens each), and
// fits the figures to their latencies (sim.FitHost). Each answer is reported to
// progress when it is not nil.
//
// Errors: a request that failed (its kind and detail; an HTTP 400 names --max-model-len),
// one whose prompt a cache served in part, answers faster than engines of eng can give
// them (sim.FasterError: the message names the engine flags, --speedup-ratio first), or
// FitHost's other errors; ctx's.
func Calibrate(ctx context.Context, client *bench.Client, eng mocker.Config, res time.Duration, blockTokens int, progress func(sim.HostSample)) (sim.Host, []sim.HostSample, error) {
	if blockTokens < 1 {
		return sim.Host{}, nil, fmt.Errorf("calibrate: %d tokens per hash id: want at least 1", blockTokens)
	}
	var lengths []int
	for _, l := range calibrateLengths {
		if l+calibrateOutput <= eng.MaxModelLen {
			lengths = append(lengths, l)
		}
	}
	if len(lengths) == 0 {
		return sim.Host{}, nil, fmt.Errorf("calibrate: --max-model-len %d: want at least %d tokens (a %d-token prompt and %d output tokens)",
			eng.MaxModelLen, calibrateLengths[0]+calibrateOutput, calibrateLengths[0], calibrateOutput)
	}
	// Hash ids from a random base: prompts of their own, also when a calibration runs
	// again against the same service.
	next := rand.Int64N(1<<62) + 1<<61
	one := func(l int) (sim.HostSample, error) {
		r := bench.Request{InputLength: l, OutputLength: calibrateOutput, HashIDs: make([]int64, (l+blockTokens-1)/blockTokens)}
		for i := range r.HashIDs {
			r.HashIDs[i], next = next, next+1
		}
		prompt, err := bench.Tokens(r, blockTokens)
		if err != nil {
			return sim.HostSample{}, fmt.Errorf("calibrate: %v", err)
		}
		got := client.Do(ctx, time.Now(), prompt, calibrateOutput)
		switch {
		case ctx.Err() != nil:
			return sim.HostSample{}, ctx.Err()
		case got.Error == "http_400":
			// Most likely a serve of a shorter context than the flag says.
			return sim.HostSample{}, fmt.Errorf("calibrate: a request of %d prompt tokens failed: %s: %s (with %d output tokens it fits --max-model-len %d: if the serve has a shorter context, give --calibrate the serve's --max-model-len)",
				l, got.Error, got.Detail, calibrateOutput, eng.MaxModelLen)
		case got.Error != "":
			return sim.HostSample{}, fmt.Errorf("calibrate: a request of %d prompt tokens failed: %s: %s", l, got.Error, got.Detail)
		case got.CachedTokens > 0:
			return sim.HostSample{}, fmt.Errorf("calibrate: the server served %d of a fresh prompt's %d tokens from a cache: not a calibration's own prompt", got.CachedTokens, l)
		}
		return sim.HostSample{PromptTokens: l, OutputTokens: got.OutputTokens, TTFT: got.TTFT, E2E: got.E2E}, nil
	}
	if _, err := one(lengths[0]); err != nil {
		return sim.Host{}, nil, err
	}
	var samples []sim.HostSample
	for range calibrateRepeats {
		for _, l := range lengths {
			s, err := one(l)
			if err != nil {
				return sim.Host{}, nil, err
			}
			if progress != nil {
				progress(s)
			}
			samples = append(samples, s)
		}
	}
	h, err := sim.FitHost(eng, res, samples)
	var fe *sim.FasterError
	if errors.As(err, &fe) {
		return sim.Host{}, nil, fmt.Errorf("calibrate: the answers came faster than mock engines of --speedup-ratio %g, --max-num-batched-tokens %d, "+
			"--num-gpu-blocks %d and --block-size %d can give them (%s at a median of %.1f ms, where the timing model takes at least %.1f ms): "+
			"the serve runs faster engines, most likely at another --speedup-ratio; give --calibrate the engine flags the serve was started with",
			eng.SpeedupRatio, eng.MaxNumBatchedTokens, eng.NumGPUBlocks, eng.BlockSize, fe.Phase, ms(fe.Measured), ms(fe.Modelled))
	}
	if err != nil {
		return sim.Host{}, nil, fmt.Errorf("calibrate: %w", err)
	}
	return h, samples, nil
}

// validateCalibrate checks the flags of `turbine bench --calibrate`; errors name the flag.
func (o *Options) validateCalibrate() error {
	allowed := append([]string{"calibrate", "url", "model", "api-key", "out", "timeout", "block-tokens"}, calibrateFlagNames...)
	for name, g := range o.given {
		// Variables of the environment (TURBINE_WORKERS for a serve ...) are not refused.
		if strings.HasPrefix(g, "--") && !slices.Contains(allowed, name) {
			return fmt.Errorf("%s: not with --calibrate (a calibration sends a workload of its own to --url)", g)
		}
	}
	if o.Model == "" {
		return errors.New("--model: required")
	}
	if err := checkURL(o.URL); err != nil {
		return err
	}
	switch {
	case o.BlockTokens < 1:
		return fmt.Errorf("--block-tokens %d: want at least 1", o.BlockTokens)
	case o.Out == "":
		return errors.New("--out: required")
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %v: want > 0", o.Timeout)
	}
	if err := o.Fleet.validate([]string{o.Fleet.RouterMode}, "--router-mode"); err != nil {
		return err
	}
	return nil
}

// calibrate is `turbine bench --calibrate`: it measures the host model against --url,
// prints it and the --simulate flags that give it, and writes --out/host.json.
func (o *Options) calibrate(ctx context.Context, stdout, stderr io.Writer) error {
	if err := o.validateCalibrate(); err != nil {
		return err
	}
	eng := o.simConfig(o.Fleet.RouterMode).Engine
	client := &bench.Client{URL: o.URL, Model: o.Model, HTTP: newHTTPClient(o.Timeout, 1), APIKey: o.APIKey}
	n := 0
	for _, l := range calibrateLengths {
		if l+calibrateOutput <= eng.MaxModelLen {
			n++
		}
	}
	fmt.Fprintf(stderr, "bench: calibrating the host model against %s (%d requests one at a time; mock engines at speedup ratio %g)\n",
		o.URL, 1+n*calibrateRepeats, eng.SpeedupRatio)
	ctx, stop := notifyStop(ctx)
	defer stop()
	res := TimerResolution()
	if _, ok := o.given["timer-resolution"]; ok {
		res = o.Fleet.Host.TimerResolution
	}
	h, samples, err := Calibrate(ctx, client, eng, res, o.BlockTokens, func(s sim.HostSample) {
		fmt.Fprintf(stderr, "bench:   %6d prompt tokens: TTFT %7.2f ms, then %.3f ms per token\n", s.PromptTokens,
			ms(s.TTFT), ms(s.E2E-s.TTFT)/float64(s.OutputTokens-1))
	})
	if err != nil {
		return err
	}
	hf := HostFile{
		TimerResolutionMS: ms(h.TimerResolution), StepOverheadMS: ms(h.StepOverhead), RequestOverheadMS: ms(h.RequestOverhead),
		RequestTokenOverheadUS: float64(h.RequestTokenOverhead) / float64(time.Microsecond),
		URL:                    o.URL, Model: o.Model, MeasuredAt: time.Now().UTC().Format(time.RFC3339),
		SpeedupRatio: eng.SpeedupRatio, BlockSize: eng.BlockSize, NumGPUBlocks: eng.NumGPUBlocks,
		MaxNumBatchedTokens: eng.MaxNumBatchedTokens, MaxModelLen: eng.MaxModelLen,
	}
	for _, s := range samples {
		hf.Samples = append(hf.Samples, HostFileSample{PromptTokens: s.PromptTokens, OutputTokens: s.OutputTokens, TTFTMS: ms(s.TTFT), E2EMS: ms(s.E2E)})
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("--out %s: %v", o.Out, err)
	}
	path := filepath.Join(o.Out, "host.json")
	if err := writeFile(path, func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(hf)
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "host model: %s\n  for --simulate: --host-model %s\n  or: %s\n", describeHost(h), path, hostArgs(h))
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
