package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot writes an SVG of three panels to w: the TTFT CDF, the ITL CDF (both in ms) and
// output-token throughput over time, with one series per summary, named by its Label
// (characters XML 1.0 cannot hold, such as most control characters, drawn as U+FFFD).
func Plot(w io.Writer, runs []Summary) error { return PlotAs(w, runs, "svg") }

// PlotAs is Plot in the given format: "svg", or "png" (150 dots per inch). Errors: no
// runs, an unknown format, or the writer's.
func PlotAs(w io.Writer, runs []Summary, format string) error {
	img, err := newCanvas(format)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	ttft := newPanel("TTFT CDF", "TTFT (ms, log scale)", "fraction of requests")
	itl := newPanel("ITL CDF", "inter-token latency (ms, log scale)", "fraction of gaps")
	for _, p := range []*plot.Plot{ttft, itl} {
		// latencies span orders of magnitude; the empty lower right of a CDF holds the legend
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = false, false
	}
	tput := newPanel("Output throughput", "time since start (s)", "tokens/s")
	for i, s := range runs {
		name := xmlText(s.Label) // whatever the label, the SVG stays XML
		if name == "" {
			name = fmt.Sprintf("run %d", i+1)
		}
		for _, series := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{ttft, cdf(s.TTFTCDF)}, {itl, cdf(s.ITLCDF)}, {tput, overTime(s.ThroughputBucketS, s.Throughput)}} {
			if len(series.xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(series.xys)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %v", name, err)
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			line.Width = vg.Points(1.5)
			series.p.Add(line)
			if series.p == ttft { // one legend: the series share their colours across panels
				series.p.Legend.Add(legendName(name), line)
			}
		}
	}
	for _, p := range []*plot.Plot{ttft, itl} {
		switch {
		case !(p.X.Min > 0) || p.X.Max < p.X.Min: // no samples: a range a log axis can draw
			p.X.Min, p.X.Max = 1, 10
		case p.X.Max == p.X.Min: // one value: a range around it
			p.X.Min, p.X.Max = p.X.Min/2, p.X.Max*2
		}
	}
	panels := [][]*plot.Plot{{ttft, itl, tput}}
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(panels, tiles, draw.New(img))
	for j, p := range panels[0] {
		p.Draw(canvases[0][j])
	}
	if _, err := img.WriteTo(w); err != nil {
		return fmt.Errorf("bench: write %s: %v", format, err)
	}
	return nil
}

func newPanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Legend.Top = true
	p.Legend.Padding = vg.Millimeter
	p.Add(plotter.NewGrid())
	return p
}

// cdf turns 101 percentiles into (value, fraction) points, for a log-scale axis: values
// below minCDFMillis (a zero gap, e.g. tokens of one frame) are drawn at it, values
// above MaxSummaryMillis (+Inf too) at that, and NaNs not at all.
func cdf(q []float64) plotter.XYs {
	xys := make(plotter.XYs, 0, len(q))
	for i, v := range q {
		if math.IsNaN(v) {
			continue
		}
		xys = append(xys, plotter.XY{X: min(max(v, minCDFMillis), MaxSummaryMillis), Y: float64(i) / float64(max(len(q)-1, 1))})
	}
	return xys
}

// minCDFMillis is the smallest latency a CDF panel shows (ms).
const minCDFMillis = 0.01

// maxPlotPoints bounds the points of a throughput series: longer series are drawn as
// the means of consecutive groups of buckets.
const maxPlotPoints = 2000

// overTime places each bucket's rate at the bucket's middle; a series of more than
// maxPlotPoints buckets is averaged over groups of buckets. Values that are not finite
// and positive (or 0), or a bucket width that is not, are left out.
func overTime(bucketS float64, perS []float64) plotter.XYs {
	if !(bucketS > 0) || math.IsInf(bucketS, 0) {
		return nil
	}
	group := (len(perS) + maxPlotPoints - 1) / maxPlotPoints
	xys := make(plotter.XYs, 0, min(len(perS), maxPlotPoints))
	for start := 0; start < len(perS); start += group {
		end := min(start+group, len(perS))
		var sum float64
		n := 0
		for _, v := range perS[start:end] {
			if v >= 0 && !math.IsInf(v, 0) {
				sum += v
				n++
			}
		}
		if n > 0 {
			xys = append(xys, plotter.XY{X: float64(start+end) / 2 * bucketS, Y: min(sum/float64(n), MaxSummaryRate)})
		}
	}
	return xys
}

// maxLegendRunes bounds a series name in the legend, which sits inside the TTFT panel.
const maxLegendRunes = 28

// legendName shortens a long run label (the default label is the workload's description)
// to maxLegendRunes, keeping its start.
func legendName(name string) string {
	r := []rune(name)
	if len(r) <= maxLegendRunes {
		return name
	}
	return string(r[:maxLegendRunes-1]) + "…"
}

// xmlText replaces each character XML 1.0 cannot hold (its Char production: tab, line
// feed, carriage return, U+0020 to U+D7FF, U+E000 to U+FFFD, U+10000 to U+10FFFF), and
// each byte of invalid UTF-8, by U+FFFD. Escaping cannot help: not even a character
// reference may name such a character.
func xmlText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= unicode.MaxRune:
			return r
		}
		return unicode.ReplacementChar
	}, s)
}

// canvas is an image the panels are drawn on and then written out.
type canvas interface {
	vg.CanvasSizer
	io.WriterTo
}

// newCanvas is a 30 × 10 cm canvas in format "svg", or "png" at 150 dots per inch.
// Errors: another format.
func newCanvas(format string) (canvas, error) {
	const width, height = 30 * vg.Centimeter, 10 * vg.Centimeter
	switch format {
	case "svg":
		return vgsvg.New(width, height), nil
	case "png":
		return vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(150))}, nil
	}
	return nil, fmt.Errorf("bench: plot format %q: want svg or png", format)
}
