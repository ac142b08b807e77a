package bench

import (
	"bytes"
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestProgressStateString(t *testing.T) {
	for _, tc := range []struct {
		s    ProgressState
		want string
	}{
		{ProgressState{Total: 5, TTFTP50: math.NaN()}, "bench: 0/5 done, 0 in flight, 0 errors, TTFT p50 -"},
		{ProgressState{Done: 3, Total: 5, InFlight: 2, Errors: 1, TTFTP50: 12.345}, "bench: 3/5 done, 2 in flight, 1 errors, TTFT p50 12.3 ms"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestRunObserve: Observe gets the final state once the last answer has ended (the
// period is an hour, so no periodic report fires during the test).
func TestRunObserve(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	reqs, err := Synthetic(12, 20, 2, 16, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []ProgressState
	var lines bytes.Buffer
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m"}, Concurrency: 4, BlockTokens: 16, Progress: &lines,
		ProgressEvery: time.Hour, Observe: func(s ProgressState) {
			mu.Lock()
			seen = append(seen, s)
			mu.Unlock()
		}}
	r.Run(context.Background(), reqs)
	if len(seen) != 1 {
		t.Fatalf("observed %d states, want the final one only", len(seen))
	}
	if s := seen[0]; s.Done != 12 || s.Total != 12 || s.InFlight != 0 || s.Errors != 0 || !(s.TTFTP50 > 0) {
		t.Fatalf("final state %+v: want 12/12 done, none in flight, no error, a TTFT", s)
	}
	if strings.Contains(lines.String(), "bench:") {
		t.Fatalf("a plain line was written before the period: %q", lines.String())
	}
}
