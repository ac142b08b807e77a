package kv

import "strconv"

// Tier is a KV storage tier below the engine's GPU memory (docs/reference.md §9): the
// node's KV block manager holds blocks in host memory (G2) and on local disk (G3), and
// another node's block manager or a shared store is the remote tier (G4). The GPU (G1)
// is the Index's own.
type Tier uint8

const (
	// TierNone: not held in any lower tier.
	TierNone Tier = iota
	// TierHost: the node's host memory (G2).
	TierHost
	// TierDisk: the node's local disk (G3).
	TierDisk
	// TierRemote: another node's block manager or a shared store (G4).
	TierRemote
)

// NumTiers bounds Tier values (for arrays indexed by tier).
const NumTiers = 4

// Medium returns the tier's name in vLLM's KV events ("CPU", "DISK", "REMOTE"; "" for
// TierNone).
func (t Tier) Medium() string {
	switch t {
	case TierHost:
		return "CPU"
	case TierDisk:
		return "DISK"
	case TierRemote:
		return "REMOTE"
	case TierNone:
		return ""
	}
	return "Tier(" + strconv.Itoa(int(t)) + ")"
}

// String returns the tier's lower-case name ("host", "disk", "remote", "none"), as
// metrics labels and the admin API spell it.
func (t Tier) String() string {
	switch t {
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	case TierRemote:
		return "remote"
	case TierNone:
		return "none"
	}
	return "Tier(" + strconv.Itoa(int(t)) + ")"
}

// TierOfMedium maps a KV event's medium to a lower tier: "CPU", "CPU_PINNED" and "cpu"
// (LMCache) are TierHost, "DISK" and "STORAGE" TierDisk, "REMOTE" TierRemote; "", "GPU"
// and anything else TierNone.
func TierOfMedium(m string) Tier {
	switch m {
	case "CPU", "CPU_PINNED", "cpu", "cpu_pinned":
		return TierHost
	case "DISK", "STORAGE", "disk":
		return TierDisk
	case "REMOTE", "remote":
		return TierRemote
	}
	return TierNone
}

// TierChange is a set of blocks, named by the router's sequence hashes (hash.go), that
// entered (Removed false) or left Tier in a node's KV block manager.
type TierChange struct {
	Tier      Tier
	Removed   bool
	SeqHashes []uint64
}

// Inventory is one numbered batch of a node's KV block manager's inventory of one model
// (messages.KvbmInventory): batches are numbered by Seq within Epoch (the block manager's
// start); a Snapshot replaces everything known of the node. ServesRemote: the node's
// blocks are remote-tier hits for workers on other nodes (a G4 path exists).
type Inventory struct {
	Epoch, Seq   uint64
	Snapshot     bool
	ServesRemote bool
	Changes      []TierChange
}
