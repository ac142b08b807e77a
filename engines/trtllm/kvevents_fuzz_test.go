package trtllm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

// FuzzKVCacheEvents: what POST /kv_cache_events answers is an engine's output, decoded
// and converted for the index. Any bytes either fail to decode, or convert without a
// panic into batches numbered one after the other whose events the index accepts: a
// stored event has hashes and exactly blockSize tokens per block, a removed one hashes.
func FuzzKVCacheEvents(f *testing.F) {
	for _, name := range []string{"kv_events.json", "kv_events_dp.json", "kv_events_restart.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(2))
	}
	f.Add([]byte(`[{"event_id":0,"data":{"type":"created"}},{"event_id":5,"data":{"type":"removed","block_hashes":[-1,18446744073709551615]}}]`), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, bs uint8) {
		evs, err := DecodeKVCacheEvents(bytes.NewReader(data))
		if err != nil {
			return
		}
		blockSize := int(bs%64) + 1
		c, err := NewEventConverter(blockSize)
		if err != nil {
			t.Fatal(err)
		}
		var seq uint64
		// Two polls of the same events: the second sees the ids again (a restart).
		for range 2 {
			for _, b := range c.Convert(evs, 1700000000) {
				if b.Seq != seq {
					t.Fatalf("batch seq %d, want %d", b.Seq, seq)
				}
				seq++
				for i, e := range b.Events {
					switch e.Kind {
					case kv.BlockStored:
						if len(e.EngineHashes) == 0 || e.BlockSize != blockSize || len(e.TokenIDs) != len(e.EngineHashes)*blockSize {
							t.Fatalf("batch %d event %d: stored %d hashes, %d tokens, block size %d (want %d)",
								b.Seq, i, len(e.EngineHashes), len(e.TokenIDs), e.BlockSize, blockSize)
						}
					case kv.BlockRemoved:
						if len(e.EngineHashes) == 0 {
							t.Fatalf("batch %d event %d: removed without hashes", b.Seq, i)
						}
					case kv.AllBlocksCleared:
					default:
						t.Fatalf("batch %d event %d: kind %v", b.Seq, i, e.Kind)
					}
				}
			}
		}
	})
}
