package cluster

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffDoublesWithJitterUpToCap(t *testing.T) {
	b := newBackoff(100*time.Millisecond, 5*time.Second, rand.New(rand.NewPCG(1, 2)))
	bases := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000}
	for round := range 2 {
		for i, base := range bases {
			base *= time.Millisecond
			if d := b.next(); d < base/2 || d > base {
				t.Fatalf("round %d, delay %d = %s, want in [%s, %s]", round, i, d, base/2, base)
			}
		}
		b.reset()
	}
}

func TestBackoffJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for seed := range uint64(20) {
		b := newBackoff(100*time.Millisecond, 5*time.Second, rand.New(rand.NewPCG(seed, 0)))
		seen[b.next()] = true
	}
	if len(seen) < 10 {
		t.Fatalf("20 seeds gave %d distinct first delays; the jitter does not spread retries", len(seen))
	}
}

func TestFailureLogLogsStateChangesOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := failureLog{every: time.Minute}
	if rec, _, _ := f.ok(t0); rec {
		t.Fatal("a success with no failure before counts as a recovery")
	}
	var logged int
	for i := range 1000 { // 1000 failed attempts over 100 s
		if f.fail(t0.Add(time.Duration(i) * 100 * time.Millisecond)) {
			logged++
		}
	}
	if logged != 2 { // the first, then one reminder after a minute
		t.Fatalf("1000 failures over 100 s logged %d times, want 2", logged)
	}
	rec, n, down := f.ok(t0.Add(100 * time.Second))
	if !rec || n != 1000 || down != 100*time.Second {
		t.Fatalf("recovery = %v, %d attempts, down %s; want true, 1000, 100s", rec, n, down)
	}
	if rec, _, _ := f.ok(t0.Add(101 * time.Second)); rec {
		t.Fatal("a second success counts as a recovery again")
	}
	if !f.fail(t0.Add(102 * time.Second)) {
		t.Fatal("the first failure of a new run is not logged")
	}
}
