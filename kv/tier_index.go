package kv

import "sort"

// The router's tier index (docs/reference.md §9.2): for each node, which of the model's
// blocks its KV block manager holds below the GPU — host memory, local disk, a remote
// store — named by the router's sequence hashes (hash.go). An engine onboards a block
// from a lower tier instead of recomputing it, so a worker's prefix hit continues, after
// its GPU hit, through the blocks its node holds (Router.candidate, tierRun).
//
// Ownership and invariants (TierIndex owns all of it):
//   - Authoritative per node: blocks maps a sequence hash to the set of tiers holding it
//     (tierBits, several at once under write-through), from the node's inventory
//     batches applied in order up to lastSeq of epoch. perTier[t] counts the blocks with
//     tier t's bit; entries the sum of every node's blocks.len() (0: no inventory at
//     all, and routing skips the tier walk).
//   - A node's stream is numbered per (node, model) from a snapshot: synced while no
//     batch was missed since the last snapshot applied. After a gap the node's blocks
//     are kept (mostly right, and the snapshot asked for replaces them within a round
//     trip); a new epoch clears them (the block manager restarted: its host tier is
//     gone, and its disk tier is announced again by the snapshot a new epoch needs).
//   - A node slot lives while a worker is registered on it (workers > 0) or it has sent
//     inventory (known); ForgetNode drops the inventory. The Router grain forgets a node
//     that has no worker left and sent nothing for a while (docs/reference.md §9.2); the
//     core never does by itself, having no clock.
//   - remote lists the slots of known nodes that serve other nodes (ServesRemote).
//   - The route memo (gen, memo per node and remoteMemo) caches lookups of the prompt
//     being routed; it is valid only within one Route (beginRoute).

// tierBit is the bit of tier t in a tierBits set.
func tierBit(t Tier) uint8 { return 1 << t }

// tierBits is a set of lower tiers (bit 1<<Tier); tierKnown marks a memo entry filled.
const (
	tierHostBit   = 1 << TierHost
	tierDiskBit   = 1 << TierDisk
	tierRemoteBit = 1 << TierRemote
	tierAllBits   = tierHostBit | tierDiskBit | tierRemoteBit
	tierKnown     = 0x80
)

// fastest is the fastest tier in bits (host, then disk, then remote), TierNone if empty.
func fastest(bits uint8) Tier {
	switch {
	case bits&tierHostBit != 0:
		return TierHost
	case bits&tierDiskBit != 0:
		return TierDisk
	case bits&tierRemoteBit != 0:
		return TierRemote
	}
	return TierNone
}

// TierIndex is the per-node inventory of the lower KV tiers. Pure; not safe for
// concurrent use. The Router owns one (Router.ApplyInventory, Router.ForgetNode).
type TierIndex struct {
	nodes   []*tierNode // by slot; nil = free
	byName  map[string]int32
	remote  []int32 // slots of known nodes with ServesRemote
	entries int     // blocks over all nodes (a block held by two nodes counts twice)
	// skipped: inventory changes with a tier other than host, disk or remote, ignored;
	// unknownRemovals: removals of blocks the node was not known to hold in that tier.
	skipped         uint64
	unknownRemovals uint64
	// the route memo
	gen        uint64
	remoteMemo []uint8
	remoteGen  uint64
}

type tierNode struct {
	name         string
	workers      int  // registered workers on the node
	known        bool // an inventory was applied (epoch, lastSeq mean something)
	synced       bool
	servesRemote bool
	epoch        uint64
	lastSeq      uint64
	blocks       u64Map // seq hash → tierBits
	perTier      [NumTiers]int
	memo         []uint8 // per prompt block: tierKnown|bits, valid when memoGen == gen
	memoGen      uint64
}

// NewTierIndex returns an empty tier index.
func NewTierIndex() *TierIndex { return &TierIndex{byName: map[string]int32{}} }

// Empty reports whether no node holds any block (routing then skips the tier walk).
func (x *TierIndex) Empty() bool { return x.entries == 0 }

// slot returns the slot of node name, creating it when create is set (-1: none).
func (x *TierIndex) slot(name string, create bool) int32 {
	if s, ok := x.byName[name]; ok {
		return s
	}
	if !create || name == "" {
		return -1
	}
	s := int32(0)
	for int(s) < len(x.nodes) && x.nodes[s] != nil {
		s++
	}
	n := &tierNode{name: name}
	if int(s) == len(x.nodes) {
		x.nodes = append(x.nodes, n)
	} else {
		x.nodes[s] = n
	}
	x.byName[name] = s
	return s
}

// addWorker counts a worker registered on node name and returns its slot (-1 for "").
func (x *TierIndex) addWorker(name string) int32 {
	s := x.slot(name, true)
	if s >= 0 {
		x.nodes[s].workers++
	}
	return s
}

// removeWorker uncounts a worker of slot s; a slot with no worker and no inventory goes.
func (x *TierIndex) removeWorker(s int32) {
	if s < 0 || int(s) >= len(x.nodes) || x.nodes[s] == nil {
		return
	}
	n := x.nodes[s]
	n.workers--
	x.release(s)
}

// release frees slot s when nothing refers to it.
func (x *TierIndex) release(s int32) {
	n := x.nodes[s]
	if n.workers > 0 || n.known {
		return
	}
	delete(x.byName, n.name)
	x.nodes[s] = nil
	for len(x.nodes) > 0 && x.nodes[len(x.nodes)-1] == nil {
		x.nodes = x.nodes[:len(x.nodes)-1]
	}
}

// clear drops node n's blocks.
func (x *TierIndex) clear(n *tierNode) {
	x.entries -= n.blocks.len()
	n.blocks.reset()
	n.perTier = [NumTiers]int{}
}

// setRemote keeps x.remote in step with slot s's ServesRemote.
func (x *TierIndex) setRemote(s int32, on bool) {
	n := x.nodes[s]
	if n.servesRemote == on {
		return
	}
	n.servesRemote = on
	if on {
		x.remote = append(x.remote, s)
		return
	}
	for i, r := range x.remote {
		if r == s {
			x.remote = append(x.remote[:i], x.remote[i+1:]...)
			break
		}
	}
}

// Apply applies node's inventory batch; see Router.ApplyInventory for the rules.
func (x *TierIndex) Apply(node string, inv Inventory) (needDump bool) {
	if node == "" {
		return false
	}
	s := x.slot(node, true)
	n := x.nodes[s]
	if inv.Snapshot {
		if n.known && (inv.Epoch < n.epoch || inv.Epoch == n.epoch && n.synced && inv.Seq <= n.lastSeq) {
			return false // late or repeated
		}
		x.clear(n)
		n.known, n.synced, n.epoch, n.lastSeq = true, true, inv.Epoch, inv.Seq
		x.setRemote(s, inv.ServesRemote)
		x.applyChanges(n, inv.Changes)
		return false
	}
	switch {
	case !n.known:
		x.release(s)
		return true
	case inv.Epoch < n.epoch:
		return false
	case inv.Epoch > n.epoch:
		x.clear(n)
		n.epoch, n.lastSeq, n.synced = inv.Epoch, 0, false
		return true
	case !n.synced:
		return true // until the snapshot comes; asked again in case the request was lost
	case inv.Seq <= n.lastSeq:
		return false // duplicate
	case inv.Seq != n.lastSeq+1:
		n.synced = false
		return true
	}
	n.lastSeq = inv.Seq
	x.setRemote(s, inv.ServesRemote)
	x.applyChanges(n, inv.Changes)
	return false
}

func (x *TierIndex) applyChanges(n *tierNode, changes []TierChange) {
	for _, ch := range changes {
		if ch.Tier != TierHost && ch.Tier != TierDisk && ch.Tier != TierRemote {
			x.skipped++
			continue
		}
		bit := tierBit(ch.Tier)
		for _, h := range ch.SeqHashes {
			old, _ := n.blocks.get(h)
			bits := uint8(old)
			if ch.Removed {
				if bits&bit == 0 {
					x.unknownRemovals++
					continue
				}
				bits &^= bit
				n.perTier[ch.Tier]--
				if bits == 0 {
					n.blocks.del(h)
					x.entries--
					continue
				}
			} else {
				if bits&bit != 0 {
					continue
				}
				if bits == 0 {
					x.entries++
				}
				bits |= bit
				n.perTier[ch.Tier]++
			}
			n.blocks.put(h, uint32(bits))
		}
	}
}

// Forget drops node's inventory (its next batch must be a snapshot) and reports
// whether there was one.
func (x *TierIndex) Forget(node string) bool {
	s := x.slot(node, false)
	if s < 0 {
		return false
	}
	n := x.nodes[s]
	had := n.known
	x.clear(n)
	x.setRemote(s, false)
	n.known, n.synced, n.epoch, n.lastSeq = false, false, 0, 0
	x.release(s)
	return had
}

// beginRoute starts a route's memo.
func (x *TierIndex) beginRoute() { x.gen++ }

// bits returns the tiers of slot s holding hashes[i] (memoized for the route).
func (x *TierIndex) bits(s int32, hashes []uint64, i int) uint8 {
	n := x.nodes[s]
	if n.memoGen != x.gen {
		n.memoGen = x.gen
		if cap(n.memo) < len(hashes) {
			n.memo = make([]uint8, len(hashes))
		}
		n.memo = n.memo[:len(hashes)]
		clear(n.memo)
	}
	if m := n.memo[i]; m&tierKnown != 0 {
		return m &^ tierKnown
	}
	var b uint8
	if n.blocks.len() > 0 {
		v, _ := n.blocks.get(hashes[i])
		b = uint8(v) & tierAllBits
	}
	n.memo[i] = b | tierKnown
	return b
}

// remoteHeld reports whether a node serving remote tiers holds hashes[i] in any tier.
func (x *TierIndex) remoteHeld(hashes []uint64, i int) bool {
	if len(x.remote) == 0 {
		return false
	}
	if x.remoteGen != x.gen {
		x.remoteGen = x.gen
		if cap(x.remoteMemo) < len(hashes) {
			x.remoteMemo = make([]uint8, len(hashes))
		}
		x.remoteMemo = x.remoteMemo[:len(hashes)]
		clear(x.remoteMemo)
	}
	if m := x.remoteMemo[i]; m&tierKnown != 0 {
		return m&tierRemoteBit != 0
	}
	held := false
	for _, s := range x.remote {
		if x.bits(s, hashes, i) != 0 {
			held = true
			break
		}
	}
	m := uint8(tierKnown)
	if held {
		m |= tierRemoteBit
	}
	x.remoteMemo[i] = m
	return held
}

// heldElsewhere reports whether a node serving remote tiers other than slot s holds
// hashes[i] in any tier (not memoised: asked only for blocks on s's own disk).
func (x *TierIndex) heldElsewhere(s int32, hashes []uint64, i int) bool {
	for _, r := range x.remote {
		if r != s && x.bits(r, hashes, i) != 0 {
			return true
		}
	}
	return false
}

// run counts, for a worker on slot s (-1: none) whose GPU prefix hit is g blocks of the
// prompt's sequence hashes, the consecutive blocks from g on that its node holds (each
// at its fastest tier) or, failing that, a node serving remote tiers holds (remote):
// engines load prefixes only, so the run ends at the first block held nowhere. With
// remoteOverDisk (the remote tier's credit above the disk's), a block only on the node's
// own disk that another node serving remote tiers holds counts as remote: the faster
// copy. Call beginRoute first, once per route.
func (x *TierIndex) run(s int32, hashes []uint64, g int, remoteOverDisk bool) (counts [NumTiers]int) {
	for i := max(g, 0); i < len(hashes); i++ {
		t := TierNone
		if s >= 0 {
			t = fastest(x.bits(s, hashes, i))
		}
		if t == TierNone && x.remoteHeld(hashes, i) {
			t = TierRemote
		} else if t == TierDisk && remoteOverDisk && x.heldElsewhere(s, hashes, i) {
			t = TierRemote
		}
		if t == TierNone {
			break
		}
		counts[t]++
	}
	return counts
}

// TierNodeStats is one node's line of the tier index.
type TierNodeStats struct {
	Node string
	// Workers: workers registered on the node; Known: its inventory was received.
	Workers int
	Known   bool
	// Synced: no batch missed since its last snapshot; Epoch, LastSeq: where its stream
	// stands; ServesRemote: its blocks are remote hits for other nodes' workers.
	Synced       bool
	Epoch        uint64
	LastSeq      uint64
	ServesRemote bool
	// Blocks is the number of blocks held per tier (indexed by Tier; a block in host
	// memory and on disk counts in both).
	Blocks [NumTiers]int
}

// Stats returns every node's line, sorted by node.
func (x *TierIndex) Stats() []TierNodeStats {
	var out []TierNodeStats
	for _, n := range x.nodes {
		if n == nil {
			continue
		}
		out = append(out, TierNodeStats{Node: n.name, Workers: n.workers, Known: n.known, Synced: n.synced,
			Epoch: n.epoch, LastSeq: n.lastSeq, ServesRemote: n.servesRemote, Blocks: n.perTier})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Tiers returns the tiers of node holding the block of sequence hash h (a set of bits
// 1<<Tier; 0 when none or the node is unknown).
func (x *TierIndex) Tiers(node string, h uint64) uint8 {
	s := x.slot(node, false)
	if s < 0 {
		return 0
	}
	v, _ := x.nodes[s].blocks.get(h)
	return uint8(v)
}

// Skipped is the number of inventory changes ignored for naming no lower tier;
// UnknownRemovals the removals of blocks a node was not known to hold in that tier.
func (x *TierIndex) Skipped() uint64         { return x.skipped }
func (x *TierIndex) UnknownRemovals() uint64 { return x.unknownRemovals }
