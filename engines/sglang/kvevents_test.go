package sglang

import (
	"reflect"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/kv"
)

// SGLang publishes KV events over ZeroMQ in vLLM's layout
// (python/sglang/srt/disaggregation/kv_events.py: array-like msgspec structs, tagged
// events). These payloads follow SGLang's own structs, which differ from vLLM's in their
// tails, and must decode with engines/kvevents.
func TestSGLangKVEventPayloads(t *testing.T) {
	ids := func(b []byte, vs ...uint64) []byte {
		b = msgp.AppendArrayHeader(b, uint32(len(vs)))
		for _, v := range vs {
			b = msgp.AppendUint64(b, v)
		}
		return b
	}
	toks := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	stored := func(b []byte, medium string) []byte {
		n := 6
		if medium != "" {
			n = 7
		}
		b = msgp.AppendArrayHeader(b, uint32(n))
		b = msgp.AppendString(b, "BlockStored")
		b = ids(b, 11, 12)
		b = msgp.AppendNil(b) // parent_block_hash
		b = ids(b, toks...)
		b = msgp.AppendInt(b, 4) // block_size
		b = msgp.AppendNil(b)    // lora_id
		if medium != "" {
			b = msgp.AppendString(b, medium)
		}
		return b
	}
	removed := func(b []byte, medium string) []byte {
		n := 2
		if medium != "" {
			n = 3
		}
		b = msgp.AppendArrayHeader(b, uint32(n))
		b = msgp.AppendString(b, "BlockRemoved")
		b = ids(b, 12)
		if medium != "" {
			b = msgp.AppendString(b, medium)
		}
		return b
	}
	want := func(medium string, rank int) kv.Batch {
		return kv.Batch{Timestamp: 1.5, DataParallelRank: rank, Events: []kv.Event{
			{Kind: kv.BlockStored, EngineHashes: []uint64{11, 12}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4, Medium: medium},
			{Kind: kv.BlockRemoved, EngineHashes: []uint64{12}, Medium: medium},
			{Kind: kv.AllBlocksCleared},
		}}
	}
	batch := func(medium string, rank *int64) []byte {
		n := 2 // EventBatch(ts, events), omit_defaults drops a None attn_dp_rank
		if rank != nil {
			n = 3
		}
		b := msgp.AppendArrayHeader(nil, uint32(n))
		b = msgp.AppendFloat64(b, 1.5)
		b = msgp.AppendArrayHeader(b, 3)
		b = stored(b, medium)
		b = removed(b, medium)
		b = msgp.AppendArrayHeader(b, 1)
		b = msgp.AppendString(b, "AllBlocksCleared")
		if rank != nil {
			b = msgp.AppendInt64(b, *rank)
		}
		return b
	}
	two := int64(2)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    kv.Batch
	}{
		{"without medium and dp rank", batch("", nil), want("", -1)},
		{"with medium and attn_dp_rank", batch("CPU_PINNED", &two), want("CPU_PINNED", 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kvevents.DecodePayload(tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
