package bench

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// readingClock is a virtual clock that moves step forward on every reading, like
// tickClock, but whose timers fire only when readings reach their time: a run's time is
// the count of its readings, and a timer fires between two of them.
type readingClock struct {
	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	timers []readingTimer
}

type readingTimer struct {
	at time.Time
	c  chan time.Time
}

func newReadingClock(step time.Duration) *readingClock {
	return &readingClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), step: step}
}

func (c *readingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = kept
	return c.now
}

func (c *readingClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, readingTimer{at: c.now.Add(d), c: ch})
	return ch
}

// TestRunFor runs a closed loop of one request in flight for 20 virtual ms on a clock
// that moves 1 ms per reading. The readings are sequential: the run's start, then per
// request the runner's check of the stop time (once the slot is free) and the client's
// send, 3 token frames and [DONE]. Checks therefore fall at 1, 7, 13, 19 and 25 ms after
// the start: 4 requests are sent (the last at 20 ms), the one whose turn comes at 25 ms
// is not (the stop timer fires at 20 ms while the runner waits for the slot), and the
// 4th, in flight at 20 ms, ends normally at 24 ms.
func TestRunFor(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	g, err := SyntheticSpec{ISL: FixedLength(20), OSL: FixedLength(3), BlockTokens: 16}.Generator()
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	next := func(i int) Request {
		if i != asked {
			t.Errorf("asked for request %d, want %d", i, asked)
		}
		asked++
		return g.Next()
	}
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Clock: newReadingClock(time.Millisecond)}, Concurrency: 1, BlockTokens: 16}
	out, err := r.RunFor(context.Background(), next, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(out)
	if s.Requests != 4 || s.Succeeded != 4 || asked != 5 {
		t.Fatalf("summary %+v after %d requests drawn: want 4 sent and valid, 5 drawn", s, asked)
	}
	for i, res := range out.Results {
		if res.Index != i || res.Start != time.Duration(2+6*i)*time.Millisecond {
			t.Fatalf("result %d: index %d, sent at %v; want %dms", i, res.Index, res.Start, 2+6*i)
		}
	}
	if last := out.Results[3]; last.Start+last.E2E <= 20*time.Millisecond || out.Duration != 24*time.Millisecond {
		t.Fatalf("last answer ends at %v, run %v: want it in flight past 20ms, the run 24ms", last.Start+last.E2E, out.Duration)
	}
}

// TestRunForConcurrent: many requests in flight, under the race detector, stop after a
// short run with every answer valid and counted. The run lasts 200 readings of a clock
// that moves 1 ms per reading, whatever the machine's speed: on the wall clock a pause
// as long as the run before the first request would leave nothing sent.
func TestRunForConcurrent(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	g, err := SyntheticSpec{ISL: mustLength(t, "uniform:10:40"), OSL: mustLength(t, "uniform:1:4"), BlockTokens: 16,
		PrefixGroups: 2, PrefixTokens: 5, Seed: 2}.Generator()
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Client: &Client{URL: srv.URL, Model: "m", Clock: newReadingClock(time.Millisecond)}, Concurrency: 8, BlockTokens: 16}
	out, err := r.RunFor(context.Background(), func(int) Request { return g.Next() }, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(out)
	if s.Requests == 0 || s.Failed != 0 || s.Succeeded != len(out.Results) {
		t.Fatalf("summary %+v: want some requests, all valid", s)
	}
	for i, res := range out.Results {
		if res.Index != i {
			t.Fatalf("result %d has index %d", i, res.Index)
		}
	}
}

func TestRunForErrors(t *testing.T) {
	next := func(int) Request { return Request{InputLength: 1, HashIDs: []int64{1}} }
	for _, tc := range []struct {
		concurrency int
		d           time.Duration
		want        string
	}{
		{0, time.Second, "concurrency bound"},
		{2, 0, "duration 0s"},
	} {
		r := &Runner{Client: &Client{URL: "http://127.0.0.1:1", Model: "m"}, Concurrency: tc.concurrency, BlockTokens: 16}
		if _, err := r.RunFor(context.Background(), next, tc.d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("concurrency %d, %v: error %v, want one containing %q", tc.concurrency, tc.d, err, tc.want)
		}
	}
}

// TestRunForCanceled: cancelling the context stops a run of a duration at once.
func TestRunForCanceled(t *testing.T) {
	srv := httptest.NewServer(openAIStream(t))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	next := func(int) Request { return Request{InputLength: 8, OutputLength: 1, HashIDs: []int64{1}} }
	out, err := (&Runner{Client: &Client{URL: srv.URL, Model: "m"}, Concurrency: 2, BlockTokens: 16}).RunFor(ctx, next, time.Hour)
	if err != nil || len(out.Results) != 0 {
		t.Fatalf("%d results, %v; want none sent", len(out.Results), err)
	}
}
