// Command gen writes Turbine's Grafana dashboards, deploy/grafana/turbine-*.json, from
// the panel lists in specs.go (docs/grafana.md). Run it from the repository root after
// changing a panel:
//
//	go run ./deploy/grafana/gen            # writes deploy/grafana/*.json
//	go run ./deploy/grafana/gen -check     # exits 1 when a file differs from specs.go
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", "deploy/grafana", "folder of the dashboard JSON files")
	check := flag.Bool("check", false, "compare instead of writing: exit 1 naming each file that differs")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	files, err := Render()
	if err != nil {
		return err
	}
	stale := 0
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if check {
			old, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(old, f.Data) {
				fmt.Fprintf(os.Stderr, "gen: %s differs from specs.go (run go run ./deploy/grafana/gen)\n", path)
				stale++
			}
			continue
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return err
		}
	}
	if stale > 0 {
		return fmt.Errorf("%d dashboard(s) out of date", stale)
	}
	return nil
}
