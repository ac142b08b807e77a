package kvpb

import (
	"reflect"
	"testing"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

func TestRoundTrip(t *testing.T) {
	evs := []kv.Event{
		{Kind: kv.BlockStored, EngineHashes: []uint64{1, 1 << 63}, HasParent: true, ParentHash: 7,
			TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, LoraName: "a", Medium: "GPU"},
		{Kind: kv.BlockStored, EngineHashes: []uint64{9}, TokenIDs: []uint32{5, 6}, BlockSize: 2},
		{Kind: kv.BlockStored, EngineHashes: []uint64{10, 11}, SequenceHashes: []uint64{21, 1 << 63}, HasParent: true, ParentHash: 9, BlockSize: 2},
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{1}, Medium: "CPU_PINNED"},
		{Kind: kv.AllBlocksCleared},
	}
	batch := &messages.KvEventBatch{Events: ToProtoAll(evs)}
	wire, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	var back messages.KvEventBatch
	if err := proto.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	got, err := FromProtoAll(back.Events)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, evs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, evs)
	}
}

func TestEmptyEventIsAnError(t *testing.T) {
	if _, err := FromProtoAll([]*messages.KvEvent{{}}); err == nil {
		t.Fatal("want an error for an event with no type")
	}
}

// A dump part's runs come back as the hashed events they were made from, after the
// part's events; runs under another hash scheme, or with hashes not one per block, are
// refused.
func TestDumpEvents(t *testing.T) {
	hashed := []kv.Event{
		{Kind: kv.BlockStored, EngineHashes: []uint64{1, 2}, SequenceHashes: []uint64{11, 12}, BlockSize: 16, Medium: "GPU"},
		{Kind: kv.BlockStored, EngineHashes: []uint64{3}, SequenceHashes: []uint64{13}, HasParent: true, ParentHash: 2,
			BlockSize: 16, LoraName: "a"},
	}
	plain := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{9}, TokenIDs: make([]uint32, 16), BlockSize: 16}
	part := &messages.BlockDump{Events: ToProtoAll([]kv.Event{plain}), HashScheme: kv.HashScheme}
	for _, ev := range hashed {
		part.Runs = append(part.Runs, ToProtoRun(ev))
	}
	wire, err := proto.Marshal(part)
	if err != nil {
		t.Fatal(err)
	}
	var back messages.BlockDump
	if err := proto.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	got, err := DumpEvents(&back)
	if want := append([]kv.Event{plain}, hashed...); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("dump events:\n got %+v (%v)\nwant %+v", got, err, want)
	}
	for name, bad := range map[string]*messages.BlockDump{
		"other scheme":     {Runs: back.Runs, HashScheme: kv.HashScheme + 1},
		"no scheme":        {Runs: back.Runs},
		"a hash short":     {Runs: []*messages.KvHashedRun{{BlockHashes: []uint64{1, 2}, SequenceHashes: []uint64{1}}}, HashScheme: kv.HashScheme},
		"no blocks":        {Runs: []*messages.KvHashedRun{{}}, HashScheme: kv.HashScheme},
		"an untyped event": {Events: []*messages.KvEvent{{}}},
	} {
		if evs, err := DumpEvents(bad); err == nil {
			t.Errorf("%s: %+v, want an error", name, evs)
		}
	}
}

// A batch's stored events hashed by the worker come back with their sequence hashes under
// the router's scheme, and the batch is refused under any other, or none; a batch
// without hashed events needs no scheme.
func TestBatchEvents(t *testing.T) {
	hashed := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1, 2}, SequenceHashes: []uint64{11, 12}, BlockSize: 16}
	plain := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{9}, TokenIDs: make([]uint32, 16), BlockSize: 16}
	for _, tc := range []struct {
		name   string
		events []kv.Event
		scheme uint32
		ok     bool
	}{
		{"hashed, the router's scheme", []kv.Event{plain, hashed}, kv.HashScheme, true},
		{"hashed, another scheme", []kv.Event{plain, hashed}, kv.HashScheme + 1, false},
		{"hashed, no scheme", []kv.Event{hashed}, 0, false},
		{"token ids, no scheme", []kv.Event{plain}, 0, true},
		{"token ids, another scheme", []kv.Event{plain}, kv.HashScheme + 1, true},
	} {
		wire, err := proto.Marshal(&messages.KvEventBatch{Events: ToProtoAll(tc.events), HashScheme: tc.scheme})
		if err != nil {
			t.Fatal(err)
		}
		var back messages.KvEventBatch
		if err := proto.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		got, err := BatchEvents(&back)
		if (err == nil) != tc.ok || (tc.ok && !reflect.DeepEqual(got, tc.events)) {
			t.Errorf("%s: %+v, %v", tc.name, got, err)
		}
	}
	// A dump's events are held to its scheme alike.
	if _, err := DumpEvents(&messages.BlockDump{Events: ToProtoAll([]kv.Event{hashed})}); err == nil {
		t.Error("dump with a hashed event and no scheme: want an error")
	}
}
