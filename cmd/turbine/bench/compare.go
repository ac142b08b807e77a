package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/serveproc"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// CompareRow is one routing mode's line of a comparison. Latencies are in ms.
type CompareRow struct {
	Mode             string         `json:"mode"`
	HitRate          *float64       `json:"hit_rate"` // prefix-cache hit rate; null when not reported
	TTFTP50          float64        `json:"ttft_p50_ms"`
	TTFTP99          float64        `json:"ttft_p99_ms"`
	ITLP50           float64        `json:"itl_p50_ms"`
	ITLP99           float64        `json:"itl_p99_ms"`
	OutputThroughput float64        `json:"output_tokens_per_s"`
	Requests         int            `json:"requests"`
	Succeeded        int            `json:"succeeded"` // latencies are of these; 0: none
	Failed           int            `json:"failed"`
	Errors           map[string]int `json:"errors"` // failures by kind
	// Lora: the requests that named a LoRA adapter; absent when none did.
	Lora *CompareLora `json:"lora,omitempty"`
}

// Comparison is the result of `turbine bench compare`, written as compare.json and
// (RenderComparison) compare.md.
type Comparison struct {
	Workload string `json:"workload"`
	Fleet    string `json:"fleet"` // the service every mode ran on
	// HitRateCeiling is the workload's infinite-cache hit rate (bench.Ceiling); absent
	// for synthetic workloads without a shared prefix, and for a closed loop of a
	// --duration (each mode sends other requests; its summary.json has their ceiling).
	HitRateCeiling *float64 `json:"hit_rate_ceiling,omitempty"`
	// HitRateCeilingPooled is the workload's pooled-cache hit rate (bench.CeilingPooled)
	// for one LRU cache of PooledCacheTokens tokens, every engine's KV blocks together;
	// set with HitRateCeiling.
	HitRateCeilingPooled *float64 `json:"hit_rate_ceiling_pooled,omitempty"`
	PooledCacheTokens    int64    `json:"pooled_cache_tokens,omitempty"`
	// Rows are the modes' runs; for a capacity sweep, each mode's run at its capacity
	// (CapacityRow.Probe).
	Rows []CompareRow `json:"rows"`
	// Capacity is the capacity sweep of --find-capacity; absent otherwise.
	Capacity *CapacitySweep `json:"capacity,omitempty"`
}

// compareRow reports one mode's summary.
func compareRow(mode string, s bench.Summary) CompareRow {
	return CompareRow{Mode: mode, HitRate: s.PrefixCacheHitRate, TTFTP50: s.TTFT.P50, TTFTP99: s.TTFT.P99,
		ITLP50: s.ITL.P50, ITLP99: s.ITL.P99, OutputThroughput: s.OutputThroughput, Requests: s.Requests,
		Succeeded: s.Succeeded, Failed: s.Failed, Errors: s.Errors, Lora: compareLora(s)}
}

// RenderComparison renders c as a Markdown table (one row per mode) under a line naming
// the workload and the fleet.
func RenderComparison(c Comparison) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Workload: %s\n\nFleet: %s\n\n", c.Workload, c.Fleet)
	writeCeilings(&b, c)
	hit := "hit rate"
	if c.HitRateCeiling != nil {
		hit = fmt.Sprintf("hit rate (ceiling %.1f %%)", 100**c.HitRateCeiling)
	}
	loraHead, loraCells := loraColumns(c)
	head := slices.Concat([]string{"mode", hit, "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "output tok/s"}, loraHead, []string{"errors"})
	rows := [][]string{head}
	for _, r := range c.Rows {
		rate := "-"
		if r.HitRate != nil {
			rate = fmt.Sprintf("%.1f %%", 100**r.HitRate)
		}
		lat := func(x float64, prec int) string {
			if r.Succeeded == 0 {
				return "-"
			}
			return fmt.Sprintf("%.*f", prec, x)
		}
		rows = append(rows, slices.Concat([]string{r.Mode, rate, lat(r.TTFTP50, 1), lat(r.TTFTP99, 1), lat(r.ITLP50, 2), lat(r.ITLP99, 2),
			fmt.Sprintf("%.1f", r.OutputThroughput)}, loraCells(r), []string{errorsCell(r)}))
	}
	writeTable(&b, rows)
	return b.String()
}

// writeTable writes rows as a Markdown table: rows[0] the header, left-aligned; the
// other rows' cells right-aligned but the first, columns padded to their widest cell.
func writeTable(b *strings.Builder, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], len([]rune(cell)))
		}
	}
	line := func(cells []string, right bool) {
		b.WriteString("|")
		for i, cell := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(cell)))
			if right && i > 0 {
				fmt.Fprintf(b, " %s%s |", pad, cell)
			} else {
				fmt.Fprintf(b, " %s%s |", cell, pad)
			}
		}
		b.WriteString("\n")
	}
	line(rows[0], false)
	b.WriteString("|")
	for i, w := range width {
		if i == 0 {
			fmt.Fprintf(b, " %s |", strings.Repeat("-", w))
		} else {
			fmt.Fprintf(b, " %s: |", strings.Repeat("-", w-1))
		}
	}
	b.WriteString("\n")
	for _, row := range rows[1:] {
		line(row, true)
	}
}

// writeCeilings writes a line with both hit-rate ceilings when c has the pooled one.
func writeCeilings(b *strings.Builder, c Comparison) {
	if c.HitRateCeiling != nil && c.HitRateCeilingPooled != nil {
		fmt.Fprintf(b, "Hit-rate ceilings: %.1f %% (an infinite cache), %.1f %% (pooled: one LRU cache of every engine's KV blocks, %d tokens)\n\n",
			100**c.HitRateCeiling, 100**c.HitRateCeilingPooled, c.PooledCacheTokens)
	}
}

// errorsCell is the failure count, with the kinds when there are any.
func errorsCell(r CompareRow) string {
	if r.Failed == 0 {
		return "0"
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.Errors[k]))
	}
	return fmt.Sprintf("%d of %d (%s)", r.Failed, r.Requests, strings.Join(kinds, ", "))
}

// compareDefaults are the defaults of `turbine bench compare`: serve's model name and
// settings, DefaultWorkers workers, output in bench-compare.
func compareDefaults() Options {
	o := Defaults()
	o.Model, o.Out = options.DefaultEngine().Model, "bench-compare"
	return o
}

// compareFlags registers the flags of `turbine bench compare`.
func compareFlags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Model, "model", o.Model, "served model name (serve --model), sent in every request")
	workloadFlags(o, fs)
	fs.StringVar(&o.Out, "out", o.Out, "directory for one sub-directory per mode (summary.json, requests.csv, plot.svg) and compare.{md,json,svg}")
	fs.BoolVar(&o.Simulate, "simulate", o.Simulate, "simulate every mode's fleet (virtual time) instead of running turbine serve")
	o.Fleet.compareFlags(fs)
	capacityFlags(o, fs)
}

// runCompare is `turbine bench compare [flags]`: the same workload against a fresh
// `turbine serve` (or simulated fleet) per routing mode, then one table.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := compareDefaults()
	fs := flag.NewFlagSet("turbine bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	compareFlags(&o, fs)
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	o.setGiven(fs)
	modes, err := o.validateCompare()
	if err != nil {
		return err
	}
	reqs, workload, err := o.workload()
	if err != nil {
		return err
	}
	if err := o.Fleet.checkFits(reqs); err != nil {
		return err
	}
	if err := o.checkGeneratedFits(); err != nil {
		return err
	}
	exe := o.Fleet.ServeExecutable
	if exe == "" && !o.Simulate {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("--serve-executable: this executable is unknown (%v); give one", err)
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("--out %s: %v", o.Out, err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.fleetKnown = true
	cmp := Comparison{Workload: workload, Fleet: o.fleetDescription()}
	if o.hasCeiling() && !o.generated() { // a generated workload's differs by mode
		o.ceilings = o.ceilingsOf(reqs)
		cmp.HitRateCeiling, cmp.HitRateCeilingPooled, cmp.PooledCacheTokens = &o.ceilings.infinite, &o.ceilings.pooled, o.ceilings.pooledTokens
	}
	if o.FindCapacity {
		return o.findCapacity(ctx, exe, reqs, modes, cmp, stdout, stderr)
	}
	var runs []bench.Summary
	for _, mode := range modes {
		var s bench.Summary
		var results []bench.Result
		if o.Simulate {
			s, results, err = o.simulate(ctx, reqs, workload, mode, mode, stderr)
		} else {
			s, results, err = o.serveAndMeasure(ctx, exe, reqs, workload, mode, stderr)
		}
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mode %s: stopped: %w", mode, err)
		}
		if err := write(filepath.Join(o.Out, modeDir(mode)), s, results); err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		printSummary(stderr, s, filepath.Join(o.Out, modeDir(mode)))
		runs = append(runs, s)
		cmp.Rows = append(cmp.Rows, compareRow(mode, s))
	}
	if err := writeComparison(o.Out, RenderComparison(cmp), cmp, runs, stdout); err != nil {
		return err
	}
	for i, s := range runs {
		if err := noneSucceeded(s); err != nil {
			return fmt.Errorf("mode %s: %w", modes[i], err)
		}
	}
	return nil
}

// validateCompare checks the options of a comparison and returns its modes; errors name
// the flag.
func (o *Options) validateCompare() ([]string, error) {
	modes, err := parseModes(o.Fleet.Modes)
	if err != nil {
		return nil, err
	}
	if o.Model == "" {
		return nil, errors.New("--model: empty")
	}
	if o.Simulate {
		if err := o.validateSimulate(); err != nil {
			return nil, err
		}
	}
	if err := o.Fleet.validate(modes, "--modes"); err != nil {
		return nil, err
	}
	if err := o.checkRealCompareLora(modes); err != nil {
		return nil, err
	}
	if err := o.validateCapacity(); err != nil {
		return nil, err
	}
	if o.Simulate {
		if err := o.Fleet.checkMemory(); err != nil {
			return nil, err
		}
	}
	return modes, o.validateWorkload()
}

// fleetDescription names the service every mode of a comparison runs on.
func (o *Options) fleetDescription() string {
	f := o.Fleet
	kind := "turbine serve"
	if o.Simulate {
		kind = "simulated"
	}
	return fmt.Sprintf("%s, %s; mock engines: block size %d, %d KV blocks, max %d seqs, %d batched tokens, max model len %d, speedup %g; overlap weight %g, router temperature %g",
		kind, f.workers(), f.BlockSize, f.NumGPUBlocks, f.MaxNumSeqs, f.MaxNumBatchedTokens, f.MaxModelLen, f.SpeedupRatio,
		f.OverlapWeight, f.RouterTemperature)
}

// serveAndMeasure starts a fresh serve for mode (cold caches), measures reqs against it
// and stops it. Errors include the serve's last log lines.
func (o *Options) serveAndMeasure(ctx context.Context, exe string, reqs []bench.Request, workload, mode string, stderr io.Writer) (bench.Summary, []bench.Result, error) {
	fmt.Fprintf(stderr, "bench: mode %s: starting %s serve with %s\n", mode, filepath.Base(exe), o.Fleet.workers())
	s, err := serveproc.Start(ctx, exe, o.Fleet.serveArgs(mode, o.Model), o.Model, o.Fleet.Workers+o.Fleet.PrefillWorkers, o.Fleet.ReadyTimeout)
	if err != nil {
		return bench.Summary{}, nil, err
	}
	fmt.Fprintf(stderr, "bench: mode %s: %s (%s) to %s\n", mode, o.requestCount(reqs), workload, s.URL)
	sum, results, err := o.measure(ctx, reqs, workload, s.URL, mode, stderr)
	if err != nil {
		_ = s.Stop()
		return bench.Summary{}, nil, err
	}
	select {
	case <-s.Done():
		return sum, results, fmt.Errorf("%w (%s %s)%s", errServeStopped, exe, serveproc.Exited(s.Err()), s.Logs())
	default:
	}
	if err := s.Stop(); err != nil {
		fmt.Fprintf(stderr, "bench: mode %s: serve did not stop cleanly: %v%s\n", mode, err, s.Logs())
	}
	return sum, results, nil
}

// writeComparison writes a comparison's table (compare.md), its JSON (compare.json) and
// its runs' plot (compare.svg) under dir, and prints the table to stdout.
func writeComparison(dir, table string, cmp Comparison, runs []bench.Summary, stdout io.Writer) error {
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"compare.md", func(w io.Writer) error { _, err := io.WriteString(w, table); return err }},
		{"compare.json", func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(cmp)
		}},
		{"compare.svg", func(w io.Writer) error { return bench.Plot(w, runs) }},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, table)
	fmt.Fprintf(stdout, "\nwritten: %s\n", filepath.Join(dir, "{compare.md,compare.json,compare.svg}"))
	return nil
}

// errServeStopped marks a run whose serve exited while it was being measured.
var errServeStopped = errors.New("serve exited during the run")
