package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
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

// TestRunStopped: cancelling the run's context (SIGINT, SIGTERM) stops sending: the
// requests answered keep their results, the one in flight ends as canceled, and those
// never sent have no result and are counted apart (not as failures), in order or not.
func TestRunStopped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arrivals []time.Duration // in ms
		stopAt   int             // the run is stopped while the stopAt-th request sent (from 1) is in flight; 0: before the start
		answered []int           // workload positions answered
		canceled []int           // workload positions canceled in flight
		notSent  int
	}{
		{"before the start", []time.Duration{0, 0, 0}, 0, nil, nil, 3},
		// The later arrivals wait a second: sent at once, the second could be in flight
		// before the first reaches the server and stops the run.
		{"during the first", []time.Duration{0, 1000, 1000}, 1, nil, []int{0}, 2},
		{"during the third of five", []time.Duration{0, 1, 2, 3, 4}, 3, []int{0, 1}, []int{2}, 2},
		{"during the last", []time.Duration{0, 1, 2}, 3, []int{0, 1}, []int{2}, 0},
		{"out of arrival order", []time.Duration{20, 0, 10}, 2, []int{1}, []int{2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.stopAt == 0 {
				cancel()
			}
			var mu sync.Mutex
			sent := 0
			stream := openAIStream(t)
			ended := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				sent++
				stop := sent == tc.stopAt
				mu.Unlock()
				if stop { // in flight when the run is stopped: wait for the client to go
					cancel()
					// The server notices a closed connection once the body is read.
					_, _ = io.Copy(io.Discard, r.Body)
					select {
					case <-r.Context().Done():
					case <-ended: // the test failed before the client went
					}
					return
				}
				stream(w, r)
			}))
			defer srv.Close()
			defer close(ended)
			reqs := make([]Request, len(tc.arrivals))
			for i, at := range tc.arrivals {
				reqs[i] = Request{Arrival: at * time.Millisecond, InputLength: 8 + i, OutputLength: 2, HashIDs: []int64{int64(i)}}
			}
			r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Clock: newTickClock(time.Millisecond)}, Concurrency: 1, BlockTokens: 16}
			out := r.Run(ctx, reqs)
			var answered, canceled []int
			for k, res := range out.Results {
				if k > 0 && res.Index <= out.Results[k-1].Index {
					t.Fatalf("results %+v: not in workload order", out.Results)
				}
				if res.InputLength != reqs[res.Index].InputLength {
					t.Fatalf("result %+v: not request %d's", res, res.Index)
				}
				switch res.Error {
				case "":
					answered = append(answered, res.Index)
				case ErrCanceled:
					canceled = append(canceled, res.Index)
				default:
					t.Fatalf("result %+v: want valid or canceled", res)
				}
			}
			if !slices.Equal(answered, tc.answered) || !slices.Equal(canceled, tc.canceled) || out.NotSent != tc.notSent {
				t.Fatalf("answered %v, canceled %v, %d not sent; want %v, %v, %d", answered, canceled, out.NotSent, tc.answered, tc.canceled, tc.notSent)
			}
			s := Summarize(out)
			if s.Requests != len(tc.answered)+len(tc.canceled) || s.Succeeded != len(tc.answered) || s.Failed != len(tc.canceled) ||
				s.Errors[ErrCanceled] != len(tc.canceled) || s.NotSent != tc.notSent {
				t.Fatalf("summary %+v: want the %d requests sent (%d canceled) and %d not sent", s, len(tc.answered)+len(tc.canceled), len(tc.canceled), tc.notSent)
			}
			var buf bytes.Buffer
			if err := WriteCSV(&buf, out.Results); err != nil {
				t.Fatal(err)
			}
			if rows, err := csv.NewReader(&buf).ReadAll(); err != nil || len(rows) != 1+s.Requests {
				t.Fatalf("requests.csv: %v, %d rows; want a row per request sent (%d)", err, len(rows)-1, s.Requests)
			}
			buf.Reset()
			if err := WriteSummary(&buf, s); err != nil {
				t.Fatal(err)
			}
			if back, err := ReadSummary(&buf, "s.json"); err != nil || back.NotSent != tc.notSent {
				t.Fatalf("summary read back: %v, not_sent %d; want %d", err, back.NotSent, tc.notSent)
			}
		})
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
