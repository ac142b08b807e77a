package gateway

import (
	"testing"
	"time"
)

// TestPlaceJoined: a place's Joined is zero until the request first joins its queue,
// then the instant of that first join, kept when it leaves and joins again (a Backend
// parking a request the gateway queued first): its whole wait counts from then.
func TestPlaceJoined(t *testing.T) {
	s := newQueueServer(t, newSlotBackend(0), 4, 10*time.Second)
	p := s.newPlace("tiny", &ticket{})
	if got := p.Joined(); !got.IsZero() {
		t.Fatalf("before joining: %v, want zero", got)
	}
	before := time.Now()
	if err := p.join(false); err != nil {
		t.Fatal(err)
	}
	first := p.Joined()
	if first.Before(before) || first.After(time.Now()) {
		t.Fatalf("joined at %v, want between %v and now", first, before)
	}
	p.Leave()
	if err := p.join(true); err != nil {
		t.Fatal(err)
	}
	defer p.Leave()
	if got := p.Joined(); !got.Equal(first) {
		t.Errorf("joined again: %v, want the first join's %v", got, first)
	}
}
