package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker"
)

// ProfileVersion is the version of the profile format this package reads and writes.
const ProfileVersion = 1

// Bounds of a profile's figures (docs/reference.md §27.1): far above any engine's, low
// enough that the arithmetic on them stays exact and no figure sizes an allocation
// beyond reason.
const (
	MaxProfileKVBlocks  = mocker.MaxNumGPUBlocks // kv_blocks per engine (16,777,216: what the mock engine plays)
	MaxProfileNumSeqs   = 65536                  // max_num_seqs per engine
	MaxProfileLatencyMs = 3600e3                 // ttft_ms and itl_ms: one hour, in ms
)

// MaxProfileBytes bounds a profile file (a sweep writes a few kilobytes).
const MaxProfileBytes = 8 << 20

// Profile is what `turbine profile` measured of one engine serving one model
// (docs/reference.md §27.1), one EngineProfile per tensor-parallel size. It is the JSON
// of a profile file; the mock engine and the simulator can take it as their timing model.
type Profile struct {
	Version   int    `json:"version"`    // ProfileVersion
	Engine    string `json:"engine"`     // one of engines.Names: "mocker", "vllm", "sglang", "trtllm"
	Model     string `json:"model"`      // served model name
	BlockSize int    `json:"block_size"` // KV block size in tokens
	// Parallel holds one profile per tensor-parallel size, ascending and distinct.
	Parallel []EngineProfile `json:"tensor_parallel"`
}

// EngineProfile is one engine of TensorParallelSize GPUs.
type EngineProfile struct {
	TensorParallelSize int `json:"tensor_parallel_size"` // GPUs per engine, ≥ 1 (a mock engine without a GPU counts 1)
	KVBlocks           int `json:"kv_blocks"`            // KV cache blocks of the engine
	MaxNumSeqs         int `json:"max_num_seqs"`         // running sequences at most
	// Prefill: one request alone on an idle engine, every prompt token uncached;
	// ascending ISL, at least one point.
	Prefill []PrefillPoint `json:"prefill"`
	// Decode: a batch of sequences decoding together; at least one point. Any order on
	// input; Parse sorts them by context, then KV usage.
	Decode []DecodePoint `json:"decode"`

	// curves are Prefill and Decode laid out for TTFT, ITL and the throughputs, kept by
	// Validate (nil until then: each call lays them out anew, Timing once) and shared by
	// copies. They serve while Prefill and Decode are the slices they were laid out from
	// (appended to or replaced, they are laid out anew); a profile whose points are
	// changed in place must be validated again.
	curves *profileCurves
}

// PrefillPoint is TTFT at one prompt length.
type PrefillPoint struct {
	ISL                int     `json:"isl"`                  // prompt tokens
	TTFTMs             float64 `json:"ttft_ms"`              // time to first token, ms
	TokensPerSecPerGPU float64 `json:"tokens_per_s_per_gpu"` // ISL / TTFT / TP
}

// DecodePoint is ITL at one batch of sequences of one context length.
type DecodePoint struct {
	Context            int     `json:"context"`              // tokens per sequence (prompt + output), mean over the measurement
	Batch              int     `json:"batch"`                // sequences decoding together
	KVUsage            float64 `json:"kv_usage"`             // fraction of KV blocks in use, [0, 1]
	ITLMs              float64 `json:"itl_ms"`               // inter-token latency, ms
	TokensPerSecPerGPU float64 `json:"tokens_per_s_per_gpu"` // Batch / ITL / TP
}

// LoadProfile reads and checks a profile file (ParseProfile).
func LoadProfile(path string) (*Profile, error) {
	// Opened without blocking and checked before it is read: a FIFO or a device is
	// refused at once instead of hanging the read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("planner: profile: %w", err)
	}
	defer f.Close()
	switch fi, err := f.Stat(); {
	case err != nil:
		return nil, fmt.Errorf("planner: profile %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("planner: profile %s is not a regular file (mode %v)", path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("planner: profile %s: %w", path, err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return p, nil
}

// ParseProfile decodes a profile strictly (unknown fields, trailing data and more than
// MaxProfileBytes are errors), checks it and sorts the decode points.
func ParseProfile(data []byte) (*Profile, error) {
	if len(data) > MaxProfileBytes {
		return nil, fmt.Errorf("planner: profile larger than %d bytes", MaxProfileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("planner: profile: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF { // dec.More misses a stray ']' or '}'
		return nil, errors.New("planner: profile: data after the JSON object")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Encode writes the profile as indented JSON.
func (p *Profile) Encode(w io.Writer) error {
	if err := p.Validate(); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// Validate checks every field, sorts each engine's decode points (context, then KV
// usage) and lays out each valid engine's curves once for TTFT, ITL and the throughputs
// to read. Errors name the tensor-parallel size and the point.
func (p *Profile) Validate() error {
	switch {
	case p.Version != ProfileVersion:
		return fmt.Errorf("planner: profile version %d, want %d", p.Version, ProfileVersion)
	case p.BlockSize < 1 || p.BlockSize > 4096:
		return fmt.Errorf("planner: profile block_size %d, want 1..4096", p.BlockSize)
	case len(p.Parallel) == 0:
		return errors.New("planner: profile has no tensor_parallel entry")
	case !slices.Contains(engines.Names, p.Engine):
		return fmt.Errorf("planner: profile engine %q, want one of %s", p.Engine, strings.Join(engines.Names, ", "))
	}
	for i := range p.Parallel {
		e := &p.Parallel[i]
		if i > 0 && e.TensorParallelSize <= p.Parallel[i-1].TensorParallelSize {
			return errors.New("planner: profile tensor_parallel sizes must be ascending and distinct")
		}
		if err := e.validate(); err != nil {
			return fmt.Errorf("planner: profile tensor_parallel_size %d: %w", e.TensorParallelSize, err)
		}
		e.keepCurves()
	}
	return nil
}

func (e *EngineProfile) validate() error {
	switch {
	case e.TensorParallelSize < 1 || e.TensorParallelSize > 64:
		return fmt.Errorf("tensor_parallel_size %d, want 1..64", e.TensorParallelSize)
	case e.KVBlocks < 1 || e.MaxNumSeqs < 1:
		return fmt.Errorf("kv_blocks %d and max_num_seqs %d must be ≥ 1", e.KVBlocks, e.MaxNumSeqs)
	case e.KVBlocks > MaxProfileKVBlocks:
		return fmt.Errorf("kv_blocks %d, want at most %d", e.KVBlocks, MaxProfileKVBlocks)
	case e.MaxNumSeqs > MaxProfileNumSeqs:
		return fmt.Errorf("max_num_seqs %d, want at most %d", e.MaxNumSeqs, MaxProfileNumSeqs)
	case len(e.Prefill) == 0 || len(e.Decode) == 0:
		return errors.New("needs at least one prefill and one decode point")
	}
	for i, pt := range e.Prefill {
		if pt.ISL < 1 || !finitePositive(pt.TTFTMs) || !finitePositive(pt.TokensPerSecPerGPU) {
			return fmt.Errorf("prefill point %d: isl ≥ 1, ttft_ms and tokens_per_s_per_gpu finite and > 0", i)
		}
		if pt.TTFTMs > MaxProfileLatencyMs {
			return fmt.Errorf("prefill point %d: ttft_ms %g, want at most %g (one hour)", i, pt.TTFTMs, MaxProfileLatencyMs)
		}
		if i > 0 && pt.ISL <= e.Prefill[i-1].ISL {
			return fmt.Errorf("prefill point %d: isl must ascend", i)
		}
	}
	for i, pt := range e.Decode {
		if pt.Context < 1 || pt.Batch < 1 || !(pt.KVUsage >= 0 && pt.KVUsage <= 1) ||
			!finitePositive(pt.ITLMs) || !finitePositive(pt.TokensPerSecPerGPU) {
			return fmt.Errorf("decode point %d: context and batch ≥ 1, kv_usage in [0, 1], itl_ms and tokens_per_s_per_gpu finite and > 0", i)
		}
		if pt.ITLMs > MaxProfileLatencyMs {
			return fmt.Errorf("decode point %d: itl_ms %g, want at most %g (one hour)", i, pt.ITLMs, MaxProfileLatencyMs)
		}
	}
	sort.SliceStable(e.Decode, func(i, j int) bool {
		a, b := e.Decode[i], e.Decode[j]
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		return a.KVUsage < b.KVUsage
	})
	return nil
}

// ForTP returns the profile of engines of tp GPUs. Errors: tp not profiled (the error
// lists the sizes that are).
func (p *Profile) ForTP(tp int) (*EngineProfile, error) {
	for i := range p.Parallel {
		if p.Parallel[i].TensorParallelSize == tp {
			return &p.Parallel[i], nil
		}
	}
	var have []int
	for _, e := range p.Parallel {
		have = append(have, e.TensorParallelSize)
	}
	return nil, fmt.Errorf("planner: tensor-parallel size %d not in the profile (profiled: %v)", tp, have)
}

// interp interpolates y at x over points (xs ascending) linearly, extrapolating linearly
// from the two end points beyond them (one point: constant).
func interp(xs, ys []float64, x float64) float64 {
	n := len(xs)
	if n == 1 {
		return ys[0]
	}
	i := sort.SearchFloat64s(xs, x) // first xs[i] >= x
	switch {
	case i == 0:
		i = 1
	case i >= n:
		i = n - 1
	}
	x0, x1, y0, y1 := xs[i-1], xs[i], ys[i-1], ys[i]
	if x1 == x0 {
		return y1
	}
	return y0 + (y1-y0)*(x-x0)/(x1-x0)
}

// profileCurves is an engine profile's points laid out for interpolation, so that
// reading a time costs a few binary searches and no allocation: the prefill curves over
// ISL and, for each context, the ITL curve over KV usage. It is built from the points as
// they are, sorted or not, and reads exactly as the points would.
type profileCurves struct {
	// prefill and decode are the slices laid out: the curves serve an EngineProfile only
	// while its slices are still these (same first element, same length).
	prefill []PrefillPoint
	decode  []DecodePoint

	isl, ttft, prefillTput []float64 // one per prefill point, in order
	// contexts holds each run of equal decode contexts once, in order (ascending once
	// Validate sorted them); usage[i] and itl[i] are the curve of contexts[i]: the
	// usages of its points in order, a usage repeated by consecutive points once with the
	// highest ITL.
	contexts   []float64
	usage, itl [][]float64
}

// layOut builds e's curves; it does not keep them.
func layOut(e *EngineProfile) *profileCurves {
	n := len(e.Prefill)
	c := &profileCurves{prefill: e.Prefill, decode: e.Decode,
		isl: make([]float64, n), ttft: make([]float64, n), prefillTput: make([]float64, n)}
	for i, pt := range e.Prefill {
		c.isl[i], c.ttft[i], c.prefillTput[i] = float64(pt.ISL), pt.TTFTMs, pt.TokensPerSecPerGPU
	}
	for _, pt := range e.Decode {
		if x := float64(pt.Context); len(c.contexts) == 0 || c.contexts[len(c.contexts)-1] != x {
			c.contexts = append(c.contexts, x)
		}
	}
	c.usage, c.itl = make([][]float64, len(c.contexts)), make([][]float64, len(c.contexts))
	for i, context := range c.contexts {
		var xs, ys []float64
		for _, pt := range e.Decode {
			if float64(pt.Context) != context {
				continue
			}
			if n := len(xs); n > 0 && xs[n-1] == pt.KVUsage {
				ys[n-1] = math.Max(ys[n-1], pt.ITLMs)
				continue
			}
			xs, ys = append(xs, pt.KVUsage), append(ys, pt.ITLMs)
		}
		c.usage[i], c.itl[i] = xs, ys
	}
	return c
}

// sameSlice reports whether a and b are the same slice: same first element, same length.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// of reports whether c (nil: no) was laid out from e's slices as they are now.
func (c *profileCurves) of(e *EngineProfile) bool {
	return c != nil && sameSlice(c.prefill, e.Prefill) && sameSlice(c.decode, e.Decode)
}

// equal reports whether c and d lay out the same slices to the same curves.
func (c *profileCurves) equal(d *profileCurves) bool {
	return c != nil && d != nil && sameSlice(c.prefill, d.prefill) && sameSlice(c.decode, d.decode) &&
		slices.Equal(c.isl, d.isl) && slices.Equal(c.ttft, d.ttft) && slices.Equal(c.prefillTput, d.prefillTput) &&
		slices.Equal(c.contexts, d.contexts) &&
		slices.EqualFunc(c.usage, d.usage, slices.Equal) && slices.EqualFunc(c.itl, d.itl, slices.Equal)
}

// keepCurves lays out e's curves and keeps them (Validate, once e is valid). Curves
// already kept and still the same are left in place, so that validating a profile again
// writes nothing while others read it.
func (e *EngineProfile) keepCurves() {
	if c := layOut(e); !c.equal(e.curves) {
		e.curves = c
	}
}

// laidOut returns the curves Validate kept when they are still e's, else lays them out
// for this one call.
func (e *EngineProfile) laidOut() *profileCurves {
	if c := e.curves; c.of(e) {
		return c
	}
	return layOut(e)
}

func (c *profileCurves) ttftAt(isl float64) float64 {
	xs, ys := c.isl, c.ttft
	v := interp(xs, ys, isl)
	if isl < xs[0] { // a steep start extrapolates below zero: hold the first point's rate
		v = math.Max(v, ys[0]*isl/xs[0])
	}
	return math.Max(0.01, v)
}

func (c *profileCurves) prefillThroughputAt(isl float64) float64 {
	xs := c.isl
	isl = math.Max(xs[0], math.Min(xs[len(xs)-1], isl))
	return interp(xs, c.prefillTput, isl)
}

// itlOf interpolates the curve of contexts[i] at usage (clamped to the measured usage
// range: ITL never extrapolates below or above what was seen).
func (c *profileCurves) itlOf(i int, usage float64) float64 {
	xs := c.usage[i]
	usage = math.Max(xs[0], math.Min(xs[len(xs)-1], usage))
	return interp(xs, c.itl[i], usage)
}

func (c *profileCurves) itlAt(usage, context float64) float64 {
	cs := c.contexts
	context = math.Max(cs[0], math.Min(cs[len(cs)-1], context))
	i := sort.SearchFloat64s(cs, context)
	if cs[i] == context || i == 0 {
		return c.itlOf(i, usage)
	}
	c0, c1 := cs[i-1], cs[i]
	y0, y1 := c.itlOf(i-1, usage), c.itlOf(i, usage)
	return y0 + (y1-y0)*(context-c0)/(c1-c0)
}

// TTFT is the time to first token in ms of a prompt of isl uncached tokens on an idle
// engine, interpolated (linearly extrapolated beyond the points, at least the smallest
// point's TTFT scaled down linearly and never below 0.01 ms). Panics without a prefill
// point.
func (e *EngineProfile) TTFT(isl float64) float64 { return e.laidOut().ttftAt(isl) }

// PrefillThroughput is the prefill throughput in tokens per second per GPU at prompt
// length isl, interpolated and held at the end points beyond them. Panics without a
// prefill point.
func (e *EngineProfile) PrefillThroughput(isl float64) float64 {
	return e.laidOut().prefillThroughputAt(isl)
}

// ITL is the inter-token latency in ms of a decode batch at KV usage usage ([0, 1]) and
// context tokens per sequence: interpolated over usage within each measured context,
// then between the two nearest contexts (held at the ends). Panics without a decode
// point.
func (e *EngineProfile) ITL(usage, context float64) float64 { return e.laidOut().itlAt(usage, context) }

// DecodeThroughput is the most output tokens per second per GPU an engine keeps while its
// ITL stays at most itlTargetMs, with sequences of context tokens: over one sequence and
// the batches KV usages in steps of 1 % hold (usage × kv_blocks × block_size / context,
// at most max_num_seqs), the batch divided by the ITL at the KV usage it really takes
// (batch × context over the capacity) and by the TP size. ok is false when even one
// sequence misses the target; tokens is then that single sequence's throughput, the
// least the engine does.
func (e *EngineProfile) DecodeThroughput(blockSize int, itlTargetMs, context float64) (tokens float64, ok bool) {
	curves := e.laidOut()
	context = math.Max(1, context)
	capacity := float64(e.KVBlocks) * float64(blockSize)
	at := func(batch float64) (tput, itl float64) {
		itl = curves.itlAt(math.Min(1, batch*context/capacity), context)
		return batch / (itl / 1000) / float64(e.TensorParallelSize), itl
	}
	single, itl := at(1) // a sequence that does not fit the cache runs at full usage
	best := 0.0
	if itl <= itlTargetMs {
		best = single
	}
	for step := 1; step <= 100; step++ {
		u := float64(step) / 100
		batch := math.Min(float64(e.MaxNumSeqs), math.Floor(u*capacity/context))
		if batch < 1 {
			continue
		}
		if tput, itl := at(batch); itl <= itlTargetMs {
			best = math.Max(best, tput)
		}
	}
	if best == 0 {
		return single, false
	}
	return best, true
}

// TensorParallelSizes lists the profiled sizes, ascending.
func (p *Profile) TensorParallelSizes() []int {
	out := make([]int, 0, len(p.Parallel))
	for _, e := range p.Parallel {
		out = append(out, e.TensorParallelSize)
	}
	return slices.Clip(out)
}
