// Package serve is `turbine serve`: a whole Turbine service in one process — a gateway on
// an HTTP port, the Router and Catalog grains, and worker actors each supervising its
// own mock-engine subprocess — on an in-process cluster (no Consul needed).
//
// Workers are aggregated (--workers, named w0, w1, …), or, for disaggregated serving
// (xPyD), prefill (--prefill-workers, p0, p1, …) and decode (--decode-workers, d0, d1,
// …) workers; with prefill or decode workers and --workers not given, there are no
// aggregated ones.
//
// With --planner load|sla the process also runs the planner (docs/reference.md §27): an
// in-process node agent (actors/node, CPU only) starts every worker — the boot workers
// above, then those the planner's local connector asks for (named local-0, local-1, …)
// — and drains the ones it removes; the member hosts the Planner kind, and the gateway
// reports its measurements to it.
//
// With --kvbm the process also runs a KV block manager (docs/reference.md §9.5) for the
// node "local" that every worker belongs to; GET /admin/kvbm shows it.
package serve

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/frontend"
	nodeactor "github.com/turbine-llm/turbine/actors/node"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/cmd/turbine/kvbm"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
	"github.com/turbine-llm/turbine/tracing"
)

// Options are serve's flags, with their defaults.
type Options struct {
	options.HTTP
	options.Engine
	options.Router
	options.Disagg
	options.Migration
	options.LoraRouting
	options.Lora
	options.Admission
	options.Canary
	options.Log
	// Kvbm: --kvbm, a KV block manager in this process (docs/reference.md §9.5), serving
	// the node "local" whose workers are all of serve's.
	Kvbm options.Kvbm
	// Workers, PrefillWorkers, DecodeWorkers: workers of each role (aggregated, prefill,
	// decode). WorkersSet says whether --workers was given.
	Workers, PrefillWorkers, DecodeWorkers int
	WorkersSet                             bool
	// MockerDialect is the mock engines' HTTP dialect: "" or vllm, sglang, trtllm
	// (--mocker-dialect, as on turbine node); the workers use that engine's client.
	MockerDialect string
	// MockerKVEvents: the mock engines publish KV events (--mocker-kv-events); without
	// them the router routes the workers approximately (docs/reference.md §3.4).
	MockerKVEvents bool
	// Planner: --planner and its flags; Reports: how often the gateway reports to it.
	Planner options.Planner
	Reports options.PlannerReports
	// Tracing: --otlp-endpoint and its flags (docs/tracing.md).
	Tracing options.Tracing
}

// Defaults are the embedded defaults (docs/reference.md §3, §7).
func Defaults() Options {
	return Options{HTTP: options.DefaultHTTP(), Engine: options.DefaultEngine(), Router: options.DefaultRouter(), Disagg: options.DefaultDisagg(), Migration: options.DefaultMigration(),
		LoraRouting: options.DefaultLoraRouting(), Lora: options.DefaultLora(), Admission: options.DefaultAdmission(), Canary: options.DefaultCanary(), Log: options.DefaultLog(), Workers: 2,
		MockerKVEvents: true, Planner: options.DefaultPlanner(), Reports: options.DefaultPlannerReports(), Kvbm: options.DefaultKvbm(),
		Tracing: options.DefaultTracing()}
}

func flags(o *Options, fs *flag.FlagSet) {
	o.HTTP.Flags(fs)
	options.IntVarTracked(fs, &o.Workers, &o.WorkersSet, "workers",
		"number of aggregated workers, each with its own mock engine (0 when --prefill-workers or --decode-workers is given without it)")
	fs.IntVar(&o.PrefillWorkers, "prefill-workers", o.PrefillWorkers, "number of prefill workers (disaggregated serving, xPyD)")
	fs.IntVar(&o.DecodeWorkers, "decode-workers", o.DecodeWorkers, "number of decode workers (disaggregated serving, xPyD)")
	fs.StringVar(&o.MockerDialect, "mocker-dialect", o.MockerDialect,
		"HTTP dialect of the mock engines: vllm (default), sglang or trtllm; the workers use that engine's client")
	fs.BoolVar(&o.MockerKVEvents, "mocker-kv-events", o.MockerKVEvents,
		"the mock engines publish KV events; false starts them without, and the router routes the workers on its own record of what it placed (approximate index mode)")
	o.Engine.Flags(fs)
	o.Router.Flags(fs)
	o.Disagg.Flags(fs)
	o.Migration.Flags(fs)
	o.LoraRouting.Flags(fs)
	o.Lora.Flags(fs)
	o.Admission.Flags(fs)
	o.Canary.Flags(fs)
	o.Log.Flags(fs)
	o.Planner.Flags(fs, "serve")
	o.Reports.Flags(fs, false)
	o.Kvbm.Flags(fs, true, false)
	o.Tracing.Flags(fs)
}

// Validate checks the options and settles the layout (--workers is 0 by default in an
// xPyD layout); errors name the flag. With --planner the planner plans workers of
// --mocker-tensor-parallel-size GPUs (an SLA profile must have that size), and the
// workers started at boot must fit --gpu-budget.
func (o *Options) Validate() error {
	switch {
	case o.PrefillWorkers < 0 || o.PrefillWorkers > 256:
		return fmt.Errorf("--prefill-workers %d: want 0..256", o.PrefillWorkers)
	case o.DecodeWorkers < 0 || o.DecodeWorkers > 256:
		return fmt.Errorf("--decode-workers %d: want 0..256", o.DecodeWorkers)
	}
	disagg := o.PrefillWorkers+o.DecodeWorkers > 0
	if disagg && !o.WorkersSet {
		o.Workers = 0
	}
	switch {
	case !disagg && (o.Workers < 1 || o.Workers > 256):
		return fmt.Errorf("--workers %d: want 1..256 (or an xPyD layout with --prefill-workers and --decode-workers)", o.Workers)
	case o.Workers < 0 || o.Workers > 256:
		return fmt.Errorf("--workers %d: want 0..256", o.Workers)
	case o.Workers+o.PrefillWorkers+o.DecodeWorkers > 256:
		return fmt.Errorf("--workers %d + --prefill-workers %d + --decode-workers %d: want 256 workers at most",
			o.Workers, o.PrefillWorkers, o.DecodeWorkers)
	case o.PrefillWorkers > 0 && o.Workers+o.DecodeWorkers == 0:
		return fmt.Errorf("--prefill-workers %d without --decode-workers or --workers: nothing would decode", o.PrefillWorkers)
	}
	var disaggFlags []string
	for _, f := range []struct {
		name string
		n    int
	}{{"--prefill-workers", o.PrefillWorkers}, {"--decode-workers", o.DecodeWorkers}} {
		if f.n > 0 {
			disaggFlags = append(disaggFlags, fmt.Sprintf("%s %d", f.name, f.n))
		}
	}
	o.Planner.Disaggregated = disagg
	// The planner sizes pools of workers that each play --mocker-tensor-parallel-size GPUs.
	o.Planner.TensorParallelSize = max(o.MockerTensorParallelSize, 1)
	for _, err := range []error{options.CheckMockerDialect(o.MockerDialect), o.HTTP.Validate(), o.Engine.Validate(), o.Engine.CheckKVLoadFailurePolicy(o.MockerDialect),
		o.Engine.CheckPoolingLayout("--mocker-dialect", o.MockerDialect, disaggFlags...),
		o.Router.Validate(), o.Disagg.Validate(), o.Migration.Validate(), o.Admission.Validate(), o.Canary.Validate(),
		o.Lora.Validate(), o.Planner.Validate(), o.Reports.Validate(), o.Kvbm.Validate(), o.Tracing.Validate()} {
		if err != nil {
			return err
		}
	}
	layout := fmt.Sprintf("--workers %d", o.Workers)
	if disagg {
		layout = fmt.Sprintf("--workers %d + --prefill-workers %d + --decode-workers %d", o.Workers, o.PrefillWorkers, o.DecodeWorkers)
	}
	return o.Planner.CheckStartWorkers(o.Workers+o.PrefillWorkers+o.DecodeWorkers, layout)
}

// Run is `turbine serve`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	return options.Main(ctx, options.Command{Name: "serve",
		Summary: "Runs a whole service in one process: gateway, router and mock-engine workers.",
		Example: "TURBINE_WORKERS=4 (or TURBINE_PREFILL_WORKERS=1 TURBINE_DECODE_WORKERS=2)", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return serve(ctx, o, log) })
}

func serve(ctx context.Context, o Options, log zerolog.Logger) error {
	card, err := o.Engine.Card()
	if err != nil {
		return err
	}
	// Every worker runs the mock engine, named so in the card as a node names its
	// engine: answers that name the model's engine (an engine's refusal) read it.
	card.Engine = engines.NameMocker
	if note := options.ParserNote(card); note != "" {
		log.Info().Str("model", card.Model).Msg("output parsing: " + note)
	}
	if err := o.Lora.CheckAdapters(card, ""); err != nil {
		return err
	}
	// Bind the HTTP port first: a taken port fails fast, before any engine starts.
	// The API's listener, and the admin listener with --admin-port; HTTPS with --tls-cert
	// (docs/tls.md).
	ls, err := o.HTTP.ListenAll(log)
	if err != nil {
		return err
	}
	defer ls.Close()
	ln := ls.Main
	stopTracing, err := o.Tracing.Start(ctx, tracing.ServiceServe, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	rcfg := o.Router.Config(o.BlockSize, log)
	rcfg.Busy = o.Admission.Busy()
	rcfg.Disagg = o.Disagg.Config()
	kinds := []*pcluster.Kind{router.Kind(rcfg), catalog.Kind()}
	var pm *options.PlannerMember
	if o.Planner.Enabled() {
		// A virtual connector starts from serve's own boot layout, not from no worker.
		o.Planner.VirtualInitial = o.bootPools()
		if pm, err = o.Planner.Member(o.Planner.Disaggregated, log); err != nil {
			return err
		}
		defer pm.Close()
		kinds = append(kinds, pm.Kind)
	}
	member, err := cluster.Start(cluster.Config{Name: "turbine-serve", Discovery: "local", Logger: log, Kinds: kinds})
	if err != nil {
		return err
	}
	defer member.Stop()
	if pm != nil {
		pm.Bind(member.Cluster)
	}

	self, err := options.MockerExecutable()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// The workers belong to the node "local" when a node agent runs them (--planner) or
	// its block manager serves them (--kvbm).
	workerNode, kvbmEnds := "", options.Endpoints{}
	if o.Planner.Enabled() || o.Kvbm.Enabled {
		workerNode = nodeName
	}
	if o.Kvbm.Enabled {
		var stopKvbm func()
		cfg := o.Kvbm.ManagerConfig(nodeName, nil, log)
		release, err := o.Kvbm.Bind(&cfg) // errors name the flag
		if err != nil {
			return err
		}
		stopKvbm, kvbmEnds, err = kvbm.Start(member, cfg, log)
		if err != nil {
			release()
			return o.Kvbm.OpenError(err)
		}
		defer stopKvbm()
	}
	routerClient, catalogClient := worker.GrainClients(member.Cluster, o.Model, catalog.Identity,
		worker.GrainTimeout(o.Heartbeat))
	root := member.System.Root
	// newWorker builds the props of one worker of role: its own mock engine.
	newWorker := func(id, role string) (*actor.Props, error) {
		cfg := o.Engine.MockerFor(self, card, role)
		cfg.Params.Dialect = server.DialectName(o.MockerDialect)
		cfg.NoKVEvents = !o.MockerKVEvents
		cfg.KvbmURL = kvbmEnds.RESP // offload evicted blocks to the block manager ("" without --kvbm)
		o.Lora.SetMocker(&cfg)
		mock, err := launch.New(cfg)
		if err != nil {
			return nil, err
		}
		wcfg := worker.Config{WorkerID: id, NodeID: workerNode, Card: card, Launcher: mock,
			Role: role, Heartbeat: o.Heartbeat, ReadyTimeout: o.ReadyTimeout, CanaryInterval: o.CanaryInterval,
			Router: routerClient, Catalog: catalogClient, Logger: log}
		o.Lora.SetWorker(&wcfg, true)
		return worker.Props(wcfg)
	}
	var pids []*actor.PID
	var node *actor.PID // the node agent that runs the workers with --planner
	drained := false
	defer func() {
		if !drained {
			for _, pid := range pids {
				_ = root.PoisonFuture(pid).Wait()
			}
		}
		if node != nil {
			_ = root.PoisonFuture(node).Wait()
		}
	}()
	if o.Planner.Enabled() {
		if node, err = startNode(root, card, newWorker, o.layout(), log); err != nil {
			return err
		}
	} else {
		for _, w := range o.layout() {
			props, err := newWorker(w.id, w.role)
			if err != nil {
				return err
			}
			pid, err := root.SpawnNamed(props, worker.ActorName(w.id))
			if err != nil {
				return fmt.Errorf("spawn worker %s: %w", w.id, err)
			}
			pids = append(pids, pid)
		}
	}

	fcfg := frontend.Config{Logger: log, MigrationLimit: o.MigrationLimit, AcceptTimeout: o.FrontendAcceptTimeout(),
		Busy: o.Admission.Busy(), LoraOnDemand: o.LoraOnDemand}
	if o.Planner.Enabled() {
		// At least two reports per planner period, so that each decision has some.
		fcfg.PlannerReports, fcfg.PlannerReportInterval = frontend.PlannerReportsOn, min(o.Reports.Interval, o.Planner.Period()/2)
	}
	backend := frontend.New(member.Cluster, fcfg)
	handler, err := gateway.New(o.Admission.Gateway(o.HTTP.Gateway(gateway.Config{Logger: log, Observer: backend.PlannerObserver()})), backend)
	if err != nil {
		return err
	}
	go backend.RunPlannerReports(ctx)
	// Answer only once the model is served, so that the first client never sees a 404
	// for a model whose engines are still starting; connections wait in the backlog.
	log.Info().Int("workers", o.Workers).Int("prefill_workers", o.PrefillWorkers).Int("decode_workers", o.DecodeWorkers).
		Msg("waiting for the first worker's engine to be ready")
	deadline := time.Now().Add(o.ReadyTimeout)
	if err := waitForModel(ctx, backend, o.Model, o.ReadyTimeout); err != nil {
		return err
	}
	if o.PrefillWorkers > 0 {
		// An xPyD layout serves as designed once both pools have a ready worker; until
		// then its requests would be prefilled on their decode workers.
		if err := waitForPools(ctx, backend, o.Model, deadline); err != nil {
			what := "requests are prefilled on their decode workers until a prefill worker is"
			if o.EnforceDisagg {
				what = "requests that need a prefill worker get 503 until one is (--enforce-disagg)"
			}
			log.Warn().Err(err).Msg("serving before both pools are ready: " + what)
		}
	}
	log.Info().Str("url", ls.URL()).Str("admin_url", ls.AdminURL()).Str("model", o.Model).Int("workers", o.Workers).
		Int("prefill_workers", o.PrefillWorkers).Int("decode_workers", o.DecodeWorkers).
		Str("router_mode", o.RouterMode).Bool("api_key_required", len(o.APIKeys) > 0).Str("planner", o.Planner.Mode).
		Msg("turbine serving")
	return options.ServeDrained(ctx, ln, ls.ServeAdmin(handler, log), log, func() {
		drained = true
		if pm != nil {
			// The planner starts no worker from now on: every worker the node agent
			// runs when the drain begins is drained with --drain-timeout.
			pm.Stop()
		}
		stop := func() { drainWorkers(root, pids, o.DrainTimeout) }
		if node != nil {
			// The node agent drains its workers, so that it knows their end is asked for.
			stop = func() {
				if err := nodeactor.StopWorkers(root, node, o.DrainTimeout, o.DrainTimeout+nodeactor.DefaultDrainOverrun+5*time.Second); err != nil {
					log.Warn().Err(err).Msg("draining the node agent's workers")
				}
			}
		}
		drain(handler, stop, log)
	})
}

// nodeName is the node id of serve's in-process node agent: the workers the planner
// starts are named local-0, local-1, ….
const nodeName = "local"

// startNode spawns the in-process node agent (CPU only: mock engines) whose workers
// newWorker builds, and has it start the boot workers of layout. Its own workers (a
// StartWorker without engine and card, as the planner's local connector sends) run the
// mock engine with card.
func startNode(root *actor.RootContext, card *messages.ModelCard, newWorker func(id, role string) (*actor.Props, error),
	layout []workerSpec, log zerolog.Logger) (*actor.PID, error) {
	props, err := nodeactor.Props(nodeactor.Config{NodeID: nodeName, CPUOnly: true, Logger: log,
		Defaults: &messages.StartWorker{Engine: nodeactor.MockerEngine, Card: card},
		NewWorker: func(id string, req *messages.StartWorker, _ []int) (*actor.Props, error) {
			return newWorker(id, req.GetRole())
		}})
	if err != nil {
		return nil, err
	}
	pid, err := root.SpawnNamed(props, nodeactor.ActorName)
	if err != nil {
		return nil, fmt.Errorf("spawn node agent: %w", err)
	}
	for _, w := range layout {
		res, err := root.RequestFuture(pid, &messages.StartWorker{WorkerId: w.id, Role: w.role}, 10*time.Second).Result()
		reply, _ := res.(*messages.StartWorkerReply)
		switch {
		case err != nil:
			return pid, fmt.Errorf("start worker %s: %w", w.id, err)
		case reply == nil || reply.Error != "":
			return pid, fmt.Errorf("start worker %s: %s", w.id, reply.GetError())
		}
	}
	return pid, nil
}

// workerSpec is one worker of the layout: its id and role.
type workerSpec struct{ id, role string }

// bootPools counts the boot workers per planner pool (aggregated, prefill, decode; pools
// without a worker left out).
func (o *Options) bootPools() map[core.Pool]int {
	out := map[core.Pool]int{}
	for _, w := range o.layout() {
		if p, err := core.ParsePool(w.role); err == nil { // every layout role is a pool
			out[p]++
		}
	}
	return out
}

// layout lists the workers to start: aggregated w0…, prefill p0…, decode d0….
func (o *Options) layout() []workerSpec {
	var out []workerSpec
	for _, g := range []struct {
		n            int
		prefix, role string
	}{{o.Workers, "w", "aggregated"}, {o.PrefillWorkers, "p", "prefill"}, {o.DecodeWorkers, "d", "decode"}} {
		for i := range g.n {
			out = append(out, workerSpec{id: fmt.Sprintf("%s%d", g.prefix, i), role: g.role})
		}
	}
	return out
}

// drain shuts the service down gracefully (docs/reference.md §10): the gateway refuses new
// requests, stopWorkers has every worker leave routing and let its requests run for the
// drain grace, then end the rest as migratable and stop with its engine; the gateway
// waits until the last answer is written.
func drain(handler *gateway.Server, stopWorkers func(), log zerolog.Logger) {
	handler.Drain()
	stopWorkers()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := handler.WaitIdle(ctx); err != nil {
		log.Warn().Msg("requests still answering 5 s after the workers stopped; closing their connections")
	}
}

// drainWorkers drains the workers at pids at once (worker.DrainAndStop: their requests
// run for grace) and returns once every one has stopped.
func drainWorkers(root *actor.RootContext, pids []*actor.PID, grace time.Duration) {
	var wg sync.WaitGroup
	for _, pid := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker.DrainAndStop(root, pid, grace)
		}()
	}
	wg.Wait()
}

// waitForPools waits until model has a ready prefill worker and a ready decode worker.
// Errors: the deadline passed first (naming the ready workers by role), or ctx ended.
func waitForPools(ctx context.Context, b *frontend.Backend, model string, deadline time.Time) error {
	var ready map[string]int
	return pollUntil(ctx, deadline, func() bool {
		var err error
		ready, err = b.ReadyWorkers(model)
		return err == nil && ready["prefill"] > 0 && ready["decode"] > 0
	}, func() error {
		return fmt.Errorf("no ready prefill and decode worker within --ready-timeout (ready by role: %v)", ready)
	})
}

// waitForModel polls the catalog until model has a live worker, ctx ends, or limit passes.
func waitForModel(ctx context.Context, b *frontend.Backend, model string, limit time.Duration) error {
	return pollUntil(ctx, time.Now().Add(limit), func() bool {
		cards, err := b.Models(ctx)
		return err == nil && slices.ContainsFunc(cards, func(c *messages.ModelCard) bool { return c.Model == model })
	}, func() error {
		return fmt.Errorf("no worker became ready within --ready-timeout %v (see the engine log lines above)", limit)
	})
}

// pollUntil checks done every 50 ms until it holds (nil), deadline passes (late's error)
// or ctx ends (its error). The cluster's state has no event to wait on here.
func pollUntil(ctx context.Context, deadline time.Time, done func() bool, late func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if done() {
			return nil
		}
		if time.Now().After(deadline) {
			return late()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
