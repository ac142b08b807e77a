package bench

// Ceiling is the prefix-cache hit rate an infinite cache shared by every worker would
// reach on reqs: the prompt tokens served from cache over all prompt tokens (0 when
// there are none). No routing policy can beat it on this workload.
//
// Requests are taken in workload order (the order they are sent). A request's hit is its
// leading hash ids that any earlier request already had — hash ids are prefix-chained,
// so those blocks hold exactly the same tokens — counted in tokens (blockTokens per id)
// and capped at InputLength-1, since an engine always computes at least the prompt's last
// token (vLLM recomputes it on a full hit to produce the first output token's logits).
// A shared prefix that ends inside a block (Request.PrefixTokens) counts in full once
// an earlier request had the same PrefixID, since it then holds exactly the same
// tokens. Traces without prefix information (Azure, synthetic without a shared prefix)
// share no id and have ceiling 0. Requests under different LoRA adapters (Request.Lora)
// share nothing, whatever their ids: an adapter's KV differs from the base model's.
func Ceiling(reqs []Request, blockTokens int) float64 {
	hit, total := ceilingTokens(reqs, blockTokens)
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// CeilingBlocks is Ceiling counted in hash-id blocks without the last-token cap: the
// leading ids seen in an earlier request over all ids.
func CeilingBlocks(reqs []Request) float64 {
	seen := make(map[blockKey]struct{})
	var loras loraIDs
	var hit, total int
	for _, r := range reqs {
		lora := loras.of(r.Lora)
		k := leadingSeen(r.HashIDs, lora, seen)
		hit += k
		total += len(r.HashIDs)
		for _, id := range r.HashIDs[k:] {
			seen[blockKey{lora, id}] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

func ceilingTokens(reqs []Request, blockTokens int) (hit, total int64) {
	seen := make(map[blockKey]struct{})
	prefixes := make(map[blockKey]struct{}) // PrefixIDs seen
	var loras loraIDs
	for _, r := range reqs {
		lora := loras.of(r.Lora)
		k := leadingSeen(r.HashIDs, lora, seen)
		total += int64(r.InputLength)
		h := k * blockTokens
		if r.PrefixTokens > h && k >= r.PrefixTokens/blockTokens {
			if _, ok := prefixes[blockKey{lora, r.PrefixID}]; ok {
				h = r.PrefixTokens
			}
		}
		hit += int64(max(min(h, r.InputLength-1), 0))
		for _, id := range r.HashIDs[k:] {
			seen[blockKey{lora, id}] = struct{}{}
		}
		if r.PrefixTokens > 0 {
			prefixes[blockKey{lora, r.PrefixID}] = struct{}{}
		}
	}
	return hit, total
}

// blockKey names a workload block: a hash id (or a PrefixID) under a LoRA adapter
// (loraIDs; 0 for the base model).
type blockKey struct {
	lora int32
	id   int64
}

// loraIDs numbers the adapters of a workload as they come: 0 is the base model.
type loraIDs map[string]int32

func (l *loraIDs) of(name string) int32 {
	if name == "" {
		return 0
	}
	if *l == nil {
		*l = map[string]int32{}
	}
	id, ok := (*l)[name]
	if !ok {
		id = int32(len(*l) + 1)
		(*l)[name] = id
	}
	return id
}

// leadingSeen counts the leading ids of ids that are in seen under adapter lora.
func leadingSeen(ids []int64, lora int32, seen map[blockKey]struct{}) int {
	for k, id := range ids {
		if _, ok := seen[blockKey{lora, id}]; !ok {
			return k
		}
	}
	return len(ids)
}

// CeilingPooled is the prefix-cache hit rate one LRU cache of capacityTokens tokens,
// shared by every worker, reaches on reqs: the fleet's KV memory pooled into a single
// cache, so that no block is held twice and any request can hit any block. It follows
// Ceiling's conventions (the leading hit in tokens, a shared prefix's remainder counted
// in full, at most InputLength-1 tokens of a prompt) and equals Ceiling when the cache
// holds the whole workload; capacityTokens < 0 is taken as 0, which hits nothing.
//
// The cache's entries are the workload's blocks: one per hash id, of blockTokens tokens
// or, for a prompt's last id, the tokens the prompt has of it (the most any request had
// when ids recur), plus, for a shared prefix that ends inside a block, one entry for its
// remainder (PrefixTokens%blockTokens tokens, taken off the cost of the block holding
// it). An entry costs its tokens; the entries' costs add up to at most capacityTokens.
// Requests are taken in workload order, each at once and whole, ignoring time:
//
//  1. its hit is its leading ids present in the cache (and the prefix remainder when
//     every whole block of its prefix is a hit and the remainder's entry is present),
//     counted as Ceiling counts it;
//  2. then all its blocks are touched, missing ones inserted, from the last to the first,
//     so that its first block is the most recently used and its tail goes first (an
//     engine frees a finished sequence's blocks tail first);
//  3. then the least recently used entries are evicted until the costs fit, this
//     request's own tail included when the request alone is larger than the cache.
//
// It is a reference figure, not a strict bound. An engine keeps a running sequence's
// blocks until it ends and caches whole blocks of its own block size (evicted one by
// one, so it may keep part of a workload block this model drops); and LRU is not the
// best possible eviction. docs/reference.md §12.1 has the definition and its figures.
// Blocks of requests under different LoRA adapters are different entries, as in Ceiling.
func CeilingPooled(reqs []Request, blockTokens int, capacityTokens int64) float64 {
	hit, total := pooledTokens(reqs, blockTokens, capacityTokens)
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

func pooledTokens(reqs []Request, blockTokens int, capacity int64) (hit, total int64) {
	c := newLRU(max(capacity, 0))
	var loras loraIDs
	for _, r := range reqs {
		lora := loras.of(r.Lora)
		k := 0
		for k < len(r.HashIDs) && c.has(lruKey{lora: lora, id: r.HashIDs[k]}) {
			k++
		}
		total += int64(r.InputLength)
		h := k * blockTokens
		whole, rem := 0, 0 // the prefix's whole blocks, and its remainder's tokens
		if r.PrefixTokens > 0 {
			whole, rem = r.PrefixTokens/blockTokens, r.PrefixTokens%blockTokens
		}
		remKey := lruKey{lora: lora, id: r.PrefixID, remainder: true}
		if r.PrefixTokens > h && k >= whole && rem > 0 && c.has(remKey) {
			h = r.PrefixTokens
		}
		hit += int64(max(min(h, r.InputLength-1), 0))
		for j := len(r.HashIDs) - 1; j >= 0; j-- {
			held := min(blockTokens, r.InputLength-j*blockTokens)
			if rem > 0 && j == whole {
				held -= rem
				c.touch(lruKey{lora: lora, id: r.HashIDs[j]}, int64(max(held, 0)))
				c.touch(remKey, int64(rem))
				continue
			}
			c.touch(lruKey{lora: lora, id: r.HashIDs[j]}, int64(max(held, 0)))
		}
		c.evict()
	}
	return hit, total
}

// lruKey names an entry of CeilingPooled's cache: a hash id, or the remainder of the
// shared prefix PrefixID, under a LoRA adapter (loraIDs).
type lruKey struct {
	lora      int32
	id        int64
	remainder bool
}

// lru is a least-recently-used cache of sized entries: a map to nodes of a doubly
// linked list kept in a slice (index 0 is the list's sentinel), most recent first.
type lru struct {
	capacity, used int64
	at             map[lruKey]int32
	nodes          []lruNode
	free           []int32 // indices of evicted nodes, for reuse
}

type lruNode struct {
	key        lruKey
	cost       int64
	prev, next int32
}

func newLRU(capacity int64) *lru {
	return &lru{capacity: capacity, at: make(map[lruKey]int32), nodes: []lruNode{{}}}
}

func (c *lru) has(k lruKey) bool {
	_, ok := c.at[k]
	return ok
}

// touch makes k the most recently used entry, inserting it with cost if absent and
// raising its cost to cost if it was lower.
func (c *lru) touch(k lruKey, cost int64) {
	i, ok := c.at[k]
	if ok {
		c.unlink(i)
		if n := &c.nodes[i]; cost > n.cost {
			c.used += cost - n.cost
			n.cost = cost
		}
	} else {
		if n := len(c.free); n > 0 {
			i, c.free = c.free[n-1], c.free[:n-1]
		} else {
			i = int32(len(c.nodes))
			c.nodes = append(c.nodes, lruNode{})
		}
		c.nodes[i] = lruNode{key: k, cost: cost}
		c.at[k] = i
		c.used += cost
	}
	head := &c.nodes[0]
	c.nodes[i].prev, c.nodes[i].next = 0, head.next
	c.nodes[head.next].prev = i
	head.next = i
}

// evict drops least recently used entries until the costs fit the capacity.
func (c *lru) evict() {
	for c.used > c.capacity {
		i := c.nodes[0].prev // the tail
		c.unlink(i)
		n := c.nodes[i]
		delete(c.at, n.key)
		c.used -= n.cost
		c.free = append(c.free, i)
	}
}

func (c *lru) unlink(i int32) {
	n := c.nodes[i]
	c.nodes[n.prev].next = n.next
	c.nodes[n.next].prev = n.prev
}
