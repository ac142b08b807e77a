package planner

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
)

// Connector changes the fleet: a local one asks node agents, a Kubernetes one patches
// Deployments' replicas, a virtual one writes the decisions out.
type Connector interface {
	// Name is "local", "kubernetes" or "virtual".
	Name() string
	// Fleet reports model's pools as they are now: ready, starting and stopping workers.
	Fleet(ctx context.Context, model string) (core.Fleet, error)
	// Scale asks for each pool in target to reach that many workers; it returns once the
	// steps are asked for (workers start and drain meanwhile; Fleet shows the progress).
	Scale(ctx context.Context, model string, target map[core.Pool]int) error
}

// Config configures every Planner grain of a member.
type Config struct {
	// Planner is each model's planner configuration (its targets change at run time
	// through SetTargets).
	Planner core.Config
	// Connector applies the decisions.
	Connector Connector
	// Router returns the Router grain client of a model, for the workers' loads (load
	// mode's rule, SLA mode's load floor) and readiness; nil in tests that give loads
	// otherwise.
	Router func(model string) *messages.RouterGrainClient
	Logger zerolog.Logger
	// CallTimeout bounds each Fleet, Scale and Router Stats call of a decision (0:
	// DefaultCallTimeout).
	CallTimeout time.Duration
	// Now is for tests; nil means time.Now.
	Now func() time.Time
	// Ticker replaces the grain's timer (tests): it returns the channel whose values
	// trigger a decision of model's grain, and a function that stops it. nil: a
	// time.Ticker of the mode's period (Planner.Interval in SLA mode, LoadInterval in
	// load mode).
	Ticker func(model string, period time.Duration) (<-chan time.Time, func())
	// Decided, when set, is called on the grain's goroutine once a period's work is done:
	// the decision and the connector's error (a failed Fleet: a zero Decision and its
	// error). Metrics and tests hook here; it must not block.
	Decided func(model string, d core.Decision, err error)
}
