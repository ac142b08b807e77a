package kvevents

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/turbine-llm/turbine/kv"
)

// TestCacheSaltExtraKeys: a salted BlockStored that starts a sequence travels in vLLM's
// extra_keys (first block [lora_name, salt] or [salt]) and decodes to the same event; a
// continuation carries no salt; vLLM's own layout (array and map) decodes alike.
func TestCacheSaltExtraKeys(t *testing.T) {
	stored := func(lora, salt string, parent bool) kv.Event {
		ev := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{7, 8}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2,
			LoraName: lora, CacheSalt: salt, Medium: "GPU"}
		if parent {
			ev.HasParent, ev.ParentHash = true, 6
		}
		return ev
	}
	for _, ev := range []kv.Event{stored("", "s1", false), stored("sql", "s2", false), stored("", "", false), stored("sql", "", false)} {
		b, err := EncodePayload(kv.Batch{Events: []kv.Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePayload(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Events[0], ev) {
			t.Errorf("round trip\n got  %+v\nwant %+v", got.Events[0], ev)
		}
	}
	// A continuation's salt is not written (it is in its parent's hash).
	b, _ := EncodePayload(kv.Batch{Events: []kv.Event{stored("", "s1", true)}})
	if got, _ := DecodePayload(b); got.Events[0].CacheSalt != "" {
		t.Errorf("continuation decoded with salt %q", got.Events[0].CacheSalt)
	}
	// vLLM's layouts, written independently: extra_keys after lora_name, then group_idx.
	arr := []any{1.5, []any{[]any{"BlockStored", []any{uint64(7)}, nil, []any{1, 2}, 2, nil, "GPU", "sql",
		[]any{[]any{"sql", "tenant-a"}}, 0}}, 0}
	m := []any{1.5, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{uint64(7)}, "parent_block_hash": nil,
		"token_ids": []any{1, 2}, "block_size": 2, "lora_id": nil, "medium": "GPU", "lora_name": nil,
		"extra_keys": []any{[]any{"tenant-b"}}}}, 0}
	mm := []any{1.5, []any{[]any{"BlockStored", []any{uint64(7)}, nil, []any{1, 2}, 2, nil, "GPU", nil,
		[]any{[]any{[]any{"img-hash", 0}, "tenant-c"}}}}, 0} // a multimodal key: not a plain salt
	for _, tc := range []struct {
		payload    any
		lora, salt string
	}{{arr, "sql", "tenant-a"}, {m, "", "tenant-b"}, {mm, "", ""}} {
		b, err := msgpack.Marshal(tc.payload)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePayload(b)
		if err != nil {
			t.Fatal(err)
		}
		if e := got.Events[0]; e.LoraName != tc.lora || e.CacheSalt != tc.salt {
			t.Errorf("%v: lora %q salt %q, want %q %q", tc.payload, e.LoraName, e.CacheSalt, tc.lora, tc.salt)
		}
	}
}
