package router

import (
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	tcluster "github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/messages"
)

// Call asks the Router grain behind c to route rr, within timeout in all. A grain in its
// registration window (activated moments ago, no worker registered yet: it answers
// ROUTE_NO_WORKERS with retry_ms, docs/reference.md §10) is asked again after that pause
// while the timeout leaves time for it; then its last answer stands. Each attempt retries
// the grain call itself until the time left (cluster.UntilTimeout). now and sleep are
// time.Now and time.Sleep when nil (a test's clock otherwise). Errors: the grain call's.
func Call(c *messages.RouterGrainClient, rr *messages.RouteRequest, timeout time.Duration,
	now func() time.Time, sleep func(time.Duration)) (*messages.RouteResponse, error) {
	if now == nil || sleep == nil {
		now, sleep = time.Now, time.Sleep
	}
	deadline := now().Add(timeout)
	for {
		resp, err := c.Route(rr, pcluster.WithTimeout(deadline.Sub(now())), tcluster.UntilTimeout())
		if err != nil || resp.GetOutcome() != messages.RouteOutcome_ROUTE_NO_WORKERS || resp.GetRetryMs() <= 0 {
			return resp, err
		}
		pause := time.Duration(resp.GetRetryMs()) * time.Millisecond
		if deadline.Sub(now()) <= pause {
			return resp, nil
		}
		sleep(pause)
	}
}
