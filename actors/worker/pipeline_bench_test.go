package worker

import (
	"encoding/binary"
	"fmt"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// directRouter is a RouterClient that calls a Router grain's methods in the caller's
// goroutine: the relay → grain path without the actor hop (no mailbox, no future, no
// serialization; in a cluster the relay and the grain are on different members).
type directRouter struct{ g *router.Grain }

func (d directRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	return d.g.Register(m, nil)
}
func (d directRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	return d.g.Deregister(m, nil)
}
func (d directRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	return d.g.PublishEvents(m, nil)
}
func (d directRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	return d.g.PublishDump(m, nil)
}

const (
	pipeWorkers      = 64
	pipePromptBlocks = 512 // warm prompts: 8,192 tokens at block size 16
	pipePromptsPerW  = 32  // at block size 16: 64 × 32 × 512 ≈ 1 M indexed blocks
	pipeCycle        = 8   // messages per worker in the event cycle
)

// pipeFleet is a Router grain with 64 registered workers, each with its relay, the
// grain's index warmed with 32 prompts per worker (about 1 M blocks at block size 16),
// and per worker a cycle of ZeroMQ messages as vLLM publishes them.
type pipeFleet struct {
	g       *router.Grain
	relays  []*relay
	cycles  [][][][]byte // worker → message → frames
	blocks  [][]int      // blocks per message (stored + removed)
	prompts [][]uint32   // warm prompts, for routes
	engSeq  []uint64
}

// newPipeFleet builds the fleet for block size bs. Each message of a worker's cycle is
// shaped as kvevents' realistic batch: 16 chained BlockStored events of 1 to 8 blocks
// (a new prompt's chain; token ids uniform over a 128,256-token vocabulary), then one
// BlockRemoved evicting the chain stored two messages earlier, so that the cycle leaves
// the index as it found it.
func newPipeFleet(b *testing.B, bs int) *pipeFleet {
	g := router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
	f := &pipeFleet{g: g, engSeq: make([]uint64, pipeWorkers)}
	rng := rand.New(rand.NewPCG(18, uint64(bs)))
	for w := 0; w < pipeWorkers; w++ {
		id := fmt.Sprintf("worker-%02d", w)
		r := newRelay(id, directRouter{g}, zerolog.Nop())
		r.handle(relayEpoch{epoch: 1})
		r.handle(relayHeartbeat{info: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "a", Id: id},
			Card: &messages.ModelCard{KvBlockSize: int32(bs), TotalKvBlocks: 1 << 20}, Ready: true, EngineEpoch: 1},
			load: &messages.WorkerLoad{TotalBlocks: 1 << 20}})
		f.relays = append(f.relays, r)
		// Warm prompts, straight into the relay (no wire encoding).
		for p := 0; p < pipePromptsPerW*16/bs; p++ {
			toks := make([]uint32, pipePromptBlocks*bs)
			for i := range toks {
				toks[i] = uint32(rng.IntN(128256))
			}
			hs := make([]uint64, pipePromptBlocks)
			for i := range hs {
				hs[i] = uint64(w)<<48 | uint64(p)<<32 | uint64(i) | 1<<63
			}
			f.engSeq[w]++
			r.onBatch(kv.Batch{Seq: f.engSeq[w], Events: []kv.Event{{Kind: kv.BlockStored, EngineHashes: hs, TokenIDs: toks, BlockSize: bs}}})
			if p < 4 {
				f.prompts = append(f.prompts, toks)
			}
		}
		// The event cycle.
		chains := make([][]uint64, pipeCycle)
		var msgs [][]kv.Event
		for m := 0; m < pipeCycle; m++ {
			var evs []kv.Event
			var parent uint64
			for e := 0; e < 16; e++ {
				n := 1 + rng.IntN(8)
				hs := make([]uint64, n)
				for j := range hs {
					hs[j] = rng.Uint64() &^ (1 << 63)
				}
				toks := make([]uint32, n*bs)
				for j := range toks {
					toks[j] = uint32(rng.IntN(128256))
				}
				evs = append(evs, kv.Event{Kind: kv.BlockStored, EngineHashes: hs, HasParent: e > 0, ParentHash: parent,
					TokenIDs: toks, BlockSize: bs, Medium: "GPU"})
				parent = hs[n-1]
				chains[m] = append(chains[m], hs...)
			}
			msgs = append(msgs, evs)
		}
		var frames [][][]byte
		var blocks []int
		for m, evs := range msgs {
			old := chains[(m+pipeCycle-2)%pipeCycle]
			evs = append(evs, kv.Event{Kind: kv.BlockRemoved, EngineHashes: old, Medium: "GPU"})
			fr, err := kvevents.EncodeMessage("kv-events", kv.Batch{Timestamp: 1700000000.125, Events: evs})
			if err != nil {
				b.Fatal(err)
			}
			frames = append(frames, fr)
			blocks = append(blocks, len(chains[m])+len(old))
		}
		f.cycles = append(f.cycles, frames)
		f.blocks = append(f.blocks, blocks)
	}
	// One untimed pass of every cycle: the first removals name chains not stored yet.
	for m := 0; m < pipeCycle; m++ {
		for w := range f.relays {
			f.publish(b, w, m)
		}
	}
	return f
}

// publish takes worker w's message m as the worker does with a message from its engine:
// decode the frames (with the next engine sequence number), then the relay's batch path
// (its own block list, numbering, conversion to protobuf) and the grain's PublishEvents
// (conversion back, the index). It returns the blocks the message carried.
func (f *pipeFleet) publish(b *testing.B, w, m int) int {
	fr := f.cycles[w][m]
	f.engSeq[w]++
	binary.BigEndian.PutUint64(fr[1], f.engSeq[w])
	_, batch, err := kvevents.DecodeMessage(fr)
	if err != nil {
		b.Fatal(err)
	}
	f.relays[w].onBatch(batch)
	return f.blocks[w][m]
}

// BenchmarkKVEventPipeline: KV events from the engine's ZeroMQ frames into the Router
// grain's index on one goroutine, 64 workers publishing in turn into a ~1 M-block index
// (block size 16; at 64 the same prompts in tokens, a quarter of the blocks): the frames'
// decoding (kvevents.DecodeMessage), the worker relay's batch path (its block list,
// numbering, protobuf conversion) and the grain's PublishEvents (protobuf conversion,
// kv.Router.ApplyBatch). Not included: the ZeroMQ socket, the relay's channel and the
// actor hop to the grain (a grain call in a cluster). Reports blocks/s (stored plus
// removed) by wall time and cpu-blocks/s by the goroutine's CPU time.
func BenchmarkKVEventPipeline(b *testing.B) {
	for _, bs := range []int{16, 64} {
		b.Run(fmt.Sprintf("block-size=%d", bs), func(b *testing.B) { runPipeline(b, bs, false) })
	}
}

// runPipeline runs the pipeline benchmarks at block size bs, every relay → grain call
// through the wire format when wire is true.
func runPipeline(b *testing.B, bs int, wire bool) {
	f := newPipeFleet(b, bs)
	w := &wireRouter{g: f.g}
	if wire {
		for _, r := range f.relays {
			r.router = w
		}
	}
	blocks := 0
	b.ReportAllocs()
	defer threadcpu.Lock()()
	cpu0, _ := threadcpu.Used()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blocks += f.publish(b, i%pipeWorkers, (i/pipeWorkers)%pipeCycle)
	}
	b.StopTimer()
	cpu1, ok := threadcpu.Used()
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	if ok && cpu1 > cpu0 {
		b.ReportMetric(float64(blocks)/(cpu1-cpu0).Seconds(), "cpu-blocks/s")
	}
	if !wire {
		st, _ := f.g.Stats(&messages.RouterStatsRequest{}, nil)
		var indexed int64
		for _, ws := range st.Workers {
			indexed += ws.IndexedBlocks
		}
		b.ReportMetric(float64(indexed), "indexed-blocks")
		return
	}
	if w.recv > 0 {
		b.ReportMetric(float64(blocks)/w.recv.Seconds(), "grain-blocks/s")
	}
	b.ReportMetric(float64(w.bytes)/float64(max(blocks, 1)), "bytes/block")
}

// BenchmarkGrainRoutesWithEvents: one Router grain (one goroutine, as its mailbox runs
// it) serving routes while 64 workers stream KV events, at block size 16. Each route is
// an 8,192-token prompt held by one worker (from block hashes, as frontends send them)
// and frees the route made 256 routes before; every routes-per-message routes, one event
// message of BenchmarkKVEventPipeline (about 72 blocks stored and as many evicted) comes
// from the next worker in turn. With 4 routes per message that is about 18 blocks stored
// per route: at 20,000 routes/s, 360,000 blocks (5.8 M tokens) stored per second across
// the fleet, 90,000 tokens/s per worker. Reports routes/s by wall time and by CPU time,
// and the event blocks applied per second alongside. Not included: the actor hops (the
// frontends' grain calls, the relays'), the frontends' hashing; the relays' work is
// (it is on the workers' machines in a cluster, so the figures are pessimistic).
func BenchmarkGrainRoutesWithEvents(b *testing.B) {
	const bs = 16
	f := newPipeFleet(b, bs)
	hashes := make([][]uint64, len(f.prompts))
	for i, p := range f.prompts {
		hashes[i] = kv.SequenceHashes(p, bs, "")
	}
	const inFlight = 256
	ids := make([]string, inFlight)
	for i := range ids {
		ids[i] = fmt.Sprint("r", i)
	}
	msgs := 0
	for _, perMsg := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("routes-per-message=%d", perMsg), func(b *testing.B) {
			blocks := 0
			b.ReportAllocs()
			defer threadcpu.Lock()()
			cpu0, _ := threadcpu.Used()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := ids[i%inFlight]
				_, _ = f.g.Free(&messages.RequestRef{RequestId: id}, nil)
				p := i % len(hashes)
				resp, err := f.g.Route(&messages.RouteRequest{RequestId: id, BlockHashes: hashes[p],
					PromptTokens: proto.Int32(int32(len(f.prompts[p])))}, nil)
				if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK {
					b.Fatalf("route: %+v %v", resp, err)
				}
				if i%perMsg == 0 {
					blocks += f.publish(b, msgs%pipeWorkers, (msgs/pipeWorkers)%pipeCycle)
					msgs++
				}
			}
			b.StopTimer()
			cpu1, ok := threadcpu.Used()
			for _, id := range ids {
				_, _ = f.g.Free(&messages.RequestRef{RequestId: id}, nil)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "routes/s")
			if ok && cpu1 > cpu0 {
				b.ReportMetric(float64(b.N)/(cpu1-cpu0).Seconds(), "cpu-routes/s")
			}
			b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "event-blocks/s")
		})
	}
}

// BenchmarkKVEventPipelineWire is BenchmarkKVEventPipeline with every relay → grain call
// through protobuf's wire format, as between members (and between actors of one
// process: a grain call is marshalled), timing the grain's side apart: grain-blocks/s is
// the blocks applied per second of the grain's unmarshalling and PublishEvents (what one
// Router grain's member spends), bytes/block the batches' size on the wire.
func BenchmarkKVEventPipelineWire(b *testing.B) {
	for _, bs := range []int{16, 64} {
		b.Run(fmt.Sprintf("block-size=%d", bs), func(b *testing.B) { runPipeline(b, bs, true) })
	}
}
