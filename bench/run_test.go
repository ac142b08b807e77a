package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRunSequential runs a trace with one request in flight on a virtual clock that
// ticks 1 ms per reading: every TTFT and ITL is exactly 1 ms and every E2E is
// (output tokens + 1) ms, whatever the machine's speed.
func TestRunSequential(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	reqs := []Request{
		{Arrival: 0, InputLength: 10, OutputLength: 3, HashIDs: []int64{1}},
		{Arrival: 5 * time.Millisecond, InputLength: 20, OutputLength: 3, HashIDs: []int64{1, 2}},
		{Arrival: time.Second, InputLength: 16, OutputLength: 0, HashIDs: []int64{3}},
	}
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Clock: newTickClock(time.Millisecond)}, Concurrency: 1, BlockTokens: 16}
	out := r.Run(context.Background(), reqs)
	s := Summarize(out)
	if s.Requests != 3 || s.Succeeded != 3 || s.Failed != 0 || len(s.Errors) != 0 {
		t.Fatalf("summary %+v: want 3 requests, all valid", s)
	}
	if s.TTFT.Min != 1 || s.TTFT.Max != 1 || s.ITL.Min != 1 || s.ITL.Max != 1 || s.ITL.Count != 2+2 {
		t.Fatalf("TTFT %+v, ITL %+v: want all 1 ms, 4 gaps", s.TTFT, s.ITL)
	}
	// Output 0 is sent as max_tokens 1 (a request must generate something).
	if s.E2E.Max != 4 || s.E2E.Min != 2 || s.OutputTokens != 7 || s.InputTokens != 46 {
		t.Fatalf("E2E %+v, %d output, %d input tokens; want 2..4 ms, 7, 46", s.E2E, s.OutputTokens, s.InputTokens)
	}
	if out.Results[2].Start < time.Second {
		t.Fatalf("third request sent at %v, before its arrival at 1s", out.Results[2].Start)
	}
	if s.PrefixCacheHitRate == nil || *s.PrefixCacheHitRate != float64(5+10+8)/46 {
		t.Fatalf("hit rate %v, want %v", s.PrefixCacheHitRate, float64(23)/46)
	}
	if math.Abs(s.OutputThroughput-7/s.DurationS) > 1e-9 || math.Abs(s.RequestThroughput-3/s.DurationS) > 1e-9 {
		t.Fatalf("throughputs %v tok/s, %v req/s over %v s", s.OutputThroughput, s.RequestThroughput, s.DurationS)
	}
	var tokens float64
	for _, x := range s.Throughput {
		tokens += x * s.ThroughputBucketS
	}
	if math.Abs(tokens-7) > 1e-6 {
		t.Fatalf("throughput series holds %v tokens, want 7", tokens)
	}
	if len(s.TTFTCDF) != 101 || s.TTFTCDF[100] != 1 {
		t.Fatalf("TTFT CDF %v", s.TTFTCDF)
	}
}

// TestRunConcurrent checks counts (not timings) with many requests in flight on the
// wall clock, under the race detector, and the CSV's rows.
func TestRunConcurrent(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	reqs, err := Synthetic(40, 30, 4, 16, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m"}, Concurrency: 8, BlockTokens: 16, Progress: &progress, ProgressEvery: time.Hour}
	out := r.Run(context.Background(), reqs)
	s := Summarize(out)
	if s.Succeeded != 40 || s.OutputTokens != 160 || s.ITL.Count != 40*3 || s.TTFT.Count != 40 {
		t.Fatalf("summary %+v: want 40 valid requests, 160 tokens, 120 gaps", s)
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, out.Results); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 41 || len(rows[1]) != len(CSVHeader) || rows[40][0] != "39" || rows[1][7] != "15" {
		t.Fatalf("CSV: %v, %d rows (want 41), first %v", err, len(rows), rows[:min(2, len(rows))])
	}
}

func TestRunCanceled(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reqs, _ := Synthetic(3, 8, 1, 16, 0, nil)
	out := (&Runner{Client: &Client{URL: srv.URL, Model: "m"}, BlockTokens: 16}).Run(ctx, reqs)
	if s := Summarize(out); s.Errors[ErrCanceled] != 3 {
		t.Fatalf("errors %v, want 3 canceled", s.Errors)
	}
}

// TestRunArrivalOrder: a workload out of arrival order is sent in arrival order (equal
// arrivals in workload order), as a simulation replays it, and reported in workload
// order.
func TestRunArrivalOrder(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	for _, tc := range []struct {
		name     string
		arrivals []time.Duration
		sent     []int // workload positions in the order sent
	}{
		{"backwards", []time.Duration{2000 * time.Millisecond, 0, 100 * time.Millisecond}, []int{1, 2, 0}},
		{"ties keep their order", []time.Duration{5 * time.Millisecond, 0, 5 * time.Millisecond, 0}, []int{1, 3, 0, 2}},
		{"in order", []time.Duration{0, time.Millisecond, time.Second}, []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]Request, len(tc.arrivals))
			for i, at := range tc.arrivals {
				reqs[i] = Request{Arrival: at, InputLength: 8 + i, OutputLength: 1, HashIDs: []int64{int64(i)}}
			}
			r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Clock: newTickClock(time.Millisecond)}, Concurrency: 1, BlockTokens: 16}
			out := r.Run(context.Background(), reqs)
			for i, res := range out.Results {
				if res.Index != i || res.InputLength != reqs[i].InputLength || res.Error != "" {
					t.Fatalf("result %d = %+v: want request %d's, valid", i, res, i)
				}
				if res.Start < reqs[i].Arrival {
					t.Fatalf("request %d sent at %v, before its arrival %v", i, res.Start, reqs[i].Arrival)
				}
			}
			for k := 1; k < len(tc.sent); k++ {
				if a, b := out.Results[tc.sent[k-1]], out.Results[tc.sent[k]]; a.Start >= b.Start {
					t.Fatalf("request %d sent at %v, not before request %d at %v: want the order %v", tc.sent[k-1], a.Start, tc.sent[k], b.Start, tc.sent)
				}
			}
		})
	}
}
