package mocker

import "github.com/turbine-llm/turbine/kv"

// blockCache is the paged KV cache: numBlocks blocks of blockSize tokens in three pools.
//
//   - active: held by at least one sequence (ref > 0);
//   - inactive: ref == 0 but registered in the prefix cache under its sequence hash, kept
//     in least-recently-released order and evicted from the front when a block is needed;
//   - free: ref == 0 and not registered (never full, a duplicate, or evicted).
//
// Invariants: every block is in exactly one pool; byHash maps a sequence hash to the one
// registered block holding it; a registered block's hash never changes until eviction.
// The cache records the KV events of what it registers and evicts, in order.
type blockCache struct {
	blockSize int
	blocks    []block
	free      []int32 // stack of free block ids
	lruHead   int32   // least recently released inactive block, -1 when none
	lruTail   int32   // most recently released inactive block
	lruLen    int
	active    int
	byHash    map[uint64]int32
	caching   bool // prefix caching enabled: full blocks are registered and events emitted
	events    []kv.Event
	// evicted records the sequence hashes of the registered blocks evicted, for the
	// engine to offload (tier.go), when offload is set.
	evicted []uint64
	offload bool
}

type block struct {
	ref        int32
	registered bool
	inLRU      bool
	prev, next int32
	seqHash    uint64 // router-style chained hash of the block's prefix (lookup key)
	engineHash uint64 // the hash published in KV events
}

func newBlockCache(numBlocks, blockSize int, caching bool) *blockCache {
	c := &blockCache{
		blockSize: blockSize,
		blocks:    make([]block, numBlocks),
		free:      make([]int32, numBlocks),
		lruHead:   -1,
		lruTail:   -1,
		byHash:    make(map[uint64]int32),
		caching:   caching,
	}
	for i := range c.free {
		// Pop order 0, 1, 2, ... keeps block ids readable in tests.
		c.free[i] = int32(numBlocks - 1 - i)
		c.blocks[i].prev, c.blocks[i].next = -1, -1
	}
	return c
}

// available is how many blocks an allocation may take (free plus evictable).
func (c *blockCache) available() int { return len(c.free) + c.lruLen }

// lookup returns the registered block holding seqHash.
func (c *blockCache) lookup(seqHash uint64) (int32, bool) {
	id, ok := c.byHash[seqHash]
	return id, ok
}

// acquire adds a reference to a registered block found by lookup (a prefix hit).
func (c *blockCache) acquire(id int32) {
	b := &c.blocks[id]
	if b.ref == 0 {
		c.lruRemove(id)
		c.active++
	}
	b.ref++
}

// allocate takes a block for new tokens: a free one, or else the least recently released
// inactive one, which is evicted (BlockRemoved). ok is false when none is left.
func (c *blockCache) allocate() (id int32, ok bool) {
	if n := len(c.free); n > 0 {
		id = c.free[n-1]
		c.free = c.free[:n-1]
	} else if c.lruHead >= 0 {
		id = c.lruHead
		c.lruRemove(id)
		c.evict(id)
	} else {
		return -1, false
	}
	c.blocks[id].ref = 1
	c.active++
	return id, true
}

func (c *blockCache) evict(id int32) {
	b := &c.blocks[id]
	delete(c.byHash, b.seqHash)
	b.registered = false
	if c.offload {
		c.evicted = append(c.evicted, b.seqHash)
	}
	c.events = append(c.events, kv.Event{Kind: kv.BlockRemoved, EngineHashes: []uint64{b.engineHash}, Medium: mediumGPU})
}

// release drops one reference; a block left unreferenced becomes inactive (registered,
// appended as most recently released) or free.
func (c *blockCache) release(id int32) {
	b := &c.blocks[id]
	b.ref--
	if b.ref > 0 {
		return
	}
	c.active--
	if b.registered {
		c.lruAppend(id)
	} else {
		c.free = append(c.free, id)
	}
}

// register records a full block under its hashes. It returns false when prefix caching
// is off or another block already holds seqHash (the duplicate stays unregistered and
// returns to the free pool when released).
func (c *blockCache) register(id int32, seqHash, engineHash uint64) bool {
	if !c.caching {
		return false
	}
	if _, dup := c.byHash[seqHash]; dup {
		return false
	}
	b := &c.blocks[id]
	b.registered, b.seqHash, b.engineHash = true, seqHash, engineHash
	c.byHash[seqHash] = id
	return true
}

func (c *blockCache) lruAppend(id int32) {
	b := &c.blocks[id]
	b.inLRU, b.prev, b.next = true, c.lruTail, -1
	if c.lruTail >= 0 {
		c.blocks[c.lruTail].next = id
	} else {
		c.lruHead = id
	}
	c.lruTail = id
	c.lruLen++
}

func (c *blockCache) lruRemove(id int32) {
	b := &c.blocks[id]
	if !b.inLRU {
		return
	}
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.lruHead = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.lruTail = b.prev
	}
	b.inLRU, b.prev, b.next = false, -1, -1
	c.lruLen--
}

// takeEvents returns and clears the recorded events.
func (c *blockCache) takeEvents() []kv.Event {
	ev := c.events
	c.events = nil
	return ev
}

// lruOrder lists inactive blocks from next-to-evict to last (for tests).
func (c *blockCache) lruOrder() []int32 {
	var out []int32
	for id := c.lruHead; id >= 0; id = c.blocks[id].next {
		out = append(out, id)
	}
	return out
}
