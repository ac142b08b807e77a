package sim

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
)

// burst is n requests arriving at once, each with a prompt of its own (one hash id of
// 64 tokens) and 20 output tokens.
func burst(n int) []bench.Request {
	out := make([]bench.Request, n)
	for i := range out {
		out[i] = bench.Request{InputLength: 64, OutputLength: 20, HashIDs: []int64{int64(100 + i)}}
	}
	return out
}

// queueConfig is one worker that is busy while any prompt is being computed (a
// prefill-token threshold of 1), with a busy queue of depth and timeout.
func queueConfig(depth int, timeout time.Duration) Config {
	eng := smallEngine()
	rc := kv.DefaultConfig(eng.BlockSize)
	rc.Busy.PrefillTokens = 1
	return Config{Workers: 1, Engine: eng, Router: rc, BlockTokens: 64, QueueDepth: depth, QueueTimeout: timeout}
}

// TestBusyQueue: a burst beyond the busy threshold fails all_busy without a queue; with
// one, the requests that found the worker busy wait and then complete in arrival order;
// with a short queue timeout they fail all_busy once it has passed; those beyond the
// queue's depth fail at once.
func TestBusyQueue(t *testing.T) {
	const n = 6
	for _, tc := range []struct {
		name    string
		depth   int
		timeout time.Duration
		errs    []string // per request in arrival order
		queued  int
		timeOut int
		full    int
	}{
		{"no queue", 0, 0, []string{"", ErrAllBusy, ErrAllBusy, ErrAllBusy, ErrAllBusy, ErrAllBusy}, 0, 0, 0},
		{"queued then completed", 8, time.Minute, []string{"", "", "", "", "", ""}, 5, 0, 0},
		{"queued then timed out", 8, time.Millisecond, []string{"", ErrAllBusy, ErrAllBusy, ErrAllBusy, ErrAllBusy, ErrAllBusy}, 5, 5, 0},
		{"queue full", 2, time.Minute, []string{"", "", "", ErrAllBusy, ErrAllBusy, ErrAllBusy}, 2, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := Run(context.Background(), queueConfig(tc.depth, tc.timeout), burst(n))
			if err != nil {
				t.Fatal(err)
			}
			var last time.Duration
			for i, r := range out.Results {
				if r.Error != tc.errs[i] {
					t.Fatalf("request %d: error %q (%s), want %q", i, r.Error, r.Detail, tc.errs[i])
				}
				switch {
				case r.Error == "":
					// First in, first out: each starts after the one before it.
					if i > 0 && r.TTFT <= last {
						t.Errorf("request %d: TTFT %v, not after request %d's %v", i, r.TTFT, i-1, last)
					}
					last = r.TTFT
					if r.OutputTokens != 20 {
						t.Errorf("request %d: %d tokens, want 20", i, r.OutputTokens)
					}
				case i > tc.depth && tc.depth > 0 || tc.depth == 0:
					if r.E2E != 0 {
						t.Errorf("request %d refused at once: E2E %v, want 0", i, r.E2E)
					}
				default:
					if r.E2E < tc.timeout {
						t.Errorf("request %d timed out in the queue: E2E %v, want at least %v", i, r.E2E, tc.timeout)
					}
				}
			}
			if st.Queued != tc.queued || st.QueueTimeouts != tc.timeOut || st.QueueFull != tc.full {
				t.Errorf("queued %d, timed out %d, refused by a full queue %d; want %d, %d, %d",
					st.Queued, st.QueueTimeouts, st.QueueFull, tc.queued, tc.timeOut, tc.full)
			}
			again, _, err := Run(context.Background(), queueConfig(tc.depth, tc.timeout), burst(n))
			if err != nil || !reflect.DeepEqual(again, out) {
				t.Errorf("a second run differs (%v)", err)
			}
		})
	}
}

// TestBusyQueueDeadline: a queued request whose client gives up leaves the queue (the
// flow's Deadline): request 0 takes the worker, request 1 waits behind it and gives up
// at 20 ms, just before the queue's head would look again; request 2, arriving at 25 ms,
// finds nobody waiting and runs (were request 1 still queued, request 2 would wait
// behind it past its own deadline).
func TestBusyQueueDeadline(t *testing.T) {
	cfg := queueConfig(8, time.Minute)
	cfg.RequestTimeout = 20 * time.Millisecond
	reqs := burst(3)
	reqs[0].OutputLength, reqs[2].OutputLength = 1, 1
	reqs[2].Arrival = 25 * time.Millisecond
	out, st, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", bench.ErrTimeout, ""} {
		if r := out.Results[i]; r.Error != want {
			t.Errorf("request %d: error %q (%s), want %q", i, r.Error, r.Detail, want)
		}
	}
	if st.Queued != 1 || st.QueueTimeouts != 0 {
		t.Errorf("queued %d, queue timeouts %d; want 1, 0", st.Queued, st.QueueTimeouts)
	}
}

// TestQueueConfig: the queue's figures are checked, and its retry period is the
// gateway's.
func TestQueueConfig(t *testing.T) {
	if DefaultQueueRetry != gateway.DefaultQueueRetry {
		t.Errorf("DefaultQueueRetry %v, the gateway's %v", DefaultQueueRetry, gateway.DefaultQueueRetry)
	}
	for _, c := range []Config{queueConfig(-1, time.Second), queueConfig(4, 0), queueConfig(4, -time.Second),
		func() Config { c := queueConfig(4, time.Second); c.QueueRetry = -1; return c }()} {
		if _, _, err := Run(context.Background(), c, burst(1)); err == nil {
			t.Errorf("depth %d timeout %v retry %v: no error", c.QueueDepth, c.QueueTimeout, c.QueueRetry)
		}
	}
}
