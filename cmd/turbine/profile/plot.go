package profile

import (
	"errors"
	"fmt"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/turbine-llm/turbine/planner"
)

// curvePoints is how many points draw an interpolated curve.
const curvePoints = 64

// Plot writes an SVG of the profile to w: a row per tensor-parallel size, with TTFT
// against ISL (log scale; the measured points and the profile's interpolation,
// planner.EngineProfile.TTFT) and ITL against KV usage (a series per context: the
// measured points and planner.EngineProfile.ITL over the usage measured at that
// context). Errors: an invalid profile, or the writer's.
func Plot(w io.Writer, prof *planner.Profile) error {
	if prof == nil || len(prof.Parallel) == 0 {
		return errors.New("profile: nothing to plot")
	}
	if err := prof.Validate(); err != nil {
		return err
	}
	rows := len(prof.Parallel)
	const width, rowHeight = 26 * vg.Centimeter, 9 * vg.Centimeter
	img := vgsvg.New(width, rowHeight*vg.Length(rows))
	panels := make([][]*plot.Plot, rows)
	for i := range prof.Parallel {
		ep := &prof.Parallel[i]
		ttft, itl, err := entryPanels(ep)
		if err != nil {
			return err
		}
		panels[i] = []*plot.Plot{ttft, itl}
	}
	tiles := draw.Tiles{Rows: rows, Cols: 2, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(panels, tiles, draw.New(img))
	for i := range panels {
		for j, p := range panels[i] {
			p.Draw(canvases[i][j])
		}
	}
	if _, err := img.WriteTo(w); err != nil {
		return fmt.Errorf("profile: write svg: %v", err)
	}
	return nil
}

// entryPanels draws one tensor-parallel size's two panels.
func entryPanels(ep *planner.EngineProfile) (*plot.Plot, *plot.Plot, error) {
	ttft := newPanel(fmt.Sprintf("TP %d: TTFT against prompt length", ep.TensorParallelSize), "ISL (tokens, log scale)", "TTFT (ms)")
	ttft.X.Scale, ttft.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var measured plotter.XYs
	for _, p := range ep.Prefill {
		measured = append(measured, plotter.XY{X: float64(p.ISL), Y: p.TTFTMs})
	}
	lo, hi := float64(ep.Prefill[0].ISL), float64(ep.Prefill[len(ep.Prefill)-1].ISL)
	curve := make(plotter.XYs, 0, curvePoints)
	for k := range curvePoints {
		x := lo
		if hi > lo {
			x = lo * math.Pow(hi/lo, float64(k)/float64(curvePoints-1))
		}
		curve = append(curve, plotter.XY{X: x, Y: ep.TTFT(x)})
	}
	if err := addSeries(ttft, "measured", "interpolated", measured, curve, 0); err != nil {
		return nil, nil, err
	}
	if lo == hi { // one point: a range a log axis can draw
		ttft.X.Min, ttft.X.Max = lo/2, lo*2
	}
	itl := newPanel(fmt.Sprintf("TP %d: ITL against KV usage", ep.TensorParallelSize), "KV usage (%)", "ITL (ms)")
	var contexts []int
	for _, p := range ep.Decode {
		if len(contexts) == 0 || contexts[len(contexts)-1] != p.Context {
			contexts = append(contexts, p.Context)
		}
	}
	for i, c := range contexts {
		var pts plotter.XYs
		ulo, uhi := math.Inf(1), math.Inf(-1)
		for _, p := range ep.Decode {
			if p.Context == c {
				pts = append(pts, plotter.XY{X: 100 * p.KVUsage, Y: p.ITLMs})
				ulo, uhi = math.Min(ulo, p.KVUsage), math.Max(uhi, p.KVUsage)
			}
		}
		curve := make(plotter.XYs, 0, curvePoints)
		for k := range curvePoints {
			u := ulo + (uhi-ulo)*float64(k)/float64(curvePoints-1)
			curve = append(curve, plotter.XY{X: 100 * u, Y: ep.ITL(u, float64(c))})
		}
		if err := addSeries(itl, fmt.Sprintf("context %d", c), "", pts, curve, i); err != nil {
			return nil, nil, err
		}
	}
	return ttft, itl, nil
}

func newPanel(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.Padding = vg.Millimeter
	p.Add(plotter.NewGrid())
	return p
}

// addSeries draws measured points (marked) and their interpolated curve (a line) in
// colour i; the legend names the points, and the curve when curveName is set.
func addSeries(p *plot.Plot, pointsName, curveName string, pts, curve plotter.XYs, i int) error {
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return fmt.Errorf("profile: plot %s: %v", pointsName, err)
	}
	sc.Color, sc.Shape, sc.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(3)
	line, err := plotter.NewLine(curve)
	if err != nil {
		return fmt.Errorf("profile: plot %s: %v", pointsName, err)
	}
	line.Color, line.Width = plotutil.Color(i), vg.Points(1.2)
	p.Add(line, sc)
	p.Legend.Add(pointsName, sc)
	if curveName != "" {
		p.Legend.Add(curveName, line)
	}
	return nil
}
