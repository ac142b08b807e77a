// Package kvbm is `turbine kvbm`: a node's KV block manager on a cluster member of its
// own (docs/reference.md §9.5). It serves the node's engines over RESP (LMCache's
// redis:// and resp://, the mock engine) and LMCache's lm://, keeps the blocks in host
// memory and on local disk, and publishes its inventory to the models' Router grains
// under --node-id, the node whose workers it serves (their WorkerInfo.node_id).
//
//	turbine kvbm --node-id gpu-7 --kvbm-host-bytes 64GiB --kvbm-disk-dir /nvme/kvbm --kvbm-disk-bytes 1TiB
//
// That node then runs `turbine node --node-id gpu-7 --kvbm-external` (the same ports) so
// that its engines are pointed at it. `turbine node --kvbm` runs the same block manager
// in its own process instead (Open once, Publish on each cluster member), and `turbine
// serve --kvbm` in its one member (Start).
package kvbm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
	kvbmactor "github.com/turbine-llm/turbine/actors/kvbm"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// Options are `turbine kvbm`'s flags, with their defaults.
type Options struct {
	options.Kvbm
	options.Cluster
	options.Log
	// NodeID names the node whose engines the block manager serves.
	NodeID string
}

// Defaults are the embedded defaults: the node is this host.
func Defaults() Options {
	host, _ := os.Hostname()
	k := options.DefaultKvbm()
	k.Enabled = true
	return Options{Kvbm: k, Cluster: options.DefaultCluster(), Log: options.DefaultLog(), NodeID: host}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "the node whose engines this block manager serves (its turbine node --node-id; default the host name)")
	o.Kvbm.Flags(fs, false, false)
	o.Cluster.Flags(fs)
	o.Log.Flags(fs)
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	if o.NodeID == "" {
		return errors.New("--node-id: empty (and the host name is unknown)")
	}
	if o.RESPPort == -1 && o.LMPort == -1 {
		return errors.New("--kvbm-resp-port -1 and --kvbm-lm-port -1: no engine could reach the block manager")
	}
	if err := o.Kvbm.Validate(); err != nil {
		return err
	}
	return o.Cluster.Validate()
}

// Run is `turbine kvbm`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	return options.Main(ctx, options.Command{Name: "kvbm",
		Summary: "Runs a node's KV block manager on its own: host-memory and disk tiers its engines offload KV blocks to.",
		Example: "TURBINE_NODE_ID=gpu-7 TURBINE_KVBM_HOST_BYTES=64GiB", Flags: func(fs *flag.FlagSet) { flags(&o, fs) },
		Validate: o.Validate, Log: &o.Log}, args, stderr,
		func(ctx context.Context, log zerolog.Logger) error { return run(ctx, o, log) })
}

func run(ctx context.Context, o Options, log zerolog.Logger) error {
	// The ports are bound before the member joins (docs/reference.md §9.5): a taken port
	// fails at once, naming its flag. The store and its servers outlive a lost member
	// (§10): each new member only publishes the inventory again.
	cfg := o.ManagerConfig(o.NodeID, nil, log)
	release, err := o.Bind(&cfg)
	if err != nil {
		return err
	}
	mgr, _, err := Open(cfg, log)
	if err != nil {
		release()
		return o.OpenError(err)
	}
	defer func() { _ = mgr.Close() }()
	return options.RunMember(ctx, o.Cluster.Config(nil, log), log, func(mctx context.Context, m *cluster.Member) error {
		stop, err := Publish(m, mgr)
		if err != nil {
			return err
		}
		defer stop()
		<-mctx.Done()
		return nil
	})
}

// Start opens a block manager of cfg (publishing to member m's Router grains unless
// cfg.Routers is set) and spawns its actor on m as kvbmactor.ActorName. It returns what
// stops it (the actor, then the servers and the store) and the endpoints its engines
// are given. Errors: those of kvbmactor.Open (a taken port, a bad disk directory), or
// the spawn's. For a process whose member may be replaced, Open once and Publish on
// each member instead.
func Start(m *cluster.Member, cfg kvbmactor.Config, log zerolog.Logger) (stop func(), ends options.Endpoints, err error) {
	if cfg.Routers == nil {
		cfg.Routers = kvbmactor.GrainRouters(m.Cluster, options.KvbmRouterTimeout())
	}
	mgr, ends, err := Open(cfg, log)
	if err != nil {
		return nil, options.Endpoints{}, err
	}
	root := m.System.Root
	pid, err := root.SpawnNamed(mgr.Props(), kvbmactor.ActorName)
	if err != nil {
		_ = mgr.Close()
		return nil, options.Endpoints{}, fmt.Errorf("spawn kvbm: %w", err)
	}
	return func() { _ = root.PoisonFuture(pid).Wait() }, ends, nil
}

// Open opens a block manager of cfg, serving from now until its Close, and logs its
// endpoints. Errors: those of kvbmactor.Open (a taken port, a bad disk directory).
func Open(cfg kvbmactor.Config, log zerolog.Logger) (*kvbmactor.Manager, options.Endpoints, error) {
	mgr, err := kvbmactor.Open(cfg)
	if err != nil {
		return nil, options.Endpoints{}, err
	}
	ends := options.ManagerEndpoints(mgr)
	ev := log.Info().Str("node", cfg.NodeID).Str("resp", ends.RESP).Str("lm", ends.LM).Str("policy", cfg.Store.Policy.String()).
		Int64("host_bytes", cfg.Store.HostBytes)
	if cfg.Store.DiskDir != "" { // disk_bytes only with a disk tier
		ev = ev.Str("disk_dir", cfg.Store.DiskDir).Int64("disk_bytes", cfg.Store.DiskBytes)
	}
	ev.Msg("KV block manager serving")
	return mgr, ends, nil
}

// Publish spawns, on member m, the actor (kvbmactor.ActorName) that publishes mgr's
// inventory to m's Router grains and answers its status; the returned func stops the
// actor and leaves mgr open. Errors: the spawn's (a name taken on m).
func Publish(m *cluster.Member, mgr *kvbmactor.Manager) (stop func(), err error) {
	root := m.System.Root
	pid, err := root.SpawnNamed(mgr.MemberProps(kvbmactor.GrainRouters(m.Cluster, options.KvbmRouterTimeout())), kvbmactor.ActorName)
	if err != nil {
		return nil, fmt.Errorf("spawn kvbm: %w", err)
	}
	return func() { _ = root.PoisonFuture(pid).Wait() }, nil
}
