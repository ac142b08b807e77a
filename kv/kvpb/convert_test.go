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
