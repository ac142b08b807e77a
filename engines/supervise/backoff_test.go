package supervise

import (
	"testing"
	"time"
)

func TestBackoffCappedExponential(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Factor: 2, Reset: time.Minute}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(time.Second); got != w*time.Millisecond {
			t.Fatalf("restart %d: delay %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if b.Restarts() != len(want) {
		t.Fatalf("restarts = %d, want %d", b.Restarts(), len(want))
	}
}

func TestBackoffResetsAfterLongRun(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Factor: 2, Reset: time.Minute}
	b.Next(0)
	b.Next(0)
	if got := b.Next(2 * time.Minute); got != 100*time.Millisecond {
		t.Fatalf("after a long run the delay should start over, got %v", got)
	}
}

func TestBackoffDefaults(t *testing.T) {
	var b Backoff
	if got := b.Next(0); got != 250*time.Millisecond {
		t.Fatalf("default initial delay %v, want 250ms", got)
	}
	for i := 0; i < 20; i++ {
		b.Next(0)
	}
	if got := b.Next(0); got != 30*time.Second {
		t.Fatalf("default cap %v, want 30s", got)
	}
}
