package worker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// RouterClient is the part of the Router grain a worker talks to.
type RouterClient interface {
	Register(*messages.RegisterWorker) (*messages.RegisterAck, error)
	Deregister(*messages.DeregisterWorker) (*messages.Ack, error)
	PublishEvents(*messages.KvEventBatch) (*messages.EventAck, error)
	PublishDump(*messages.BlockDump) (*messages.Ack, error)
}

// dumpPartEvents caps the events of one BlockDump message, keeping each remote message
// far below gRPC's size limit (a stored block of 64 tokens is about 300 bytes;
// docs/actor-library.md §5).
const dumpPartEvents = 4096

// publishBlocks caps the blocks of the engine batches merged into one KV event batch
// (relay.onBatches): the merged message stays about as small as a dump part.
const publishBlocks = dumpPartEvents

// dumpPartBlocks caps the blocks of one hashed BlockDump part (about 16 bytes each, 1 MiB
// a part); a part holds whole runs, so it may exceed the cap by one run.
const dumpPartBlocks = 65536

// relay item kinds, delivered in order on one channel.
type (
	relayBatch     struct{ batch kv.Batch }
	relayHeartbeat struct {
		info *messages.WorkerInfo
		load *messages.WorkerLoad
		seq  uint64 // info's adapter sequence (workerActor.loraSeq when info was made)
	}
	// relayRegister registers info at once with the load of the latest heartbeat (an
	// adapter change, the seq-th); done is closed once the router answered, or at once
	// when nothing more goes to the router.
	relayRegister struct {
		info *messages.WorkerInfo
		seq  uint64
		done chan struct{}
	}
	relayEpoch struct{ epoch uint64 } // engine (re)started: forget its blocks
	relayDump  struct{}
	// relayReregister registers again with the latest info and load, without a scrape (a
	// membership change: the Router grain may have moved).
	relayReregister struct{}
	// relayAdopt: a new worker (owner) adopted the relay with its parked engine; it
	// registers with router from now on, and only owner's info.
	relayAdopt struct {
		router RouterClient
		owner  *messages.ActorRef
	}
	relayLeave struct {
		reason string
		done   chan struct{}
	}
)

// relay owns the worker's block list and its event numbering and is the only sender to
// the Router grain: KV event batches, dumps and registrations leave in the order they
// were produced.
type relay struct {
	workerID string
	router   RouterClient
	log      zerolog.Logger
	in       chan any

	blocks  *BlockList
	epoch   uint64
	seq     uint64 // last batch number sent in this epoch
	lastEng uint64 // last engine sequence number seen
	seenEng bool
	info    *messages.WorkerInfo
	load    *messages.WorkerLoad // of the latest heartbeat
	left    bool                 // deregistered (draining or stopping): nothing more goes to the router
	// owner is the worker that adopted the relay with a parked engine (nil: the one
	// that made it): what a heartbeat of the worker that parked it, late, registers is
	// dropped.
	owner *messages.ActorRef
	// adapters is the info of the latest adapter change registered (relayRegister) and
	// adapterSeq its sequence: a heartbeat made before it registers its adapters instead
	// of its own stale ones.
	adapters   *messages.WorkerInfo
	adapterSeq uint64

	failingSince, lastFailLog time.Time // registration failures, for paced logging

	// reregQueued is set while a relayReregister waits in in: changes coming faster than
	// the relay registers add none.
	reregQueued atomic.Bool
	// held is an item taken from in while merging batches (onBatches), handled next.
	held any
	// eventScheme is the hash scheme the router's last answer offered for event batches
	// (event_hash_scheme; 0: none): at kv.HashScheme, stored blocks go hashed, as their
	// sequence hashes instead of their token ids (filter).
	eventScheme uint32
}

func newRelay(workerID string, router RouterClient, log zerolog.Logger) *relay {
	return &relay{workerID: workerID, router: router, log: log, in: make(chan any, 4096), blocks: NewBlockList()}
}

// run processes items until ctx ends.
func (r *relay) run(ctx context.Context) {
	for {
		if it := r.held; it != nil {
			r.held = nil
			r.handle(it)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case it := <-r.in:
			r.handle(it)
		}
	}
}

func (r *relay) handle(it any) {
	if a, ok := it.(relayAdopt); ok { // a new owner: even a relay that left
		r.router, r.owner, r.info, r.adapters, r.adapterSeq, r.left = a.router, a.owner, nil, nil, 0, false
		r.eventScheme = 0 // the new router's answers say
		return
	}
	if _, leave := it.(relayLeave); r.left && !leave {
		if reg, ok := it.(relayRegister); ok {
			close(reg.done)
		}
		return
	}
	switch it := it.(type) {
	case relayHeartbeat:
		if !r.owns(it.info) {
			return
		}
	case relayRegister:
		if !r.owns(it.info) {
			close(it.done)
			return
		}
	}
	switch it := it.(type) {
	case relayEpoch:
		r.epoch, r.seq, r.seenEng = it.epoch, 0, false
		r.blocks.Clear()
	case relayBatch:
		r.onBatches(it.batch)
	case relayHeartbeat:
		r.load = it.load
		info := it.info
		if r.adapters != nil && it.seq < r.adapterSeq {
			info = proto.Clone(info).(*messages.WorkerInfo)
			info.Adapters, info.MaxLoras, info.LoraLoadMs = r.adapters.Adapters, r.adapters.MaxLoras, r.adapters.LoraLoadMs
			info.KnownAdapters = r.adapters.KnownAdapters
		}
		r.register(info, it.load)
	case relayRegister:
		load := r.lastLoad()
		if it.seq >= r.adapterSeq {
			r.adapters, r.adapterSeq = it.info, it.seq
		}
		r.register(it.info, load)
		close(it.done)
	case relayDump:
		r.dump(0) // DumpBlocksRequest: the sender's scheme is not known
	case relayReregister:
		r.reregQueued.Store(false)
		if r.info != nil {
			r.register(r.info, r.lastLoad())
		}
	case relayLeave:
		r.left = true
		if _, err := r.router.Deregister(&messages.DeregisterWorker{WorkerId: r.workerID, Reason: it.reason,
			Actor: r.info.GetActor()}); err != nil {
			r.log.Debug().Err(err).Msg("deregister failed")
		}
		close(it.done)
	}
}

// lastLoad is the latest heartbeat's load, or an empty one before any.
// owns reports whether info is of the relay's worker (its owner, once adopted).
func (r *relay) owns(info *messages.WorkerInfo) bool {
	a := info.GetActor()
	return r.owner == nil || (a.GetAddress() == r.owner.GetAddress() && a.GetId() == r.owner.GetId())
}

func (r *relay) lastLoad() *messages.WorkerLoad {
	if r.load == nil {
		return &messages.WorkerLoad{}
	}
	return r.load
}

// reregister asks the relay to register again with what it last registered (at most one
// such request waits at a time; none when the relay's queue is full, the next heartbeat
// registers anyway). Safe from any goroutine.
func (r *relay) reregister() {
	if !r.reregQueued.CompareAndSwap(false, true) {
		return
	}
	select {
	case r.in <- relayReregister{}:
	default:
		r.reregQueued.Store(false)
	}
}

// register sends a registration of info with load, and a dump when the router asks.
func (r *relay) register(info *messages.WorkerInfo, load *messages.WorkerLoad) {
	r.info = info
	ack, err := r.router.Register(&messages.RegisterWorker{Worker: info, Load: load, LastEventSeq: r.seq})
	if err != nil {
		// Once when it starts failing, then once a minute: a router out of reach (no
		// frontend, discovery down) must not flood the log every heartbeat.
		if now := time.Now(); r.failingSince.IsZero() || now.Sub(r.lastFailLog) >= time.Minute {
			if r.failingSince.IsZero() {
				r.failingSince = now
			}
			r.lastFailLog = now
			r.log.Warn().Err(err).Dur("failing_for", now.Sub(r.failingSince).Round(time.Second)).
				Msg("register with router failed: no Router grain reachable (is a frontend up, and discovery reachable?)")
		}
		return
	}
	if !r.failingSince.IsZero() {
		r.log.Info().Dur("failed_for", time.Since(r.failingSince).Round(time.Second)).Msg("registered with router again")
		r.failingSince = time.Time{}
	}
	if !ack.Accepted {
		r.log.Error().Str("reason", ack.Error).Msg("router refused this worker")
		return
	}
	r.eventScheme = ack.EventHashScheme
	if ack.NeedDump {
		r.dump(ack.DumpHashScheme)
	}
}

// onBatch relays one engine batch: its events go into the block list and to the
// router (filter, publish).
func (r *relay) onBatch(b kv.Batch) { r.publish(r.filter(b)) }

// onBatches relays first with the engine batches queued right behind it as one KV event
// batch, up to publishBlocks blocks: while a publish waits for a slow router (a frontend
// short of CPU, its answer up to the call's timeout), the batches produced meanwhile
// leave together in the next, so that the relay keeps up and a heartbeat queued behind
// them waits for one call, not one per batch. The first other item taken from the queue
// is handled next (held).
func (r *relay) onBatches(first kv.Batch) {
	events := r.filter(first)
	for blocks := eventBlocks(events); blocks < publishBlocks; {
		var it any
		select {
		case it = <-r.in:
		default:
		}
		if it == nil {
			break
		}
		b, ok := it.(relayBatch)
		if !ok {
			r.held = it
			break
		}
		more := r.filter(b.batch)
		blocks += eventBlocks(more)
		events = append(events, more...)
	}
	r.publish(events)
}

// eventBlocks is the number of blocks events name.
func eventBlocks(events []kv.Event) int {
	n := 0
	for _, ev := range events {
		n += max(len(ev.EngineHashes), 1)
	}
	return n
}

// filter checks an engine batch's numbering, applies its GPU events to the block list and
// returns the events to relay (orphan blocks left out).
func (r *relay) filter(b kv.Batch) []kv.Event {
	if r.seenEng && b.Seq <= r.lastEng {
		// The publisher's numbering went backwards: the engine restarted behind our back
		// (docs/reference.md §1, "Engine restarts").
		r.log.Warn().Uint64("seq", b.Seq).Uint64("last", r.lastEng).Msg("KV event sequence reset: clearing blocks")
		r.blocks.Clear()
		b.Events = append([]kv.Event{{Kind: kv.AllBlocksCleared}}, b.Events...)
	}
	if r.seenEng && b.Seq > r.lastEng+1 {
		r.log.Warn().Uint64("seq", b.Seq).Uint64("last", r.lastEng).
			Msg("KV events lost between the engine and this worker: the router's index may keep blocks the engine dropped")
	}
	r.seenEng, r.lastEng = true, b.Seq
	kept, orphans := b.Events[:0], 0
	for _, ev := range b.Events {
		if !kv.OnGPU(ev.Medium) {
			// Another tier's (vLLM's CPU offload): relayed, but the list, like the
			// router's index, is of the GPU's blocks, which such events do not change.
			kept = append(kept, ev)
			continue
		}
		if ev.Kind == kv.BlockStored && ev.HasParent && !r.blocks.Holds(ev.ParentHash) {
			// An orphan (docs/reference.md §1, "Orphan blocks"): chained onto a block
			// the engine no longer holds, or never announced. No prefix lookup can reach
			// it, and a router would take it for lost events and ask for the whole list.
			orphans += len(ev.EngineHashes)
			continue
		}
		if ev.Kind != kv.BlockStored || r.eventScheme != kv.HashScheme {
			if err := r.blocks.Apply(ev); err != nil {
				r.log.Warn().Err(err).Msg("bad KV event from engine")
			}
			kept = append(kept, ev)
			continue
		}
		seqs, err := r.blocks.ApplyHashed(ev)
		if err != nil {
			r.log.Warn().Err(err).Msg("bad KV event from engine")
		}
		if seqs != nil {
			// Hashed here, once, for a router that offered the scheme: 8 bytes a block
			// instead of its tokens, and nothing for the router to hash (docs/reference.md §10).
			ev = kv.Event{Kind: kv.BlockStored, EngineHashes: ev.EngineHashes, SequenceHashes: seqs,
				HasParent: ev.HasParent, ParentHash: ev.ParentHash, BlockSize: ev.BlockSize,
				LoraName: ev.LoraName, Medium: ev.Medium}
		}
		kept = append(kept, ev)
	}
	if orphans > 0 {
		r.log.Debug().Int("blocks", orphans).Msg("KV blocks stored onto a block the engine no longer holds: not relayed")
	}
	return kept
}

// publish sends events to the router as the next batch of this epoch (none when empty),
// and a dump when the router asks.
func (r *relay) publish(events []kv.Event) {
	if len(events) == 0 {
		return
	}
	r.seq++
	batch := &messages.KvEventBatch{WorkerId: r.workerID, EngineEpoch: r.epoch, Seq: r.seq, Events: kvpb.ToProtoAll(events)}
	for i := range events {
		if events[i].SequenceHashes != nil {
			batch.HashScheme = kv.HashScheme
			break
		}
	}
	ack, err := r.router.PublishEvents(batch)
	if err != nil {
		r.log.Warn().Err(err).Msg("publish KV events failed; the router will ask for a dump")
		return
	}
	r.eventScheme = ack.EventHashScheme
	if ack.NeedDump {
		r.dump(ack.DumpHashScheme)
	}
}

// dump sends the block list to the router activation that asked, hashed when the
// asking answer offered this worker's hash scheme (scheme; 0: none), else as token ids.
// The scheme is the asking answer's own, never an earlier one's: another activation
// (an older version during a move) may ask next.
func (r *relay) dump(scheme uint32) {
	var parts []*messages.BlockDump
	if scheme == kv.HashScheme {
		parts = hashedParts(r.blocks.DumpHashed())
	} else {
		parts = plainParts(r.blocks.Dump())
	}
	for i, msg := range parts {
		msg.WorkerId, msg.EngineEpoch, msg.LastSeq = r.workerID, r.epoch, r.seq
		msg.Part, msg.Last = int32(i), i == len(parts)-1
		if _, err := r.router.PublishDump(msg); err != nil {
			r.log.Warn().Err(err).Msg("publish block dump failed")
			return
		}
	}
}

// plainParts splits a token-id dump into parts of up to dumpPartEvents events; an empty
// list is one empty part.
func plainParts(evs []kv.Event) []*messages.BlockDump {
	parts := []*messages.BlockDump{}
	for start := 0; ; start += dumpPartEvents {
		end := min(start+dumpPartEvents, len(evs))
		parts = append(parts, &messages.BlockDump{Events: kvpb.ToProtoAll(evs[start:end])})
		if end == len(evs) {
			return parts
		}
	}
}

// hashedParts splits a hashed dump (BlockList.DumpHashed) into parts of whole runs, up to
// dumpPartBlocks blocks a part (a part of one run may hold more); an empty list is one
// empty part.
func hashedParts(evs []kv.Event) []*messages.BlockDump {
	parts := []*messages.BlockDump{}
	for start := 0; ; {
		end, blocks := start, 0
		for end < len(evs) && (end == start || blocks+len(evs[end].EngineHashes) <= dumpPartBlocks) {
			blocks += len(evs[end].EngineHashes)
			end++
		}
		runs := make([]*messages.KvHashedRun, end-start)
		for i, ev := range evs[start:end] {
			runs[i] = kvpb.ToProtoRun(ev)
		}
		parts = append(parts, &messages.BlockDump{Runs: runs, HashScheme: kv.HashScheme})
		if end == len(evs) {
			return parts
		}
		start = end
	}
}
