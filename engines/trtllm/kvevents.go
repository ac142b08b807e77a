package trtllm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// BlockHash is a TensorRT-LLM block hash: an unsigned 64-bit integer in JSON (negative
// values, which no known version sends, are read as their two's complement).
type BlockHash uint64

// UnmarshalJSON reads an integer literal of up to 64 bits.
func (h *BlockHash) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		*h = BlockHash(u)
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*h = BlockHash(uint64(i))
		return nil
	}
	return fmt.Errorf("block hash %.40s: want a 64-bit integer", s)
}

// KVCacheEvent is one entry of POST /kv_cache_events.
type KVCacheEvent struct {
	EventID    int64       `json:"event_id"`
	WindowSize int         `json:"window_size"`
	Data       KVEventData `json:"data"`
	// AttentionDPRank is set with attention data parallelism.
	AttentionDPRank *int `json:"attention_dp_rank"`
}

// KVEventData is the union of the event types ("created", "stored", "removed",
// "updated"); fields not of Type are zero.
type KVEventData struct {
	Type string `json:"type"`
	// created
	NumBlocksPerCacheLevel []int64 `json:"num_blocks_per_cache_level"`
	// stored
	ParentHash *BlockHash    `json:"parent_hash"`
	Blocks     []StoredBlock `json:"blocks"`
	// removed
	BlockHashes []BlockHash `json:"block_hashes"`
	// updated (cache_level and priority are {"type": "event_diff", ...} objects there)
	BlockHash BlockHash `json:"block_hash"`
}

// StoredBlock is one block of a "stored" event.
type StoredBlock struct {
	BlockHash BlockHash     `json:"block_hash"`
	Tokens    []UniqueToken `json:"tokens"`
	// CacheLevel 0 is device memory, 1 host memory.
	CacheLevel int `json:"cache_level"`
	Priority   int `json:"priority"`
}

// UniqueToken is a token of a stored block; TokenExtraID is non-zero for tokens that
// are not plain vocabulary ids (multimodal content, prompt tuning).
type UniqueToken struct {
	TokenID      uint32 `json:"token_id"`
	TokenExtraID uint64 `json:"token_extra_id"`
}

// KVCacheEvents fetches (and so drains: the server hands each event out once) the KV
// cache events recorded since the previous call, oldest first. trtllm-serve waits up to
// 2 s for events before answering [].
func (c *Client) KVCacheEvents(ctx context.Context) ([]KVCacheEvent, error) {
	resp, err := c.h.Do(ctx, http.MethodPost, "/kv_cache_events", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return DecodeKVCacheEvents(io.LimitReader(resp.Body, 256<<20))
}

// DecodeKVCacheEvents decodes the JSON array /kv_cache_events answers.
func DecodeKVCacheEvents(r io.Reader) ([]KVCacheEvent, error) {
	var evs []KVCacheEvent
	if err := json.NewDecoder(r).Decode(&evs); err != nil {
		return nil, fmt.Errorf("trtllm: POST /kv_cache_events: want a JSON array of KV cache events: %w", err)
	}
	return evs, nil
}

// EventConverter turns trtllm-serve KV cache events into kv.Batch values. It is a pure
// state machine (no I/O, no clock): feed it each poll's events in order.
//
// Mapping:
//   - "stored": a BlockStored of the leading blocks that hold exactly BlockSize plain
//     tokens (token_extra_id 0); the rest of the event (a partial block, multimodal
//     tokens) is dropped, since blocks after it chain from a block the index lacks.
//     cache_level 0 is medium "GPU", 1 "CPU_PINNED"; a change of level inside one
//     event splits it.
//   - "removed": a BlockRemoved.
//   - "created" (the cache was (re)created, the engine's first event), an event id that
//     goes backwards (the engine restarted) or skips ids (events were dropped because
//     event_buffer_max_size was exceeded, or another client drained them): an
//     AllBlocksCleared first, so that the index never keeps blocks the engine may have
//     removed.
//   - "updated" (priority or cache level changes of a stored block): ignored.
//
// Each poll gives one batch per attention DP rank (in order of first appearance);
// Batch.Seq counts the batches this converter made, from 0, and Timestamp is the poll's.
type EventConverter struct {
	blockSize int
	seq       uint64
	last      map[int]int64 // last event id per attention DP rank
	// Gaps counts the id gaps and restarts seen (each cleared the blocks).
	Gaps int
}

// NewEventConverter returns a converter for blocks of blockSize tokens (TensorRT-LLM's
// kv_cache_config.tokens_per_block, 32 by default). Errors: blockSize < 1.
func NewEventConverter(blockSize int) (*EventConverter, error) {
	if blockSize < 1 {
		return nil, fmt.Errorf("trtllm: KV block size %d must be at least 1", blockSize)
	}
	return &EventConverter{blockSize: blockSize, last: map[int]int64{}}, nil
}

// Convert returns the batches for one poll's events, taken at ts (seconds since the
// Unix epoch). Polls without events give none.
func (c *EventConverter) Convert(events []KVCacheEvent, ts float64) []kv.Batch {
	var out []kv.Batch
	index := map[int]int{} // rank -> position in out
	for i := range events {
		e := &events[i]
		rank := -1
		if e.AttentionDPRank != nil {
			rank = *e.AttentionDPRank
		}
		pos, ok := index[rank]
		if !ok {
			pos = len(out)
			index[rank] = pos
			out = append(out, kv.Batch{Timestamp: ts, DataParallelRank: rank})
		}
		out[pos].Events = c.convertOne(out[pos].Events, e, rank)
	}
	res := out[:0]
	for _, b := range out {
		if len(b.Events) == 0 {
			continue
		}
		b.Seq = c.seq
		c.seq++
		res = append(res, b)
	}
	return res
}

func (c *EventConverter) convertOne(evs []kv.Event, e *KVCacheEvent, rank int) []kv.Event {
	prev, seen := c.last[rank]
	c.last[rank] = e.EventID
	if e.Data.Type == "created" {
		return append(evs, kv.Event{Kind: kv.AllBlocksCleared})
	}
	if seen && e.EventID != prev+1 {
		c.Gaps++
		evs = append(evs, kv.Event{Kind: kv.AllBlocksCleared})
	}
	switch e.Data.Type {
	case "stored":
		return c.stored(evs, &e.Data)
	case "removed":
		if len(e.Data.BlockHashes) == 0 {
			return evs
		}
		hs := make([]uint64, len(e.Data.BlockHashes))
		for i, h := range e.Data.BlockHashes {
			hs[i] = uint64(h)
		}
		return append(evs, kv.Event{Kind: kv.BlockRemoved, EngineHashes: hs})
	}
	return evs
}

// stored appends BlockStored events for the leading full plain-token blocks of d.
func (c *EventConverter) stored(evs []kv.Event, d *KVEventData) []kv.Event {
	var cur *kv.Event
	hasParent, parent := d.ParentHash != nil, uint64(0)
	if hasParent {
		parent = uint64(*d.ParentHash)
	}
	level := -1
	for _, b := range d.Blocks {
		if len(b.Tokens) != c.blockSize || !plain(b.Tokens) {
			break
		}
		if cur == nil || b.CacheLevel != level {
			evs = append(evs, kv.Event{Kind: kv.BlockStored, HasParent: hasParent, ParentHash: parent,
				BlockSize: c.blockSize, Medium: medium(b.CacheLevel)})
			cur, level = &evs[len(evs)-1], b.CacheLevel
		}
		cur.EngineHashes = append(cur.EngineHashes, uint64(b.BlockHash))
		for _, t := range b.Tokens {
			cur.TokenIDs = append(cur.TokenIDs, t.TokenID)
		}
		hasParent, parent = true, uint64(b.BlockHash)
	}
	return evs
}

func plain(ts []UniqueToken) bool {
	for _, t := range ts {
		if t.TokenExtraID != 0 {
			return false
		}
	}
	return true
}

func medium(cacheLevel int) string {
	switch cacheLevel {
	case 0:
		return "GPU"
	case 1:
		return "CPU_PINNED"
	}
	return "LEVEL_" + strconv.Itoa(cacheLevel)
}

// PollConfig configures PollKVEvents.
type PollConfig struct {
	// BlockSize is the engine's tokens_per_block (required).
	BlockSize int
	// Interval is the pause after a poll that returned no events (default 50 ms; the
	// server itself waits up to 2 s for events before answering).
	Interval time.Duration
}

// PollKVEvents polls POST /kv_cache_events until ctx ends and calls fn with each
// converted batch, in order. It returns nil when ctx ends, and otherwise the first
// error: a transport error, a non-200 answer (404 or 405 when the server has no such
// endpoint), or an undecodable body. The caller decides whether to poll again; a new
// poll starts its batch numbering at 0 again, which consumers treat as a restart.
func (c *Client) PollKVEvents(ctx context.Context, cfg PollConfig, fn func(kv.Batch)) error {
	conv, err := NewEventConverter(cfg.BlockSize)
	if err != nil {
		return err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		evs, err := c.KVCacheEvents(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		for _, b := range conv.Convert(evs, float64(now.UnixNano())/1e9) {
			fn(b)
		}
		if len(evs) > 0 {
			timer.Reset(0)
		} else {
			timer.Reset(cfg.Interval)
		}
	}
}
