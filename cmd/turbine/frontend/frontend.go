// Package frontend is `turbine frontend`: a cluster member that serves the OpenAI HTTP
// API for every model in the cluster and hosts Router and Catalog grains. Workers run on
// `turbine node` members; members find each other through Consul (or in-process with
// --discovery local). Any number of frontends may run: each serves every model.
package frontend

import (
	"context"
	"flag"
	"io"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	fe "github.com/turbine-llm/turbine/actors/frontend"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/tracing"
)

// Options are the frontend's flags, with their defaults.
type Options struct {
	options.HTTP
	options.Router
	options.Disagg
	options.Migration
	options.LoraRouting
	options.Admission
	options.Cluster
	options.Log
	ModelCacheDir string
	// Reports: --planner-reports and --planner-report-interval (docs/reference.md §27.7).
	Reports options.PlannerReports
	// Tracing: --otlp-endpoint and its flags (docs/tracing.md).
	Tracing options.Tracing
}

// Defaults are the embedded defaults.
func Defaults() Options {
	return Options{HTTP: options.DefaultHTTP(), Router: options.DefaultRouter(), Disagg: options.DefaultDisagg(), Migration: options.DefaultMigration(), LoraRouting: options.DefaultLoraRouting(), Admission: options.DefaultAdmission(), Cluster: options.DefaultCluster(),
		Log: options.DefaultLog(), Reports: options.DefaultPlannerReports(), Tracing: options.DefaultTracing()}
}

func flags(o *Options, fs *flag.FlagSet) {
	o.HTTP.Flags(fs)
	o.Router.Flags(fs)
	o.Disagg.Flags(fs)
	o.Migration.Flags(fs)
	o.LoraRouting.Flags(fs)
	o.Admission.Flags(fs)
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
	fs.StringVar(&o.ModelCacheDir, "model-cache-dir", o.ModelCacheDir, "where tokenizer files fetched from workers are kept, one folder per digest (default $TURBINE_CACHE_DIR/models or ~/.cache/turbine/models)")
	o.Reports.Flags(fs, true)
	o.Tracing.Flags(fs)
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	for _, err := range []error{o.HTTP.Validate(), o.Router.Validate(), o.Disagg.Validate(), o.Migration.Validate(), o.Admission.Validate(), o.Cluster.Validate(), o.Reports.Validate(), o.Tracing.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Run is `turbine frontend`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	return options.Main(ctx, options.Command{Name: "frontend",
		Summary: "Serves the OpenAI API for every model of the cluster and hosts its routers.",
		Example: "TURBINE_DISCOVERY=consul://10.0.0.5:8500", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return run(ctx, o, log) })
}

func run(ctx context.Context, o Options, log zerolog.Logger) error {
	// The member outlives the end of ctx (SIGTERM) until the gateway has drained.
	memberCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// The API's listener, and the admin listener with --admin-port; HTTPS with --tls-cert
	// (docs/tls.md).
	ls, err := o.HTTP.ListenAll(log)
	if err != nil {
		return err
	}
	defer ls.Close()
	ln := ls.Main
	stopTracing, err := o.Tracing.Start(ctx, tracing.ServiceFrontend, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	rcfg := o.Router.Config(0, log)
	rcfg.Busy = o.Admission.Busy()
	rcfg.Disagg = o.Disagg.Config()
	kinds := []*pcluster.Kind{router.Kind(rcfg), catalog.Kind()}
	cfg := o.Cluster.Config(kinds, log)

	// The HTTP server outlives member restarts: one gateway (and one set of metrics) over
	// a backend that moves to each new member.
	var backend *fe.Backend
	started := make(chan error, 1)
	memberErr := make(chan error, 1)
	go func() {
		memberErr <- options.RunMember(memberCtx, cfg, log, func(mctx context.Context, m *cluster.Member) error {
			if backend == nil {
				backend = fe.New(m.Cluster, fe.Config{Logger: log, ModelCacheDir: o.ModelCacheDir, MigrationLimit: o.MigrationLimit,
					AcceptTimeout: o.FrontendAcceptTimeout(), Busy: o.Admission.Busy(), LoraOnDemand: o.LoraOnDemand, PlannerReports: o.Reports.Mode(),
					PlannerReportInterval: o.Reports.Interval})
				started <- nil
			} else {
				backend.SetCluster(m.Cluster)
			}
			log.Info().Str("member", m.ID()).Str("discovery", o.Discovery).Msg("frontend member joined the cluster")
			<-mctx.Done()
			return nil
		})
	}()
	select {
	case <-started:
	case err := <-memberErr:
		return err
	case <-ctx.Done():
		return nil
	}
	// Tokenizer files a node has and this machine lacks are fetched from a worker once,
	// verified against the card's digest and cached.
	handler, err := gateway.New(o.Admission.Gateway(o.HTTP.Gateway(gateway.Config{Logger: log, Observer: backend.PlannerObserver()})), backend,
		gateway.WithModelLoader(backend.ModelLoader()))
	if err != nil {
		return err
	}
	// Reports go to the Planner grains while one runs (--planner-reports auto), until the
	// member stops.
	go backend.RunPlannerReports(memberCtx)
	log.Info().Str("url", ls.URL()).Str("admin_url", ls.AdminURL()).Str("router_mode", o.RouterMode).Bool("api_key_required", len(o.APIKeys) > 0).Msg("turbine frontend serving")
	// On SIGTERM: new requests get 503, those in flight run for --drain-timeout.
	serveErr := options.ServeDrained(ctx, ln, ls.ServeAdmin(handler, log), log, func() {
		handler.Drain()
		dctx, dcancel := context.WithTimeout(context.Background(), o.DrainTimeout)
		defer dcancel()
		if err := handler.WaitIdle(dctx); err != nil {
			log.Warn().Dur("drain_timeout", o.DrainTimeout).Msg("requests still running after --drain-timeout; closing their connections")
		}
	})
	cancel()
	if err := <-memberErr; err != nil && serveErr == nil {
		return err
	}
	return serveErr
}
