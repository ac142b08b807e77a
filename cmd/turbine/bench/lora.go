package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/flow"
)

// LoRA adapters in the benchmark (docs/reference.md §26.5): a workload whose requests
// name adapters (--loras, --lora-zipf, --lora-base-fraction: synthetic or a trace, sent
// as each request's model), the simulated engines' adapter slots and load time
// (--max-loras, --lora-load-ms, --router-lora-load-ms) and the baseline routing mode
// that ignores adapters (a mode's ":ignore-adapters" suffix).

// ignoreAdaptersSuffix, after a routing policy (ttft:ignore-adapters), makes the
// simulated router place adapter requests as if adapters did not matter
// (kv.Config.IgnoreAdapters): the baseline of the LoRA benchmark.
const ignoreAdaptersSuffix = ":ignore-adapters"

// MaxLoraLoadMs bounds --lora-load-ms and --router-lora-load-ms: an hour.
const MaxLoraLoadMs = float64(time.Hour / time.Millisecond)

// MaxModelledLoraLoad bounds the simulated time of one adapter load (--lora-load-ms over
// --speedup-ratio): the worker's limit on one engine call (a real fleet fails a longer
// load), half the stall timeout of the simulated flows (flow.DefaultStallTimeout), past
// which a request that waits for its adapter without a token fails (docs/reference.md
// §26.5).
const MaxModelledLoraLoad = worker.DefaultLoraLoadTimeout

// loraWorkloadFlags name the workload's adapter flags; loraFleetFlags the simulated
// engines' (a real run measures the server as it is).
var (
	loraWorkloadFlags = []string{"lora-zipf", "lora-base-fraction"}
	loraFleetFlags    = []string{"max-loras", "lora-load-ms", "router-lora-load-ms"}
)

// splitMode splits a routing mode into its policy and whether it ignores adapters.
func splitMode(mode string) (policy string, ignoreAdapters bool) {
	p, ok := strings.CutSuffix(mode, ignoreAdaptersSuffix)
	return p, ok
}

// modeDir is the directory of a mode's files under --out: the mode with ':' written
// '-' (ttft-ignore-adapters), a name every file system takes.
func modeDir(mode string) string { return strings.ReplaceAll(mode, ":", "-") }

// loraFlags registers the workload's adapter flags.
func loraFlags(o *Options, fs *flag.FlagSet) {
	fs.IntVar(&o.Loras, "loras", o.Loras, fmt.Sprintf("requests name one of this many LoRA adapters, lora-00 ... (sent as the request's model; 0: none; at most %d)", bench.MaxLoraAdapters))
	fs.Float64Var(&o.LoraZipf, "lora-zipf", o.LoraZipf, fmt.Sprintf("with --loras: Zipf exponent of adapter popularity, adapter k drawn ∝ 1/(k+1)^S (0: uniform; at most %d)", bench.MaxLoraZipf))
	fs.Float64Var(&o.LoraBaseFraction, "lora-base-fraction", o.LoraBaseFraction, "with --loras: fraction of requests (0 to 1) for the base model, naming no adapter")
}

// loraFleetFlagsOf registers the simulated engines' adapter flags.
func (f *Fleet) loraFleetFlagsOf(fs *flag.FlagSet) {
	fs.IntVar(&f.MaxLoras, "max-loras", f.MaxLoras, "--simulate: LoRA adapter slots per engine; a request whose adapter is not loaded waits for a load, evicting the least recently used idle adapter (0: no slots, every engine serves every adapter without loading)")
	fs.Float64Var(&f.LoraLoadMs, "lora-load-ms", f.LoraLoadMs, "--simulate: modelled time of one adapter load in `ms` (over --speedup-ratio, like every engine time); the engine computes nothing meanwhile")
	fs.Float64Var(&f.RouterLoraLoadMs, "router-lora-load-ms", f.RouterLoraLoadMs, "--simulate: the adapter load time in `ms` the router assumes for a worker that has loaded none yet (0: the engines' --lora-load-ms over --speedup-ratio)")
}

// loraSpec is the workload's adapters.
func (o *Options) loraSpec() bench.LoraSpec {
	return bench.LoraSpec{Adapters: o.Loras, Zipf: o.LoraZipf, BaseFraction: o.LoraBaseFraction}
}

// validateLora checks the workload's adapter flags; errors name the flag.
func (o *Options) validateLora() error {
	if o.Loras == 0 {
		for _, name := range loraWorkloadFlags {
			if g, ok := o.given[name]; ok {
				return fmt.Errorf("%s: only with --loras (the workload names no adapter)", g)
			}
		}
	}
	switch {
	case o.Loras < 0 || o.Loras > bench.MaxLoraAdapters:
		return fmt.Errorf("--loras %d: want 0 to %d", o.Loras, bench.MaxLoraAdapters)
	case !(o.LoraZipf >= 0 && o.LoraZipf <= bench.MaxLoraZipf):
		return fmt.Errorf("--lora-zipf %v: want 0 (uniform) to %d", o.LoraZipf, bench.MaxLoraZipf)
	case !(o.LoraBaseFraction >= 0 && o.LoraBaseFraction <= 1):
		return fmt.Errorf("--lora-base-fraction %v: want 0 to 1", o.LoraBaseFraction)
	}
	return nil
}

// validateLora checks the simulated engines' adapter flags; errors name the flag.
func (f *Fleet) validateLora() error {
	switch {
	case f.MaxLoras < 0 || f.MaxLoras > options.MaxMaxLoras:
		return fmt.Errorf("--max-loras %d: want 0 (no adapter slots) to %d, as serve's", f.MaxLoras, options.MaxMaxLoras)
	case !(f.LoraLoadMs >= 0 && f.LoraLoadMs <= MaxLoraLoadMs):
		return fmt.Errorf("--lora-load-ms %v: want 0 to %g ms (an hour)", f.LoraLoadMs, MaxLoraLoadMs)
	case !(f.RouterLoraLoadMs >= 0 && f.RouterLoraLoadMs <= MaxLoraLoadMs):
		return fmt.Errorf("--router-lora-load-ms %v: want 0 to %g ms (an hour)", f.RouterLoraLoadMs, MaxLoraLoadMs)
	}
	if f.SpeedupRatio > 0 {
		if d := time.Duration(f.LoraLoadMs / f.SpeedupRatio * float64(time.Millisecond)); d > MaxModelledLoraLoad {
			return fmt.Errorf("--lora-load-ms %v over --speedup-ratio %v is a load of %v: want at most %v (the worker's limit on one engine call; a request that waits past the %v stall timeout for its adapter fails)",
				f.LoraLoadMs, f.SpeedupRatio, d, MaxModelledLoraLoad, flow.DefaultStallTimeout)
		}
	}
	return nil
}

// checkRealCompareLora refuses what a comparison of real serves cannot do with adapters:
// its serves start without adapter slots or adapters, and serve has no routing mode that
// ignores adapters.
func (o *Options) checkRealCompareLora(modes []string) error {
	if o.Simulate {
		return nil
	}
	for _, m := range modes {
		if _, ignore := splitMode(m); ignore {
			return fmt.Errorf("--modes: %s: only with --simulate (serve has no routing mode that ignores adapters)", m)
		}
	}
	for _, name := range append([]string{"loras"}, loraFleetFlags...) {
		if g, ok := o.given[name]; ok {
			return fmt.Errorf("%s: only with --simulate (the serves a comparison starts hold no LoRA adapters; measure a serve that has them with turbine bench --url)", g)
		}
	}
	return nil
}

// loraWorkloadName describes the workload's adapters ("" without).
func (o *Options) loraWorkloadName() string {
	if o.Loras == 0 {
		return ""
	}
	s := fmt.Sprintf(" with %d LoRA adapters (Zipf %g", o.Loras, o.LoraZipf)
	if o.LoraBaseFraction > 0 {
		s += fmt.Sprintf(", base model %g", o.LoraBaseFraction)
	}
	return s + ")"
}

// assignLoras names the adapters of a trace's requests.
func (o *Options) assignLoras(reqs []bench.Request) error {
	if o.Loras == 0 {
		return nil
	}
	if err := bench.AssignLoras(reqs, o.loraSpec(), o.Seed); err != nil {
		return errors.New("--loras: " + strings.TrimPrefix(err.Error(), "bench: "))
	}
	return nil
}

// loraEngines is what a simulation's engines did with adapters, for its summary: loads
// per minute of simulated time.
func loraEngines(st sim.Stats) *bench.LoraEngines {
	l := st.Lora
	e := &bench.LoraEngines{Loads: l.Loads, Unplanned: l.Unplanned, Evictions: l.Evictions, Hits: l.Hits, Misses: l.Misses,
		WaitedForSlot: l.Waited}
	if m := st.SimulatedTime.Minutes(); m > 0 {
		e.LoadsPerMinute = float64(l.Loads) / m
	}
	if n := l.Hits + l.Misses; n > 0 {
		e.HitRate = float64(l.Hits) / float64(n)
	}
	return e
}

// printLora prints the adapter lines of a summary.
func printLora(w io.Writer, s bench.Summary) {
	l := s.Lora
	if l == nil {
		return
	}
	ttft := "no samples"
	if l.TTFT.Count > 0 {
		ttft = fmt.Sprintf("TTFT p50 %.1f  p99 %.1f ms", l.TTFT.P50, l.TTFT.P99)
	}
	hit := ""
	if l.PrefixCacheHitRate != nil {
		hit = fmt.Sprintf(", prefix-cache hit rate %.1f%%", 100**l.PrefixCacheHitRate)
	}
	fmt.Fprintf(w, "  LoRA adapters: %d requests naming %d adapters, %d ok: %s%s\n", l.Requests, l.Adapters, l.Succeeded, ttft, hit)
	if e := l.Engines; e != nil {
		fmt.Fprintf(w, "  adapter loads %d (%.1f per minute; %d evictions, %d unplanned), adapter hit rate %.1f%% (%d of %d; %d waited for a slot)\n",
			e.Loads, e.LoadsPerMinute, e.Evictions, e.Unplanned, 100*e.HitRate, e.Hits, e.Hits+e.Misses, e.WaitedForSlot)
	}
}

// CompareLora is a mode's adapter figures in a comparison (CompareRow.Lora). Latencies
// are in ms, of the adapter requests that succeeded.
type CompareLora struct {
	Requests  int     `json:"requests"`  // naming an adapter
	Succeeded int     `json:"succeeded"` // of those; the latencies are theirs
	TTFTP50   float64 `json:"ttft_p50_ms"`
	TTFTP99   float64 `json:"ttft_p99_ms"`
	// Simulations only: the engines' adapter hit rate, loads and loads per minute.
	AdapterHitRate *float64 `json:"adapter_hit_rate,omitempty"`
	Loads          *int64   `json:"loads,omitempty"`
	LoadsPerMinute *float64 `json:"loads_per_minute,omitempty"`
}

// compareLora is a summary's adapter figures for a comparison row; nil without.
func compareLora(s bench.Summary) *CompareLora {
	l := s.Lora
	if l == nil {
		return nil
	}
	c := &CompareLora{Requests: l.Requests, Succeeded: l.Succeeded, TTFTP50: l.TTFT.P50, TTFTP99: l.TTFT.P99}
	if e := l.Engines; e != nil {
		hit, loads, perMin := e.HitRate, e.Loads, e.LoadsPerMinute
		c.AdapterHitRate, c.Loads, c.LoadsPerMinute = &hit, &loads, &perMin
	}
	return c
}

// loraColumns are the comparison table's adapter columns, for the rows of c: the
// adapter requests' TTFT when some requests name none, the engines' figures when a
// row has them; none when no row names adapters.
func loraColumns(c Comparison) (head []string, cells func(r CompareRow) []string) {
	ttft, engines := false, false
	for _, r := range c.Rows {
		if r.Lora != nil {
			ttft = ttft || r.Lora.Requests != r.Requests
			engines = engines || r.Lora.Loads != nil
		}
	}
	if ttft {
		head = append(head, "adapter TTFT p50 ms", "adapter TTFT p99 ms")
	}
	if engines {
		head = append(head, "adapter hits", "adapter loads", "loads/min")
	}
	return head, func(r CompareRow) []string {
		var out []string
		l := r.Lora
		if ttft {
			if l == nil || l.Succeeded == 0 {
				out = append(out, "-", "-")
			} else {
				out = append(out, fmt.Sprintf("%.1f", l.TTFTP50), fmt.Sprintf("%.1f", l.TTFTP99))
			}
		}
		if engines {
			if l == nil || l.Loads == nil {
				out = append(out, "-", "-", "-")
			} else {
				out = append(out, fmt.Sprintf("%.1f %%", 100**l.AdapterHitRate), fmt.Sprintf("%d", *l.Loads), fmt.Sprintf("%.1f", *l.LoadsPerMinute))
			}
		}
		return out
	}
}
