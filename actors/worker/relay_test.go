package worker

import (
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
		ack.DumpHashScheme = 0
	}
	return ack, err
}
