package kvpb

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// FuzzPeerMessages feeds a Router the peer messages a Router grain takes from the wire
// (docs/reference.md §2): bytes decoded as a KvEventBatch, a BlockDump and a
// RouteRequest, each converted as the grain converts it and applied to a router with two
// registered workers. Nothing may panic; a batch the converter accepts either applies
// or is refused with an error; a route answers a decision on a registered worker or one
// of the router's documented errors; and the router still routes a well-formed request
// afterwards.
func FuzzPeerMessages(f *testing.F) {
	parent, promptTokens := uint64(7), int32(40)
	seed := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	stored := &messages.KvEvent{Event: &messages.KvEvent_Stored{Stored: &messages.KvBlockStored{
		BlockHashes: []uint64{1, 2}, ParentBlockHash: &parent, TokenIds: make([]uint32, 32), BlockSize: 16}}}
	removed := &messages.KvEvent{Event: &messages.KvEvent_Removed{Removed: &messages.KvBlockRemoved{BlockHashes: []uint64{2}}}}
	cleared := &messages.KvEvent{Event: &messages.KvEvent_Cleared{Cleared: &messages.KvAllBlocksCleared{}}}
	f.Add(seed(&messages.KvEventBatch{WorkerId: "w0", EngineEpoch: 1, Seq: 1, Events: []*messages.KvEvent{stored, removed}}), uint8(0))
	f.Add(seed(&messages.KvEventBatch{WorkerId: "w1", EngineEpoch: 1, Seq: 1, Events: []*messages.KvEvent{cleared, {}}}), uint8(0))
	hashedStored := &messages.KvEvent{Event: &messages.KvEvent_Stored{Stored: &messages.KvBlockStored{
		BlockHashes: []uint64{1, 2}, SequenceHashes: []uint64{5, 6}, BlockSize: 16}}}
	f.Add(seed(&messages.KvEventBatch{WorkerId: "w0", EngineEpoch: 1, Seq: 1, HashScheme: kv.HashScheme,
		Events: []*messages.KvEvent{hashedStored, stored, removed}}), uint8(3))
	f.Add(seed(&messages.BlockDump{WorkerId: "w0", EngineEpoch: 1, LastSeq: 3, Events: []*messages.KvEvent{stored}, Last: true}), uint8(1))
	f.Add(seed(&messages.BlockDump{WorkerId: "w1", EngineEpoch: 1, HashScheme: kv.HashScheme, Last: true, Runs: []*messages.KvHashedRun{
		{BlockHashes: []uint64{1, 2}, SequenceHashes: []uint64{5, 6}, BlockSize: 16},
		{ParentBlockHash: &parent, BlockHashes: []uint64{3}, SequenceHashes: []uint64{7}, BlockSize: 16, Medium: "GPU"}}}), uint8(4))
	f.Add(seed(&messages.RouteRequest{RequestId: "r", TokenIds: make([]uint32, 40)}), uint8(2))
	f.Add(seed(&messages.RouteRequest{RequestId: "r", BlockHashes: []uint64{1, 2, 3}, PromptTokens: &promptTokens, PinWorker: "w1"}), uint8(2))
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		cfg := kv.DefaultConfig(16)
		cfg.NoDump = kind/3%2 == 1 // as the Router grain: the index then takes hashed dumps
		r, err := kv.NewRouter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"w0", "w1"} {
			if _, err := r.Register(kv.WorkerSpec{ID: id, BlockSize: 16, TotalBlocks: 1024, Ready: true, Epoch: 1}); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Unix(1000, 0)
		rng := rand.New(rand.NewPCG(1, 2))
		switch kind % 3 {
		case 0:
			var m messages.KvEventBatch
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			if evs, err := BatchEvents(&m); err == nil {
				_, _ = r.ApplyBatch(m.GetWorkerId(), m.GetEngineEpoch(), m.GetSeq(), evs)
			}
		case 1:
			var m messages.BlockDump
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			if evs, err := DumpEvents(&m); err == nil {
				_, _ = r.ApplyDump(m.GetWorkerId(), m.GetEngineEpoch(), m.GetLastSeq(), evs, int(m.GetPart()), m.GetLast())
			}
		case 2:
			var m messages.RouteRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			d, err := r.Route(RouteInput(&m), now, rng)
			switch {
			case err == nil:
				if d.WorkerID != "w0" && d.WorkerID != "w1" {
					t.Fatalf("routed to %q, not a registered worker", d.WorkerID)
				}
				r.Free(m.GetRequestId())
			case errors.Is(err, kv.ErrInvalidRequest), errors.Is(err, kv.ErrNoWorkers), errors.Is(err, kv.ErrAllBusy),
				errors.Is(err, kv.ErrNoPrefillWorkers):
			default:
				t.Fatalf("route: undocumented error %v", err)
			}
		}
		d, err := r.Route(kv.RouteInput{RequestID: "after", Tokens: make([]uint32, 48)}, now, rng)
		if err != nil || (d.WorkerID != "w0" && d.WorkerID != "w1") {
			t.Fatalf("a well-formed request after the peer message: %+v, %v", d, err)
		}
	})
}
