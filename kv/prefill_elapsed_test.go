package kv

import (
	"testing"
	"time"
)

// tokensFrom is n prompt tokens from base on (distinct bases share no block).
func tokensFrom(base, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(base + i)
	}
	return t
}

// queueOf is worker name's candidate at now and the ttft prediction for a 100-token
// prompt there.
func queueOf(t *testing.T, r *Router, name string, now time.Time) (Candidate, Prediction) {
	t.Helper()
	rw := r.byName[name]
	r.setNow(now)
	c := r.candidate(rw, r.active.Load(rw.id))
	return c, PredictTTFT(&r.cfg.Profile, 100, r.cfg.BlockSize, &c)
}

// TestPrefillElapsedStaleStart: a request that leaves the queue without a first token's
// time (cancelled at the head, or its first token heard of without a time) leaves the
// start of the next head unknown, so nothing is taken off the queue until a first token
// with a time says when it began. Before, the next head inherited the old start and a
// whole queue read as done.
func TestPrefillElapsedStaleStart(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	full := func(r *Router, c Candidate) float64 {
		m := newTTFTModel(&r.cfg.Profile, r.cfg.BlockSize)
		ms, _ := m.prefill(float64(c.ActivePrefillTokens))
		return ms
	}
	t.Run("head cancelled", func(t *testing.T) {
		r := ttftRouter(t)
		for i, id := range []string{"a", "b"} {
			if _, err := r.Route(RouteInput{RequestID: id, Tokens: tokensFrom(1+100000*i, 8000), PinWorker: "w1"}, at(0.01*float64(i)), nil); err != nil {
				t.Fatal(err)
			}
		}
		r.Free("a") // after a second: b begins now
		c, pr := queueOf(t, r, "w1", at(1.001))
		if c.PrefillElapsedMs != 0 || pr.QueueMs != full(r, c) {
			t.Errorf("after the head was cancelled: elapsed %v ms, queue %.1f of %.1f ms; want 0 and the whole queue", c.PrefillElapsedMs, pr.QueueMs, full(r, c))
		}
		// The next timed first token says when the head after it began.
		if _, err := r.Route(RouteInput{RequestID: "c", Tokens: tokensFrom(300000, 8000), PinWorker: "w1"}, at(1.1), nil); err != nil {
			t.Fatal(err)
		}
		r.PrefillDoneAt("b", at(1.2))
		if c, _ := queueOf(t, r, "w1", at(1.25)); c.PrefillElapsedMs < 49.999 || c.PrefillElapsedMs > 50.001 {
			t.Errorf("50 ms after b's first token: elapsed %v ms, want 50", c.PrefillElapsedMs)
		}
	})
	t.Run("first tokens without a time", func(t *testing.T) {
		r := ttftRouter(t)
		// 2,000-token requests every 20 ms, one first token per 40 ms heard of without
		// its time: the queue never empties.
		for i := 0; i < 40; i++ {
			if _, err := r.Route(RouteInput{RequestID: string(rune('A' + i)), Tokens: tokensFrom(10000*(i+1), 2000), PinWorker: "w1"}, at(0.02*float64(i)), nil); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				r.PrefillDone(string(rune('A' + i/2)))
			}
		}
		c, pr := queueOf(t, r, "w1", at(0.8))
		if c.PrefillElapsedMs != 0 || pr.QueueMs != full(r, c) {
			t.Errorf("%d tokens queued (%.0f ms) read as %.1f ms (elapsed %v ms); want the whole queue", c.ActivePrefillTokens, full(r, c), pr.QueueMs, c.PrefillElapsedMs)
		}
	})
	t.Run("the router hands the elapsed time over in ms", func(t *testing.T) {
		r := ttftRouter(t)
		if _, err := r.Route(RouteInput{RequestID: "a", Tokens: tokensFrom(1, 8000), PinWorker: "w1"}, t0, nil); err != nil {
			t.Fatal(err)
		}
		if c, _ := queueOf(t, r, "w1", t0.Add(30*time.Millisecond)); c.PrefillElapsedMs < 29.999 || c.PrefillElapsedMs > 30.001 {
			t.Errorf("PrefillElapsedMs %v 30 ms after the route, want 30", c.PrefillElapsedMs)
		}
		if c, _ := queueOf(t, r, "w2", t0.Add(30*time.Millisecond)); c.PrefillElapsedMs != 0 {
			t.Errorf("idle worker: PrefillElapsedMs %v, want 0", c.PrefillElapsedMs)
		}
	})
}
