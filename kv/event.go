package kv

import "strconv"

// EventKind is the type of a KV cache event (vLLM kv-events wire format, docs/reference.md §1).
type EventKind uint8

const (
	// BlockStored: full blocks were committed to the engine's prefix cache.
	BlockStored EventKind = iota + 1
	// BlockRemoved: blocks were evicted from the engine's prefix cache.
	BlockRemoved
	// AllBlocksCleared: the engine dropped its whole prefix cache.
	AllBlocksCleared
)

// String returns the event kind's name in the vLLM wire format ("BlockStored" ...).
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one KV cache event from an engine, independent of its transport
// (ZMQ msgpack from the engine, protobuf between Turbine components).
//
// EngineHashes are the engine's own block hashes: opaque ids, only used to find blocks
// again on BlockRemoved and to chain a BlockStored to its parent. The router computes its
// own chained hashes (docs/reference.md §2) from TokenIDs.
type Event struct {
	Kind EventKind
	// EngineHashes: BlockStored and BlockRemoved; one per block.
	EngineHashes []uint64
	// HasParent/ParentHash: BlockStored; the engine hash of the block before the first
	// stored block, or HasParent=false when the first block starts a sequence.
	HasParent  bool
	ParentHash uint64
	// TokenIDs: BlockStored; len(TokenIDs) == len(EngineHashes)*BlockSize.
	TokenIDs []uint32
	// BlockSize: BlockStored; tokens per block.
	BlockSize int
	// LoraName: BlockStored; "" for the base model.
	LoraName string
	// CacheSalt: BlockStored without a parent; the request's cache salt, mixed into the
	// first block's hash (SaltHash, docs/reference.md §2); "" for none. Blocks after the
	// first inherit it through their parent, so it is ignored when HasParent.
	CacheSalt string
	// Medium: "" (GPU), "GPU", "CPU_PINNED", "DISK".
	Medium string
	// SequenceHashes: BlockStored of a worker's block-list dump only (never from an
	// engine): the router's own sequence hash of each block (docs/reference.md §2),
	// computed by the worker under HashScheme, one per EngineHashes entry; TokenIDs and
	// CacheSalt are then empty (the hashes hold them), and the index trusts the hashes.
	SequenceHashes []uint64
}

// Batch is one engine publication: a ZMQ message of the vLLM kv-events stream.
type Batch struct {
	// Seq is the publisher's sequence number (8-byte big-endian frame on the wire).
	Seq uint64
	// Timestamp in seconds since the Unix epoch, as the engine sent it.
	Timestamp float64
	// DataParallelRank, or -1 when the engine sent nil.
	DataParallelRank int
	Events           []Event
}
