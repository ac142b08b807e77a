package worker

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// coreRouter is a RouterClient that does what a Router grain does with a worker's calls,
// over a kv.Router that keeps no token ids (as the grain runs it), every message through
// protobuf's wire format: it answers event_hash_scheme with offer() and
// dump_hash_scheme with dumpOff, and counts the stored events it got hashed.
type coreRouter struct {
	bs       int
	core     *kv.Router
	offer    func() uint32 // event_hash_scheme to answer
	dumpOff  uint32        // dump_hash_scheme to answer
	hashedEv int
	errs     []error
}

func newCoreRouter(t testing.TB, bs int, offer func() uint32, dump uint32) *coreRouter {
	cfg := kv.DefaultConfig(bs)
	cfg.NoDump = true
	c, err := kv.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &coreRouter{bs: bs, core: c, offer: offer, dumpOff: dump}
}

// wire is m after marshalling and unmarshalling into fresh.
func wire[M proto.Message](m M, fresh M) M {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	if err := proto.Unmarshal(b, fresh); err != nil {
		panic(err)
	}
	return fresh
}

func (c *coreRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	m = wire(m, &messages.RegisterWorker{})
	need, err := c.core.Register(kv.WorkerSpec{ID: m.Worker.WorkerId, BlockSize: c.bs, TotalBlocks: 1 << 20, Ready: true,
		Epoch: m.Worker.EngineEpoch, LastSeq: m.LastEventSeq})
	if err != nil {
		return &messages.RegisterAck{Error: err.Error()}, nil
	}
	return &messages.RegisterAck{Accepted: true, NeedDump: need, DumpHashScheme: c.dumpOff, EventHashScheme: c.offer()}, nil
}
func (c *coreRouter) Deregister(*messages.DeregisterWorker) (*messages.Ack, error) {
	return &messages.Ack{}, nil
}
func (c *coreRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	m = wire(m, &messages.KvEventBatch{})
	evs, err := kvpb.BatchEvents(m)
	if err != nil {
		c.errs = append(c.errs, err)
		return &messages.EventAck{NeedDump: true, DumpHashScheme: c.dumpOff, EventHashScheme: c.offer()}, nil
	}
	for _, ev := range evs {
		if ev.SequenceHashes != nil {
			c.hashedEv++
		}
	}
	need, _ := c.core.ApplyBatch(m.WorkerId, m.EngineEpoch, m.Seq, evs)
	return &messages.EventAck{NeedDump: need, DumpHashScheme: c.dumpOff, EventHashScheme: c.offer()}, nil
}
func (c *coreRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	m = wire(m, &messages.BlockDump{})
	evs, err := kvpb.DumpEvents(m)
	if err != nil {
		c.errs = append(c.errs, err)
		return &messages.Ack{}, nil
	}
	_, _ = c.core.ApplyDump(m.WorkerId, m.EngineEpoch, m.LastSeq, evs, int(m.Part), m.Last)
	return &messages.Ack{}, nil
}

// indexState is worker w0's blocks in c's index (engine hash → sequence hash) and the
// index's node count.
func indexState(c *coreRouter) (map[uint64]uint64, int) {
	m := map[uint64]uint64{}
	c.core.Index().WorkerBlocks(0, func(e, s uint64) { m[e] = s })
	return m, c.core.Index().Nodes()
}

// diffOpts shape a differential run (runDiff).
type diffOpts struct {
	mixedBS   bool // let other block sizes through
	dumps     bool // force dumps now and then
	toggle    bool // hashed relay's router toggles its offer
	plainDump bool // forced dumps in token ids (DumpBlocksRequest)
}

// runDiff feeds the random engine batches of data (blockListOps) to two relays, one
// answered with the hash scheme (or, with toggle, mostly with it) and one without, and
// checks after every batch that their routers' indexes hold the same blocks under the
// same sequence hashes.
func runDiff(t *testing.T, seed uint64, bs int, o diffOpts, data []byte) {
	rng := rand.New(rand.NewPCG(seed, 99))
	ops := blockListOps{data: data, wide: seed%2 == 0}
	hashedOffer := func() uint32 { return kv.HashScheme }
	if o.toggle {
		hashedOffer = func() uint32 {
			if rng.IntN(3) == 0 {
				return 0
			}
			return kv.HashScheme
		}
	}
	routers, relays := relayPair(t, bs, hashedOffer)
	var batch []kv.Event
	seq := uint64(0)
	var trace []string
	for {
		ev, _, ok := ops.next()
		if !ok {
			break
		}
		if ev.Kind == kv.BlockStored && ev.BlockSize != bs && !o.mixedBS {
			continue
		}
		batch = append(batch, ev)
		if len(batch) < 1+int(seq%4) {
			continue
		}
		seq++
		trace = append(trace, fmt.Sprintf("batch %d: %+v", seq, batch))
		for _, r := range relays {
			r.onBatch(kv.Batch{Seq: seq, Events: append([]kv.Event(nil), batch...)})
		}
		batch = batch[:0]
		if o.dumps && rng.IntN(10) == 0 {
			trace = append(trace, "dump")
			dumpBoth(relays, routers, o.plainDump)
		}
		if diff := indexDiff(routers); diff != "" {
			t.Fatalf("seed %d bs %d %+v batch %d: %s\nlast:\n%v", seed, bs, o, seq, diff, trace[max(0, len(trace)-30):])
		}
	}
	for i, cr := range routers {
		if len(cr.errs) > 0 {
			t.Fatalf("router %d: %v", i, cr.errs)
		}
	}
	if routers[0].hashedEv == 0 || routers[1].hashedEv != 0 {
		t.Fatalf("seed %d: %d stored events hashed where offered, %d where not", seed, routers[0].hashedEv, routers[1].hashedEv)
	}
}

// genData is a random blockListOps input for seed, clears rare.
func genData(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 77))
	data := make([]byte, 6000)
	for i := range data {
		data[i] = byte(rng.Uint32())
		if data[i] >= 250 && rng.IntN(8) != 0 {
			data[i] = byte(rng.IntN(250))
		}
	}
	return data
}

// TestRelaySendsHashedEvents: a relay answered with the router's hash scheme sends stored
// blocks as their sequence hashes, and its router's index holds after every batch exactly
// what the index of one sent token ids holds: random streams of chains with adapters,
// salts, CPU-tier copies, orphans, blocks stored again with other content, removals and
// clears, with dumps in either form, the offer switched on and off, and blocks of
// another block size.
func TestRelaySendsHashedEvents(t *testing.T) {
	for _, o := range []diffOpts{{}, {toggle: true}, {dumps: true}, {dumps: true, plainDump: true}, {mixedBS: true}, {dumps: true, toggle: true, mixedBS: true}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			for seed := uint64(1); seed <= 16; seed++ {
				for bs := 1; bs <= 3; bs++ {
					runDiff(t, seed, bs, o, genData(seed))
				}
			}
		})
	}
}

// reproRelays are two relays of worker w0 at block size bs, the first answered with the
// hash scheme, the second without, each with its router.
func reproRelays(t *testing.T, bs int) ([2]*coreRouter, [2]*relay) {
	return relayPair(t, bs, func() uint32 { return kv.HashScheme })
}

// relayPair are two registered relays of worker w0 at block size bs, each with its router:
// the first's answers offer event_hash_scheme offer() (and hashed dumps), the second's
// offer nothing.
func relayPair(t *testing.T, bs int, offer func() uint32) ([2]*coreRouter, [2]*relay) {
	routers := [2]*coreRouter{newCoreRouter(t, bs, offer, kv.HashScheme), newCoreRouter(t, bs, func() uint32 { return 0 }, 0)}
	var relays [2]*relay
	for i, cr := range routers {
		relays[i] = newRelay("w0", cr, zerolog.Nop())
		relays[i].handle(relayEpoch{epoch: 1})
		relays[i].register(&messages.WorkerInfo{WorkerId: "w0", EngineEpoch: 1}, &messages.WorkerLoad{})
	}
	return routers, relays
}

// compareRepro fails t when the two routers' indexes differ.
func compareRepro(t *testing.T, routers [2]*coreRouter, what string) {
	if diff := indexDiff(routers); diff != "" {
		t.Errorf("%s: %s", what, diff)
	}
}

// TestRelayHashedRestoreThenDump: a block stored again with other content, then a dump
// (which gives the router the first content the worker keeps), then a child: the child
// must chain onto what the router holds.
func TestRelayHashedRestoreThenDump(t *testing.T) {
	for _, form := range []string{"asker's form", "token ids (DumpBlocksRequest)"} {
		routers, relays := reproRelays(t, 2)
		send := sender(relays)
		send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{10, 11}, BlockSize: 2})
		send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{20, 21}, BlockSize: 2})
		compareRepro(t, routers, form+": after the re-store")
		dumpBoth(relays, routers, form != "asker's form")
		compareRepro(t, routers, form+": after the dump")
		send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{2}, HasParent: true, ParentHash: 1, TokenIDs: []uint32{30, 31}, BlockSize: 2})
		compareRepro(t, routers, form+": child stored after the dump")
	}
}

// TestRelayHashedOtherBlockSize: a block stored again at a block size the router refuses
// keeps the router's copy; its child must chain onto that.
func TestRelayHashedOtherBlockSize(t *testing.T) {
	routers, relays := reproRelays(t, 2)
	send := sender(relays)
	send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{10, 11}, BlockSize: 2})
	send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{1}, TokenIDs: []uint32{10}, BlockSize: 1}) // refused by the index
	send(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{2}, HasParent: true, ParentHash: 1, TokenIDs: []uint32{30, 31}, BlockSize: 2})
	compareRepro(t, routers, "child of a block re-stored at another block size")
}

// TestRelayHashedContentAddressed: as TestRelaySendsHashedEvents with a content-addressed
// engine (vLLM-like): an engine hash is a function of its parent's
// engine hash (or the salt), its tokens and adapter, so a hash is never re-stored with
// other content. Dumps in both forms, scheme toggles, merged batches, seq resets.
func TestRelayHashedContentAddressed(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		for _, bs := range []int{1, 2, 4} {
			realisticRun(t, seed, bs)
		}
	}
}

// realisticRun is one run of TestRelayHashedContentAddressed.
func realisticRun(t *testing.T, seed uint64, bs int) {
	rng := rand.New(rand.NewPCG(seed, 5))
	offer := func() uint32 {
		if rng.IntN(4) == 0 {
			return 0
		}
		return kv.HashScheme
	}
	routers, relays := relayPair(t, bs, offer)
	held := map[uint64]bool{} // engine's GPU blocks
	var heldList []uint64
	ehash := func(parent uint64, hasParent bool, salt, lora string, toks []uint32) uint64 {
		h := uint64(1469598103934665603)
		mix := func(x uint64) { h ^= x; h *= 1099511628211 }
		if hasParent {
			mix(parent)
		} else {
			for _, c := range salt {
				mix(uint64(c))
			}
			mix(77)
		}
		for _, c := range lora {
			mix(uint64(c) + 1000)
		}
		for _, x := range toks {
			mix(uint64(x) + 5)
		}
		return h % 1000003
	}
	engSeq := uint64(0)
	for step := 0; step < 400; step++ {
		nb := 1 + rng.IntN(3)
		var batches []kv.Batch
		for range nb {
			var evs []kv.Event
			for range 1 + rng.IntN(4) {
				switch r := rng.IntN(20); {
				case r < 11:
					ebs := bs
					if rng.IntN(6) == 0 {
						ebs = bs + 1
					}
					ev := kv.Event{Kind: kv.BlockStored, BlockSize: ebs, LoraName: []string{"", "", "ad"}[rng.IntN(3)],
						Medium: []string{"", "GPU", "CPU_PINNED"}[rng.IntN(3)]}
					var parent uint64
					if len(heldList) > 0 && rng.IntN(3) != 0 {
						parent = heldList[rng.IntN(len(heldList))]
						ev.HasParent, ev.ParentHash = true, parent
					} else {
						ev.CacheSalt = []string{"", "", "s1", "s2"}[rng.IntN(4)]
					}
					p, hp := parent, ev.HasParent
					for range 1 + rng.IntN(5) {
						toks := make([]uint32, ebs)
						for j := range toks {
							toks[j] = uint32(rng.IntN(3))
						}
						h := ehash(p, hp, ev.CacheSalt, ev.LoraName, toks)
						ev.EngineHashes = append(ev.EngineHashes, h)
						ev.TokenIDs = append(ev.TokenIDs, toks...)
						p, hp = h, true
					}
					if kv.OnGPU(ev.Medium) {
						for _, h := range ev.EngineHashes {
							if !held[h] {
								held[h] = true
								heldList = append(heldList, h)
							}
						}
					}
					evs = append(evs, ev)
				case r < 18:
					if len(heldList) == 0 {
						continue
					}
					ev := kv.Event{Kind: kv.BlockRemoved, Medium: []string{"", "GPU", "CPU_PINNED"}[rng.IntN(3)]}
					for range 1 + rng.IntN(4) {
						h := heldList[rng.IntN(len(heldList))]
						ev.EngineHashes = append(ev.EngineHashes, h)
					}
					if kv.OnGPU(ev.Medium) {
						for _, h := range ev.EngineHashes {
							delete(held, h)
						}
						heldList = heldList[:0]
						for h := range held {
							heldList = append(heldList, h)
						}
						slices.Sort(heldList)
					}
					evs = append(evs, ev)
				case r < 19:
					evs = append(evs, kv.Event{Kind: kv.AllBlocksCleared})
					clear(held)
					heldList = heldList[:0]
				}
			}
			engSeq++
			if rng.IntN(60) == 0 {
				engSeq = 1 // engine restarted behind the worker's back
				clear(held)
				heldList = heldList[:0]
			}
			batches = append(batches, kv.Batch{Seq: engSeq, Events: evs})
		}
		for _, r := range relays {
			cp := make([]kv.Batch, len(batches))
			for i, b := range batches {
				cp[i] = kv.Batch{Seq: b.Seq, Events: append([]kv.Event(nil), b.Events...)}
			}
			for _, b := range cp[1:] {
				r.in <- relayBatch{batch: b}
			}
			r.handle(relayBatch{batch: cp[0]})
			if len(r.in) != 0 {
				t.Fatal("not merged")
			}
		}
		if rng.IntN(15) == 0 {
			dumpBoth(relays, routers, rng.IntN(2) == 0)
		}
		if diff := indexDiff(routers); diff != "" {
			t.Fatalf("seed %d bs %d step %d: %s", seed, bs, step, diff)
		}
	}
	for i, cr := range routers {
		if len(cr.errs) > 0 {
			t.Fatalf("router %d: %v", i, cr.errs)
		}
	}
	if routers[0].hashedEv == 0 {
		t.Fatalf("seed %d: nothing hashed", seed)
	}
}

// TestRelayHashesOnlyWhereOffered: the relay hashes stored blocks only while its router's
// last answer offered the scheme; an answer without it (an older grain) stops it at once.
func TestRelayHashesOnlyWhereOffered(t *testing.T) {
	offer := kv.HashScheme
	cr := newCoreRouter(t, 2, func() uint32 { return offer }, kv.HashScheme)
	r := newRelay("w0", cr, zerolog.Nop())
	r.handle(relayEpoch{epoch: 1})
	r.register(&messages.WorkerInfo{WorkerId: "w0", EngineEpoch: 1}, &messages.WorkerLoad{})
	store := func(seq uint64, h uint64) {
		r.onBatch(kv.Batch{Seq: seq, Events: []kv.Event{{Kind: kv.BlockStored, EngineHashes: []uint64{h}, TokenIDs: []uint32{uint32(h), 1}, BlockSize: 2}}})
	}
	store(1, 10)
	if cr.hashedEv != 1 {
		t.Fatalf("offered: %d stored events hashed, want 1", cr.hashedEv)
	}
	offer = 0
	store(2, 11) // still hashed: the answer to this batch withdraws the offer
	store(3, 12)
	store(4, 13)
	if cr.hashedEv != 2 {
		t.Fatalf("after an answer without the scheme: %d stored events hashed in all, want 2", cr.hashedEv)
	}
	offer = kv.HashScheme
	store(5, 14)
	store(6, 15)
	if cr.hashedEv != 3 {
		t.Fatalf("offered again: %d stored events hashed in all, want 3", cr.hashedEv)
	}
}

// dumpBoth makes each relay send its block list: in token ids when plain (as a
// DumpBlocksRequest asks), else in the form its router takes.
func dumpBoth(relays [2]*relay, routers [2]*coreRouter, plain bool) {
	for i, r := range relays {
		if plain {
			r.dump(0)
		} else {
			r.dump(routers[i].dumpOff)
		}
	}
}

// indexDiff describes how the first router's index differs from the second's; "" when
// they hold the same blocks under the same sequence hashes.
func indexDiff(routers [2]*coreRouter) string {
	want, wn := indexState(routers[1])
	got, gn := indexState(routers[0])
	if reflect.DeepEqual(got, want) && gn == wn {
		return ""
	}
	return fmt.Sprintf("hashed events indexed %v (%d nodes), token ids %v (%d nodes)", got, gn, want, wn)
}

// sender returns a function that sends events to both relays as the next engine batch
// (each its own copy of the slice).
func sender(relays [2]*relay) func(...kv.Event) {
	seq := uint64(0)
	return func(evs ...kv.Event) {
		seq++
		for _, r := range relays {
			r.onBatch(kv.Batch{Seq: seq, Events: append([]kv.Event(nil), evs...)})
		}
	}
}
