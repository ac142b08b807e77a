// Package node is `turbine node`: the cluster member of one machine. Its node agent owns
// the machine's GPUs (found through NVML; CPU mode without a driver) and starts worker
// actors pinned to disjoint GPU sets (CUDA_VISIBLE_DEVICES), each supervising its engine
// subprocess. Routers and gateways run on `turbine frontend` members.
package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	nodeactor "github.com/turbine-llm/turbine/actors/node"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// Options are the node's flags, with their defaults.
type Options struct {
	options.Engine
	options.Cluster
	options.Log
	NodeID             string
	Workers            int
	EngineName         string
	TensorParallelSize int
}

// Defaults are the embedded defaults: two mock workers, no GPU each.
func Defaults() Options {
	host, _ := os.Hostname()
	return Options{Engine: options.DefaultEngine(), Cluster: options.DefaultCluster(), Log: options.DefaultLog(),
		NodeID: host, Workers: 2, EngineName: "mocker"}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "node name, unique in the cluster; workers are named <node-id>-<n> (default: host name; set it when several nodes share a machine)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "workers started at boot (0: none until asked)")
	fs.StringVar(&o.EngineName, "engine", o.EngineName, "engine of the workers started at boot: mocker")
	fs.IntVar(&o.TensorParallelSize, "tensor-parallel-size", o.TensorParallelSize, "GPUs pinned to each worker started at boot (0: none, mock engines only)")
	o.Engine.Flags(fs)
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	switch {
	case o.NodeID == "":
		return errors.New("--node-id: empty (and the host name is unknown)")
	case o.Workers < 0 || o.Workers > 256:
		return fmt.Errorf("--workers %d: want 0..256", o.Workers)
	case o.EngineName != "mocker":
		return fmt.Errorf("--engine %q: want mocker (real engines are started through their own launchers)", o.EngineName)
	case o.TensorParallelSize < 0 || o.TensorParallelSize > 64:
		return fmt.Errorf("--tensor-parallel-size %d: want 0..64", o.TensorParallelSize)
	}
	for _, err := range []error{o.Engine.Validate(), o.Cluster.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Run is `turbine node`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	log, help, err := options.Parse(options.Command{Name: "node",
		Summary: "Runs one machine's node agent and its workers.",
		Example: "TURBINE_NODE_ID=gpu-7", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr)
	if help || err != nil {
		return err
	}
	card, err := o.Engine.Card()
	if err != nil {
		return err
	}
	self, err := options.MockerExecutable()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	gpus, cpuOnly := discover(log)
	return options.RunMember(ctx, o.Cluster.Config(nil, log), log, func(mctx context.Context, m *cluster.Member) error {
		return runNode(mctx, o, m, card, self, gpus, cpuOnly, log)
	})
}

// discover lists the GPUs; without an NVML driver it says so once and returns CPU mode.
func discover(log zerolog.Logger) ([]nodeactor.GPU, bool) {
	gpus, err := nodeactor.DiscoverGPUs(nvml.New())
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
		d, err := preprocess.SourceDigest(card.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("card of %q: tokenizer %q: %w", card.Model, card.Tokenizer, err)
		}
		card.TokenizerDigest = d
	}
	return card, nil
}

// runNode runs the node agent on member m until ctx ends, starting the boot workers.
func runNode(ctx context.Context, o Options, m *cluster.Member, card *messages.ModelCard, self string,
	gpus []nodeactor.GPU, cpuOnly bool, log zerolog.Logger) error {
	props, err := nodeactor.Props(nodeactor.Config{NodeID: o.NodeID, GPUs: gpus, CPUOnly: cpuOnly, Logger: log,
		NewWorker: func(id string, req *messages.StartWorker, pinned []int) (*actor.Props, error) {
			card, err := completeCard(req.Card)
			if err != nil {
				return nil, err
			}
			mock := o.Engine.Mocker(self, card)
			mock.Extra = req.EngineArgs
			routerClient, catalogClient := worker.GrainClients(m.Cluster, card.Model, catalog.Identity,
				worker.GrainTimeout(o.Heartbeat))
			return worker.Props(worker.Config{WorkerID: id, Card: card, Launcher: mock,
				Env: nodeactor.CUDAEnv(pinned), Heartbeat: o.Heartbeat, ReadyTimeout: o.ReadyTimeout,
				Router: routerClient, Catalog: catalogClient, Logger: log})
		}})
	if err != nil {
		return err
	}
	root := m.System.Root
	pid, err := root.SpawnNamed(props, nodeactor.ActorName)
	if err != nil {
		return fmt.Errorf("spawn node agent: %w", err)
	}
	defer func() { _ = root.PoisonFuture(pid).Wait() }()
	log.Info().Str("node", o.NodeID).Str("member", m.ID()).Str("address", pid.Address).
		Bool("cpu_only", cpuOnly).Int("gpus", len(gpus)).Msg("node agent joined the cluster")
	for i := 0; i < o.Workers; i++ {
		res, err := root.RequestFuture(pid, &messages.StartWorker{Engine: o.EngineName,
			TensorParallelSize: int32(o.TensorParallelSize), Card: card}, 10*time.Second).Result()
		if err != nil {
			return fmt.Errorf("start worker %d: %w", i, err)
		}
		reply, _ := res.(*messages.StartWorkerReply)
		if reply == nil || reply.Error != "" {
			return fmt.Errorf("start worker %d: %s", i, reply.GetError())
		}
		log.Info().Str("worker", reply.WorkerId).Ints32("gpus", reply.Gpus).Msg("worker started")
	}
	<-ctx.Done()
	return nil
}
