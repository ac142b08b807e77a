// Package kvpb converts KV events between the kv package's types and their protobuf form
// (messages.KvEvent), the form in which they travel between workers and Router grains.
package kvpb

import (
	"errors"
	"fmt"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// ToProto converts one event; a stored event hashed by the worker
// (kv.Event.SequenceHashes) carries its sequence hashes. Slices are shared, not copied.
func ToProto(ev kv.Event) *messages.KvEvent {
	switch ev.Kind {
	case kv.BlockStored:
		return &messages.KvEvent{Event: &messages.KvEvent_Stored{Stored: &messages.KvBlockStored{
			BlockHashes:     ev.EngineHashes,
			ParentBlockHash: parent(ev),
			TokenIds:        ev.TokenIDs,
			BlockSize:       int32(ev.BlockSize),
			LoraName:        ev.LoraName,
			Medium:          ev.Medium,
			CacheSalt:       ev.CacheSalt,
			SequenceHashes:  ev.SequenceHashes,
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

// parent is a stored event's parent hash, nil when it has none.
func parent(ev kv.Event) *uint64 {
	if !ev.HasParent {
		return nil
	}
	h := ev.ParentHash
	return &h
}

// ToProtoAll converts a list of events.
func ToProtoAll(evs []kv.Event) []*messages.KvEvent {
	out := make([]*messages.KvEvent, len(evs))
	for i, ev := range evs {
		out[i] = ToProto(ev)
	}
	return out
}

// FromProto converts one event. Sequence hashes of a stored event are taken as they are:
// the caller checks the scheme they were computed under (BatchEvents, DumpEvents).
// Errors: an event with no type set.
func FromProto(m *messages.KvEvent) (kv.Event, error) {
	switch e := m.GetEvent().(type) {
	case *messages.KvEvent_Stored:
		s := e.Stored
		return kv.Event{Kind: kv.BlockStored, EngineHashes: s.BlockHashes, HasParent: s.ParentBlockHash != nil,
			ParentHash: s.GetParentBlockHash(), TokenIDs: s.TokenIds, BlockSize: int(s.BlockSize),
			LoraName: s.LoraName, Medium: s.Medium, CacheSalt: s.CacheSalt, SequenceHashes: nilIfEmpty(s.SequenceHashes)}, nil
	case *messages.KvEvent_Removed:
		return kv.Event{Kind: kv.BlockRemoved, EngineHashes: e.Removed.BlockHashes, Medium: e.Removed.Medium}, nil
	case *messages.KvEvent_Cleared:
		return kv.Event{Kind: kv.AllBlocksCleared}, nil
	default:
		return kv.Event{}, fmt.Errorf("kvpb: KV event with no type")
	}
}

// nilIfEmpty is h, or nil when it has no element (absent on the wire).
func nilIfEmpty(h []uint64) []uint64 {
	if len(h) == 0 {
		return nil
	}
	return h
}

// BatchEvents converts a KV event batch as a Router grain applies it. Errors: an event
// with no type (naming its index); stored events hashed by the worker
// (sequence_hashes) under a scheme other than kv.HashScheme (the batch's hash_scheme).
// The index checks the rest of a hashed event's shape (kv.ValidateStored).
func BatchEvents(m *messages.KvEventBatch) ([]kv.Event, error) {
	evs, err := FromProtoAll(m.GetEvents())
	if err != nil {
		return nil, err
	}
	if err := checkScheme(evs, m.GetHashScheme()); err != nil {
		return nil, fmt.Errorf("kvpb: KV event batch: %w", err)
	}
	return evs, nil
}

// checkScheme fails when one of evs carries sequence hashes and scheme is not
// kv.HashScheme.
func checkScheme(evs []kv.Event, scheme uint32) error {
	if scheme == kv.HashScheme {
		return nil
	}
	for i := range evs {
		if evs[i].SequenceHashes != nil {
			return fmt.Errorf("event %d hashed under scheme %d, this router's is %d", i, scheme, kv.HashScheme)
		}
	}
	return nil
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

// RouteInput is the kv.Router.Route input of a RouteRequest; slices are shared, not
// copied.
func RouteInput(req *messages.RouteRequest) kv.RouteInput {
	return kv.RouteInput{RequestID: req.GetRequestId(), Tokens: req.GetTokenIds(), LoraName: req.GetLoraName(),
		CacheSalt: req.GetCacheSalt(), HasOverlapWeight: req.OverlapWeight != nil, OverlapWeight: req.GetOverlapWeight(),
		HasTemperature: req.Temperature != nil, Temperature: req.GetTemperature(),
		Exclude: req.GetExcludeWorkers(), ExcludePrefill: req.GetExcludePrefillWorkers(),
		LocalPrefill: req.GetLocalPrefill(), WillAck: req.GetWillAck(), PinWorker: req.GetPinWorker(),
		SessionID: req.GetSessionId(), BlockHashes: req.GetBlockHashes(), PromptTokens: int(req.GetPromptTokens()),
		Explain: req.GetExplain(), Admitted: req.GetAdmitted(), LoraOnDemand: req.GetLoraOnDemand(), LoraPath: req.GetLoraPath()}
}

// RouteResponse is the answer to a Route call that kv.Router.Route answered with d and
// err: for an error, its text and Outcome(err), nothing else; otherwise the chosen
// worker's id, the prompt and overlap blocks (counts of KV blocks), the decision, the
// uncached prefill tokens and, for a remote decision, the prefill worker's id, overlap
// blocks and its leg's request id (the router tracks the leg under it), and the
// explained candidates when the route asked (RouteCandidates). Actor references and
// SGLang bootstrap addresses are the caller's to add: the core knows no actor.
func RouteResponse(d kv.Decision, err error) *messages.RouteResponse {
	if err != nil {
		return &messages.RouteResponse{Error: err.Error(), Outcome: Outcome(err)}
	}
	r := &messages.RouteResponse{WorkerId: d.WorkerID, OverlapBlocks: int32(d.OverlapBlocks),
		PromptBlocks: int32(d.PromptBlocks), DisaggDecision: d.Disagg, UncachedPrefillTokens: d.UncachedPrefillTokens}
	if p := d.Prefill; p != nil {
		r.PrefillWorkerId, r.PrefillOverlapBlocks, r.PrefillRequestId = p.WorkerID, int32(p.OverlapBlocks), p.RequestID
	}
	r.Candidates = RouteCandidates(d.Candidates)
	r.LoraPath = d.LoraPath
	return r
}

// RouteCandidates converts a decision's explained candidates (kv.Decision.Candidates)
// to their protobuf form, in order; nil for none.
func RouteCandidates(cs []kv.ExplainedCandidate) []*messages.RouteCandidate {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*messages.RouteCandidate, len(cs))
	for i, c := range cs {
		rc := &messages.RouteCandidate{WorkerId: c.WorkerID, OverlapBlocks: int32(c.OverlapBlocks), Cost: c.Cost, Chosen: c.Chosen}
		if len(c.Terms) > 0 {
			rc.Terms = make([]*messages.CostTerm, len(c.Terms))
			for j, t := range c.Terms {
				rc.Terms[j] = &messages.CostTerm{Name: t.Name, Value: t.Value}
			}
		}
		out[i] = rc
	}
	return out
}

// Outcome is the RouteOutcome of an error kv.Router.Route returned: ROUTE_OK for nil,
// ROUTE_NO_PREFILL_WORKERS, ROUTE_ALL_BUSY, ROUTE_BAD_REQUEST (kv.ErrInvalidRequest),
// ROUTE_NO_ADAPTER (kv.ErrNoAdapter), else ROUTE_NO_WORKERS.
func Outcome(err error) messages.RouteOutcome {
	switch {
	case err == nil:
		return messages.RouteOutcome_ROUTE_OK
	case errors.Is(err, kv.ErrNoPrefillWorkers):
		return messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS
	case errors.Is(err, kv.ErrAllBusy):
		return messages.RouteOutcome_ROUTE_ALL_BUSY
	case errors.Is(err, kv.ErrInvalidRequest):
		return messages.RouteOutcome_ROUTE_BAD_REQUEST
	case errors.Is(err, kv.ErrNoAdapter):
		return messages.RouteOutcome_ROUTE_NO_ADAPTER
	}
	return messages.RouteOutcome_ROUTE_NO_WORKERS
}

// ToProtoRun converts a hashed BlockStored event of a block-list dump (one with
// kv.Event.SequenceHashes) to its run. Slices are shared, not copied.
func ToProtoRun(ev kv.Event) *messages.KvHashedRun {
	return &messages.KvHashedRun{ParentBlockHash: parent(ev), BlockHashes: ev.EngineHashes,
		SequenceHashes: ev.SequenceHashes, LoraName: ev.LoraName, Medium: ev.Medium, BlockSize: int32(ev.BlockSize)}
}

// DumpEvents converts a BlockDump part as a Router grain applies it: its events, then its
// runs as hashed BlockStored events (kv.Event.SequenceHashes; the index checks their
// block size). Errors: an event with no type (naming its index), runs hashed under a
// scheme other than kv.HashScheme, a run with no blocks or with not one sequence hash
// per block.
func DumpEvents(m *messages.BlockDump) ([]kv.Event, error) {
	evs, err := FromProtoAll(m.GetEvents())
	if err != nil {
		return nil, err
	}
	if err := checkScheme(evs, m.GetHashScheme()); err != nil {
		return nil, fmt.Errorf("kvpb: block dump: %w", err)
	}
	runs := m.GetRuns()
	if len(runs) == 0 {
		return evs, nil
	}
	if m.GetHashScheme() != kv.HashScheme {
		return nil, fmt.Errorf("kvpb: block dump runs hashed under scheme %d, this router's is %d", m.GetHashScheme(), kv.HashScheme)
	}
	for i, r := range runs {
		if len(r.BlockHashes) == 0 || len(r.SequenceHashes) != len(r.BlockHashes) {
			return nil, fmt.Errorf("kvpb: block dump run %d has %d blocks and %d sequence hashes (want one per block, at least one)",
				i, len(r.BlockHashes), len(r.SequenceHashes))
		}
		evs = append(evs, kv.Event{Kind: kv.BlockStored, EngineHashes: r.BlockHashes, SequenceHashes: r.SequenceHashes,
			HasParent: r.ParentBlockHash != nil, ParentHash: r.GetParentBlockHash(), BlockSize: int(r.BlockSize),
			LoraName: r.LoraName, Medium: r.Medium})
	}
	return evs, nil
}
