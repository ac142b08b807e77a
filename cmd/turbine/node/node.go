// Package node is `turbine node`: the cluster member of one machine. Its node agent owns
// the machine's GPUs (found through NVML; CPU mode without a driver) and starts worker
// actors pinned to disjoint GPU sets (CUDA_VISIBLE_DEVICES), each supervising its engine
// subprocess: the mock engine (`turbine mocker`), vLLM, SGLang or trtllm-serve, launched
// by the launcher engines/registry names. Routers and gateways run on `turbine frontend`
// members.
//
//	turbine node --engine vllm --model /models/Qwen3-8B [flags] [-- <engine arguments>]
//
// Arguments after "--" reach every boot worker's engine untouched. With --model a model
// folder, the model deployment card comes from it (model). Real engines take
// --tensor-parallel-size GPUs each (default 1) and are refused on a machine without an
// NVIDIA driver.
//
// Testing without GPUs: the environment variable TURBINE_FAKE_GPUS=<n> replaces NVML
// discovery with n fake GPUs, so that the node agent places real engines (which then see
// CUDA_VISIBLE_DEVICES naming devices that do not exist). It is meant for tests that run
// stand-in engine executables; the node logs a warning when it is set.
//
// KV block manager (docs/reference.md §9.5): with --kvbm the node serves a block manager
// for its whole life (each cluster member in turn runs the actor that publishes its
// inventory), and its vLLM engines are started with LMCache pointed at it; with
// --kvbm-external one runs on its own (`turbine kvbm --node-id <node>`). Every worker
// registers with the node's id (WorkerInfo.node_id) either way.
package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	kvbmactor "github.com/turbine-llm/turbine/actors/kvbm"
	nodeactor "github.com/turbine-llm/turbine/actors/node"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/cmd/turbine/kvbm"
	"github.com/turbine-llm/turbine/cmd/turbine/node/nodehttp"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/registry"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
	"github.com/turbine-llm/turbine/tracing"
	"google.golang.org/protobuf/proto"
)

// Options are the node's flags, with their defaults.
type Options struct {
	options.Engine
	options.Launch
	options.Cluster
	options.Log
	options.Canary
	options.Lora
	options.Kvbm
	DrainTimeout       time.Duration
	NodeID             string
	Workers            int
	EngineName         string
	TensorParallelSize int
	// WorkerRole is the disaggregated-serving role of every worker the node starts:
	// "aggregated", "prefill" or "decode".
	WorkerRole string
	// EngineArgs are the arguments after "--", appended to the boot workers' engines.
	EngineArgs []string
	// HTTP is the node's /live, /health and /metrics port (--http-host, --http-port;
	// docs/metrics.md).
	HTTP options.NodeHTTP
	// EngineHost is the address the engines' HTTP servers listen on (--engine-host);
	// WorkerInfo.engine_url advertises it, or --advertise-host (else --member-host) when
	// it binds every address.
	EngineHost string
	// EnginePort is the first engine's HTTP port (--engine-port); each worker takes the
	// lowest free one from it. 0: a free port at each engine start.
	EnginePort int
	// Tracing: --otlp-endpoint and its flags (docs/tracing.md): the workers' spans and the
	// traceparent header of their engine requests.
	Tracing options.Tracing
}

// Defaults are the embedded defaults: two mock workers, no GPU each.
func Defaults() Options {
	host, _ := os.Hostname()
	return Options{Engine: options.DefaultEngine(), Launch: options.DefaultLaunch(), Cluster: options.DefaultCluster(),
		Log: options.DefaultLog(), Canary: options.DefaultCanary(), Lora: options.DefaultLora(), Kvbm: options.DefaultKvbm(), DrainTimeout: options.DefaultDrainTimeout,
		NodeID: host, Workers: 2, EngineName: launcher.EngineMocker, WorkerRole: "aggregated", HTTP: options.DefaultNodeHTTP(), EngineHost: worker.DefaultHost, Tracing: options.DefaultTracing()}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "node name, unique in the cluster; workers are named <node-id>-<n> (set it when several nodes share a machine; the default is the host name)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "workers started at boot (0: none until asked)")
	fs.StringVar(&o.EngineName, "engine", o.EngineName, "engine of the workers started at boot: "+strings.Join(registry.Default.Names(), ", "))
	fs.IntVar(&o.TensorParallelSize, "tensor-parallel-size", o.TensorParallelSize, "GPUs pinned to each worker started at boot (0: none for the mocker, 1 for real engines)")
	fs.StringVar(&o.WorkerRole, "worker-role", o.WorkerRole, "role of every worker this node starts in disaggregated serving: aggregated, prefill or decode (the engines are started for it)")
	o.Engine.Flags(fs)
	fs.Lookup("model").Usage = "model folder (or hub name) the engines load; with a folder the model card comes from its config.json and tokenizer files. The mocker serves it as its model name"
	o.Launch.Flags(fs)
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
	o.Canary.Flags(fs)
	o.Lora.Flags(fs)
	o.Kvbm.Flags(fs, true, true)
	o.Tracing.Flags(fs)
	o.HTTP.Flags(fs)
	fs.StringVar(&o.EngineHost, "engine-host", o.EngineHost, "address the engines' HTTP servers listen on; WorkerInfo.engine_url advertises it "+
		"(or --advertise-host, else --member-host, when it is 0.0.0.0 or ::); 0.0.0.0 lets a gateway on another host reach the engines directly")
	fs.IntVar(&o.EnginePort, "engine-port", o.EnginePort, "first engine's HTTP port: each worker's engine listens on the lowest free port from it and keeps it across restarts, "+
		"so that a gateway's InferencePool targetPorts can name it (0: a free port at each engine start)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout,
		"on SIGTERM, how long the workers' requests in flight may run to their end (they leave routing at once) before the rest are ended as migratable")
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	switch {
	case o.NodeID == "":
		return errors.New("--node-id: empty (and the host name is unknown)")
	case o.Workers < 0 || o.Workers > 256:
		return fmt.Errorf("--workers %d: want 0..256", o.Workers)
	case !slices.Contains(registry.Default.Names(), o.EngineName):
		return fmt.Errorf("--engine %q: want %s", o.EngineName, strings.Join(registry.Default.Names(), ", "))
	case o.TensorParallelSize < 0 || o.TensorParallelSize > 64:
		return fmt.Errorf("--tensor-parallel-size %d: want 0..64", o.TensorParallelSize)
	}
	if o.EngineHost == "" {
		return errors.New("--engine-host: empty")
	}
	if o.EnginePort < 0 || o.EnginePort > 65535 {
		return fmt.Errorf("--engine-port %d: want 0..65535", o.EnginePort)
	}
	if err := o.HTTP.Validate(); err != nil {
		return err
	}
	role, err := options.ParseWorkerRole("--worker-role", o.WorkerRole)
	if err != nil {
		return err
	}
	o.WorkerRole = role
	if o.DrainTimeout < 0 {
		return fmt.Errorf("--drain-timeout %v: must be ≥ 0", o.DrainTimeout)
	}
	var disaggFlags []string
	if role != "aggregated" {
		disaggFlags = []string{"--worker-role " + role}
	}
	engineFlag, engine := "--engine", o.EngineName
	if engine == launcher.EngineMocker {
		engineFlag, engine = "--mocker-dialect", o.MockerDialect
	}
	for _, err := range []error{o.Engine.Validate(), o.Launch.Validate(), o.Engine.CheckKVLoadFailurePolicy(o.MockerDialect),
		o.Engine.CheckPoolingLayout(engineFlag, engine, disaggFlags...), o.Cluster.Validate(), o.Canary.Validate(), o.Lora.Validate(), o.Kvbm.Validate(), o.Tracing.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// bootTensorParallelSize is the GPUs of each boot worker: real engines need at least one.
func (o *Options) bootTensorParallelSize() int {
	if registry.Real(o.EngineName) && o.TensorParallelSize == 0 {
		return 1
	}
	return o.TensorParallelSize
}

// splitEngineArgs splits a command line at the first "--": turbine's flags before it, the
// engine's arguments after it.
func splitEngineArgs(args []string) (flags, engine []string) {
	if i := slices.Index(args, "--"); i >= 0 {
		return args[:i], slices.Clone(args[i+1:])
	}
	return args, nil
}

// Run is `turbine node`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	args, o.EngineArgs = splitEngineArgs(args)
	return options.Main(ctx, options.Command{Name: "node",
		Summary: "Runs one machine's node agent and its workers. Arguments after -- go to the engines untouched.",
		Example: "TURBINE_NODE_ID=gpu-7", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return run(ctx, o, log) })
}

// run starts the node: its model card, GPU discovery, then the cluster member with the
// node agent, until ctx ends.
func run(ctx context.Context, o Options, log zerolog.Logger) error {
	card, err := o.Engine.NodeCard(o.EngineName, o.Launch)
	if err != nil {
		return err
	}
	if note := options.ParserNote(card); note != "" {
		log.Info().Str("model", card.Model).Msg("output parsing: " + note)
	}
	// The mock engine runs as this binary; a real-engine node needs it only for
	// StartWorker requests that ask for the mocker, which fail with this error.
	self, selfErr := options.MockerExecutable()
	if selfErr != nil && !registry.Real(o.EngineName) {
		return fmt.Errorf("node: %w", selfErr)
	}
	gpus, cpuOnly := discover(log, os.Getenv(FakeGPUsEnv))
	// Boot workers this machine cannot place fail here, before the node joins the cluster.
	if need := o.bootTensorParallelSize() * o.Workers; need > len(gpus) {
		why := ""
		if cpuOnly {
			why = " (no NVML driver)"
		}
		return fmt.Errorf("--workers %d × --tensor-parallel-size %d needs %d GPUs; this node has %d%s",
			o.Workers, o.bootTensorParallelSize(), need, len(gpus), why)
	}
	b := &builder{o: o, boot: card, self: self, selfErr: selfErr, ports: newEnginePorts(o.EnginePort)}
	var mgr *kvbmactor.Manager
	if o.Kvbm.Enabled {
		// The block manager's ports are bound before the node joins (a taken port fails
		// here, naming its flag); it serves until the node stops, across members
		// (docs/reference.md §10), closed after the engines.
		cfg := o.Kvbm.ManagerConfig(o.NodeID, nil, log)
		release, err := o.Kvbm.Bind(&cfg)
		if err != nil {
			return err
		}
		if mgr, b.kvbm, err = kvbm.Open(cfg, log); err != nil {
			release()
			return o.Kvbm.OpenError(err)
		}
		defer func() { _ = mgr.Close() }()
	}
	// Engines outlive a lost member (docs/reference.md §10); stopped when the node stops.
	b.parking = worker.NewParking()
	defer func() {
		for _, id := range b.parking.StopAll() {
			b.ports.release(id)
		}
	}()
	// A bad --lora fails here, before the node joins the cluster, rather than each worker.
	if err := o.Lora.CheckAdapters(card, b.loraModelPath(o.EngineName, card)); err != nil {
		return err
	}
	log.Info().Str("engine", o.EngineName).Str("worker_role", o.WorkerRole).Str("model", o.Model).Str("served_model_name", card.Model).
		Str("tokenizer", card.Tokenizer).Int32("context_length", card.ContextLength).Int32("kv_block_size", card.KvBlockSize).
		Strs("engine_args", o.EngineArgs).Msg("model card")
	if o.Kvbm.External {
		b.kvbm = o.Kvbm.ExternalEndpoints()
	}
	stopTracing, err := o.Tracing.Start(ctx, tracing.ServiceNode, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	// The HTTP port is bound before the node joins, and outlives a lost member.
	b.board = nodehttp.NewBoard()
	stopHTTP, err := startHTTP(ctx, o, b.board, log)
	if err != nil {
		return err
	}
	defer stopHTTP()
	return options.RunMember(ctx, o.Cluster.Config(nil, log), log, func(mctx context.Context, m *cluster.Member) error {
		if mgr != nil {
			stop, err := kvbm.Publish(m, mgr)
			if err != nil {
				return err
			}
			defer stop()
		}
		return runNode(mctx, o, m, b, gpus, cpuOnly, log)
	})
}

// FakeGPUsEnv names the environment variable that replaces GPU discovery with that many
// fake GPUs (tests of real-engine launches on machines without GPUs).
const FakeGPUsEnv = "TURBINE_FAKE_GPUS"

// fakeGPUs returns n stand-in GPUs, indices 0..n-1.
func fakeGPUs(n int) []nodeactor.GPU {
	gpus := make([]nodeactor.GPU, n)
	for i := range gpus {
		gpus[i] = nodeactor.GPU{Index: i, UUID: fmt.Sprintf("GPU-fake-%d", i), Name: "fake GPU (" + FakeGPUsEnv + ")"}
	}
	return gpus
}

// discover lists the GPUs; without an NVML driver it says so once and returns CPU mode.
// fake, the value of TURBINE_FAKE_GPUS, replaces discovery when set.
func discover(log zerolog.Logger, fake string) ([]nodeactor.GPU, bool) {
	if fake != "" {
		n, err := strconv.Atoi(fake)
		if err == nil && n >= 1 && n <= 64 {
			log.Warn().Int("gpus", n).Msg(FakeGPUsEnv + " is set: placing workers on fake GPUs (tests only; engines see CUDA_VISIBLE_DEVICES of devices that do not exist)")
			return fakeGPUs(n), false
		}
		log.Error().Str(FakeGPUsEnv, fake).Msg("ignored: want a GPU count 1..64")
	}
	gpus, err := nodeactor.DiscoverSystemGPUs()
	switch {
	case errors.Is(err, nodeactor.ErrNoDriver):
		log.Warn().Err(err).Msg("no NVIDIA driver: CPU mode, mock engines only")
		return nil, true
	case err != nil:
		log.Error().Err(err).Msg("GPU discovery failed: CPU mode, mock engines only")
		return nil, true
	}
	for _, g := range gpus {
		log.Info().Int("index", g.Index).Str("uuid", g.UUID).Str("name", g.Name).
			Uint64("memory_bytes", g.MemoryTotalBytes).Msg("GPU")
	}
	return gpus, len(gpus) == 0
}

// completeCard checks a StartWorker's card and fills what the node derives itself: the
// tokenizer digest, so that gateways on other machines can fetch the files.
func completeCard(in *messages.ModelCard) (*messages.ModelCard, error) {
	switch {
	case in.GetKvBlockSize() < 1 || in.GetKvBlockSize() > 4096:
		return nil, fmt.Errorf("card of %q: kv_block_size %d, want 1..4096", in.GetModel(), in.GetKvBlockSize())
	case in.GetTotalKvBlocks() < 1 || in.GetMaxNumSeqs() < 1 || in.GetMaxNumBatchedTokens() < 1 || in.GetContextLength() < 1:
		return nil, fmt.Errorf("card of %q: total_kv_blocks, max_num_seqs, max_num_batched_tokens and context_length must be ≥ 1", in.GetModel())
	}
	card := proto.Clone(in).(*messages.ModelCard)
	if card.Tokenizer == "" {
		card.Tokenizer = options.DefaultEngine().Tokenizer
	}
	if card.TokenizerDigest == "" {
		d, err := model.SourceDigest(card.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("card of %q: tokenizer %q: %w", card.Model, card.Tokenizer, err)
		}
		card.TokenizerDigest = d
	}
	return card, nil
}

// runNode runs the node agent on member m until ctx ends, starting the boot workers.
func runNode(ctx context.Context, o Options, m *cluster.Member, b *builder, gpus []nodeactor.GPU, cpuOnly bool,
	log zerolog.Logger) error {
	// A StartWorker without engine and card (a planner's "one more of this node's
	// workers", docs/reference.md §27.5) starts the boot workers' kind; its role, when
	// given, replaces --worker-role for that worker alone.
	defaults := &messages.StartWorker{Engine: o.EngineName, TensorParallelSize: int32(o.bootTensorParallelSize()),
		Card: b.boot, EngineArgs: o.EngineArgs, Role: o.WorkerRole}
	// The workers of the previous member, when it was lost, start again with their ids
	// on their GPUs, each adopting its parked engine.
	restore := b.parking.Placements()
	props, err := nodeactor.Props(nodeactor.Config{NodeID: o.NodeID, GPUs: gpus, CPUOnly: cpuOnly, Logger: log,
		Defaults: defaults, Parking: b.parking, Restore: restore,
		Released: func(id string) {
			if !b.parking.Holds(id) { // a parked engine keeps its port
				b.ports.release(id)
			}
		},
		NewWorker: func(id string, req *messages.StartWorker, pinned []int) (*actor.Props, error) {
			adopt := b.parking.Take(id)
			cfg, err := b.forRole(req.GetRole()).worker(id, req, pinned)
			if err != nil {
				b.parking.Drop(id)
				return nil, err
			}
			cfg.Router, cfg.Catalog = worker.GrainClients(m.Cluster, cfg.Card.Model, catalog.Identity,
				worker.GrainTimeout(o.Heartbeat))
			cfg.Router = boardRouter{RouterClient: cfg.Router, board: b.board}
			cfg.Logger = log
			cfg.CanaryInterval = o.CanaryInterval
			cfg.Parking, cfg.Adopt = b.parking, adopt
			props, err := worker.Props(cfg)
			if err != nil {
				b.parking.Drop(id)
			}
			return props, err
		}})
	if err != nil {
		return err
	}
	root := m.System.Root
	pid, err := root.SpawnNamed(props, nodeactor.ActorName)
	if err != nil {
		return fmt.Errorf("spawn node agent: %w", err)
	}
	lost := false
	defer func() {
		if lost {
			// Nobody can reach these workers to drain them: they park their engines
			// for the next member, which adopts them.
			b.parking.Open()
		}
		waitStopped(root, pid, log)
		b.parking.Close()
	}()
	attachBoard(b.board, root, pid)
	defer b.board.Detach()
	log.Info().Str("node", o.NodeID).Str("member", m.ID()).Str("address", pid.Address).
		Bool("cpu_only", cpuOnly).Int("gpus", len(gpus)).Msg("node agent joined the cluster")
	boot := o.Workers
	if len(restore) > 0 {
		// The agent started them as it started (each loads its tokenizer): its answer
		// comes after. The previous member's workers replace the boot workers.
		limit := 30*time.Second + time.Duration(len(restore))*15*time.Second
		if _, err := root.RequestFuture(pid, &messages.NodeStatusRequest{}, limit).Result(); err != nil {
			return fmt.Errorf("start the previous member's workers again: %w", err)
		}
		boot = max(0, boot-len(restore))
		log.Info().Int("workers", len(restore)).Msg("the previous member's workers started again")
	}
	if b.booted {
		boot = 0 // the previous member's workers, as many as it had (a planner may have stopped some)
	}
	// Engines parked for no worker started again (one that stopped as parking opened).
	for _, id := range b.parking.StopUnclaimed() {
		b.ports.release(id)
		log.Warn().Str("worker", id).Msg("parked engine stopped: no worker of that id started again")
	}
	for i := 0; i < boot; i++ {
		res, err := root.RequestFuture(pid, &messages.StartWorker{Engine: o.EngineName,
			TensorParallelSize: int32(o.bootTensorParallelSize()), Card: b.boot, EngineArgs: o.EngineArgs}, 10*time.Second).Result()
		if err != nil {
			return fmt.Errorf("start worker %d: %w", i, err)
		}
		reply, _ := res.(*messages.StartWorkerReply)
		if reply == nil || reply.Error != "" {
			return fmt.Errorf("start worker %d: %s", i, reply.GetError())
		}
		log.Info().Str("worker", reply.WorkerId).Ints32("gpus", reply.Gpus).Msg("worker started")
	}
	b.booted = true
	b.board.Booted()
	<-ctx.Done()
	select {
	case <-m.Lost():
		lost = true
	default:
		drainWorkers(root, pid, o.DrainTimeout, log)
	}
	return nil
}

// forRole returns the builder of a worker of role (a planner's StartWorker.role): b
// itself for the node's own role or none, else a copy whose workers register and start
// their engines with role instead of --worker-role.
func (b *builder) forRole(role string) *builder {
	if role == "" || role == b.o.WorkerRole {
		return b
	}
	rb := *b
	rb.o.WorkerRole = role
	return &rb
}

// drainWorkers drains every worker of the node agent at pid in parallel (they leave
// routing at once; requests in flight get grace to finish, the rest end as migratable)
// and returns once all have stopped.
func drainWorkers(root *actor.RootContext, pid *actor.PID, grace time.Duration, log zerolog.Logger) {
	res, err := root.RequestFuture(pid, &messages.NodeStatusRequest{}, 5*time.Second).Result()
	st, _ := res.(*messages.NodeStatus)
	if err != nil || st == nil {
		log.Warn().Err(err).Msg("node status unavailable: stopping workers without draining")
		return
	}
	log.Info().Int("workers", len(st.Workers)).Dur("grace", grace).Msg("draining workers")
	var wg sync.WaitGroup
	for _, w := range st.Workers {
		wg.Add(1)
		go func(ref *messages.ActorRef) {
			defer wg.Done()
			worker.DrainAndStop(root, actor.NewPID(ref.Address, ref.Id), grace)
		}(w.Worker)
	}
	wg.Wait()
}

// waitStopped poisons the node agent at pid and returns once it and its workers are gone
// (beyond protoactor's 10 s wait for one future: a worker may take its engine's stop
// grace), or after stopWaitLimit.
func waitStopped(root *actor.RootContext, pid *actor.PID, log zerolog.Logger) {
	deadline := time.Now().Add(stopWaitLimit)
	err := root.PoisonFuture(pid).Wait()
	for errors.Is(err, actor.ErrTimeout) && time.Now().Before(deadline) {
		err = root.StopFuture(pid).Wait() // a stopped actor answers at once
	}
	if err != nil {
		log.Warn().Err(err).Msg("node agent not stopped within the wait: going on")
	}
}

// stopWaitLimit bounds waitStopped.
const stopWaitLimit = 2 * time.Minute
