package frontend

import (
	"testing"
	"time"
)

func TestHitGapDetector(t *testing.T) {
	// One observation: at (seconds), worker, predicted, delivered; want is what it did:
	// "open" (the gap opened), "close" (it closed), "+" (open, no change), "." (closed,
	// no change).
	type obs struct {
		at        float64
		worker    string
		pred, del int64
		want      string
	}
	cfg := hitGapConfig{Window: 4, MaxAge: 10 * time.Second, Tolerance: 0.2, MinPredicted: 1000, MinRequests: 1}
	for _, tc := range []struct {
		name string
		obs  []obs
	}{
		{"delivered as predicted: never opens", []obs{
			{0, "w0", 600, 600, "."}, {1, "w0", 600, 600, "."}, {2, "w0", 600, 600, "."}}},
		{"within the tolerance: 80 % delivered", []obs{
			{0, "w0", 1000, 800, "."}, {1, "w0", 1000, 800, "."}}},
		{"below it: opens once, when the window has enough predicted tokens", []obs{
			{0, "w0", 600, 0, "."}, {1, "w0", 600, 0, "open"}, {2, "w0", 600, 0, "+"}, {3, "w0", 600, 0, "+"}}},
		{"a few small prompts are not judged", []obs{
			{0, "w0", 100, 0, "."}, {1, "w0", 100, 0, "."}, {2, "w0", 100, 0, "."}}},
		{"closes when the window recovers (by count)", []obs{
			{0, "w0", 600, 0, "."}, {1, "w0", 600, 0, "open"},
			{2, "w0", 600, 600, "+"}, {3, "w0", 600, 600, "+"}, // 1200 of 2400: still below 80 %
			{4, "w0", 600, 600, "+"},     // window 0,600,600,600 (the first left): 1800 of 2400, 75 %
			{5, "w0", 600, 600, "close"}, // 2400 of 2400
			{6, "w0", 600, 600, "."}}},
		{"old requests leave the window (by age)", []obs{
			{0, "w0", 2000, 0, "open"},
			{11, "w0", 2000, 2000, "close"}, // the first is older than 10 s
		}},
		{"too little evidence keeps the state", []obs{
			{0, "w0", 2000, 0, "open"},
			{20, "w0", 100, 100, "+"}, // alone in the window, under MinPredicted
		}},
		{"workers are judged apart", []obs{
			{0, "w0", 2000, 0, "open"}, {1, "w1", 2000, 2000, "."}, {2, "w0", 2000, 0, "+"}, {3, "w1", 2000, 1900, "."}}},
		{"a surplus does not hide a shortfall", []obs{
			{0, "w0", 900, 0, "."}, {1, "w0", 100, 5000, "open"}}},
		{"no prediction and nothing delivered", []obs{
			{0, "w0", 0, 0, "."}, {1, "w0", 0, 300, "."}, {2, "w0", -5, -1, "."}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newHitGapDetector(cfg)
			t0 := time.Unix(1000, 0)
			for i, o := range tc.obs {
				ch := d.observe(t0.Add(time.Duration(o.at*float64(time.Second))), "m", o.worker, o.pred, o.del)
				got := "."
				switch {
				case ch.Opened:
					got = "open"
				case ch.Closed:
					got = "close"
				case ch.Open:
					got = "+"
				}
				if ch.Opened && !ch.Open || ch.Closed && ch.Open {
					t.Fatalf("observation %d: inconsistent change %+v", i, ch)
				}
				if got != o.want {
					t.Fatalf("observation %d (%+v): %s (%+v), want %s", i, o, got, ch, o.want)
				}
			}
		})
	}
}

func TestHitGapDetectorWindowSums(t *testing.T) {
	d := newHitGapDetector(hitGapConfig{Window: 3, MinPredicted: 1000, MinRequests: 1})
	t0 := time.Unix(0, 0)
	var ch hitGapChange
	for i := int64(1); i <= 10; i++ {
		ch = d.observe(t0.Add(time.Duration(i)*time.Millisecond), "m", "w", 100*i, 10*i)
	}
	// The last three: 800+900+1000 predicted, 80+90+100 delivered.
	if ch.Requests != 3 || ch.Predicted != 2700 || ch.Delivered != 270 || !ch.Open {
		t.Fatalf("window %+v", ch)
	}
	if w := d.windows[hitGapKey{"m", "w"}]; len(w.obs) > 2*3+1 {
		t.Fatalf("window holds %d observations", len(w.obs))
	}
	def := hitGapConfig{}.withDefaults()
	if def.Window != DefaultHitGapWindow || def.MaxAge != DefaultHitGapMaxAge || def.Tolerance != DefaultHitGapTolerance ||
		def.MinPredicted != DefaultHitGapMinPredicted {
		t.Fatalf("defaults %+v", def)
	}
}

// TestHitGapMinRequests: one request that misses its predicted hit (scheduled in the same
// engine step as the request computing the shared prefix) does not open a gap; as many
// misses as DefaultHitGapMinRequests do.
func TestHitGapMinRequests(t *testing.T) {
	d := newHitGapDetector(hitGapConfig{})
	t0 := time.Unix(0, 0)
	for i := 0; i < DefaultHitGapMinRequests; i++ {
		ch := d.observe(t0.Add(time.Duration(i)*time.Millisecond), "m", "w0", 5952, 0)
		if want := i == DefaultHitGapMinRequests-1; ch.Opened != want {
			t.Fatalf("request %d: opened %v, want %v (%+v)", i+1, ch.Opened, want, ch)
		}
	}
}
