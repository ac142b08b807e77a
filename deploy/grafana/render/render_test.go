package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		unit string
		v    float64
		want string
	}{
		{"s", 0, "0 s"},
		{"s", 0.0004, "400 µs"},
		{"s", 0.1234, "123 ms"},
		{"s", 2.5, "2.5 s"},
		{"s", 90, "1.5 min"},
		{"percentunit", 0.4567, "45.7%"},
		{"bytes", 3 << 30, "3 GiB"},
		{"Bps", 1536, "1.5 KiB/s"},
		{"reqps", 4.25, "4.25 req/s"},
		{"short", 12345, "12.3 K"},
		{"", 0.5, "0.5"},
	} {
		if got := formatValue(tc.unit, tc.v); got != tc.want {
			t.Errorf("formatValue(%q, %v) = %q, want %q", tc.unit, tc.v, got, tc.want)
		}
	}
}

func TestScrapesRoundTrip(t *testing.T) {
	ss, err := readScrapes("testdata/run.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 3 || ss[1].at.UnixMilli() != 1010000 {
		t.Fatalf("%d scrapes, second at %v", len(ss), ss[1].at)
	}
	path := filepath.Join(t.TempDir(), "run.txt")
	if err := writeScrapes(path, ss); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile("testdata/run.txt")
	b, _ := os.ReadFile(path)
	if !bytes.Equal(a, b) {
		t.Errorf("written scrapes differ from what was read:\n%s", b)
	}
	if _, err := parseScrapes([]byte("x 1\n")); err == nil {
		t.Error("data before the first scrape mark: no error")
	}
}

// TestEvaluate runs real PromQL over the fixture: a counter rising 2 then 4 per second,
// a histogram whose p50 falls in the first bucket, a gauge by worker.
func TestEvaluate(t *testing.T) {
	ss, err := readScrapes("testdata/run.txt")
	if err != nil {
		t.Fatal(err)
	}
	db, err := load(ss)
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard.Dashboard{Panels: []dashboard.Panel{
		{ID: 1, Title: "rate", Targets: []dashboard.Target{{RefID: "A", Expr: `sum(rate(req_total{model=~"$model"}[$__rate_interval]))`, LegendFormat: "all"}}},
		{ID: 2, Title: "p50", Targets: []dashboard.Target{{RefID: "A", Expr: `histogram_quantile(0.5, sum by (le) (rate(lat_seconds_bucket[$__rate_interval])))`}}},
		{ID: 3, Title: "busy", Targets: []dashboard.Target{{RefID: "A", Expr: `busy{worker=~"$worker"}`, LegendFormat: "{{worker}} busy"}}},
	}}
	sub := dashboard.DefaultSubstitution()
	sub["__rate_interval"] = "15s" // (1005 s, 1020 s]: the samples at 1010 s and 1020 s
	at := time.UnixMilli(1020000)
	res, err := evaluate(context.Background(), db, d, sub, at, at, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	check := func(id int, legend string, want float64) {
		t.Helper()
		s := res[id].series
		if len(s) != 1 || len(s[0].v) != 1 {
			t.Fatalf("panel %d: %+v", id, s)
		}
		if s[0].legend != legend || math.Abs(s[0].v[0]-want) > 1e-9 {
			t.Errorf("panel %d: %q = %v, want %q = %v", id, s[0].legend, s[0].v[0], legend, want)
		}
	}
	check(1, "all", 4)     // (60-20)/10 s
	check(2, "value", 0.1) // 20 of 40 new observations under 0.1: the median is the bucket's bound
	check(3, "w0 busy", 2)
}

func TestDrawDashboard(t *testing.T) {
	ss, err := readScrapes("testdata/run.txt")
	if err != nil {
		t.Fatal(err)
	}
	db, err := load(ss)
	if err != nil {
		t.Fatal(err)
	}
	ds := &dashboard.Datasource{Type: "prometheus", UID: "${DS_PROMETHEUS}"}
	d := &dashboard.Dashboard{Title: "t", Panels: []dashboard.Panel{
		{ID: 1, Type: "stat", Title: "s", Datasource: ds, GridPos: &dashboard.GridPos{H: 4, W: 6}, Targets: []dashboard.Target{{RefID: "A", Expr: "busy"}}},
		{ID: 2, Type: "timeseries", Title: "ts", Datasource: ds, GridPos: &dashboard.GridPos{H: 8, W: 12, Y: 4}, Targets: []dashboard.Target{{RefID: "A", Expr: "rate(req_total[10s])"}}},
		{ID: 3, Type: "timeseries", Title: "none", Datasource: ds, GridPos: &dashboard.GridPos{H: 8, W: 12, X: 12, Y: 4}, Targets: []dashboard.Target{{RefID: "A", Expr: "absent_metric"}}},
	}}
	res, err := evaluate(context.Background(), db, d, dashboard.DefaultSubstitution(), time.UnixMilli(1000000), time.UnixMilli(1020000), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "t.png")
	if err := drawDashboard(path, d, res, 800); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
}
