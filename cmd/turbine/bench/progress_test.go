package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// TestProgressBar: on a terminal the runner feeds a live bar (count, in flight, errors,
// TTFT p50); elsewhere it writes plain lines every interval.
func TestProgressBar(t *testing.T) {
	defer func(t time.Duration) { barThrottle = t }(barThrottle)
	barThrottle = 0 // draw every state
	var w bytes.Buffer
	p := newProgress(&w, 5*time.Second, 10, "kv", true)
	var r bench.Runner
	p.runner(&r)
	if r.Observe == nil || r.Progress != nil || r.ProgressEvery != barRefresh {
		t.Fatalf("runner %+v: want Observe every %v and no plain lines", r, barRefresh)
	}
	r.Observe(bench.ProgressState{Done: 4, Total: 10, InFlight: 3, Errors: 1, TTFTP50: 42.25})
	r.Observe(bench.ProgressState{Done: 10, Total: 10, TTFTP50: 40})
	p.finish()
	out := w.String()
	for _, want := range []string{"kv: 3 in flight, 1 errors, TTFT p50 42.2 ms", "(4/10", "kv: 0 in flight, 0 errors, TTFT p50 40.0 ms", "(10/10"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q:\n%q", want, out)
		}
	}

	w.Reset()
	p = newProgress(&w, 5*time.Second, 10, "kv", false)
	r = bench.Runner{}
	p.runner(&r)
	if r.Observe != nil || r.Progress != &w || r.ProgressEvery != 5*time.Second {
		t.Fatalf("runner %+v: want plain lines every 5s", r)
	}
	p.finish()
	if w.Len() != 0 {
		t.Fatalf("plain progress wrote %q at finish", w.String())
	}
}

func TestSimulatedProgress(t *testing.T) {
	var w bytes.Buffer
	f := newProgress(&w, time.Second, 25, "x", false).simulated()
	for i := 1; i <= 25; i++ {
		f(i, 25)
	}
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 13 || lines[0] != "bench: 1/25 simulated" || lines[len(lines)-1] != "bench: 25/25 simulated" {
		t.Fatalf("%d lines %q: want one every 2 requests and the last", len(lines), lines)
	}
	if newProgress(&w, 0, 25, "x", false).simulated() != nil {
		t.Fatal("interval 0 still reports")
	}
}
