package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFilesUpToDate fails when a deploy/grafana/*.json differs from what specs.go
// generates: edit specs.go and run go run ./deploy/grafana/gen, not the JSON.
func TestFilesUpToDate(t *testing.T) {
	files, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 6 {
		t.Errorf("%d dashboards, want 6", len(files))
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("..", f.Name))
		if err != nil {
			t.Error(err)
			continue
		}
		if string(got) != string(f.Data) {
			t.Errorf("%s differs from specs.go: run go run ./deploy/grafana/gen", f.Name)
		}
	}
}

// TestLayout: panels fill rows left to right and wrap at 24 columns.
func TestLayout(t *testing.T) {
	d := build(spec{file: "x.json", uid: "x", title: "x", panels: []panel{
		{kind: "stat", title: "a", w: 6, targets: []target{{expr: "up"}}},
		{kind: "stat", title: "b", w: 18, targets: []target{{expr: "up"}}},
		{kind: "timeseries", title: "c", w: 12, targets: []target{{expr: "up"}}},
		{kind: "timeseries", title: "d", w: 12, h: 10, targets: []target{{expr: "up"}}},
		{kind: "timeseries", title: "e", w: 6, targets: []target{{expr: "up"}}},
	}})
	want := [][4]int{{0, 0, 6, 4}, {6, 0, 18, 4}, {0, 4, 12, 8}, {12, 4, 12, 10}, {0, 14, 6, 8}}
	for i, p := range d.Panels {
		g := p.GridPos
		if got := [4]int{g.X, g.Y, g.W, g.H}; got != want[i] {
			t.Errorf("panel %s at %v, want %v", p.Title, got, want[i])
		}
	}
}
