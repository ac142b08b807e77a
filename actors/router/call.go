package router

import (
	"context"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	tcluster "github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/messages"
)

// Clock is the time source of Call: time.Now and a pause that ends early when its
// context does (a test's fake clock otherwise).
type Clock struct {
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration)
}

// RealClock is the wall clock.
var RealClock = Clock{Now: time.Now, Sleep: func(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}}

// Call asks the Router grain behind c to route rr before deadline. A grain in its
// registration window (activated moments ago, no worker registered yet: it answers
// ROUTE_NO_WORKERS with retry_ms, docs/reference.md §10) is asked again after that pause
// while the deadline leaves time for it and ctx lasts; then its last answer stands. Each
// attempt retries the grain call itself until the time left (cluster.UntilTimeout).
// clock's zero value is RealClock. Errors: the grain call's.
func Call(ctx context.Context, c *messages.RouterGrainClient, rr *messages.RouteRequest, deadline time.Time,
	clock Clock) (*messages.RouteResponse, error) {
	if clock.Now == nil || clock.Sleep == nil {
		clock = RealClock
	}
	for {
		resp, err := c.Route(rr, pcluster.WithTimeout(deadline.Sub(clock.Now())), tcluster.UntilTimeout())
		if err != nil || resp.GetOutcome() != messages.RouteOutcome_ROUTE_NO_WORKERS || resp.GetRetryMs() <= 0 {
			return resp, err
		}
		pause := time.Duration(resp.GetRetryMs()) * time.Millisecond
		if deadline.Sub(clock.Now()) <= pause {
			return resp, nil
		}
		clock.Sleep(ctx, pause)
		if ctx.Err() != nil || !clock.Now().Before(deadline) {
			return resp, nil // a pause that overran leaves no time: the grain's answer stands
		}
	}
}
