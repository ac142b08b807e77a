package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// chain returns n sequence hashes of a prompt: the first shared blocks of prefix p,
// then blocks of tail t.
func chain(p, shared, t, n int) []uint64 {
	var toks []uint32
	for i := 0; i < n; i++ {
		key := uint32(p*1000 + i)
		if i >= shared {
			key = uint32(1_000_000 + t*1000 + i)
		}
		for j := 0; j < 4; j++ {
			toks = append(toks, key*4+uint32(j))
		}
	}
	return SequenceHashes(toks, 4, "")
}

// TestPredictions: the predicted-placement table alone — prefix runs, TTL, the
// capacity bound (oldest out first, tail before head), refreshes and clearing.
func TestPredictions(t *testing.T) {
	type op struct {
		kind     string // add, expire, clear, remove
		w        WorkerID
		h        []uint64
		at       time.Duration
		ttl      time.Duration
		capacity int
	}
	a5 := chain(1, 5, 0, 5)
	a3b := chain(1, 3, 7, 5) // shares a5's first 3 blocks
	b4 := chain(2, 4, 0, 4)
	cases := []struct {
		name   string
		ops    []op
		query  []uint64
		want   []uint32 // per worker 0..2
		blocks []int    // per worker 0..2
		nodes  int
	}{
		{"predicted prefix", []op{{kind: "add", w: 1, h: a5, ttl: 5 * time.Second, capacity: 100}},
			a3b, []uint32{0, 3, 0}, []int{0, 5, 0}, 5},
		{"whole prompt", []op{{kind: "add", w: 1, h: a5, ttl: 5 * time.Second, capacity: 100}},
			a5, []uint32{0, 5, 0}, []int{0, 5, 0}, 5},
		{"two workers share nodes", []op{
			{kind: "add", w: 0, h: a5, ttl: 5 * time.Second, capacity: 100},
			{kind: "add", w: 2, h: a3b, ttl: 5 * time.Second, capacity: 100}},
			a5, []uint32{5, 0, 3}, []int{5, 0, 5}, 7},
		{"expired after the TTL", []op{
			{kind: "add", w: 1, h: a5, ttl: 5 * time.Second, capacity: 100},
			{kind: "expire", w: 1, at: 5*time.Second + 1, ttl: 5 * time.Second}},
			a5, []uint32{0, 0, 0}, []int{0, 0, 0}, 0},
		{"kept at the TTL", []op{
			{kind: "add", w: 1, h: a5, ttl: 5 * time.Second, capacity: 100},
			{kind: "expire", w: 1, at: 5 * time.Second, ttl: 5 * time.Second}},
			a5, []uint32{0, 5, 0}, []int{0, 5, 0}, 5},
		{"refreshed by a later prediction", []op{
			{kind: "add", w: 1, h: a5, ttl: 4 * time.Second, capacity: 100},
			{kind: "add", w: 1, h: a3b, at: 3 * time.Second, ttl: 4 * time.Second, capacity: 100},
			{kind: "expire", w: 1, at: 6 * time.Second, ttl: 4 * time.Second}},
			a5, []uint32{0, 3, 0}, []int{0, 5, 0}, 5},
		{"a repeat within ttl/4 is not pushed again", []op{
			{kind: "add", w: 1, h: a5, ttl: 4 * time.Second, capacity: 100},
			{kind: "add", w: 1, h: a5, at: 999 * time.Millisecond, ttl: 4 * time.Second, capacity: 100},
			{kind: "expire", w: 1, at: 4*time.Second + 1, ttl: 4 * time.Second}},
			a5, []uint32{0, 0, 0}, []int{0, 0, 0}, 0},
		{"a repeat after ttl/4 is", []op{
			{kind: "add", w: 1, h: a5, ttl: 4 * time.Second, capacity: 100},
			{kind: "add", w: 1, h: a5, at: time.Second, ttl: 4 * time.Second, capacity: 100},
			{kind: "expire", w: 1, at: 4*time.Second + 1, ttl: 4 * time.Second}},
			a5, []uint32{0, 5, 0}, []int{0, 5, 0}, 5},
		{"capacity: oldest out, tail first", []op{
			{kind: "add", w: 1, h: a5, ttl: time.Minute, capacity: 6},
			{kind: "add", w: 1, h: b4, at: time.Second, ttl: time.Minute, capacity: 6}},
			a5, []uint32{0, 2, 0}, []int{0, 6, 0}, 6},
		{"capacity: a prompt longer than it keeps its head", []op{
			{kind: "add", w: 1, h: a5, ttl: time.Minute, capacity: 3}},
			a5, []uint32{0, 3, 0}, []int{0, 3, 0}, 3},
		{"cleared (new engine)", []op{
			{kind: "add", w: 0, h: a5, ttl: time.Minute, capacity: 100},
			{kind: "add", w: 1, h: a5, ttl: time.Minute, capacity: 100},
			{kind: "clear", w: 1}},
			a5, []uint32{5, 0, 0}, []int{5, 0, 0}, 5},
		{"removed", []op{
			{kind: "add", w: 1, h: a5, ttl: time.Minute, capacity: 100},
			{kind: "remove", w: 1}},
			a5, []uint32{0, 0, 0}, []int{0, 0, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPredictions()
			for _, o := range c.ops {
				switch o.kind {
				case "add":
					p.add(o.w, o.h, t0.Add(o.at), o.ttl, o.capacity)
				case "expire":
					p.expire(o.w, t0.Add(o.at), o.ttl)
				case "clear":
					p.clearWorker(o.w)
				case "remove":
					p.removeWorker(o.w)
				}
			}
			out := make([]uint32, 3)
			p.overlaps(c.query, out)
			if fmt.Sprint(out) != fmt.Sprint(c.want) {
				t.Errorf("overlaps = %v, want %v", out, c.want)
			}
			for w, n := range c.blocks {
				if got := p.blocks(WorkerID(w)); got != n {
					t.Errorf("worker %d: %d blocks predicted, want %d", w, got, n)
				}
			}
			if p.nodes() != c.nodes {
				t.Errorf("%d nodes, want %d", p.nodes(), c.nodes)
			}
		})
	}
}

// TestPredictionsChurn: many workers predicting, expiring, evicting and clearing
// overlapping chains in random order keep the table's invariants (bitTable's parents
// outlive children, or release would corrupt it; holders match the bits).
func TestPredictionsChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	p := newPredictions()
	const workers, capacity = 5, 40
	ttl := 10 * time.Second
	now := time.Duration(0)
	for step := 0; step < 5000; step++ {
		now += time.Duration(rng.IntN(400)) * time.Millisecond
		w := WorkerID(rng.IntN(workers))
		if rng.IntN(50) == 0 {
			p.clearWorker(w)
			if p.blocks(w) != 0 {
				t.Fatalf("step %d: worker %d holds %d blocks after clearing", step, w, p.blocks(w))
			}
			continue
		}
		h := chain(rng.IntN(6), rng.IntN(8), rng.IntN(50), 1+rng.IntN(12))
		p.expire(w, t0.Add(now), ttl)
		p.add(w, h, t0.Add(now), ttl, capacity)
		// Whatever was evicted or skipped: w holds at most capacity blocks, and the
		// whole prompt just predicted (it fits).
		if n := p.blocks(w); n > capacity {
			t.Fatalf("step %d: worker %d holds %d blocks, capacity %d", step, w, n, capacity)
		}
		out := make([]uint32, workers)
		p.overlaps(h, out)
		if int(out[w]) != len(h) {
			t.Fatalf("step %d: worker %d predicts %d of the %d blocks just added", step, w, out[w], len(h))
		}
	}
	// Every slot alive is held by someone, and holders match the bits.
	total := 0
	for w := 0; w < workers; w++ {
		total += p.blocks(WorkerID(w))
	}
	held := 0
	for s := 0; s < p.t.capSlots(); s++ {
		if !p.t.live(uint32(s)) {
			continue
		}
		if p.holders[s] == 0 {
			t.Fatalf("slot %d alive with no holder", s)
		}
		held += int(p.holders[s])
	}
	if held != total {
		t.Fatalf("holders sum %d, workers' blocks %d", held, total)
	}
	for w := 0; w < workers; w++ {
		p.clearWorker(WorkerID(w))
	}
	if p.nodes() != 0 {
		t.Fatalf("%d nodes left after clearing every worker", p.nodes())
	}
}

// TestIndexModeSwitch: a worker is approximate when its registration says its engine
// publishes no KV events, or when requests that should have stored blocks met no event
// batch for long enough; an event batch of its engine makes it exact again.
func TestIndexModeSwitch(t *testing.T) {
	type step struct {
		at      time.Duration
		route   int // prompt blocks of a request pinned to the worker (0: none)
		cached  bool
		batch   bool
		restart bool
		declare *bool
	}
	yes, no := true, false
	cases := []struct {
		name     string
		noEvents bool
		steps    []step
		want     IndexMode
	}{
		{"events by default", false, nil, IndexEvents},
		{"declared without events", true, nil, IndexApproximate},
		{"declared, then a batch", true, []step{{batch: true}}, IndexEvents},
		{"declaration withdrawn", true, []step{{declare: &no}}, IndexEvents},
		{"declaration added", false, []step{{declare: &yes}}, IndexApproximate},
		{"silent: 3 requests over 10 s", false, []step{{route: 2}, {at: 5 * time.Second, route: 2}, {at: 10 * time.Second, route: 2}},
			IndexApproximate},
		{"silent too briefly", false, []step{{route: 2}, {at: 5 * time.Second, route: 2}, {at: 9 * time.Second, route: 2}},
			IndexEvents},
		{"too few requests", false, []step{{route: 2}, {at: 50 * time.Second, route: 2}}, IndexEvents},
		{"a batch restarts the count", false, []step{{route: 2}, {at: 5 * time.Second, route: 2}, {at: 6 * time.Second, batch: true},
			{at: 10 * time.Second, route: 2}}, IndexEvents},
		{"prompts without a full block do not count", false, []step{{route: 0}, {at: 5 * time.Second, route: 0},
			{at: 10 * time.Second, route: 0}}, IndexEvents},
		{"fully cached prompts do not count", false, []step{{batch: true}, {route: 2, cached: true},
			{at: 5 * time.Second, route: 2, cached: true}, {at: 10 * time.Second, route: 2, cached: true}}, IndexEvents},
		{"silent, then a batch", false, []step{{route: 2}, {at: 5 * time.Second, route: 2}, {at: 10 * time.Second, route: 2},
			{at: 11 * time.Second, batch: true}}, IndexEvents},
		{"silent, then a new engine", false, []step{{route: 2}, {at: 5 * time.Second, route: 2}, {at: 10 * time.Second, route: 2},
			{at: 11 * time.Second, restart: true}}, IndexEvents},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig(4)
			cfg.ApproxAfterRequests, cfg.ApproxAfterSilence = 3, 10*time.Second
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			spec := WorkerSpec{ID: "w", BlockSize: 4, Ready: true, Epoch: 1, NoKVEvents: c.noEvents}
			if _, err := r.Register(spec); err != nil {
				t.Fatal(err)
			}
			seq := uint64(0)
			cached := prompt(8)
			for i, s := range c.steps {
				switch {
				case s.batch:
					seq++
					ev := Event{Kind: BlockStored, BlockSize: 4, TokenIDs: cached, EngineHashes: []uint64{1, 2}}
					if _, err := r.ApplyBatch("w", spec.Epoch, seq, []Event{ev}); err != nil {
						t.Fatal(err)
					}
				case s.restart:
					spec.Epoch++
					seq = 0
					if _, err := r.Register(spec); err != nil {
						t.Fatal(err)
					}
				case s.declare != nil:
					spec.NoKVEvents = *s.declare
					if _, err := r.Register(spec); err != nil {
						t.Fatal(err)
					}
				default:
					toks := prompt(4*s.route + 1)
					if s.cached {
						toks = cached
					}
					if _, err := r.Route(RouteInput{RequestID: fmt.Sprint("r", i), Tokens: toks}, t0.Add(s.at), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := r.Stats().Workers[0].IndexMode; got != c.want {
				t.Errorf("mode %v, want %v", got, c.want)
			}
		})
	}
}

// TestPredictionsSteadyStateAllocs: recording and expiring predictions allocates
// nothing once the tables have grown.
func TestPredictionsSteadyStateAllocs(t *testing.T) {
	p := newPredictions()
	prompts := make([][]uint64, 64)
	for i := range prompts {
		prompts[i] = chain(i%4, 16, i, 64)
	}
	now := t0
	step := func(i int) {
		now = now.Add(37 * time.Millisecond)
		w := WorkerID(i % 8)
		p.expire(w, now, 2*time.Second)
		p.add(w, prompts[i%len(prompts)], now, 2*time.Second, 2048)
	}
	for i := 0; i < 20000; i++ { // grow every table to its steady size
		step(i)
	}
	i := 0
	if n := testing.AllocsPerRun(2000, func() { step(i); i++ }); n != 0 {
		t.Errorf("%v allocations per prediction in steady state, want 0", n)
	}
}

// BenchmarkRoutePredicted is BenchmarkRoute with predictions on for the workers with
// KV events (Config.PredictActive, as `turbine serve` runs by default).
func BenchmarkRoutePredicted(b *testing.B) {
	f := benchRouter(b)
	r := f.r
	defer func(on bool) { r.cfg.PredictActive = on }(r.cfg.PredictActive)
	r.cfg.PredictActive = true
	rng := rand.New(rand.NewPCG(1, 1))
	prompts := make([][]uint32, 256)
	for i := range prompts {
		prompts[i] = benchPromptTokens(nil, rng.IntN(benchWorkers*benchPromptsPerW))
	}
	ids := make([]string, 256)
	for i := range ids {
		ids[i] = fmt.Sprint("pred-", i)
	}
	lat := make([]time.Duration, 0, b.N)
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%len(ids)]
		r.Free(id)
		now = now.Add(time.Millisecond)
		start := time.Now()
		if _, err := r.Route(RouteInput{RequestID: id, Tokens: prompts[i%len(prompts)]}, now, rng); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	for _, id := range ids {
		r.Free(id)
	}
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
}
