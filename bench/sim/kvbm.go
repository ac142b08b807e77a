package sim

import (
	"container/list"
	"fmt"
	"math"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// KV block managers (Config.Kvbm; docs/reference.md §9). Each simulated worker is alone
// on its node (the simulator places one worker per node) with that node's block
// manager: the blocks its engine's GPU cache evicts go to host memory, least recently
// used first out of it onto the disk (the kvbm store's default demote policy,
// kvbm.PolicyDemote), and out of the disk for good; a block read back from the disk is
// promoted to host memory, as the store's Get does. The engine onboards a prefix the
// block manager holds at its tier's bandwidth (mocker.Config.TierGBps) instead of
// computing it. After every engine step the block manager's inventory changes reach the
// router as a numbered batch (kv.Router.ApplyInventory), as the real block manager
// publishes them, so routing sees the tiers too. Blocks are named by the router's
// sequence hashes, as the mock engine keys them (kvbm.BlockKey); sizes are
// BlockSize × KVBytesPerToken bytes.
//
// With Kvbm.Remote every block manager also serves the other nodes (a G4 path: a shared
// LMCache remote backend, or a peer block manager): after its own node's host memory and
// disk, an engine matches the blocks any other node's block manager holds, in any tier,
// as kv.TierRemote, and onboards them at the remote tier's bandwidth; the serving node
// reads them as its own Get does (a disk block promoted to its host memory). Every
// inventory batch then says ServesRemote, so the router credits those blocks to the
// workers of every other node (kv.Router's tier walk, docs/reference.md §9.2).

// Kvbm configures the simulated block managers, one per node.
type Kvbm struct {
	// HostBytes caps the host-memory tier in bytes (above 0).
	HostBytes int64
	// DiskBytes caps the disk tier in bytes (0: no disk tier).
	DiskBytes int64
	// TierGBps is each tier's bandwidth into GPU memory in GB/s at the reference timing
	// (0s: kv.DefaultTierBandwidth's); divided by Engine.SpeedupRatio like every time.
	TierGBps kv.TierBandwidth
	// Remote makes every node's block manager serve the other nodes' engines as their
	// remote tier (G4), read at TierGBps's Remote bandwidth.
	Remote bool
}

// MaxKvbmBlocks bounds the blocks one simulated block manager may hold (HostBytes plus
// DiskBytes over the block size): about 100 bytes of memory each.
const MaxKvbmBlocks = 1 << 24

// normalizeKvbm checks c.Kvbm and gives the engines its bandwidths and block size.
func (c *Config) normalizeKvbm() error {
	k := c.Kvbm
	if k == nil {
		return nil
	}
	if k.HostBytes <= 0 || k.DiskBytes < 0 {
		return fmt.Errorf("sim: Kvbm: HostBytes %d must be above 0 and DiskBytes %d at least 0", k.HostBytes, k.DiskBytes)
	}
	for _, t := range []kv.Tier{kv.TierHost, kv.TierDisk, kv.TierRemote} {
		if g := k.TierGBps.GBps(t); !(g >= 0) || math.IsInf(g, 0) {
			return fmt.Errorf("sim: Kvbm.TierGBps: %s %v GB/s: want a finite figure, at least 0", t, g)
		}
	}
	for _, e := range []*mocker.Config{&c.Engine, &c.PrefillEngine} {
		e.TierGBps, e.KVBytesPerToken = k.TierGBps, c.KVBytesPerToken
	}
	bb := c.Engine.BlockBytes()
	if blocks := k.HostBytes/bb + k.DiskBytes/bb; blocks > MaxKvbmBlocks {
		return fmt.Errorf("sim: Kvbm: HostBytes %d + DiskBytes %d hold %d blocks of %d bytes: want at most %d",
			k.HostBytes, k.DiskBytes, blocks, bb, MaxKvbmBlocks)
	}
	return nil
}

// nodeKvbm is one node's simulated block manager: a mocker.LowerTier over two LRU tiers.
// It records its inventory changes until the simulator publishes them (publish).
type nodeKvbm struct {
	node       string
	blockBytes int64
	host, disk lruTier
	changes    []kv.TierChange
	seq        uint64
	// fleet is every node's block manager, this one included, when they serve each
	// other (Kvbm.Remote); nil otherwise.
	fleet *kvbmFleet
}

// kvbmFleet is the block managers that serve each other as the remote tier (Kvbm.Remote),
// in the order of their workers.
type kvbmFleet struct {
	nodes []*nodeKvbm
}

// join makes n one of the fleet's block managers.
func (f *kvbmFleet) join(n *nodeKvbm) {
	n.fleet = f
	f.nodes = append(f.nodes, n)
}

// lruTier is one tier: blocks by sequence hash, least recently used at the front.
type lruTier struct {
	tier    kv.Tier
	capBlks int
	order   *list.List // of uint64
	at      map[uint64]*list.Element
}

func newLRUTier(t kv.Tier, capBytes, blockBytes int64) lruTier {
	return lruTier{tier: t, capBlks: int(capBytes / blockBytes), order: list.New(), at: map[uint64]*list.Element{}}
}

func newNodeKvbm(node string, k *Kvbm, blockBytes int64) *nodeKvbm {
	return &nodeKvbm{node: node, blockBytes: blockBytes,
		host: newLRUTier(kv.TierHost, k.HostBytes, blockBytes), disk: newLRUTier(kv.TierDisk, k.DiskBytes, blockBytes)}
}

var _ mocker.LowerTier = (*nodeKvbm)(nil)

// record appends a change, extending the last TierChange when it is of the same kind.
func (n *nodeKvbm) record(t kv.Tier, removed bool, h uint64) {
	if k := len(n.changes); k > 0 && n.changes[k-1].Tier == t && n.changes[k-1].Removed == removed {
		n.changes[k-1].SeqHashes = append(n.changes[k-1].SeqHashes, h)
		return
	}
	n.changes = append(n.changes, kv.TierChange{Tier: t, Removed: removed, SeqHashes: []uint64{h}})
}

func (n *nodeKvbm) remove(l *lruTier, h uint64) {
	if e, ok := l.at[h]; ok {
		l.order.Remove(e)
		delete(l.at, h)
		n.record(l.tier, true, h)
	}
}

// putHost puts h in host memory as the most recently used block, demoting the least
// recently used ones to disk (or dropping them without a disk) while over the cap.
func (n *nodeKvbm) putHost(h uint64) {
	if e, ok := n.host.at[h]; ok {
		n.host.order.MoveToBack(e)
		return
	}
	if n.host.capBlks == 0 {
		return
	}
	n.host.at[h] = n.host.order.PushBack(h)
	n.record(kv.TierHost, false, h)
	for n.host.order.Len() > n.host.capBlks {
		old := n.host.order.Front().Value.(uint64)
		n.remove(&n.host, old)
		n.putDisk(old)
	}
}

func (n *nodeKvbm) putDisk(h uint64) {
	if n.disk.capBlks == 0 {
		return
	}
	if e, ok := n.disk.at[h]; ok {
		n.disk.order.MoveToBack(e)
		return
	}
	n.disk.at[h] = n.disk.order.PushBack(h)
	n.record(kv.TierDisk, false, h)
	for n.disk.order.Len() > n.disk.capBlks {
		n.remove(&n.disk, n.disk.order.Front().Value.(uint64))
	}
}

// Offload stores an evicted block in host memory (a disk copy moves up).
func (n *nodeKvbm) Offload(h uint64) {
	n.remove(&n.disk, h)
	n.putHost(h)
}

// holds reports whether n holds h in host memory or on disk.
func (n *nodeKvbm) holds(h uint64) bool { return n.host.at[h] != nil || n.disk.at[h] != nil }

// peer returns the first other block manager of the fleet that holds h, or nil (always
// nil without Kvbm.Remote).
func (n *nodeKvbm) peer(h uint64) *nodeKvbm {
	if n.fleet == nil {
		return nil
	}
	for _, p := range n.fleet.nodes {
		if p != n && p.holds(h) {
			return p
		}
	}
	return nil
}

// Match returns the tier of each leading block held: its own node's host memory or
// disk, else another node's block manager (kv.TierRemote, with Kvbm.Remote).
func (n *nodeKvbm) Match(hs []uint64) []kv.Tier {
	var out []kv.Tier
	for _, h := range hs {
		switch {
		case n.host.at[h] != nil:
			out = append(out, kv.TierHost)
		case n.disk.at[h] != nil:
			out = append(out, kv.TierDisk)
		case n.peer(h) != nil:
			out = append(out, kv.TierRemote)
		default:
			return out
		}
	}
	return out
}

// Onboard reads the blocks: each becomes the most recently used in host memory (a disk
// block is promoted) of its own node, or of the other node that serves it.
func (n *nodeKvbm) Onboard(hs []uint64) int {
	for i, h := range hs {
		if n.read(h) {
			continue
		}
		if p := n.peer(h); p == nil || !p.read(h) {
			return i
		}
	}
	return len(hs)
}

// read reads h from n's own tiers, as the store's Get does (a disk block is promoted to
// host memory), and reports whether n held it.
func (n *nodeKvbm) read(h uint64) bool {
	switch {
	case n.host.at[h] != nil:
		n.host.order.MoveToBack(n.host.at[h])
	case n.disk.at[h] != nil:
		n.remove(&n.disk, h)
		n.putHost(h)
	default:
		return false
	}
	return true
}

// take returns the changes recorded since the last call as the next inventory batch
// (the first a snapshot of the empty start), or ok false when there are none.
func (n *nodeKvbm) take() (inv kv.Inventory, ok bool) {
	if len(n.changes) == 0 && n.seq > 0 {
		return kv.Inventory{}, false
	}
	n.seq++
	inv = kv.Inventory{Epoch: 1, Seq: n.seq, Snapshot: n.seq == 1, ServesRemote: n.fleet != nil, Changes: n.changes}
	n.changes = nil
	return inv, true
}

// publishKvbm sends w's node's inventory changes to the router; with Kvbm.Remote every
// node's, since w's engine may have read (and so promoted) blocks of other nodes.
func (s *simulator) publishKvbm(w *worker) {
	if w.kvbm == nil {
		return
	}
	if w.kvbm.fleet == nil {
		s.publishNode(w.kvbm)
		return
	}
	for _, n := range w.kvbm.fleet.nodes {
		s.publishNode(n)
	}
}

// publishNode sends n's inventory changes, if any, to the router.
func (s *simulator) publishNode(n *nodeKvbm) {
	if inv, ok := n.take(); ok {
		if s.router.ApplyInventory(n.node, inv) {
			s.stats.Tiers.InventoryDumps++
		}
		s.stats.Tiers.InventoryBatches++
	}
}

// nodeName is the node of worker name when it has a block manager.
func nodeName(worker string) string { return "node-" + worker }

// TierStats are the prefix hits by tier and the block managers' traffic (Config.Kvbm).
type TierStats struct {
	// PromptTokens and Cached are the successful requests' prompt tokens and the
	// cached tokens their usage reports (bench.Summary's figures), the latter split by
	// where the engine found them: indexed by kv.Tier, TierNone the GPU cache's.
	PromptTokens uint64
	Cached       [kv.NumTiers]uint64
	// Queries and Hits are the engines' own counters, summed over every engine the run
	// started: prompt tokens looked up at each admission (a preempted request's again;
	// vllm:prefix_cache_queries) and the tokens found, by tier as Cached.
	Queries uint64
	Hits    [kv.NumTiers]uint64
	// OffloadedBlocks went to the block managers; OnboardedBlocks came back, by tier.
	OffloadedBlocks uint64
	OnboardedBlocks [kv.NumTiers]uint64
	// InventoryBatches reached the router; InventoryDumps of them made it ask for a
	// snapshot (none expected).
	InventoryBatches, InventoryDumps int
	// RoutedBlocks are the lower-tier blocks the router counted for the workers it
	// picked, by tier (kv.Stats.TierHitBlocks): what routing knew of the tiers.
	RoutedBlocks [kv.NumTiers]int64
}

// HitRate returns the successful requests' hit rate in tier t (TierNone: the GPU's):
// Cached[t] / PromptTokens, 0 without prompt tokens. The tiers' rates add up to
// bench.Summary's PrefixCacheHitRate.
func (t TierStats) HitRate(tier kv.Tier) float64 {
	if t.PromptTokens == 0 {
		return 0
	}
	return float64(t.Cached[tier]) / float64(t.PromptTokens)
}

// addRequest adds a successful request's prompt and cached tokens, onboarded of them
// from the lower tiers.
func (t *TierStats) addRequest(prompt, cached int, onboarded [kv.NumTiers]int) {
	t.PromptTokens += uint64(prompt)
	lower := 0
	for k, n := range onboarded {
		t.Cached[k] += uint64(n)
		lower += n
	}
	t.Cached[kv.TierNone] += uint64(max(cached-lower, 0))
}

// addEngine adds an engine's counters.
func (t *TierStats) addEngine(st mocker.Stats) {
	t.Queries += st.PrefixQueries
	t.Hits[kv.TierNone] += st.PrefixHits
	t.OffloadedBlocks += st.Tiers.OffloadedBlocks
	for k := range t.OnboardedBlocks {
		t.Hits[k] += st.Tiers.PrefixHits[k]
		t.OnboardedBlocks[k] += st.Tiers.OnboardedBlocks[k]
	}
}
