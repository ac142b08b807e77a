package worker

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// countingRouter passes calls to a Router grain through the wire format and counts the
// dump parts of each form.
type countingRouter struct {
	*wireRouter
	hashedParts, plainParts int
}

func (c *countingRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	if len(m.Runs) > 0 {
		c.hashedParts++
	}
	if len(m.Events) > 0 {
		c.plainParts++
	}
	return c.wireRouter.PublishDump(m)
}

// A Router grain activated afresh asks a registering worker for its blocks; the worker
// sends them hashed (it offered the worker's hash scheme), and the grain then routes a
// prompt exactly as one that took the token-id dump: the same blocks indexed, the same
// prefix found.
func TestRelayDumpsHashedBlocks(t *testing.T) {
	const bs = 4
	prompt := make([]uint32, 40*bs)
	for i := range prompt {
		prompt[i] = uint32(i*7 + 3)
	}
	// The card names no model: a grain made by router.New without Init routes model "".
	info := &messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "w0"},
		Card: &messages.ModelCard{KvBlockSize: bs, TotalKvBlocks: 1024}, Ready: true, EngineEpoch: 1}
	fill := func(r *relay) {
		r.handle(relayEpoch{epoch: 1})
		hs := make([]uint64, 40)
		for i := range hs {
			hs[i] = uint64(1000 + i)
		}
		// A salted prompt of 30 blocks, then 10 more chained onto it, then one of another
		// adapter; a removal leaves an orphan the dump leaves out.
		r.onBatch(kv.Batch{Seq: 1, Events: []kv.Event{
			{Kind: kv.BlockStored, EngineHashes: hs[:30], TokenIDs: prompt[:30*bs], BlockSize: bs, CacheSalt: "s"},
			{Kind: kv.BlockStored, EngineHashes: hs[30:], HasParent: true, ParentHash: hs[29], TokenIDs: prompt[30*bs:], BlockSize: bs},
			{Kind: kv.BlockStored, EngineHashes: []uint64{7, 8}, TokenIDs: prompt[:2*bs], BlockSize: bs, LoraName: "ad"},
			{Kind: kv.BlockRemoved, EngineHashes: []uint64{hs[35]}},
		}})
	}
	grains := map[string]*router.Grain{}
	for _, form := range []string{"hashed", "plain"} {
		old := newRelay("w0", nopRouter{}, zerolog.Nop())
		fill(old)
		g := router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
		cr := &countingRouter{wireRouter: &wireRouter{g: g}}
		old.router = cr
		if form == "plain" {
			old.router = plainRouter{cr}
		}
		old.register(info, &messages.WorkerLoad{TotalBlocks: 1024})
		if want := form == "hashed"; (cr.hashedParts > 0) != want || (cr.plainParts > 0) == want {
			t.Fatalf("%s: %d hashed and %d plain dump parts", form, cr.hashedParts, cr.plainParts)
		}
		grains[form] = g
	}
	for _, c := range []struct {
		name    string
		req     *messages.RouteRequest
		overlap int32
	}{
		{"salted prompt", &messages.RouteRequest{RequestId: "r1", TokenIds: prompt, CacheSalt: "s"}, 35},
		{"unsalted", &messages.RouteRequest{RequestId: "r2", TokenIds: prompt}, 0},
		{"adapter", &messages.RouteRequest{RequestId: "r3", TokenIds: prompt[:3*bs], LoraName: "ad"}, 2},
	} {
		name, req := c.name, c.req
		var overlaps []int32
		for _, form := range []string{"hashed", "plain"} {
			resp, err := grains[form].Route(proto.Clone(req).(*messages.RouteRequest), nil)
			if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK {
				t.Fatalf("%s, %s: %+v %v", name, form, resp, err)
			}
			overlaps = append(overlaps, resp.OverlapBlocks)
		}
		if overlaps[0] != c.overlap || overlaps[1] != c.overlap {
			t.Errorf("%s: overlap %d blocks from the hashed dump, %d from the plain one, want %d", name, overlaps[0], overlaps[1], c.overlap)
		}
	}
	for _, form := range []string{"hashed", "plain"} {
		st, _ := grains[form].Stats(&messages.RouterStatsRequest{}, nil)
		if n := st.Workers[0].IndexedBlocks; n != 37 { // 40 stored, one removed, its 4 descendants orphaned, 2 of the adapter
			t.Errorf("%s: %d blocks indexed, want 37", form, n)
		}
	}
}

// plainRouter hides the router's hash scheme, as a Router grain of an older version does.
type plainRouter struct{ *countingRouter }

func (p plainRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	ack, err := p.countingRouter.Register(m)
	if ack != nil {
		ack.DumpHashScheme, ack.EventHashScheme = 0, 0
	}
	return ack, err
}

// oldGrain is a Router grain of a version without hashed dumps or events: its answers
// offer no dump_hash_scheme nor event_hash_scheme, and its unmarshalling drops
// BlockDump's runs and hash_scheme, and KvEventBatch's hash_scheme and its stored
// events' sequence_hashes, as unknown fields.
type oldGrain struct{ *wireRouter }

func (o oldGrain) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	ack, err := o.wireRouter.Register(m)
	if ack != nil {
		ack.DumpHashScheme, ack.EventHashScheme = 0, 0
	}
	return ack, err
}

func (o oldGrain) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	c := proto.Clone(m).(*messages.KvEventBatch)
	c.HashScheme = 0
	for _, ev := range c.Events {
		if st := ev.GetStored(); st != nil {
			st.SequenceHashes = nil
		}
	}
	ack, err := o.wireRouter.PublishEvents(c)
	if ack != nil {
		ack.DumpHashScheme, ack.EventHashScheme = 0, 0
	}
	return ack, err
}

func (o oldGrain) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	c := proto.Clone(m).(*messages.BlockDump)
	c.Runs, c.HashScheme = nil, 0 // what an old binary sees of the message
	return o.wireRouter.PublishDump(c)
}

func indexed(t *testing.T, g *router.Grain) int64 {
	t.Helper()
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if len(st.Workers) != 1 {
		t.Fatalf("%d workers", len(st.Workers))
	}
	return st.Workers[0].IndexedBlocks
}

// A dump goes in the form the activation that asked for it takes: here an EventAck of an
// older activation (no hash scheme) asks after a newer one took a hashed dump. Sending it
// hashed there (the newer one's scheme) would reach the older one as an empty list
// marked last: the worker synced with no blocks.
func TestRelayDumpsInTheAskersForm(t *testing.T) {
	const bs = 4
	toks := make([]uint32, 20*bs)
	for i := range toks {
		toks[i] = uint32(i*13 + 1)
	}
	hs := make([]uint64, 20)
	for i := range hs {
		hs[i] = uint64(500 + i)
	}
	info := &messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "w0"},
		Card: &messages.ModelCard{KvBlockSize: bs, TotalKvBlocks: 1024}, Ready: true, EngineEpoch: 1}
	load := &messages.WorkerLoad{TotalBlocks: 1024}
	newGrain := func() *router.Grain {
		return router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
	}

	r := newRelay("w0", nopRouter{}, zerolog.Nop())
	r.handle(relayEpoch{epoch: 1})
	r.onBatch(kv.Batch{Seq: 1, Events: []kv.Event{{Kind: kv.BlockStored, EngineHashes: hs[:8], TokenIDs: toks[:8*bs], BlockSize: bs}}})

	// 1. The worker registers with an old-version activation B, which takes its list.
	b := newGrain()
	r.router = oldGrain{&wireRouter{g: b}}
	r.register(info, load)
	if n := indexed(t, b); n != 8 {
		t.Fatalf("old grain indexed %d blocks after the plain dump, want 8", n)
	}
	// 2. It registers with a new-version activation A (offers the scheme): hashed dump.
	a := newGrain()
	r.router = &wireRouter{g: a}
	r.register(info, load)
	r.onBatch(kv.Batch{Seq: 2, Events: []kv.Event{{Kind: kv.BlockStored, EngineHashes: hs[8:10], HasParent: true, ParentHash: hs[7], TokenIDs: toks[8*bs : 10*bs], BlockSize: bs}}})
	if n := indexed(t, a); n != 10 {
		t.Fatalf("new grain indexed %d blocks, want 10", n)
	}
	// 3. Its next calls reach B again (still alive, still knows the worker) before any
	// registration: B sees a gap and asks for a dump through the EventAck.
	r.router = oldGrain{&wireRouter{g: b}}
	r.onBatch(kv.Batch{Seq: 3, Events: []kv.Event{{Kind: kv.BlockStored, EngineHashes: hs[10:11], HasParent: true, ParentHash: hs[9], TokenIDs: toks[10*bs : 11*bs], BlockSize: bs}}})
	r.register(info, load) // the next heartbeat: B thinks it is synced, asks for nothing
	if n, want := indexed(t, b), int64(r.blocks.Len()); n != want {
		t.Fatalf("old grain indexes %d blocks of the worker after the EventAck-requested dump, the worker holds %d", n, want)
	}
}

// DumpHashed at the engines' block sizes (16: appendChained16; 32: hashMid; 64:
// xxh3 library) with salts, adapters, orphans, CPU parents of GPU children, parent hashes
// without has_parent, mixed block sizes and re-stores on another medium: an index built
// from it equals one built from Dump.
func TestDumpHashedAtEngineBlockSizes(t *testing.T) {
	for _, bs := range []int{16, 32, 64} {
		rng := rand.New(rand.NewPCG(uint64(bs), 7))
		l := NewBlockList()
		for step := 0; step < 3000; step++ {
			size := bs
			if rng.IntN(20) == 0 {
				size = bs / 2
			}
			ev := kv.Event{Kind: kv.BlockStored, BlockSize: size,
				Medium:    []string{"", "GPU", "CPU_PINNED", "DISK"}[rng.IntN(4)],
				LoraName:  []string{"", "", "ad-1", "ad-2"}[rng.IntN(4)],
				CacheSalt: []string{"", "", "s1", "s2"}[rng.IntN(4)]}
			switch rng.IntN(3) {
			case 0:
				ev.HasParent, ev.ParentHash = true, uint64(rng.IntN(400))
			case 1:
				ev.ParentHash = uint64(rng.IntN(400))
			}
			for range 1 + rng.IntN(6) {
				h := uint64(rng.IntN(400))
				ev.EngineHashes = append(ev.EngineHashes, h)
				for j := range size {
					ev.TokenIDs = append(ev.TokenIDs, uint32(h)*31+uint32(j)+uint32(rng.IntN(2)))
				}
			}
			_ = l.Apply(ev)
			if rng.IntN(4) == 0 {
				_ = l.Apply(kv.Event{Kind: kv.BlockRemoved, EngineHashes: []uint64{uint64(rng.IntN(400))}})
			}
			if step%500 != 499 {
				continue
			}
			fromTokens, fromHashes := kv.NewIndexWithoutDump(bs), kv.NewIndexWithoutDump(bs)
			for _, ev := range l.Dump() {
				_ = fromTokens.Apply(0, ev)
			}
			for _, ev := range l.DumpHashed() {
				_ = fromHashes.Apply(0, ev)
			}
			want, got := map[uint64]uint64{}, map[uint64]uint64{}
			fromTokens.WorkerBlocks(0, func(e, s uint64) { want[e] = s })
			fromHashes.WorkerBlocks(0, func(e, s uint64) { got[e] = s })
			if len(want) == 0 || !reflect.DeepEqual(got, want) || fromHashes.Nodes() != fromTokens.Nodes() {
				t.Fatalf("bs %d step %d: hashed %d blocks (%d nodes), plain %d (%d nodes)", bs, step, len(got), fromHashes.Nodes(), len(want), fromTokens.Nodes())
			}
		}
	}
}

// A batch whose engine sequence number skips ahead (batches lost between the engine and
// the worker) is logged; one that follows on, or the first, is not.
func TestRelayLogsLostEngineBatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		seqs []uint64
		want int // warnings
	}{
		{"in order", []uint64{0, 1, 2, 3}, 0},
		{"first batch at any number", []uint64{7, 8}, 0},
		{"one gap", []uint64{0, 1, 4, 5}, 1},
		{"two gaps", []uint64{0, 2, 3, 9}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := newRelay("w0", nopRouter{}, zerolog.New(&buf))
			for _, s := range tc.seqs {
				r.onBatch(kv.Batch{Seq: s})
			}
			if got := strings.Count(buf.String(), "KV events lost between the engine and this worker"); got != tc.want {
				t.Fatalf("warnings %d, want %d:\n%s", got, tc.want, buf.String())
			}
		})
	}
}

// TestRelayDropsOrphanBlocks: a BlockStored chained onto a block the engine has
// announced removed (a duplicate's child, docs/reference.md §1 "Orphan blocks") is
// neither listed nor relayed, nor are its descendants: the Router grain, which cannot
// place it, would otherwise ask for the worker's whole block list at every such block.
// The rest of the batch goes on.
func TestRelayDropsOrphanBlocks(t *testing.T) {
	const bs = 4
	toks := func(n int) []uint32 {
		out := make([]uint32, n*bs)
		for i := range out {
			out[i] = uint32(100 + i)
		}
		return out
	}
	g := router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
	cr := &countingRouter{wireRouter: &wireRouter{g: g}}
	r := newRelay("w0", cr, zerolog.Nop())
	r.handle(relayEpoch{epoch: 1})
	r.register(&messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "w0"},
		Card: &messages.ModelCard{KvBlockSize: bs, TotalKvBlocks: 64}, Ready: true, EngineEpoch: 1}, &messages.WorkerLoad{TotalBlocks: 64})
	dumps := cr.hashedParts + cr.plainParts
	batches := [][]kv.Event{
		{{Kind: kv.BlockStored, EngineHashes: []uint64{1, 2}, TokenIDs: toks(2), BlockSize: bs}},
		{{Kind: kv.BlockRemoved, EngineHashes: []uint64{1, 2}}},
		// 3 onto the removed 2, 4 onto 3: orphans; 5 a first block, in the same batch.
		{{Kind: kv.BlockStored, EngineHashes: []uint64{3}, HasParent: true, ParentHash: 2, TokenIDs: toks(1), BlockSize: bs},
			{Kind: kv.BlockStored, EngineHashes: []uint64{5, 6}, TokenIDs: toks(2), BlockSize: bs}},
		{{Kind: kv.BlockStored, EngineHashes: []uint64{4}, HasParent: true, ParentHash: 3, TokenIDs: toks(1), BlockSize: bs}},
		{{Kind: kv.BlockStored, EngineHashes: []uint64{7}, HasParent: true, ParentHash: 6, TokenIDs: toks(1), BlockSize: bs}},
	}
	for i, evs := range batches {
		r.onBatch(kv.Batch{Seq: uint64(i), Events: evs})
	}
	if got := cr.hashedParts + cr.plainParts - dumps; got != 0 {
		t.Fatalf("the router asked for %d dump parts", got)
	}
	for _, h := range []uint64{3, 4} {
		if r.blocks.Holds(h) {
			t.Fatalf("orphan %d listed", h)
		}
	}
	st, err := g.Stats(&messages.RouterStatsRequest{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Workers) != 1 || st.Workers[0].IndexedBlocks != 3 || r.blocks.Len() != 3 {
		t.Fatalf("router indexes %v, the relay lists %d blocks; want 5, 6 and 7 in both", st.Workers, r.blocks.Len())
	}
}

// TestRelayListsGPUBlocksOnly: events of another tier (vLLM's CPU offload announces the
// same block hashes with medium "CPU") leave the worker's list alone, as they leave the
// router's index: a dump after a CPU copy was stored and removed still holds the GPU
// block.
func TestRelayListsGPUBlocksOnly(t *testing.T) {
	const bs = 4
	g := router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
	r := newRelay("w0", &wireRouter{g: g}, zerolog.Nop())
	r.handle(relayEpoch{epoch: 1})
	r.register(&messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "w0"},
		Card: &messages.ModelCard{KvBlockSize: bs, TotalKvBlocks: 64}, Ready: true, EngineEpoch: 1}, &messages.WorkerLoad{TotalBlocks: 64})
	toks := []uint32{1, 2, 3, 4}
	for i, ev := range []kv.Event{
		{Kind: kv.BlockStored, EngineHashes: []uint64{9}, TokenIDs: toks, BlockSize: bs, Medium: "GPU"},
		{Kind: kv.BlockStored, EngineHashes: []uint64{9}, TokenIDs: toks, BlockSize: bs, Medium: "CPU"},
		{Kind: kv.BlockRemoved, EngineHashes: []uint64{9}, Medium: "CPU"},
	} {
		r.onBatch(kv.Batch{Seq: uint64(i), Events: []kv.Event{ev}})
	}
	r.handle(relayDump{})
	st, err := g.Stats(&messages.RouterStatsRequest{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.blocks.Holds(9) || len(st.Workers) != 1 || st.Workers[0].IndexedBlocks != 1 {
		t.Fatalf("after the CPU copy's removal and a dump: listed %v, router %v; want the GPU block in both", r.blocks.Holds(9), st.Workers)
	}
}

// slowRouter records the calls it gets, in order; a PublishEvents waits for release.
type slowRouter struct {
	nopRouter
	calls   chan string
	release chan struct{}
}

func (r slowRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	r.calls <- fmt.Sprintf("register seq=%d", m.LastEventSeq)
	return &messages.RegisterAck{Accepted: true}, nil
}

func (r slowRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	var hs []uint64
	for _, ev := range m.Events {
		hs = append(hs, ev.GetStored().GetBlockHashes()...)
	}
	r.calls <- fmt.Sprintf("publish seq=%d blocks=%v", m.Seq, hs)
	<-r.release
	return &messages.EventAck{}, nil
}

// TestRelayMergesQueuedBatches: the engine batches queued while a publish waits for a slow
// router leave together in the next one, in order, and the heartbeat queued behind them
// waits for that one call, not one per batch.
func TestRelayMergesQueuedBatches(t *testing.T) {
	rt := slowRouter{calls: make(chan string, 16), release: make(chan struct{})}
	r := newRelay("w0", rt, zerolog.Nop())
	info := &messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "w0"}, Card: &messages.ModelCard{}}
	stored := func(seq uint64, h uint64) relayBatch {
		ev := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{h}, TokenIDs: []uint32{uint32(h)}, BlockSize: 1}
		if h > 1 {
			ev.HasParent, ev.ParentHash = true, h-1
		}
		return relayBatch{batch: kv.Batch{Seq: seq, Events: []kv.Event{ev}}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.in <- relayEpoch{epoch: 1}
	r.in <- stored(1, 1)
	ran := make(chan struct{})
	go func() { r.run(ctx); close(ran) }()
	if c := <-rt.calls; c != "publish seq=1 blocks=[1]" {
		t.Fatalf("first call %q", c)
	}
	// While the first publish waits: four more batches, a heartbeat, one more batch.
	for h := uint64(2); h <= 5; h++ {
		r.in <- stored(h, h)
	}
	r.in <- relayHeartbeat{info: info, load: &messages.WorkerLoad{}}
	r.in <- stored(6, 6)
	// Each publish answers once released; a registration at once.
	rt.release <- struct{}{}
	for _, w := range []string{"publish seq=2 blocks=[2 3 4 5]", "register seq=2", "publish seq=3 blocks=[6]"} {
		if c := <-rt.calls; c != w {
			t.Fatalf("call %q, want %q", c, w)
		}
		if strings.HasPrefix(w, "publish") {
			rt.release <- struct{}{}
		}
	}
	cancel()
	<-ran
	if n := r.blocks.Len(); n != 6 {
		t.Fatalf("block list holds %d blocks, want 6", n)
	}
}
