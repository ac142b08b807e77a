package bench

import (
	"flag"
	"fmt"
	"io"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/kv"
)

// KV block managers of a simulated fleet (bench/sim kvbm.go, docs/reference.md §9): with
// --kvbm every worker's node holds the blocks its engine evicts in host memory
// (--kvbm-host-bytes, default 4 × the engine's KV cache) and on disk (--kvbm-disk-bytes,
// default none), the engines load a prefix held there at the tier's bandwidth instead of
// computing it, and the report counts prefix hits by tier. With --kvbm-remote every
// node's block manager also serves the other nodes as their remote tier (G4). Sizes are
// byte counts with an optional unit ("64GiB", options.Bytes), as serve's and node's.

// kvbmFlagNames are the block manager's flags of `turbine bench --simulate` (a real run
// refuses them: its serve has its own).
var kvbmFlagNames = []string{"kvbm", "kvbm-host-bytes", "kvbm-disk-bytes", "kvbm-remote"}

// KvbmFleet holds those flags.
type KvbmFleet struct {
	On                   bool
	HostBytes, DiskBytes options.Bytes
	Remote               bool
}

// DefaultKvbmHostFactor sizes the host tier when --kvbm-host-bytes is 0: this many times
// an engine's KV cache.
const DefaultKvbmHostFactor = 4

func (k *KvbmFleet) flags(fs *flag.FlagSet) {
	fs.BoolVar(&k.On, "kvbm", k.On, "--simulate: a KV block manager on every worker's node: evicted KV blocks go to host memory, then disk, and are loaded back instead of computed")
	fs.Var(&k.HostBytes, "kvbm-host-bytes",
		fmt.Sprintf("--simulate --kvbm: host-memory tier `bytes` per node, e.g. 64GiB (0: %d × an engine's KV cache, --num-gpu-blocks × --block-size × --kv-bytes-per-token)", DefaultKvbmHostFactor))
	fs.Var(&k.DiskBytes, "kvbm-disk-bytes", "--simulate --kvbm: disk tier `bytes` per node, e.g. 320GiB (0: no disk tier)")
	fs.BoolVar(&k.Remote, "kvbm-remote", k.Remote, "--simulate --kvbm: every node's block manager also serves the other nodes' engines as their remote tier (G4), read at the remote bandwidth")
}

// config returns the simulation's block managers (nil without --kvbm); errors name the
// flag.
func (k KvbmFleet) config(f *Fleet) (*sim.Kvbm, error) {
	if !k.On {
		if k.HostBytes != 0 || k.DiskBytes != 0 || k.Remote {
			return nil, fmt.Errorf("--kvbm-host-bytes, --kvbm-disk-bytes and --kvbm-remote need --kvbm")
		}
		return nil, nil
	}
	bpt := f.KVBytesPerToken
	if bpt == 0 {
		bpt = kv.DefaultKVBytesPerToken
	}
	host := int64(k.HostBytes)
	if host == 0 {
		host = DefaultKvbmHostFactor * int64(f.NumGPUBlocks) * int64(f.BlockSize) * bpt
	}
	switch {
	case host < 0:
		return nil, fmt.Errorf("--kvbm-host-bytes %d: want above 0 (0: the default)", k.HostBytes)
	case k.DiskBytes < 0:
		return nil, fmt.Errorf("--kvbm-disk-bytes %d: want at least 0 (0: no disk tier)", k.DiskBytes)
	}
	return &sim.Kvbm{HostBytes: host, DiskBytes: int64(k.DiskBytes), Remote: k.Remote}, nil
}

// tierHitRates puts the engines' prefix hit rates by tier into s and writes them.
func tierHitRates(s *bench.Summary, st sim.Stats, stderr io.Writer) {
	t := st.Tiers
	if t.PromptTokens == 0 {
		return
	}
	s.PrefixHitRateByTier = map[string]float64{"gpu": t.HitRate(kv.TierNone), "host": t.HitRate(kv.TierHost),
		"disk": t.HitRate(kv.TierDisk), "remote": t.HitRate(kv.TierRemote)}
	fmt.Fprintf(stderr, "bench: prefix hits by tier: GPU %.1f %%, host %.1f %%, disk %.1f %%, remote %.1f %% of prompt tokens (%d blocks offloaded, %d onboarded)\n",
		100*t.HitRate(kv.TierNone), 100*t.HitRate(kv.TierHost), 100*t.HitRate(kv.TierDisk), 100*t.HitRate(kv.TierRemote),
		t.OffloadedBlocks, t.OnboardedBlocks[kv.TierHost]+t.OnboardedBlocks[kv.TierDisk]+t.OnboardedBlocks[kv.TierRemote])
}
