package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `turbine bench tiers`: a Markdown row per run (golden), stacked bars with every tier
// and run named, and clear errors for what it cannot draw.
func TestTiersTableAndPlot(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "tiers.svg")
	var stdout bytes.Buffer
	if err := Run(context.Background(), []string{"tiers", "testdata/tiers/none.json", "testdata/tiers/remote.json", "-o", svg},
		&stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/tiers/table.golden.md")
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != string(want) {
		t.Errorf("table:\n%s\nwant:\n%s", stdout.String(), want)
	}
	pic, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<svg", "Prefix hits by KV tier", "gpu", "host", "disk", "remote", "none", "host+disk+remote", "ceiling 37.4 %"} {
		if !bytes.Contains(pic, []byte(s)) {
			t.Errorf("the SVG lacks %q", s)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no files", []string{"tiers"}, "no summary.json"},
		{"a run without tiers", []string{"tiers", "testdata/tiers/no-tiers.json"}, "real run: no prefix_hit_rate_by_tier"},
		{"bad picture", []string{"tiers", "testdata/tiers/none.json", "-o", filepath.Join(dir, "t.gif")}, "want a .svg or .png"},
		{"missing file", []string{"tiers", filepath.Join(dir, "absent.json")}, "absent.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
