package bench

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"strings"
	"testing"
)

func TestPlot(t *testing.T) {
	a := Summary{Label: "kv", TTFTCDF: quantiles([]float64{1, 2, 3}), ITLCDF: quantiles([]float64{0.5, 1}), ThroughputBucketS: 0.5, Throughput: []float64{10, 20, 5}}
	b := Summary{Label: "round-robin", TTFTCDF: quantiles([]float64{2, 4}), ITLCDF: quantiles([]float64{1}), ThroughputBucketS: 1, Throughput: []float64{8}}
	var buf bytes.Buffer
	if err := Plot(&buf, []Summary{a, b}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, want := range []string{"<svg", "TTFT CDF", "ITL CDF", "Output throughput", "kv", "round-robin"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG has no %q", want)
		}
	}
	dec := xml.NewDecoder(&buf)
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	if err := Plot(io.Discard, nil); err == nil {
		t.Error("Plot of no run: no error")
	}
	if err := Plot(io.Discard, []Summary{{Label: "empty"}}); err != nil {
		t.Errorf("Plot of a run without samples: %v", err)
	}
}

func TestPlotPNG(t *testing.T) {
	a := Summary{Label: "kv", TTFTCDF: quantiles([]float64{1, 2, 3}), ITLCDF: quantiles([]float64{0.5, 1}), ThroughputBucketS: 0.5, Throughput: []float64{10, 20, 5}}
	var buf bytes.Buffer
	if err := PlotAs(&buf, []Summary{a}, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// 30 cm × 10 cm at 150 dpi
	if b := img.Bounds(); b.Dx() != 1772 || b.Dy() != 591 {
		t.Errorf("PNG is %d×%d pixels, want 1772×591", b.Dx(), b.Dy())
	}
	if err := PlotAs(io.Discard, []Summary{a}, "gif"); err == nil || !strings.Contains(err.Error(), `"gif"`) {
		t.Errorf("format gif: %v, want an error naming it", err)
	}
}

func TestLegendName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kv", "kv"},
		{"exactly twenty-eight runes!!", "exactly twenty-eight runes!!"},
		{"mooncake_fast25_conversation_trace.jsonl (300 requests)", "mooncake_fast25_conversatio…"},
		{"ééééééééééééééééééééééééééééééé", "ééééééééééééééééééééééééééé…"},
	} {
		if got := legendName(tc.in); got != tc.want {
			t.Errorf("legendName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
