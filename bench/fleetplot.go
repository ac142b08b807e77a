package bench

import (
	"fmt"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// PlotFleet draws autoscaled runs side by side in three panels: the ready workers (every
// pool together) over time, as steps, and each interval's TTFT and ITL p90 with the
// targets as flat lines; one series per summary, named by its Label. format is "svg" or
// "png". Errors: no run with a fleet or intervals that has samples, an unknown format,
// the writer's.
func PlotFleet(w io.Writer, runs []Summary, format string) error {
	img, err := newCanvas(format)
	if err != nil {
		return err
	}
	ready := newPanel("Ready workers", "time since start (s)", "workers")
	ttft := newPanel("TTFT p90 per interval", "time since start (s)", "ms")
	itl := newPanel("ITL p90 per interval", "time since start (s)", "ms")
	drawn := false
	for i, s := range runs {
		name := xmlText(s.Label)
		if name == "" {
			name = fmt.Sprintf("run %d", i+1)
		}
		var series []panelSeries
		if s.Fleet != nil {
			series = append(series, panelSeries{ready, readySteps(s.Fleet)})
		}
		if iv := s.Intervals; iv != nil {
			series = append(series,
				panelSeries{ttft, intervalLine(iv, func(x Interval) (float64, bool) { return x.TTFTP90Ms, x.TTFTs > 0 })},
				panelSeries{itl, intervalLine(iv, func(x Interval) (float64, bool) { return x.ITLP90Ms, x.ITLs > 0 })})
		}
		named := false
		for _, sr := range series {
			if len(sr.xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(sr.xys)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %v", name, err)
			}
			line.Color, line.Dashes, line.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
			sr.p.Add(line)
			if !named { // one legend entry per run: its colour is the same in every panel
				sr.p.Legend.Add(legendName(name), line)
				named = true
			}
			drawn = true
		}
	}
	if !drawn {
		return fmt.Errorf("bench: nothing to plot: no summary has a fleet or intervals with samples")
	}
	for _, tg := range []struct {
		p *plot.Plot
		v func(*IntervalReport) float64
	}{{ttft, func(r *IntervalReport) float64 { return r.TTFTTargetMs }}, {itl, func(r *IntervalReport) float64 { return r.ITLTargetMs }}} {
		for _, s := range runs {
			if s.Intervals == nil {
				continue
			}
			v := tg.v(s.Intervals)
			end := float64(len(s.Intervals.Intervals)) * s.Intervals.IntervalS
			line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: v}, {X: end, Y: v}})
			if err == nil {
				line.Color, line.Width = plotutil.DarkColors[len(plotutil.DarkColors)-1], vg.Points(0.75)
				tg.p.Add(line)
			}
			break // one target line: the runs compared share their targets
		}
		tg.p.Y.Min = 0
	}
	ready.Y.Min = 0
	ready.Legend.Left = true // a fleet starts and ends small: the upper left is free
	panels := [][]*plot.Plot{{ready, ttft, itl}}
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

// panelSeries is one run's line in one panel.
type panelSeries struct {
	p   *plot.Plot
	xys plotter.XYs
}

// readySteps is the fleet's ready workers (every pool) as a step line to its end.
func readySteps(f *FleetReport) plotter.XYs {
	var xys plotter.XYs
	prev := -1
	for k, p := range f.Points {
		if k+1 < len(f.Points) && f.Points[k+1].AtS == p.AtS {
			continue // the next point is at the same instant: draw once all are in
		}
		n := f.Ready(p.AtS)
		if n == prev {
			continue
		}
		if prev >= 0 {
			xys = append(xys, plotter.XY{X: p.AtS, Y: float64(prev)})
		}
		xys = append(xys, plotter.XY{X: p.AtS, Y: float64(n)})
		prev = n
	}
	if prev >= 0 && f.EndS > xys[len(xys)-1].X {
		xys = append(xys, plotter.XY{X: f.EndS, Y: float64(prev)})
	}
	return xys
}

// intervalLine places each measured interval's value at its middle, capped at
// MaxSummaryMillis.
func intervalLine(r *IntervalReport, v func(Interval) (float64, bool)) plotter.XYs {
	var xys plotter.XYs
	for _, iv := range r.Intervals {
		if y, ok := v(iv); ok && !math.IsNaN(y) {
			xys = append(xys, plotter.XY{X: iv.StartS + r.IntervalS/2, Y: min(y, MaxSummaryMillis)})
		}
	}
	return xys
}
