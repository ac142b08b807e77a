package trtllm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// IterationStats is one entry of GET /metrics: the executor's statistics of one
// iteration (TensorRT-LLM's IterationStats JSON names; fields this package does not
// read are not listed).
type IterationStats struct {
	Timestamp            string  `json:"timestamp"`
	Iter                 int64   `json:"iter"`
	IterLatencyMS        float64 `json:"iterLatencyMS"`
	NumNewActiveRequests int     `json:"numNewActiveRequests"`
	// NumActiveRequests are scheduled in the executor (running); NumQueuedRequests
	// wait for it.
	NumActiveRequests    int                    `json:"numActiveRequests"`
	NumQueuedRequests    int                    `json:"numQueuedRequests"`
	NumCompletedRequests int                    `json:"numCompletedRequests"`
	MaxNumActiveRequests int                    `json:"maxNumActiveRequests"`
	GPUMemUsage          int64                  `json:"gpuMemUsage"`
	KVCacheStats         *KVCacheStats          `json:"kvCacheStats"`
	InflightBatching     *InflightBatchingStats `json:"inflightBatchingStats"`
}

// KVCacheStats are the KV cache manager's counters, in blocks of TokensPerBlock tokens.
type KVCacheStats struct {
	MaxNumBlocks     int64   `json:"maxNumBlocks"`
	FreeNumBlocks    int64   `json:"freeNumBlocks"`
	UsedNumBlocks    int64   `json:"usedNumBlocks"`
	TokensPerBlock   int64   `json:"tokensPerBlock"`
	AllocTotalBlocks int64   `json:"allocTotalBlocks"`
	AllocNewBlocks   int64   `json:"allocNewBlocks"`
	ReusedBlocks     int64   `json:"reusedBlocks"`
	MissedBlocks     int64   `json:"missedBlocks"`
	CacheHitRate     float64 `json:"cacheHitRate"`
}

// InflightBatchingStats describe the iteration's batch.
type InflightBatchingStats struct {
	NumScheduledRequests int   `json:"numScheduledRequests"`
	NumContextRequests   int   `json:"numContextRequests"`
	NumGenRequests       int   `json:"numGenRequests"`
	NumPausedRequests    int   `json:"numPausedRequests"`
	NumCtxTokens         int64 `json:"numCtxTokens"`
}

// IterationStats fetches (and so drains: the server hands each entry out once) the
// statistics of the iterations since the previous call, oldest first. An empty list
// means no iteration ran, or the PyTorch backend runs without enable_iter_perf_stats.
// trtllm-serve waits up to 2 s for stats before answering.
func (c *Client) IterationStats(ctx context.Context) ([]IterationStats, error) {
	resp, err := c.h.Do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return DecodeIterationStats(io.LimitReader(resp.Body, 64<<20))
}

// DecodeIterationStats decodes the JSON array /metrics answers.
func DecodeIterationStats(r io.Reader) ([]IterationStats, error) {
	var stats []IterationStats
	if err := json.NewDecoder(r).Decode(&stats); err != nil {
		return nil, fmt.Errorf("trtllm: GET /metrics: want a JSON array of iteration stats: %w", err)
	}
	return stats, nil
}

// Load is a server's load from its latest iteration.
type Load struct {
	Running, Queued int
	// KV blocks of TokensPerBlock tokens (0 when the stats carry no kvCacheStats).
	UsedBlocks, MaxBlocks, TokensPerBlock int64
	// Iter is the iteration the load was read from.
	Iter int64
}

// KVUsage is UsedBlocks / MaxBlocks (0 without KV stats).
func (l Load) KVUsage() float64 {
	if l.MaxBlocks <= 0 {
		return 0
	}
	return float64(l.UsedBlocks) / float64(l.MaxBlocks)
}

// LoadFromStats returns the load of the latest iteration in stats; ok is false for an
// empty list.
func LoadFromStats(stats []IterationStats) (l Load, ok bool) {
	if len(stats) == 0 {
		return Load{}, false
	}
	last := stats[0]
	for _, s := range stats[1:] {
		if s.Iter >= last.Iter {
			last = s
		}
	}
	l = Load{Running: last.NumActiveRequests, Queued: last.NumQueuedRequests, Iter: last.Iter}
	if kv := last.KVCacheStats; kv != nil {
		l.UsedBlocks, l.MaxBlocks, l.TokensPerBlock = kv.UsedNumBlocks, kv.MaxNumBlocks, kv.TokensPerBlock
	}
	return l, true
}
