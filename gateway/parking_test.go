package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// parkingBackend is a slotBackend that parks a request finding no slot in its place of
// the busy queue (GenerateRequest.Parking), as the frontend's flows do, and tries again
// each time the place says it may; it gives up after the place's timeout, when the
// server drains, or when ctx ends.
type parkingBackend struct{ *slotBackend }

func (b *parkingBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	p := req.Parking
	if p == nil {
		return b.slotBackend.Generate(ctx, req)
	}
	timeout := time.NewTimer(p.Timeout())
	defer timeout.Stop()
	for {
		st, err := b.slotBackend.Generate(ctx, req)
		if err == nil {
			p.Leave()
			return st, nil
		}
		if err := p.Park(); err != nil {
			return nil, err
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				p.Leave()
				return nil, ctx.Err()
			case <-timeout.C:
				p.Leave()
				return nil, fmt.Errorf("%w: waited in the busy queue", ErrAllBusy)
			case <-p.Wake():
				switch {
				case p.Draining():
					p.Leave()
					return nil, ErrDraining
				case p.Ready():
					break wait
				}
			}
		}
	}
}

// TestParkedQueueFIFO: with a Backend that parks its busy requests itself, the queue
// keeps one order: a runs; b finds the only worker slot taken and parks; c arrives
// while b waits and queues behind it without trying; d finds the queue full (503
// all_workers_busy at once). When a ends, b runs, then c; every place is left.
func TestParkedQueueFIFO(t *testing.T) {
	b := &parkingBackend{newSlotBackend(1)}
	s := newQueueServer(t, b, 2, time.Hour)
	ra := post(s, "a")
	if id := <-b.started; id != "a" {
		t.Fatalf("first admitted %s", id)
	}
	rb := post(s, "b")
	waitQueued(t, s, "tiny", 1)
	rc := post(s, "c")
	waitQueued(t, s, "tiny", 2)
	if r := <-post(s, "d"); r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, "all_workers_busy") {
		t.Fatalf("d with a full queue: %d %s", r.code, r.body)
	}
	close(b.release)
	for _, want := range []string{"b", "c"} {
		if id := <-b.started; id != want {
			t.Fatalf("admitted %s, want %s", id, want)
		}
	}
	for name, ch := range map[string]chan *httpResult{"a": ra, "b": rb, "c": rc} {
		if r := <-ch; r.code != 200 {
			t.Errorf("%s: %d %s", name, r.code, r.body)
		}
	}
	if n := s.queue.len("tiny"); n != 0 {
		t.Errorf("%d requests still queued", n)
	}
	if got := metricValue(s, `turbine_frontend_queued_requests_total{model="tiny"}`); got != "2" {
		t.Errorf("queued = %q, want 2", got)
	}
}

// TestParkedEnds: a parked request that never runs gets today's answers: 503
// all_workers_busy (with Retry-After) after its wait, 503 service_draining once the
// server drains; it leaves the queue either way, and is queued once.
func TestParkedEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		drain   bool
		want    string
	}{
		{"timeout", time.Millisecond, false, "all_workers_busy"},
		{"drain", time.Hour, true, "service_draining"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &parkingBackend{newSlotBackend(0)}
			s := newQueueServer(t, b, 4, tc.timeout)
			res := post(s, "a")
			if tc.drain {
				waitQueued(t, s, "tiny", 1)
				s.Drain()
			}
			r := <-res
			if r.code != 503 || r.retryAfter == "" || !strings.Contains(r.body, tc.want) {
				t.Fatalf("got %d Retry-After=%q %s, want 503 %s", r.code, r.retryAfter, r.body, tc.want)
			}
			if n := s.queue.len("tiny"); n != 0 {
				t.Errorf("%d requests still queued", n)
			}
			// The Backend's answer is final: the gateway does not queue the request again.
			if got := metricValue(s, `turbine_frontend_queued_requests_total{model="tiny"}`); got != "1" {
				t.Errorf("queued = %q, want 1", got)
			}
		})
	}
}

// TestPlaceTimeout: a request that waited in the queue for a slot before its Backend
// parked it may wait only what is left of Config.QueueTimeout.
func TestPlaceTimeout(t *testing.T) {
	s := newQueueServer(t, newSlotBackend(0), 4, 10*time.Second)
	p := s.newPlace("tiny", &ticket{})
	if got := p.Timeout(); got != 10*time.Second {
		t.Errorf("before joining: %v, want the whole 10s", got)
	}
	if err := p.join(false); err != nil {
		t.Fatal(err)
	}
	defer p.Leave()
	p.joined = p.joined.Add(-4 * time.Second)
	if got := p.Timeout(); got > 6*time.Second || got < 5*time.Second {
		t.Errorf("4s after joining: %v, want about 6s", got)
	}
	p.joined = p.joined.Add(-time.Minute)
	if got := p.Timeout(); got <= 0 {
		t.Errorf("past the timeout: %v, want a positive wait (0 turns the queue off)", got)
	}
}
