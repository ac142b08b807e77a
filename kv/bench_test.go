package kv

import (
	"fmt"
	"github.com/turbine-llm/turbine/internal/threadcpu"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Benchmark fleet (docs/reference.md §3 peer comparison): 64 workers, KV block size 16, each
// worker holding 32 prompts of 8,192 tokens (512 blocks): 64 × 32 × 512 = 1,048,576
// indexed blocks. Prompts share one of 8 system prompts of 64 blocks.
const (
	benchWorkers       = 64
	benchBlockSize     = 16
	benchPromptBlocks  = 512
	benchPromptsPerW   = 32
	benchSystemBlocks  = 64
	benchSystemPrompts = 8
	benchEventBlocks   = 32 // blocks per BlockStored event, as an engine emits them in chunks
)

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// benchPromptTokens writes prompt p's tokens into dst (reused).
func benchPromptTokens(dst []uint32, p int) []uint32 {
	dst = dst[:0]
	for j := 0; j < benchPromptBlocks; j++ {
		key := uint64(p)<<20 | uint64(j)
		if j < benchSystemBlocks {
			key = 1<<62 | uint64(p%benchSystemPrompts)<<20 | uint64(j)
		}
		for t := 0; t < benchBlockSize; t++ {
			dst = append(dst, uint32(splitmix(key<<8|uint64(t))%151936))
		}
	}
	return dst
}

// benchStoreEvents returns the BlockStored events that store prompt p on a worker,
// with engine hashes derived from base.
func benchStoreEvents(toks []uint32, base uint64) []Event {
	var evs []Event
	for b := 0; b < benchPromptBlocks; b += benchEventBlocks {
		ev := Event{Kind: BlockStored, BlockSize: benchBlockSize,
			TokenIDs: toks[b*benchBlockSize : (b+benchEventBlocks)*benchBlockSize]}
		for i := 0; i < benchEventBlocks; i++ {
			ev.EngineHashes = append(ev.EngineHashes, base+uint64(b+i))
		}
		if b > 0 {
			ev.HasParent, ev.ParentHash = true, base+uint64(b-1)
		}
		evs = append(evs, ev)
	}
	return evs
}

type benchFleet struct {
	r          *Router
	buildTime  time.Duration
	heapPerBlk float64
	indexed    int
	nodes      int
}

var (
	fleetOnce sync.Once
	fleet     *benchFleet
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// benchRouter builds the benchmark fleet once per process, configured as the Router
// grain configures its core (Config.NoDump: no token ids kept).
func benchRouter(b *testing.B) *benchFleet {
	fleetOnce.Do(func() {
		cfg := DefaultConfig(benchBlockSize)
		cfg.NoDump = true
		fleet = buildFleet(b, cfg)
	})
	return fleet
}

// buildFleet builds the benchmark fleet on a Router with configuration cfg, measuring
// the heap it takes.
func buildFleet(b *testing.B, cfg Config) *benchFleet {
	r, err := NewRouter(cfg)
	if err != nil {
		b.Fatal(err)
	}
	before := heapInUse()
	toks := make([]uint32, 0, benchPromptBlocks*benchBlockSize)
	start := time.Now()
	for w := 0; w < benchWorkers; w++ {
		id := fmt.Sprintf("worker-%02d", w)
		if _, err := r.Register(WorkerSpec{ID: id, BlockSize: benchBlockSize, TotalBlocks: 16384, Ready: true, Epoch: 1}); err != nil {
			b.Fatal(err)
		}
		seq := uint64(0)
		for k := 0; k < benchPromptsPerW; k++ {
			p := w*benchPromptsPerW + k
			toks = benchPromptTokens(toks, p)
			seq++
			if nd, err := r.ApplyBatch(id, 1, seq, benchStoreEvents(toks, uint64(p)<<20)); nd || err != nil {
				b.Fatalf("building fleet: %v %v", nd, err)
			}
		}
	}
	f := &benchFleet{r: r, buildTime: time.Since(start)}
	for _, ws := range r.Stats().Workers {
		f.indexed += ws.IndexedBlocks
	}
	f.nodes = r.Index().Nodes()
	f.heapPerBlk = float64(heapInUse()-before) / float64(f.indexed)
	return f
}

func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkRoute: routing decision for an 8,192-token prompt (512 blocks of 16) over 64
// workers and ~1 M indexed blocks, from token ids: hashing, index walk, load lookup,
// policy, recording the active sequence. Prompts are stored ones (one worker holds all
// 512 blocks, the other 63 share the 64-block system prompt or nothing), so the walk
// runs the whole prompt: the slow case. 256 requests stay in flight (each freed 256
// routes later, outside the timed region).
func BenchmarkRoute(b *testing.B) {
	f := benchRouter(b)
	r := f.r
	rng := rand.New(rand.NewPCG(1, 1))
	const nPrompts = 256
	prompts := make([][]uint32, nPrompts)
	for i := range prompts {
		prompts[i] = benchPromptTokens(nil, rng.IntN(benchWorkers*benchPromptsPerW))
	}
	const inFlight = 256
	ids := make([]string, inFlight)
	for i := range ids {
		ids[i] = fmt.Sprint("req-", i)
	}
	lat := make([]time.Duration, 0, b.N)
	now := t0
	var hit, total int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%inFlight]
		r.Free(id)
		start := time.Now()
		d, err := r.Route(RouteInput{RequestID: id, Tokens: prompts[i%nPrompts]}, now, rng)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		hit += int64(d.OverlapBlocks)
		total += int64(d.PromptBlocks)
	}
	b.StopTimer()
	for _, id := range ids {
		r.Free(id)
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(len(lat))/sum.Seconds(), "routes/s")
	b.ReportMetric(float64(hit)/float64(total), "hit-ratio")
	b.ReportMetric(float64(f.indexed), "indexed-blocks")
	b.ReportMetric(f.heapPerBlk, "heap-B/indexed-block")
}

// BenchmarkRouteUnique: like BenchmarkRoute, but every prompt is new apart from its
// 64-block system prompt (held by every worker): the walk stops early and all 448 other
// blocks are new to the load tracking. Prompt generation is outside the timed region;
// read p50-µs and p99-µs, not ns/op.
func BenchmarkRouteUnique(b *testing.B) {
	f := benchRouter(b)
	r := f.r
	rng := rand.New(rand.NewPCG(3, 3))
	const inFlight = 256
	ids := make([]string, inFlight)
	for i := range ids {
		ids[i] = fmt.Sprint("uniq-", i)
	}
	lat := make([]time.Duration, 0, b.N)
	toks := make([]uint32, 0, benchPromptBlocks*benchBlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%inFlight]
		r.Free(id)
		toks = benchPromptTokens(toks, 1<<24+i)
		start := time.Now()
		_, err := r.Route(RouteInput{RequestID: id, Tokens: toks}, t0, rng)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, id := range ids {
		r.Free(id)
	}
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkOverlaps: the lookup alone — hashing the 8,192-token prompt and walking the
// index for all 64 workers.
func BenchmarkOverlaps(b *testing.B) {
	f := benchRouter(b)
	x := f.r.Index()
	rng := rand.New(rand.NewPCG(2, 2))
	prompts := make([][]uint32, 64)
	for i := range prompts {
		prompts[i] = benchPromptTokens(nil, rng.IntN(benchWorkers*benchPromptsPerW))
	}
	hashes := make([]uint64, 0, benchPromptBlocks)
	out := make([]uint32, benchWorkers)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hashes = AppendSequenceHashes(hashes[:0], prompts[i%len(prompts)], benchBlockSize, "")
		out = x.Overlaps(hashes, out)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkHashPrompt: the router's block hashes of an 8,192-token prompt.
func BenchmarkHashPrompt(b *testing.B) {
	toks := benchPromptTokens(nil, 1)
	hashes := make([]uint64, 0, benchPromptBlocks)
	b.SetBytes(int64(len(toks) * 4))
	for i := 0; i < b.N; i++ {
		hashes = AppendSequenceHashes(hashes[:0], toks, benchBlockSize, "")
	}
}

// BenchmarkApplyEvents: KV event ingestion on one core into the ~1 M-block index: a
// worker stores a new 512-block prompt in 16 chained BlockStored events of 32 blocks,
// then evicts it with one BlockRemoved of 512 hashes (so the index stays the same size
// and the stream can cycle). Reports blocks applied per second (stored + removed).
func BenchmarkApplyEvents(b *testing.B) {
	f := benchRouter(b)
	x := f.r.Index()
	const nPrompts = 16
	type cycle struct {
		w      WorkerID
		events []Event
		blocks []int
	}
	var cycles []cycle
	for p := 0; p < nPrompts; p++ {
		toks := benchPromptTokens(nil, 1<<16+p)
		base := uint64(1)<<40 | uint64(p)<<20
		evs := benchStoreEvents(toks, base)
		rm := Event{Kind: BlockRemoved}
		for i := 0; i < benchPromptBlocks; i++ {
			rm.EngineHashes = append(rm.EngineHashes, base+uint64(i))
		}
		evs = append(evs, rm)
		c := cycle{w: WorkerID(p * 4 % benchWorkers), events: evs}
		for _, ev := range evs {
			c.blocks = append(c.blocks, len(ev.EngineHashes))
		}
		cycles = append(cycles, c)
	}
	var flat []struct {
		w  WorkerID
		ev *Event
		n  int
	}
	for i := range cycles {
		for j := range cycles[i].events {
			flat = append(flat, struct {
				w  WorkerID
				ev *Event
				n  int
			}{cycles[i].w, &cycles[i].events[j], cycles[i].blocks[j]})
		}
	}
	nodes, held := x.Nodes(), x.Blocks(0)
	blocks := 0
	b.ReportAllocs()
	defer threadcpu.Lock()()
	cpu0, _ := threadcpu.Used()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := flat[i%len(flat)]
		if err := x.Apply(e.w, *e.ev); err != nil {
			b.Fatal(err)
		}
		blocks += e.n
	}
	b.StopTimer()
	cpu1, cpuOK := threadcpu.Used()
	// leave the shared index as it was
	for i := b.N; i%len(flat) != 0; i++ {
		e := flat[i%len(flat)]
		if err := x.Apply(e.w, *e.ev); err != nil {
			b.Fatal(err)
		}
	}
	if x.Nodes() != nodes || x.Blocks(0) != held {
		b.Fatalf("the event cycle changed the index: %d nodes (was %d), worker 0 %d blocks (was %d)", x.Nodes(), nodes, x.Blocks(0), held)
	}
	b.ReportMetric(float64(blocks)/b.Elapsed().Seconds(), "blocks/s")
	if cpuOK && cpu1 > cpu0 {
		b.ReportMetric(float64(blocks)/(cpu1-cpu0).Seconds(), "cpu-blocks/s")
	}
	b.ReportMetric(float64(f.indexed)/f.buildTime.Seconds(), "build-blocks/s")
}

// BenchmarkIndexMemory reports the heap of the 1 M-block fleet's router per indexed
// block and per distinct block: as the Router grain runs it (no token ids kept), and
// with the token ids Dump needs (a second fleet, built and dropped here).
func BenchmarkIndexMemory(b *testing.B) {
	f := benchRouter(b)
	for i := 0; i < b.N; i++ {
		_ = f.r.Index().Nodes()
	}
	b.ReportMetric(f.heapPerBlk, "heap-B/indexed-block")
	b.ReportMetric(f.heapPerBlk*float64(f.indexed)/float64(f.nodes), "heap-B/distinct-block")
	b.ReportMetric(float64(f.nodes), "distinct-blocks")
	b.StopTimer()
	withDump := buildFleet(b, DefaultConfig(benchBlockSize))
	b.ReportMetric(withDump.heapPerBlk, "heap-B/indexed-block-with-dump")
}
