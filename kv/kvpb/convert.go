// Package kvpb converts KV events between the kv package's types and their protobuf form
// (messages.KvEvent), the form in which they travel between workers and Router grains.
package kvpb

import (
	"fmt"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// ToProto converts one event. Slices are shared, not copied.
func ToProto(ev kv.Event) *messages.KvEvent {
	switch ev.Kind {
	case kv.BlockStored:
		return &messages.KvEvent{Event: &messages.KvEvent_Stored{Stored: &messages.KvBlockStored{
			BlockHashes:     ev.EngineHashes,
			HasParent:       ev.HasParent,
			ParentBlockHash: ev.ParentHash,
			TokenIds:        ev.TokenIDs,
			BlockSize:       int32(ev.BlockSize),
			LoraName:        ev.LoraName,
			Medium:          ev.Medium,
		}}}
	case kv.BlockRemoved:
		return &messages.KvEvent{Event: &messages.KvEvent_Removed{Removed: &messages.KvBlockRemoved{
			BlockHashes: ev.EngineHashes,
			Medium:      ev.Medium,
		}}}
	default:
		return &messages.KvEvent{Event: &messages.KvEvent_Cleared{Cleared: &messages.KvAllBlocksCleared{}}}
	}
}

// ToProtoAll converts a list of events.
func ToProtoAll(evs []kv.Event) []*messages.KvEvent {
	out := make([]*messages.KvEvent, len(evs))
	for i, ev := range evs {
		out[i] = ToProto(ev)
	}
	return out
}

// FromProto converts one event. Errors: an event with no type set.
func FromProto(m *messages.KvEvent) (kv.Event, error) {
	switch e := m.GetEvent().(type) {
	case *messages.KvEvent_Stored:
		s := e.Stored
		return kv.Event{Kind: kv.BlockStored, EngineHashes: s.BlockHashes, HasParent: s.HasParent,
			ParentHash: s.ParentBlockHash, TokenIDs: s.TokenIds, BlockSize: int(s.BlockSize),
			LoraName: s.LoraName, Medium: s.Medium}, nil
	case *messages.KvEvent_Removed:
		return kv.Event{Kind: kv.BlockRemoved, EngineHashes: e.Removed.BlockHashes, Medium: e.Removed.Medium}, nil
	case *messages.KvEvent_Cleared:
		return kv.Event{Kind: kv.AllBlocksCleared}, nil
	default:
		return kv.Event{}, fmt.Errorf("kvpb: KV event with no type")
	}
}

// FromProtoAll converts a list of events; the error names the index of the bad event.
func FromProtoAll(ms []*messages.KvEvent) ([]kv.Event, error) {
	out := make([]kv.Event, len(ms))
	for i, m := range ms {
		ev, err := FromProto(m)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		out[i] = ev
	}
	return out, nil
}
