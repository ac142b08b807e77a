package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRouterExpiresUnacknowledgedRequests: a request routed with WillAck that is never
// acknowledged — its caller's Route call timed out after the router recorded it, so the
// caller cannot know where it went — is expired with both its legs once MaxUnackedAge
// has passed, and nothing else is; the clock is virtual.
func TestRouterExpiresUnacknowledgedRequests(t *testing.T) {
	const bound = 30 * time.Second
	cases := []struct {
		name     string
		fleet    string
		maxAge   time.Duration // MaxUnackedAge
		willAck  bool
		routes   int  // how many times the id is routed (a retried call routes it again)
		ack      bool // acknowledged after routing
		free     bool // freed after routing (the caller saw its call fail)
		at       time.Duration
		unacked  int64 // sequences expired for want of an acknowledgement
		stale    int64
		awaiting int // still awaiting an acknowledgement afterwards
		active   int // sequences still tracked afterwards
	}{
		{"not acknowledged: expired after the bound", "a0 a1", bound, true, 1, false, false, bound + time.Second, 1, 0, 0, 0},
		{"the bound is inclusive", "a0 a1", bound, true, 1, false, false, bound, 0, 0, 1, 1},
		{"acknowledged: kept", "a0 a1", bound, true, 1, true, false, bound + time.Second, 0, 0, 0, 1},
		{"acknowledged: bounded by MaxSequenceAge", "a0 a1", bound, true, 1, true, false, DefaultMaxSequenceAge + time.Second, 0, 1, 0, 0},
		{"no acknowledgement announced: kept", "a0 a1", bound, false, 1, false, false, bound + time.Second, 0, 0, 0, 1},
		{"expiry off", "a0 a1", 0, true, 1, false, false, bound + time.Second, 0, 0, 0, 1},
		{"routed twice (retried call): expired once", "a0 a1", bound, true, 2, false, false, bound + time.Second, 1, 0, 0, 0},
		{"freed after a failed call: nothing to expire", "a0 a1", bound, true, 1, false, true, bound + time.Second, 0, 0, 0, 0},
		{"remote: both legs expire", "d0:decode p0:prefill", bound, true, 1, false, false, bound + time.Second, 2, 0, 0, 0},
		{"remote acknowledged: both legs kept", "d0:decode p0:prefill", bound, true, 1, true, false, bound + time.Second, 0, 0, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig(disaggBS)
			cfg.MaxUnackedAge = c.maxAge
			cfg.Disagg = DisaggConfig{MaxLocalPrefillTokens: 8, MaxPrefillQueueTokens: 1000}
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			parseFleet(t, r, c.fleet)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < c.routes; i++ {
				if _, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(40), WillAck: c.willAck}, t0, rng); err != nil {
					t.Fatal(err)
				}
			}
			if c.ack && !r.Ack("r") {
				t.Fatal("Ack of a request awaiting its acknowledgement reported false")
			}
			if c.free && !r.Free("r") {
				t.Fatal("Free of a tracked request reported false")
			}
			if got := r.Expire(t0.Add(c.at)); got != (Expired{Unacked: c.unacked, Stale: c.stale}) {
				t.Errorf("Expire = %+v, want unacked %d stale %d", got, c.unacked, c.stale)
			}
			st := r.Stats()
			if st.ActiveRequests != c.active || st.AwaitingAck != c.awaiting {
				t.Errorf("%d sequences tracked, %d awaiting; want %d, %d", st.ActiveRequests, st.AwaitingAck, c.active, c.awaiting)
			}
			if st.Expired != (Expired{Unacked: c.unacked, Stale: c.stale}) {
				t.Errorf("Stats.Expired = %+v", st.Expired)
			}
			if c.active == 0 {
				for _, w := range st.Workers {
					if w.ActiveBlocks != 0 || w.ActivePrefillTokens != 0 || w.ActiveRequests != 0 {
						t.Errorf("load left on %s: %+v", w.ID, w)
					}
				}
			}
			if err := checkAckInvariants(r); err != nil {
				t.Fatal(err)
			}
			if got := r.Ack("r"); got != (c.awaiting == 1) {
				t.Errorf("a late Ack reported awaiting %v, want %v", got, c.awaiting == 1)
			}
		})
	}
}

// TestRouterAckQueueStaysBounded: acknowledged requests leave the acknowledgement queue
// (compacted), so a long run of acknowledged routes holds no memory for them.
func TestRouterAckQueueStaysBounded(t *testing.T) {
	r, err := NewRouter(DefaultConfig(disaggBS))
	if err != nil {
		t.Fatal(err)
	}
	parseFleet(t, r, "a0")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		id := fmt.Sprint("r", i)
		if _, err := r.Route(RouteInput{RequestID: id, Tokens: prompt(8), WillAck: true}, t0, rng); err != nil {
			t.Fatal(err)
		}
		r.Ack(id)
		r.Free(id)
	}
	if n := r.ackQueue.len(); n > 1025 || len(r.awaiting) != 0 {
		t.Fatalf("%d queue entries, %d awaiting after 20000 acknowledged requests", n, len(r.awaiting))
	}
}

// checkAckInvariants checks the acknowledgement bookkeeping: every awaiting id has a
// queue entry of its generation from its head on, entries are in routing order, and the
// consumed part is cleared.
func checkAckInvariants(r *Router) error {
	live := map[string]bool{}
	for i, q := range r.ackQueue.items {
		if i < r.ackQueue.head {
			if q != (queued{}) {
				return fmt.Errorf("consumed ack queue entry %d not cleared: %+v", i, q)
			}
			continue
		}
		if i > r.ackQueue.head && q.start.Before(r.ackQueue.items[i-1].start) {
			return fmt.Errorf("ack queue out of order at %d", i)
		}
		if gen, ok := r.awaiting[q.id]; ok && gen == q.gen {
			live[q.id] = true
		}
	}
	for id := range r.awaiting {
		if !live[id] {
			return fmt.Errorf("request %q awaits an acknowledgement without a queue entry", id)
		}
	}
	return nil
}
