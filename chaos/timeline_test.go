package chaos

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"
)

func TestTimelinePlots(t *testing.T) {
	tl := newTimeline()
	for i := range 40 {
		tl.request(Record{End: time.Duration(i) * 250 * time.Millisecond, Status: 200, Done: true})
	}
	tl.request(Record{End: 3 * time.Second, Status: 503, ErrCode: "no_live_workers"})
	tl.request(Record{End: 4 * time.Second, Disconnect: true})
	tl.migrations(5*time.Second, 2)
	tl.event(Event{At: time.Second, For: 2 * time.Second, Kind: KillNode, Target: "n-1"})
	tl.event(Event{At: 4 * time.Second, Kind: KillEngine, Target: "n-2"})
	if tl.ok[2] != 4 || tl.failed[3] != 1 || tl.failed[4] != 0 || tl.migrated[5] != 2 {
		t.Fatalf("counts ok %v failed %v migrated %v", tl.ok, tl.failed, tl.migrated)
	}
	var svg, pngOut bytes.Buffer
	if err := tl.plot(&svg, 12*time.Second, "svg"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "kill-node", "Nemesis", "migrations"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if err := tl.plot(&pngOut, 12*time.Second, "png"); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&pngOut); err != nil {
		t.Errorf("PNG: %v", err)
	}
}
