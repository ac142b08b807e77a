package kv

// ApplyInventory applies a node's KV block manager's inventory batch (docs/reference.md
// §9.2). A Snapshot replaces all the router knew of the node (unless it is older than
// what it holds: a lower epoch, or the same epoch at a seq already applied); other
// batches must follow the last one applied in the same epoch (Seq + 1). needDump: the
// node must send a snapshot next — it is unknown (never sent one, or forgotten), a new
// Epoch came without a snapshot (its blocks are dropped: the block manager restarted),
// a Seq was skipped, or a snapshot is still awaited (asked again with every batch until
// it comes: a publisher with several batches in flight sends one snapshot per loss).
// Batches of an older epoch and duplicates are ignored. Changes naming no lower tier
// are skipped (Stats.SkippedTierChanges); the rest of the batch applies.
func (r *Router) ApplyInventory(node string, inv Inventory) (needDump bool) {
	return r.tiers.Apply(node, inv)
}

// ForgetNode drops a node's inventory (its block manager is gone, or silent with no
// worker left on the node: the Router grain decides, docs/reference.md §9.2); its next
// batch must be a snapshot. It reports whether the router held an inventory of it.
func (r *Router) ForgetNode(node string) bool { return r.tiers.Forget(node) }

// Tiers gives read access to the tier index (tests, stats).
func (r *Router) Tiers() *TierIndex { return r.tiers }

// SetTierCredit changes the tier credits (the Router grain sets them once the model card
// is known). Errors: ErrInvalidConfig for a fraction outside 0..1.
func (r *Router) SetTierCredit(c TierCredit) error {
	if err := c.Validate(); err != nil {
		return err
	}
	r.cfg.TierCredit = c
	return nil
}

// TierCredit returns the tier credits in force.
func (r *Router) TierCredit() TierCredit { return r.cfg.TierCredit }

// tierFacts completes candidate c of worker rw with the blocks after its GPU hit held in
// lower tiers (TierIndex.run) and their credited tokens. Called only while some node
// holds blocks.
func (r *Router) tierFacts(rw *routerWorker, c *Candidate) {
	cr := r.cfg.TierCredit
	n := r.tiers.run(rw.node, r.routeHashes, c.OverlapBlocks, cr.Remote > cr.Disk)
	c.HostBlocks, c.DiskBlocks, c.RemoteBlocks = n[TierHost], n[TierDisk], n[TierRemote]
	c.TierCreditTokens = float64(r.cfg.BlockSize) *
		(float64(c.HostBlocks)*cr.Host + float64(c.DiskBlocks)*cr.Disk + float64(c.RemoteBlocks)*cr.Remote)
}

// countTierHits adds a routed candidate's tier blocks to Stats.TierHitBlocks.
func (r *Router) countTierHits(c *Candidate) {
	r.tierHits[TierHost] += int64(c.HostBlocks)
	r.tierHits[TierDisk] += int64(c.DiskBlocks)
	r.tierHits[TierRemote] += int64(c.RemoteBlocks)
}

// uncachedTokens is the prompt tokens c computes itself: ISL less its GPU hit and its
// credited tier tokens (rounded), at least 0.
func uncachedTokens(isl int64, bs int, c *Candidate) int64 {
	v := isl - int64(c.OverlapBlocks)*int64(bs)
	if c.TierCreditTokens > 0 {
		v -= int64(c.TierCreditTokens + 0.5)
	}
	return max(0, v)
}
