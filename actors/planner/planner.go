// Package planner hosts the Planner grain (docs/reference.md §27.4): one per model, it
// merges the frontends' reports, runs the pure planner core (package planner) on a timer,
// and asks a Connector (§27.5) to start or drain workers.
package planner

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
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
	// mode) and readiness; nil in tests that give loads otherwise.
	Router func(model string) *messages.RouterGrainClient
	Logger zerolog.Logger
	// Now is for tests; nil means time.Now.
	Now func() time.Time
}

// Kind returns the cluster kind hosting Planner grains.
func Kind(cfg Config) *cluster.Kind {
	panic("actors/planner: Kind not built yet")
}
