package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/turbine-llm/turbine/bench"
)

// `turbine bench tiers A.json B.json ... [-o tiers.svg]` (docs/reference.md §9.6): the
// prefix hit rates by KV tier of simulated runs with block managers (summary.json's
// prefix_hit_rate_by_tier), one Markdown row per run on stdout, and with -o a stacked
// bar per run against the workload's infinite-cache ceiling.

// tierNames are the tiers of prefix_hit_rate_by_tier, fastest first: the order of the
// table's columns and of the bars' stack.
var tierNames = []string{"gpu", "host", "disk", "remote"}

// tierRow is one run's line: hit rates as fractions of prompt tokens, latencies in ms,
// output throughput in tokens/s; Ceiling is NaN when the summary has none.
type tierRow struct {
	Label           string
	Tiers           [4]float64 // by tierNames
	Total, Ceiling  float64
	TTFTP50, TTFT99 float64
	OutputTPS       float64
}

// tierRows reads the runs' tier figures. Errors: a run without prefix_hit_rate_by_tier
// (not a simulation, or one older than it), named by its label or position.
func tierRows(runs []bench.Summary) ([]tierRow, error) {
	rows := make([]tierRow, 0, len(runs))
	for i, s := range runs {
		r := tierRow{Label: s.Label, Ceiling: math.NaN(), TTFTP50: s.TTFT.P50, TTFT99: s.TTFT.P99, OutputTPS: s.OutputThroughput}
		if r.Label == "" {
			r.Label = fmt.Sprintf("run %d", i+1)
		}
		if s.PrefixHitRateByTier == nil {
			return nil, fmt.Errorf("tiers: %s: no prefix_hit_rate_by_tier (a --simulate run writes it)", r.Label)
		}
		for k, name := range tierNames {
			r.Tiers[k] = s.PrefixHitRateByTier[name]
			r.Total += r.Tiers[k]
		}
		if s.HitRateCeiling != nil {
			r.Ceiling = *s.HitRateCeiling
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// writeTierTable writes rows as a Markdown table: percentages with one decimal, the
// total's share of the ceiling, TTFT p50/p99 in ms and output tokens/s.
func writeTierTable(w io.Writer, rows []tierRow) error {
	var b strings.Builder
	b.WriteString("| run | GPU % | host % | disk % | remote % | total % | of ceiling | TTFT p50 / p99 ms | output tok/s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		of := "–"
		if r.Ceiling > 0 {
			of = fmt.Sprintf("%.0f %%", 100*r.Total/r.Ceiling)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.0f / %.0f | %.0f |\n", r.Label,
			100*r.Tiers[0], 100*r.Tiers[1], 100*r.Tiers[2], 100*r.Tiers[3], 100*r.Total, of, r.TTFTP50, r.TTFT99, r.OutputTPS)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// plotTiers draws rows as stacked bars of hit rate (% of prompt tokens) by tier, with
// the first ceiling found as a dashed line, in format "svg" or "png" (34 × 12 cm).
func plotTiers(w io.Writer, rows []tierRow, format string) error {
	const width, height = 34 * vg.Centimeter, 12 * vg.Centimeter
	var img interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case "svg":
		img = vgsvg.New(width, height)
	case "png":
		img = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(150))}
	default:
		return fmt.Errorf("tiers: plot format %q: want svg or png", format)
	}
	p := plot.New()
	p.Title.Text = "Prefix hits by KV tier"
	p.Y.Label.Text = "% of prompt tokens"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	labels := make([]string, len(rows))
	for i, r := range rows {
		labels[i] = r.Label
	}
	var below *plotter.BarChart
	for k, name := range tierNames {
		vals := make(plotter.Values, len(rows))
		for i, r := range rows {
			vals[i] = 100 * r.Tiers[k]
		}
		bars, err := plotter.NewBarChart(vals, vg.Centimeter)
		if err != nil {
			return fmt.Errorf("tiers: %v", err)
		}
		bars.Color, bars.LineStyle.Width = plotutil.Color(k), 0
		if below != nil {
			bars.StackOn(below)
		}
		p.Add(bars)
		p.Legend.Add(name, bars)
		below = bars
	}
	ymax := 0.0
	for _, r := range rows {
		ymax = max(ymax, 100*r.Total)
	}
	for _, r := range rows {
		if r.Ceiling > 0 {
			c := 100 * r.Ceiling
			line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: c}, {X: float64(len(rows)) - 0.5, Y: c}})
			if err != nil {
				return fmt.Errorf("tiers: %v", err)
			}
			line.Dashes, line.Width = []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("infinite-cache ceiling %.1f %%", c), line)
			ymax = max(ymax, c)
			break
		}
	}
	p.Y.Min, p.Y.Max = 0, math.Ceil(ymax*1.5/10)*10 // room above the bars for the legend
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 9
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.Draw(draw.New(img))
	_, err := img.WriteTo(w)
	return err
}

// runTiers is `turbine bench tiers [-o F] SUMMARY.json ...`.
func runTiers(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("turbine bench tiers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "stacked bars to write: SVG, or PNG when the name ends in .png (empty: the table only)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: turbine bench tiers [-o tiers.svg|tiers.png] SUMMARY.json ...")
		fs.PrintDefaults()
	}
	files, err := parseFiles(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("tiers: no summary.json given")
	}
	format := ""
	if *out != "" {
		switch ext := strings.ToLower(filepath.Ext(*out)); ext {
		case ".png":
			format = "png"
		case ".svg":
			format = "svg"
		default:
			return fmt.Errorf("-o %s: want a .svg or .png file", *out)
		}
	}
	var runs []bench.Summary
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("tiers: %v", err)
		}
		s, err := bench.ReadSummary(f, name)
		f.Close()
		if err != nil {
			return fmt.Errorf("tiers: %s", strings.TrimPrefix(err.Error(), "bench: "))
		}
		runs = append(runs, s)
	}
	rows, err := tierRows(runs)
	if err != nil {
		return err
	}
	if err := writeTierTable(stdout, rows); err != nil {
		return err
	}
	if format == "" {
		return nil
	}
	return writeFile(*out, func(w io.Writer) error { return plotTiers(w, rows, format) })
}
