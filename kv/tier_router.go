package kv

// ApplyInventory applies a node's KV block manager's inventory batch (docs/reference.md
// §9). needDump: a gap in Seq, an unknown node or a new Epoch without a snapshot — the
// node must send a snapshot next.
//
// TODO(tiers): the router's tier index.
func (r *Router) ApplyInventory(node string, inv Inventory) (needDump bool) {
	return false
}
