// Package planner is `turbine planner`: a cluster member that hosts the Planner grains
// (actors/planner), one per model, as `turbine frontend` hosts the Router grains. Each
// grain merges the reports of every frontend (`turbine frontend` reports while a planner
// runs), decides every period how many workers each pool of its model needs, and has its
// connector start and drain them: node agents (`turbine node`) on the cluster's members
// (--connector local), the Deployments or StatefulSets of a Kubernetes namespace
// (--connector kubernetes) or an external system fed with the decisions (--connector
// virtual). `GET /admin/planner` on any frontend explains the latest decision
// (docs/reference.md §27).
//
//	turbine planner --mode load --gpu-budget 8 --discovery consul://10.0.0.5:8500
//	turbine planner --mode sla --planner-profile h100.json --ttft-target 300 --itl-target 40 --disaggregated
package planner

import (
	"context"
	"flag"
	"io"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// Options are the planner's flags, with their defaults.
type Options struct {
	options.Planner
	options.Cluster
	options.Log
}

// Defaults are the embedded defaults: load mode, the local connector.
func Defaults() Options {
	o := Options{Planner: options.DefaultPlanner(), Cluster: options.DefaultCluster(), Log: options.DefaultLog()}
	o.Mode = "load"
	return o
}

func flags(o *Options, fs *flag.FlagSet) {
	o.Planner.Flags(fs, "planner")
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	for _, err := range []error{o.Planner.Validate(), o.Cluster.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Run is `turbine planner`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	return options.Main(ctx, options.Command{Name: "planner",
		Summary: "Runs the planner: a cluster member that sizes every model's worker pools to its load and starts and drains workers.",
		Example: "TURBINE_MODE=sla TURBINE_PLANNER_PROFILE=profile.json", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return run(ctx, o, log) })
}

func run(ctx context.Context, o Options, log zerolog.Logger) error {
	pm, err := o.Member(o.Disaggregated, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := pm.Close(); err != nil {
			log.Warn().Err(err).Msg("planner: closing the connector")
		}
	}()
	cfg := o.Cluster.Config([]*pcluster.Kind{pm.Kind}, log)
	return options.RunMember(ctx, cfg, log, func(mctx context.Context, m *cluster.Member) error {
		pm.Bind(m.Cluster)
		log.Info().Str("member", m.ID()).Str("discovery", o.Discovery).Str("mode", o.Mode).Str("connector", o.Connector).
			Float64("ttft_target_ms", o.TTFTTargetMs).Float64("itl_target_ms", o.ITLTargetMs).Int("gpu_budget", o.GPUBudget).
			Int("min_workers", o.MinWorkers).Dur("period", o.Period()).Bool("disaggregated", o.Disaggregated).
			Msg("turbine planner joined the cluster")
		<-mctx.Done()
		return nil
	})
}
