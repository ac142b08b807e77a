package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

// Grafana's grid: 24 columns, rows of 30 px; drawn here with rowPx pixels a grid row and
// a title bar above the panels.
const (
	rowPx    = 36
	headerPx = 44
	gapPx    = 6
)

// palette is Grafana's classic series colours.
var palette = []color.RGBA{
	{0x73, 0xbf, 0x69, 0xff}, {0xf2, 0xcc, 0x0c, 0xff}, {0x8a, 0xb8, 0xff, 0xff}, {0xff, 0x78, 0x0a, 0xff},
	{0xf2, 0x49, 0x5c, 0xff}, {0x57, 0x94, 0xf2, 0xff}, {0xb8, 0x77, 0xd9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
	{0x37, 0x87, 0x2d, 0xff}, {0xfa, 0xde, 0x2a, 0xff}, {0x44, 0x7e, 0xbc, 0xff}, {0xc4, 0x16, 0x2a, 0xff},
}

var (
	bg      = color.RGBA{0x18, 0x1b, 0x1f, 0xff} // Grafana's dark theme
	panelBg = color.RGBA{0x22, 0x25, 0x2b, 0xff}
	border  = color.RGBA{0x34, 0x37, 0x3d, 0xff}
	fg      = color.RGBA{0xcc, 0xcc, 0xdc, 0xff}
	muted   = color.RGBA{0x8e, 0x8e, 0x9e, 0xff}
)

func style(size vg.Length, c color.Color) draw.TextStyle {
	return draw.TextStyle{Color: c, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler}
}

// drawDashboard draws d's panels with res (panel id → data) into a PNG at path.
func drawDashboard(path string, d *dashboard.Dashboard, res map[int]panelData, width int) error {
	rows := 0
	for _, p := range d.Panels {
		if p.GridPos != nil {
			rows = max(rows, p.GridPos.Y+p.GridPos.H)
		}
	}
	height := headerPx + rows*rowPx
	// vgimg draws at 72 dpi unless told: one point is one pixel.
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width), vg.Length(height)), vgimg.UseDPI(72), vgimg.UseBackgroundColor(bg))
	dc := draw.New(img)
	top := vg.Length(height)
	dc.FillText(style(18, fg), vg.Point{X: 12, Y: top - 28}, d.Title)
	colPx := float64(width) / 24
	for _, p := range d.Panels {
		if p.GridPos == nil {
			continue
		}
		g := p.GridPos
		x0 := vg.Length(float64(g.X)*colPx + gapPx/2)
		x1 := vg.Length(float64(g.X+g.W)*colPx - gapPx/2)
		y1 := top - vg.Length(headerPx+g.Y*rowPx) - gapPx/2
		y0 := top - vg.Length(headerPx+(g.Y+g.H)*rowPx) + gapPx/2
		c := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: x0, Y: y0}, Max: vg.Point{X: x1, Y: y1}}}
		frame(c)
		c.FillText(style(12, fg), vg.Point{X: x0 + 8, Y: y1 - 18}, p.Title)
		body := draw.Crop(c, 4, -4, 4, -26)
		pd := res[p.ID]
		var err error
		if p.Type == "stat" {
			drawStat(body, p, pd)
		} else {
			err = drawSeries(body, p, pd)
		}
		if err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func frame(c draw.Canvas) {
	r := c.Rectangle
	pts := []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
	c.FillPolygon(panelBg, pts)
	c.StrokeLines(draw.LineStyle{Color: border, Width: 1}, append(pts, r.Min))
}

// drawStat shows the last value of the first series, as Grafana's stat panel with
// "lastNotNull".
func drawStat(c draw.Canvas, p dashboard.Panel, pd panelData) {
	v := math.NaN()
	for _, s := range pd.series {
		for i := len(s.v) - 1; i >= 0; i-- {
			if !math.IsNaN(s.v[i]) {
				v = s.v[i]
				break
			}
		}
		if !math.IsNaN(v) {
			break
		}
	}
	txt := "No data"
	col := color.Color(muted)
	if !math.IsNaN(v) {
		txt = formatValue(unit(p), v)
		col = palette[0]
	}
	sty := style(30, col)
	sty.XAlign, sty.YAlign = text.XCenter, text.YCenter
	c.FillText(sty, c.Center(), txt)
}

func unit(p dashboard.Panel) string {
	if p.FieldConfig == nil {
		return ""
	}
	return p.FieldConfig.Defaults.Unit
}

// drawSeries draws every series of pd as lines over time, broken where a value is
// missing, with a legend of the series names.
func drawSeries(c draw.Canvas, p dashboard.Panel, pd panelData) error {
	pl := plot.New()
	pl.BackgroundColor = color.Transparent
	for _, ax := range []*plot.Axis{&pl.X, &pl.Y} {
		ax.Color = border
		ax.Tick.Color = border
		ax.Tick.Label = style(9, muted)
		ax.Label.TextStyle = style(9, muted)
	}
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05", Time: func(t float64) time.Time { return time.Unix(int64(t), 0) }}
	pl.Y.Tick.Marker = unitTicks{unit: unit(p)}
	pl.Legend.TextStyle = style(9, fg)
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.ThumbnailWidth = 10
	pl.Legend.Padding = 1
	grid := plotter.NewGrid()
	pl.Add(grid)
	grid.Vertical.Color, grid.Horizontal.Color = border, border
	drawn := false
	for i, s := range pd.series {
		col := palette[i%len(palette)]
		first := true
		for _, seg := range segments(s) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color = col
			l.Width = 1.5
			pl.Add(l)
			if first {
				pl.Legend.Add(s.legend, l)
				first = false
			}
			drawn = true
		}
	}
	if !drawn {
		sty := style(14, muted)
		sty.XAlign, sty.YAlign = text.XCenter, text.YCenter
		c.FillText(sty, c.Center(), "No data")
		return nil
	}
	if fd := p.FieldConfig; fd != nil {
		if fd.Defaults.Min != nil {
			pl.Y.Min = *fd.Defaults.Min
		}
		if fd.Defaults.Max != nil {
			pl.Y.Max = math.Max(pl.Y.Max, *fd.Defaults.Max)
		}
	}
	if pl.Y.Min > 0 {
		pl.Y.Min = 0
	}
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
	// Room above the lines for the legend.
	pl.Y.Max += (pl.Y.Max - pl.Y.Min) * 0.12 * float64(min(len(pd.series), 6))
	pl.Draw(c)
	return nil
}

// segments splits a series at missing values (NaN) into runs gonum can draw.
func segments(s series) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i := range s.t {
		if math.IsNaN(s.v[i]) || math.IsInf(s.v[i], 0) {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: s.t[i], Y: s.v[i]})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// unitTicks labels the default ticks in the panel's unit.
type unitTicks struct{ unit string }

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = formatValue(u.unit, ts[i].Value)
		}
	}
	return ts
}
