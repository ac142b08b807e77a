package mocker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

var t0 = time.Unix(1700000000, 0)

func testVocab() Vocab {
	v := Vocab{EOS: []uint32{2}}
	for t := uint32(100); t < 110; t++ {
		v.Ordinary = append(v.Ordinary, t)
	}
	return v
}

func smallConfig() Config {
	return Config{BlockSize: 4, NumGPUBlocks: 64, MaxNumSeqs: 8, MaxNumBatchedTokens: 64, MaxModelLen: 128,
		EnablePrefixCaching: true, EnableChunkedPrefill: true, SpeedupRatio: 1, MeanOutputTokens: 16, Seed: 7}
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg, testVocab())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func mustAdd(t testing.TB, e *Engine, r Request) {
	t.Helper()
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
}

// run steps the engine on a virtual clock until it is idle, returning each request's
// tokens, its last output, every event and the final time.
type runResult struct {
	tokens map[string][]uint32
	last   map[string]Output
	events []kv.Event
	steps  []StepResult
	end    time.Time
}

func run(t testing.TB, e *Engine, now time.Time) runResult {
	t.Helper()
	rr := runResult{tokens: map[string][]uint32{}, last: map[string]Output{}, end: now}
	for i := 0; e.HasWork(); i++ {
		if i > 100000 {
			t.Fatal("engine did not finish")
		}
		res := e.Step(rr.end)
		if res.Idle {
			t.Fatalf("idle step with work left: %+v", e.Stats())
		}
		for _, o := range res.Outputs {
			rr.tokens[o.RequestID] = append(rr.tokens[o.RequestID], o.TokenIDs...)
			rr.last[o.RequestID] = o
		}
		rr.events = append(rr.events, res.Events...)
		rr.steps = append(rr.steps, res)
		rr.end = res.End
	}
	return rr
}

func TestTimingModel(t *testing.T) {
	if PrefillMillis(0) != 0 {
		t.Fatal("prefill of nothing takes time")
	}
	if got, want := PrefillMillis(1000), 4.209989e-7*1e6+1.518344e-2*1000+16.50142; math.Abs(got-want) > 1e-9 {
		t.Fatalf("PrefillMillis(1000) = %v, want %v", got, want)
	}
	if DecodeMillis(0) != 5.74 || math.Abs(DecodeMillis(1)-34.01) > 1e-9 || DecodeMillis(-3) != 5.74 {
		t.Fatalf("DecodeMillis: %v %v", DecodeMillis(0), DecodeMillis(1))
	}
	d := StepDuration(1000, true, 0.5, 2)
	want := (PrefillMillis(1000) + DecodeMillis(0.5)) / 2
	if math.Abs(float64(d)/1e6-want) > 1e-3 {
		t.Fatalf("StepDuration = %v, want %v ms", d, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.BlockSize = 0 }, "--block-size"},
		{func(c *Config) { c.NumGPUBlocks = -1 }, "--num-gpu-blocks-override"},
		{func(c *Config) { c.MaxNumSeqs = 0 }, "--max-num-seqs"},
		{func(c *Config) { c.MaxNumBatchedTokens = 0 }, "--max-num-batched-tokens"},
		{func(c *Config) { c.MaxModelLen = 1 }, "--max-model-len"},
		{func(c *Config) { c.SpeedupRatio = math.NaN() }, "--speedup-ratio"},
		{func(c *Config) { c.MeanOutputTokens = 0 }, "--mean-output-tokens"},
		{func(c *Config) { c.NumGPUBlocks = 10 }, "exceeds the KV cache"},
		{func(c *Config) { c.EnableChunkedPrefill = false }, "without chunked prefill"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "mocker: ") {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

func TestAddValidation(t *testing.T) {
	e := newEngine(t, smallConfig())
	mustAdd(t, e, Request{ID: "a", Prompt: []uint32{1}, MaxTokens: 1})
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{Prompt: []uint32{1}, MaxTokens: 1}, "without id"},
		{Request{ID: "a", Prompt: []uint32{1}, MaxTokens: 1}, "duplicate"},
		{Request{ID: "b", MaxTokens: 1}, "empty prompt"},
		{Request{ID: "b", Prompt: []uint32{1}}, "max_tokens 0"},
		{Request{ID: "b", Prompt: []uint32{1}, MaxTokens: 2, MinTokens: 3}, "min_tokens 3"},
		{Request{ID: "b", Prompt: seqTokens(0, 100), MaxTokens: 29}, "exceed the context length 128"},
	} {
		if err := e.Add(tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

func TestBatchingLimits(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxNumSeqs = 2
	cfg.MaxNumBatchedTokens = 16
	e := newEngine(t, cfg)
	for _, id := range []string{"a", "b", "c"} {
		mustAdd(t, e, Request{ID: id, Prompt: seqTokens(1000*int(id[0]), 10), MaxTokens: 3, IgnoreEOS: true})
	}
	// Step 1: a's whole prompt (10) and 6 of b's; c waits for a sequence slot.
	r := e.Step(t0)
	if r.PrefillTokens != 16 || r.DecodeSeqs != 0 || len(r.Outputs) != 1 || r.Outputs[0].RequestID != "a" {
		t.Fatalf("step 1: %+v", r)
	}
	if st := e.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("after step 1: %+v", st)
	}
	if want := StepDuration(16, false, 0, 1); r.Duration != want || !r.End.Equal(t0.Add(want)) {
		t.Fatalf("duration %v, want %v", r.Duration, want)
	}
	// Step 2: a decodes one token, b finishes its prompt (4 tokens).
	r = e.Step(r.End)
	if r.PrefillTokens != 4 || r.DecodeSeqs != 1 || len(r.Outputs) != 2 {
		t.Fatalf("step 2: %+v", r)
	}
	// The budget holds in every step, and at most two run at once.
	rr := run(t, e, r.End)
	for _, s := range rr.steps {
		if s.PrefillTokens+s.DecodeSeqs > 16 {
			t.Fatalf("step computed %d tokens", s.PrefillTokens+s.DecodeSeqs)
		}
	}
	if len(rr.tokens["c"]) != 3 || rr.last["c"].FinishReason != FinishLength {
		t.Fatalf("c: %v %+v", rr.tokens["c"], rr.last["c"])
	}
}

func TestChunkedPrefill(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxNumBatchedTokens = 16
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 40), MaxTokens: 2, IgnoreEOS: true})
	var chunks []int
	for e.HasWork() {
		r := e.Step(t0)
		chunks = append(chunks, r.PrefillTokens)
		if r.PrefillTokens > 0 && r.PrefillTokens < 16 && len(r.Outputs) != 1 {
			t.Fatalf("last chunk produced no token: %+v", r)
		}
		if r.PrefillTokens == 16 && len(r.Outputs) != 0 {
			t.Fatalf("a partial chunk produced a token: %+v", r)
		}
	}
	if !slices.Equal(chunks, []int{16, 16, 8, 0}) {
		t.Fatalf("prefill chunks %v, want [16 16 8 0]", chunks)
	}

	// Without chunked prefill a prompt waits until it fits the step's budget whole.
	cfg = smallConfig()
	cfg.EnableChunkedPrefill = false
	cfg.MaxNumBatchedTokens = 128
	e = newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 100), MaxTokens: 2, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(500, 40), MaxTokens: 2, IgnoreEOS: true})
	r := e.Step(t0)
	if r.PrefillTokens != 100 || e.Stats().Waiting != 1 {
		t.Fatalf("unchunked step 1: %+v %+v", r, e.Stats())
	}
	r = e.Step(r.End)
	if r.PrefillTokens != 40 || r.DecodeSeqs != 1 {
		t.Fatalf("unchunked step 2: %+v", r)
	}
}

func TestPrefixCacheHits(t *testing.T) {
	e := newEngine(t, smallConfig())
	prompt := seqTokens(1, 13) // three full blocks of 4 and one token
	mustAdd(t, e, Request{ID: "a", Prompt: prompt, MaxTokens: 1, IgnoreEOS: true})
	rr := run(t, e, t0)
	if len(rr.events) != 1 || rr.events[0].Kind != kv.BlockStored || len(rr.events[0].EngineHashes) != 3 ||
		rr.events[0].HasParent || !slices.Equal(rr.events[0].TokenIDs, prompt[:12]) {
		t.Fatalf("events %+v", rr.events)
	}
	if rr.last["a"].CachedTokens != 0 {
		t.Fatalf("cold request had %d cached tokens", rr.last["a"].CachedTokens)
	}

	// Same first two blocks, then different: 8 cached tokens.
	b := append(append([]uint32{}, prompt[:8]...), 900, 901, 902, 903, 904)
	mustAdd(t, e, Request{ID: "b", Prompt: b, MaxTokens: 1, IgnoreEOS: true})
	rr = run(t, e, rr.end)
	if rr.last["b"].CachedTokens != 8 || rr.steps[0].PrefillTokens != 5 {
		t.Fatalf("b: cached %d, prefill %d", rr.last["b"].CachedTokens, rr.steps[0].PrefillTokens)
	}
	// b stores only its new block, chained to a's second block.
	if len(rr.events) != 1 || !rr.events[0].HasParent || len(rr.events[0].EngineHashes) != 1 {
		t.Fatalf("b events %+v", rr.events)
	}

	// The whole prompt cached: the last block is recomputed so one token is computed.
	mustAdd(t, e, Request{ID: "c", Prompt: prompt[:12], MaxTokens: 1, IgnoreEOS: true})
	rr = run(t, e, rr.end)
	if rr.last["c"].CachedTokens != 8 || rr.steps[0].PrefillTokens != 4 {
		t.Fatalf("c: cached %d, prefill %d", rr.last["c"].CachedTokens, rr.steps[0].PrefillTokens)
	}
	st := e.Stats()
	if st.PrefixQueries != 13+13+12 || st.PrefixHits != 16 {
		t.Fatalf("prefix stats %+v", st)
	}

	// A LoRA adapter changes the hashes: no hit on the base model's blocks.
	mustAdd(t, e, Request{ID: "d", Prompt: prompt, MaxTokens: 1, IgnoreEOS: true, LoraName: "x"})
	rr = run(t, e, rr.end)
	if rr.last["d"].CachedTokens != 0 || rr.events[0].LoraName != "x" {
		t.Fatalf("lora: cached %d, events %+v", rr.last["d"].CachedTokens, rr.events)
	}
}

func engineHashes(prompt []uint32, bs int) []uint64 {
	var out []uint64
	for _, h := range kv.SequenceHashes(prompt, bs, "") {
		out = append(out, kv.ChainHash(h, engineHashSalt))
	}
	return out
}

func TestLRUEvictionTailFirst(t *testing.T) {
	cfg := smallConfig()
	cfg.NumGPUBlocks = 6
	cfg.MaxModelLen = 24
	e := newEngine(t, cfg)
	a := seqTokens(1, 12)
	mustAdd(t, e, Request{ID: "a", Prompt: a, MaxTokens: 1, IgnoreEOS: true})
	rr := run(t, e, t0)
	// a held blocks 0, 1, 2; released last first, so block 2 is evicted first.
	if got := e.cache.lruOrder(); !slices.Equal(got, []int32{2, 1, 0}) {
		t.Fatalf("LRU order %v, want [2 1 0]", got)
	}
	ah := engineHashes(a, 4)
	// b needs 5 blocks: the 3 free ones, then a's blocks 2 and 1 (tail first).
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(500, 20), MaxTokens: 1, IgnoreEOS: true})
	rr = run(t, e, rr.end)
	var removed []uint64
	for _, ev := range rr.events {
		if ev.Kind == kv.BlockRemoved {
			removed = append(removed, ev.EngineHashes...)
		}
	}
	if !slices.Equal(removed, []uint64{ah[2], ah[1]}) {
		t.Fatalf("removed %x, want a's blocks 2 and 1 %x %x", removed, ah[2], ah[1])
	}
	// a's first block survived: a prompt sharing it hits.
	mustAdd(t, e, Request{ID: "c", Prompt: append(append([]uint32{}, a[:4]...), 7, 7, 7, 7, 7), MaxTokens: 1, IgnoreEOS: true})
	rr = run(t, e, rr.end)
	if rr.last["c"].CachedTokens != 4 {
		t.Fatalf("c cached %d, want 4", rr.last["c"].CachedTokens)
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := newEngine(t, smallConfig())
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 10), MaxTokens: 50, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "w", Prompt: seqTokens(1, 10), MaxTokens: 50, IgnoreEOS: true})
	e.cfg.MaxNumSeqs = 1 // keep w waiting
	r := e.Step(t0)
	r = e.Step(r.End)
	if st := e.Stats(); st.Running != 1 || st.Waiting != 1 || st.ActiveBlocks != 3 {
		t.Fatalf("before abort %+v", st)
	}
	if !e.Abort("a") || !e.Abort("w") || e.Abort("a") {
		t.Fatal("Abort results")
	}
	st := e.Stats()
	if st.Running != 0 || st.Waiting != 0 || st.ActiveBlocks != 0 || st.CachedBlocks != 2 || e.HasWork() {
		t.Fatalf("after abort %+v", st)
	}
	if r := e.Step(r.End); !r.Idle || r.Duration != 0 {
		t.Fatalf("step after abort %+v", r)
	}
}

func TestPreemptionRecomputes(t *testing.T) {
	cfg := smallConfig()
	cfg.NumGPUBlocks = 8
	cfg.MaxModelLen = 32
	alone := func(id string, prompt []uint32) []uint32 {
		e := newEngine(t, cfg)
		mustAdd(t, e, Request{ID: id, Prompt: prompt, MaxTokens: 12, IgnoreEOS: true})
		return run(t, e, t0).tokens[id]
	}
	pa, pb := seqTokens(1, 12), seqTokens(300, 12)
	e := newEngine(t, cfg)
	mustAdd(t, e, Request{ID: "a", Prompt: pa, MaxTokens: 12, IgnoreEOS: true})
	mustAdd(t, e, Request{ID: "b", Prompt: pb, MaxTokens: 12, IgnoreEOS: true})
	rr := run(t, e, t0)
	var preempted []string
	for _, s := range rr.steps {
		preempted = append(preempted, s.Preempted...)
	}
	if len(preempted) == 0 || preempted[0] != "b" {
		t.Fatalf("preempted %v, want b (the later request) first", preempted)
	}
	if e.Stats().Preemptions == 0 {
		t.Fatal("no preemption counted")
	}
	if !slices.Equal(rr.tokens["a"], alone("a", pa)) || !slices.Equal(rr.tokens["b"], alone("b", pb)) {
		t.Fatalf("preemption changed the output:\na %v\nb %v", rr.tokens["a"], rr.tokens["b"])
	}
	if st := e.Stats(); st.ActiveBlocks != 0 || st.Running+st.Waiting != 0 {
		t.Fatalf("blocks leaked: %+v", st)
	}
}

// TestEventsMatchCache replays every event of a seeded random workload (with aborts,
// shared prefixes, pinned prefill legs, imported decode legs and a small cache) into a model of the engine's prefix cache and
// checks it against the cache: events say exactly what is stored and evicted.
func TestEventsMatchCache(t *testing.T) {
	cfg := smallConfig()
	cfg.NumGPUBlocks = 40
	cfg.MaxNumBatchedTokens = 24
	cfg.MaxNumSeqs = 4
	e := newEngine(t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[uint64]bool{}
	now := t0
	nextID := 0
	prefixes := [][]uint32{seqTokens(1, 16), seqTokens(100, 8), seqTokens(200, 24)}
	for step := 0; step < 3000; step++ {
		if rng.IntN(3) == 0 {
			pre := prefixes[rng.IntN(len(prefixes))]
			p := append([]uint32{}, pre[:min(len(pre), 4*rng.IntN(5))]...)
			for n := rng.IntN(20) + 1; n > 0; n-- {
				p = append(p, uint32(rng.IntN(50)))
			}
			max := rng.IntN(20) + 1
			if len(p)+max > cfg.MaxModelLen {
				continue
			}
			r := Request{ID: fmt.Sprint(nextID), Prompt: p, MaxTokens: max, LoraName: []string{"", "", "l"}[rng.IntN(3)]}
			switch rng.IntN(4) { // legs of disaggregated requests
			case 0:
				r.HoldBlocks = true
			case 1:
				r.ImportedTokens = rng.IntN(len(p) + 1)
			}
			mustAdd(t, e, r)
			nextID++
		}
		if rng.IntN(10) == 0 && nextID > 0 {
			e.Abort(fmt.Sprint(rng.IntN(nextID)))
		}
		if rng.IntN(3) == 0 && nextID > 0 {
			e.Release(fmt.Sprint(rng.IntN(nextID)))
		}
		r := e.Step(now)
		now = r.End
		for _, ev := range r.Events {
			switch ev.Kind {
			case kv.BlockStored:
				for _, h := range ev.EngineHashes {
					if model[h] {
						t.Fatalf("step %d: stored %x twice", step, h)
					}
					model[h] = true
				}
				if len(ev.TokenIDs) != len(ev.EngineHashes)*cfg.BlockSize {
					t.Fatalf("stored event token count %d", len(ev.TokenIDs))
				}
			case kv.BlockRemoved:
				for _, h := range ev.EngineHashes {
					if !model[h] {
						t.Fatalf("step %d: removed %x never stored", step, h)
					}
					delete(model, h)
				}
			}
		}
		want := map[uint64]bool{}
		for i := range e.cache.blocks {
			if b := e.cache.blocks[i]; b.registered {
				want[b.engineHash] = true
			}
		}
		if len(want) != len(model) {
			t.Fatalf("step %d: events say %d blocks cached, cache has %d", step, len(model), len(want))
		}
		for h := range want {
			if !model[h] {
				t.Fatalf("step %d: cached block %x has no BlockStored", step, h)
			}
		}
		st := e.Stats()
		if st.ActiveBlocks+st.CachedBlocks+st.FreeBlocks != cfg.NumGPUBlocks {
			t.Fatalf("step %d: pools %+v do not add up", step, st)
		}
	}
	for id := 0; id < nextID; id++ {
		e.Abort(fmt.Sprint(id))
	}
	if st := e.Stats(); st.ActiveBlocks != 0 || st.PinnedBlocks != 0 || st.PinnedRequests != 0 || e.HasWork() {
		t.Fatalf("blocks left after aborting everything: %+v", st)
	}
}

// TestDeterministicContinuation: the output is a function of seed and tokens only, on any
// engine; a request re-sent with part of its output in the prompt continues the stream.
func TestDeterministicContinuation(t *testing.T) {
	prompt := seqTokens(40, 9)
	e1 := newEngine(t, smallConfig())
	mustAdd(t, e1, Request{ID: "x", Prompt: prompt, MaxTokens: 30, IgnoreEOS: true})
	full := run(t, e1, t0).tokens["x"]
	if len(full) != 30 {
		t.Fatalf("got %d tokens", len(full))
	}
	cfg2 := smallConfig()
	cfg2.BlockSize = 8
	cfg2.MaxNumBatchedTokens = 5
	e2 := newEngine(t, cfg2)
	mustAdd(t, e2, Request{ID: "warm", Prompt: seqTokens(40, 16), MaxTokens: 3})
	run(t, e2, t0)
	for _, k := range []int{1, 7, 29} {
		cont := append(append([]uint32{}, prompt...), full[:k]...)
		mustAdd(t, e2, Request{ID: fmt.Sprint(k), Prompt: cont, MaxTokens: 30 - k, IgnoreEOS: true})
		got := run(t, e2, t0).tokens[fmt.Sprint(k)]
		if !slices.Equal(got, full[k:]) {
			t.Fatalf("continuation after %d tokens:\ngot  %v\nwant %v", k, got, full[k:])
		}
	}
	// Another seed gives another stream.
	mustAdd(t, e2, Request{ID: "s", Prompt: prompt, MaxTokens: 30, IgnoreEOS: true, Seed: 99, HasSeed: true})
	if got := run(t, e2, t0).tokens["s"]; slices.Equal(got, full) {
		t.Fatal("seed has no effect")
	}
}

func TestEOSMeanLength(t *testing.T) {
	cfg := smallConfig()
	cfg.MeanOutputTokens = 20
	cfg.MaxModelLen = 256
	e := newEngine(t, cfg)
	const n = 400
	for i := 0; i < n; i++ {
		mustAdd(t, e, Request{ID: fmt.Sprint(i), Prompt: []uint32{uint32(i), uint32(i * 7)}, MaxTokens: 250})
	}
	rr := run(t, e, t0)
	total := 0
	for id, toks := range rr.tokens {
		last := rr.last[id]
		if last.FinishReason == FinishStop && toks[len(toks)-1] != 2 {
			t.Fatalf("stop without EOS: %+v", last)
		}
		if last.HasStopTokenID {
			t.Fatal("EOS reported as a stop token id")
		}
		total += len(toks)
	}
	if mean := float64(total) / n; mean < 17 || mean > 23 {
		t.Fatalf("mean output %.1f tokens, want about 20", mean)
	}
}

func TestStopTokensAndMinTokens(t *testing.T) {
	cfg := smallConfig()
	e, err := New(cfg, Vocab{Ordinary: []uint32{100, 101}, EOS: []uint32{2}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		mustAdd(t, e, Request{ID: fmt.Sprint(i), Prompt: []uint32{uint32(i)}, MaxTokens: 60, MinTokens: 6,
			IgnoreEOS: true, StopTokenIDs: []uint32{100}})
	}
	rr := run(t, e, t0)
	for id, toks := range rr.tokens {
		last := rr.last[id]
		if slices.Contains(toks[:6], 100) {
			t.Fatalf("%s: stop token within min_tokens: %v", id, toks)
		}
		if last.FinishReason == FinishStop {
			if !last.HasStopTokenID || last.StopTokenID != 100 || toks[len(toks)-1] != 100 || slices.Contains(toks[:len(toks)-1], 100) {
				t.Fatalf("%s: stop %+v tokens %v", id, last, toks)
			}
		} else if len(toks) != 60 {
			t.Fatalf("%s: %s after %d tokens", id, last.FinishReason, len(toks))
		}
	}
}

type fakeTokens map[uint32]string

func (f fakeTokens) TokenBytes(id uint32) ([]byte, bool) { s, ok := f[id]; return []byte(s), ok }
func (f fakeTokens) VocabSize() int                      { return 10 }
func (f fakeTokens) IsSpecial(id uint32) bool            { return id == 9 }

func TestBuildVocab(t *testing.T) {
	v, err := BuildVocab(fakeTokens{0: " the", 1: "the", 2: " a", 3: " word", 4: " w0rd", 5: " abcdefghij", 6: " abcdefghijk", 9: " special"}, []uint32{9})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.Ordinary, []uint32{0, 3, 5}) || !slices.Equal(v.EOS, []uint32{9}) {
		t.Fatalf("vocab %+v", v)
	}
	if _, err := BuildVocab(fakeTokens{0: "x"}, nil); err == nil {
		t.Fatal("vocabulary without words accepted")
	}
}

func BenchmarkStep(b *testing.B) {
	cfg := DefaultConfig()
	cfg.MeanOutputTokens = 256
	e := newEngine(b, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	shared := seqTokens(1, 2048)
	now := t0
	id, tokens, steps := 0, 0, 0
	var simulated time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for e.Stats().Running+e.Stats().Waiting < 128 {
			p := append(append([]uint32{}, shared[:64*rng.IntN(32)]...), seqTokens(10000+id*7, 512)...)
			_ = e.Add(Request{ID: fmt.Sprint(id), Prompt: p, MaxTokens: 512})
			id++
		}
		r := e.Step(now)
		now = r.End
		simulated += r.Duration
		steps++
		for _, o := range r.Outputs {
			tokens += len(o.TokenIDs)
		}
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	if simulated > 0 {
		b.ReportMetric(float64(tokens)/simulated.Seconds(), "simulated-tokens/s")
	}
}

// W marks a drawn word (any ordinary token) in TestScript's expectations.
const W = ^uint32(0)

func TestScript(t *testing.T) {
	for _, c := range []struct {
		name   string
		req    Request
		want   []uint32
		reason FinishReason
		stopID uint32 // Output.StopTokenID when set
	}{
		{name: "script then EOS", req: Request{Script: []uint32{50, 51, 52}, MaxTokens: 20},
			want: []uint32{50, 51, 52, 2}, reason: FinishStop},
		{name: "empty script: EOS at once", req: Request{Script: []uint32{}, MaxTokens: 20},
			want: []uint32{2}, reason: FinishStop},
		{name: "max_tokens truncates", req: Request{Script: []uint32{50, 51, 52}, MaxTokens: 2},
			want: []uint32{50, 51}, reason: FinishLength},
		{name: "ignore_eos: words after the script", req: Request{Script: []uint32{50, 51}, MaxTokens: 5, IgnoreEOS: true},
			want: []uint32{50, 51, W, W, W}, reason: FinishLength},
		{name: "min_tokens: words until reached, then EOS", req: Request{Script: []uint32{50, 51}, MaxTokens: 20, MinTokens: 4},
			want: []uint32{50, 51, W, W, 2}, reason: FinishStop},
		{name: "EOS in the script ends it", req: Request{Script: []uint32{50, 2, 51}, MaxTokens: 20},
			want: []uint32{50, 2}, reason: FinishStop},
		{name: "stop token in the script ends it", req: Request{Script: []uint32{50, 51, 52}, MaxTokens: 20, StopTokenIDs: []uint32{51}},
			want: []uint32{50, 51}, reason: FinishStop, stopID: 51},
		{name: "min_tokens masks the script's EOS", req: Request{Script: []uint32{50, 2, 51}, MaxTokens: 20, MinTokens: 3},
			want: []uint32{50, W, 51, 2}, reason: FinishStop},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, smallConfig())
			r := c.req
			r.ID, r.Prompt = "a", seqTokens(1, 10)
			mustAdd(t, e, r)
			rr := run(t, e, t0)
			got, last := rr.tokens["a"], rr.last["a"]
			if len(got) != len(c.want) {
				t.Fatalf("tokens %v, want %v", got, c.want)
			}
			for i, w := range c.want {
				if w == W && !slices.Contains(testVocab().Ordinary, got[i]) || w != W && got[i] != w {
					t.Fatalf("tokens %v, want %v (W: an ordinary word)", got, c.want)
				}
			}
			if last.FinishReason != c.reason || last.HasStopTokenID != (c.stopID != 0) || last.StopTokenID != c.stopID {
				t.Fatalf("finished %+v, want %s (stop id %d)", last, c.reason, c.stopID)
			}
		})
	}
}

// TestScriptKeepsTiming: a scripted request takes the same steps, of the same modelled
// durations, as a drawn one of the same lengths.
func TestScriptKeepsTiming(t *testing.T) {
	durations := func(script []uint32) []time.Duration {
		e := newEngine(t, smallConfig())
		mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 30), MaxTokens: 12, IgnoreEOS: true, Script: script})
		mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(100, 20), MaxTokens: 7, IgnoreEOS: true})
		var out []time.Duration
		for _, s := range run(t, e, t0).steps {
			out = append(out, s.Duration)
		}
		return out
	}
	drawn, scripted := durations(nil), durations([]uint32{60, 61, 62, 63, 64})
	if !slices.Equal(drawn, scripted) {
		t.Fatalf("step durations differ: drawn %v, scripted %v", drawn, scripted)
	}
}
