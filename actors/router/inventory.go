package router

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Bounds of one inventory batch (validateInventory). A snapshot of a node holding 16 M
// blocks (32 TiB of Llama-3.1-8B's 2 MiB blocks) is 128 MB of hashes, past any transport's
// message size; more is not an inventory but a defect.
const (
	maxInventoryHashes  = 1 << 24
	maxInventoryChanges = 1 << 16
	maxNodeIDLen        = 256
)

// DefaultNodeTTL is Config.NodeTTL's default: a node with no worker left that sent no
// inventory for this long is forgotten (docs/reference.md §9.2).
const DefaultNodeTTL = 2 * time.Minute

// PublishInventory takes a node's KV block manager's inventory of this model
// (docs/reference.md §9.2) and applies it to the core's tier index (kv.Router.
// ApplyInventory); need_dump in the answer asks for a snapshot next. A batch naming
// another model, no node or absurd sizes is refused whole (logged, and not applied: the
// node's next batch then finds a gap and is asked for a snapshot); a change naming a tier
// other than host, disk or remote is skipped (logged, counted in the core's
// Stats.SkippedTierChanges) and the rest applies. Before the first worker registers (no block size yet) batches are dropped;
// the node is asked for a snapshot with its first batch after that.
func (g *Grain) PublishInventory(req *messages.KvbmInventory, _ cluster.GrainContext) (*messages.EventAck, error) {
	inv, err := g.validateInventory(req)
	if err != nil {
		g.log.Warn().Err(err).Str("node", req.GetNodeId()).Uint64("seq", req.GetSeq()).Msg("KV block manager inventory refused")
		return &messages.EventAck{}, nil
	}
	if g.core == nil {
		return &messages.EventAck{}, nil
	}
	now := g.cfg.Now()
	g.nodeSeen[req.NodeId] = now
	needDump := g.core.ApplyInventory(req.NodeId, inv)
	if needDump {
		g.log.Debug().Str("node", req.NodeId).Uint64("epoch", req.Epoch).Uint64("seq", req.Seq).
			Msg("KV block manager inventory: asking for a snapshot")
	}
	return &messages.EventAck{NeedDump: needDump}, nil
}

// validateInventory checks a batch and converts it for the core.
func (g *Grain) validateInventory(req *messages.KvbmInventory) (kv.Inventory, error) {
	switch {
	case req.GetNodeId() == "" || len(req.NodeId) > maxNodeIDLen:
		return kv.Inventory{}, fmt.Errorf("router: inventory node_id %q empty or longer than %d bytes", req.GetNodeId(), maxNodeIDLen)
	case req.Model != g.model:
		return kv.Inventory{}, fmt.Errorf("router: inventory of model %q sent to the router of %q", req.Model, g.model)
	case len(req.Changes) > maxInventoryChanges:
		return kv.Inventory{}, fmt.Errorf("router: inventory with %d changes, more than %d", len(req.Changes), maxInventoryChanges)
	}
	inv := kv.Inventory{Epoch: req.Epoch, Seq: req.Seq, Snapshot: req.Snapshot, ServesRemote: req.ServesRemote,
		Changes: make([]kv.TierChange, 0, len(req.Changes))}
	total := 0
	for i, ch := range req.Changes {
		t, ok := tierOf(ch.GetTier())
		if !ok {
			g.log.Warn().Str("node", req.NodeId).Int("change", i).Stringer("tier", ch.GetTier()).
				Msg("KV block manager inventory change of no known tier skipped")
		}
		total += len(ch.GetSeqHashes())
		if total > maxInventoryHashes {
			return kv.Inventory{}, fmt.Errorf("router: inventory with more than %d block hashes", maxInventoryHashes)
		}
		inv.Changes = append(inv.Changes, kv.TierChange{Tier: t, Removed: ch.GetRemoved(), SeqHashes: ch.GetSeqHashes()})
	}
	return inv, nil
}

// tierOf maps the wire's KvTier to kv.Tier; ok is false for UNSPECIFIED and unknown values.
func tierOf(t messages.KvTier) (kv.Tier, bool) {
	switch t {
	case messages.KvTier_KV_TIER_HOST:
		return kv.TierHost, true
	case messages.KvTier_KV_TIER_DISK:
		return kv.TierDisk, true
	case messages.KvTier_KV_TIER_REMOTE:
		return kv.TierRemote, true
	}
	return kv.TierNone, false
}

// forgetNodes drops the inventory of nodes that have no registered worker left and sent
// nothing for Config.NodeTTL (their block manager is gone, or serves nobody here); a node
// that comes back is asked for a snapshot with its next batch.
func (g *Grain) forgetNodes(now time.Time) {
	if len(g.nodeSeen) == 0 {
		return
	}
	for node, seen := range g.nodeSeen {
		if now.Sub(seen) <= g.cfg.NodeTTL || g.nodeHasWorker(node) {
			continue
		}
		g.core.ForgetNode(node)
		delete(g.nodeSeen, node)
		g.log.Info().Str("node", node).Dur("silent", now.Sub(seen)).
			Msg("KV block manager inventory forgotten: no worker on its node and nothing heard")
	}
}

func (g *Grain) nodeHasWorker(node string) bool {
	for _, w := range g.workers {
		if w.node == node {
			return true
		}
	}
	return false
}

// KVBytesPerToken is a model card's KV cache size of one token in bytes: the
// architecture's kv_bytes_per_token, else 2 · layers · KV heads · head dim · dtype bytes
// when the card has those figures, else kv.DefaultKVBytesPerToken (a mock model).
func KVBytesPerToken(card *messages.ModelCard) int64 {
	a := card.GetArchitecture()
	if a.GetKvBytesPerToken() > 0 {
		return a.GetKvBytesPerToken()
	}
	db, ok := model.DtypeBytes(a.GetDtype())
	if ok && a.GetNumLayers() > 0 && a.GetNumKvHeads() > 0 && a.GetHeadDim() > 0 {
		return 2 * int64(a.NumLayers) * int64(a.NumKvHeads) * int64(a.HeadDim) * int64(db)
	}
	return kv.DefaultKVBytesPerToken
}

// tierCredit is the tier credit for a model card: Config.TierCredit when set, else
// computed from the card's KV size, the router's timing profile and Config.TierBandwidth
// (each figure 0: kv.DefaultTierBandwidth's).
func (g *Grain) tierCredit(card *messages.ModelCard) kv.TierCredit {
	if g.cfg.TierCredit != nil {
		return *g.cfg.TierCredit
	}
	bw, def := g.cfg.TierBandwidth, kv.DefaultTierBandwidth()
	if bw.Host == 0 {
		bw.Host = def.Host
	}
	if bw.Disk == 0 {
		bw.Disk = def.Disk
	}
	if bw.Remote == 0 {
		bw.Remote = def.Remote
	}
	return kv.TierCreditsFor(KVBytesPerToken(card), g.kcfg.Profile, bw)
}
