package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// wireRouter is a RouterClient that sends each message through protobuf's wire format
// (marshal on the worker's side, unmarshal on the grain's, as a grain call between
// members does) and times the two sides apart.
type wireRouter struct {
	g    *router.Grain
	recv time.Duration // unmarshalling and the grain's method

	bytes int
}

func wireCall[M proto.Message, A any](w *wireRouter, m M, fresh M, call func(M) (A, error)) (A, error) {
	b, err := proto.Marshal(m)
	t1 := time.Now()
	w.bytes += len(b)
	if err == nil {
		err = proto.Unmarshal(b, fresh)
	}
	var a A
	if err == nil {
		a, err = call(fresh)
	}
	w.recv += time.Since(t1)
	return a, err
}

func (w *wireRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	return wireCall(w, m, &messages.RegisterWorker{}, func(m *messages.RegisterWorker) (*messages.RegisterAck, error) { return w.g.Register(m, nil) })
}
func (w *wireRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	return wireCall(w, m, &messages.DeregisterWorker{}, func(m *messages.DeregisterWorker) (*messages.Ack, error) { return w.g.Deregister(m, nil) })
}
func (w *wireRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	return wireCall(w, m, &messages.KvEventBatch{}, func(m *messages.KvEventBatch) (*messages.EventAck, error) { return w.g.PublishEvents(m, nil) })
}
func (w *wireRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	return wireCall(w, m, &messages.BlockDump{}, func(m *messages.BlockDump) (*messages.Ack, error) { return w.g.PublishDump(m, nil) })
}

// BenchmarkRouterMove: a Router grain activated afresh (it moved to another frontend)
// takes the block lists of 64 workers holding about 1 M blocks together (the fleet of
// BenchmarkKVEventPipeline): each worker registers, is asked for a dump and sends its
// list in parts, every message through protobuf's wire format, all on one goroutine.
// Reports, per move: the grain's side (unmarshalling and applying every part:
// grain-ms, which a cluster spends serially on the grain's member), the workers' side
// (listing and marshalling: worker-ms for all 64 together, and per worker, which a
// cluster spends in parallel on the workers' machines), the bytes sent and the blocks
// indexed afterwards. Not included: the network, the heartbeat the workers wait for
// before they register with the new activation, the actor hops.
func BenchmarkRouterMove(b *testing.B) {
	for _, bs := range []int{16, 64} {
		b.Run(fmt.Sprintf("block-size=%d", bs), func(b *testing.B) {
			f := newPipeFleet(b, bs)
			var grain, worker, wall time.Duration
			var sent int
			var indexed int64
			defer threadcpu.Lock()()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				g := router.New(router.Config{BlockSize: bs, Mode: "kv", OverlapWeight: 1, WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})
				wr := &wireRouter{g: g}
				b.StartTimer()
				t0 := time.Now()
				for _, r := range f.relays {
					r.router = wr
					r.register(r.info, r.load)
				}
				d := time.Since(t0)
				wall += d
				grain, worker, sent = grain+wr.recv, worker+d-wr.recv, sent+wr.bytes
				b.StopTimer()
				st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
				indexed = 0
				for _, ws := range st.Workers {
					indexed += ws.IndexedBlocks
				}
				b.StartTimer()
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 / float64(b.N) }
			b.ReportMetric(ms(wall), "move-ms")
			b.ReportMetric(ms(grain), "grain-ms")
			b.ReportMetric(ms(worker), "worker-ms")
			b.ReportMetric(ms(worker)/pipeWorkers, "per-worker-ms")
			b.ReportMetric(float64(sent)/float64(b.N)/(1<<20), "MiB/move")
			b.ReportMetric(float64(indexed), "indexed-blocks")
		})
	}
}
