package chaos

import (
	"fmt"
	"io"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// timeline counts, per second of the run, requests ended by outcome and migrations, and
// keeps the nemesis's events.
type timeline struct {
	mu         sync.Mutex
	ok, failed map[int]float64 // second -> requests ended
	migrated   map[int]float64
	events     []Event
}

func newTimeline() *timeline {
	return &timeline{ok: map[int]float64{}, failed: map[int]float64{}, migrated: map[int]float64{}}
}

func (t *timeline) request(r Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := int(r.End / time.Second)
	if r.Status == 200 && r.Done && r.ErrCode == "" && r.Transport == "" {
		t.ok[s]++
	} else if !r.Disconnect {
		t.failed[s]++
	}
}

func (t *timeline) migrations(at time.Duration, n float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.migrated[int(at/time.Second)] += n
}

func (t *timeline) event(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, e)
}

// plot writes an image (format "svg" or "png") of two panels over the run's span:
// requests ended per second (ok and failed) with migrations per second, in buckets of
// about a 180th of the span, and the nemesis's events as bars, one row per kind.
func (t *timeline) plot(w io.Writer, span time.Duration, format string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	rates := plot.New()
	rates.Title.Text = "Requests ended per second, and migrations (mean over each bucket)"
	rates.X.Label.Text, rates.Y.Label.Text = "time since the load started (s)", "per second"
	rates.Add(plotter.NewGrid())
	// Buckets of a whole number of seconds, about 180 over the span, each drawn as its
	// mean rate: a second's counts are too few to read over a long run.
	bucket := max(1, int(span/time.Second)/180)
	n := int(span/time.Second)/bucket + 1
	for i, s := range []struct {
		name string
		m    map[int]float64
	}{{"ok", t.ok}, {"failed", t.failed}, {"migrations", t.migrated}} {
		xys := make(plotter.XYs, n)
		for j := range n {
			var sum float64
			for k := j * bucket; k < (j+1)*bucket; k++ {
				sum += s.m[k]
			}
			xys[j] = plotter.XY{X: float64(j * bucket), Y: sum / float64(bucket)}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1)
		rates.Add(line)
		rates.Legend.Add(s.name, line)
	}
	rates.Legend.Top = true
	rates.X.Min, rates.X.Max = 0, span.Seconds()

	nem := plot.New()
	nem.Title.Text = "Nemesis"
	nem.X.Label.Text = "time since the load started (s)"
	nem.X.Min, nem.X.Max = 0, span.Seconds()
	nem.Y.Min, nem.Y.Max = -1, float64(numKinds)
	var ticks []plot.Tick
	for k := range numKinds {
		ticks = append(ticks, plot.Tick{Value: float64(k), Label: k.String()})
	}
	nem.Y.Tick.Marker = plot.ConstantTicks(ticks)
	nem.Add(plotter.NewGrid())
	for _, e := range t.events {
		end := max(e.End(), e.At+300*time.Millisecond) // an instant event, drawn visible
		bar, err := plotter.NewLine(plotter.XYs{{X: e.At.Seconds(), Y: float64(e.Kind)}, {X: end.Seconds(), Y: float64(e.Kind)}})
		if err != nil {
			return err
		}
		bar.Color = plotutil.Color(int(e.Kind))
		bar.Width = vg.Points(6)
		nem.Add(bar)
	}
	width, height := 30*vg.Centimeter, 18*vg.Centimeter
	var img vg.CanvasWriterTo = vgsvg.New(width, height)
	if format == "png" {
		img = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	}
	panels := [][]*plot.Plot{{rates}, {nem}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(panels, tiles, draw.New(img))
	rates.Draw(canvases[0][0])
	nem.Draw(canvases[1][0])
	if _, err := img.WriteTo(w); err != nil {
		return fmt.Errorf("chaos: write the timeline: %v", err)
	}
	return nil
}
