package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
)

// LoRA adapters in a workload (docs/reference.md §26.5). A request may name a LoRA
// adapter (Request.Lora), which a real run sends as the request's model and a
// simulation as its SamplingParams.lora_name. A LoraSpec draws the names: the adapters
// are LoraName(0, n) … LoraName(n-1, n), adapter k drawn with probability proportional
// to 1/(k+1)^Zipf, from a random stream of its own (the seed's lora stream), so that
// adding adapters to a workload changes nothing else of it (arrivals, lengths, prefix
// groups, hash ids).

// Bounds and defaults of a LoraSpec.
const (
	// DefaultLoraZipf is the default Zipf exponent of adapter popularity: 1, the
	// classic Zipf law (with 64 adapters the most popular one gets 21 % of the
	// requests, the top 4 half of them, the top 32 86 %).
	DefaultLoraZipf = 1.0
	// MaxLoraAdapters bounds LoraSpec.Adapters.
	MaxLoraAdapters = 100_000
	// MaxLoraZipf bounds LoraSpec.Zipf: at 10 the most popular adapter already takes
	// 99.9 % of the requests.
	MaxLoraZipf = 10
)

// loraStream is the PCG stream of the adapter draws ("lora"): apart from the one of
// arrivals, groups and lengths (stream 0).
const loraStream = 0x6c6f7261

// LoraSpec says which LoRA adapters a workload's requests name.
type LoraSpec struct {
	// Adapters is the number of adapters (0: every request is for the base model), at
	// most MaxLoraAdapters.
	Adapters int
	// Zipf is the popularity exponent, 0 (uniform) to MaxLoraZipf: adapter k (from 0)
	// is drawn with probability proportional to 1/(k+1)^Zipf.
	Zipf float64
	// BaseFraction of the requests, 0 to 1, name no adapter (the base model).
	BaseFraction float64
}

// Check reports what makes s unusable; errors name the field in words.
func (s LoraSpec) Check() error {
	switch {
	case s.Adapters < 0 || s.Adapters > MaxLoraAdapters:
		return fmt.Errorf("bench: %d LoRA adapters: want 0 to %d", s.Adapters, MaxLoraAdapters)
	case !(s.Zipf >= 0 && s.Zipf <= MaxLoraZipf):
		return fmt.Errorf("bench: LoRA popularity exponent %v: want 0 (uniform) to %d", s.Zipf, MaxLoraZipf)
	case !(s.BaseFraction >= 0 && s.BaseFraction <= 1):
		return fmt.Errorf("bench: base-model fraction %v: want 0 to 1", s.BaseFraction)
	case s.Adapters == 0 && s.BaseFraction != 0:
		return fmt.Errorf("bench: base-model fraction %v without LoRA adapters: every request is for the base model", s.BaseFraction)
	}
	return nil
}

// LoraName is the name of adapter k of n: "lora-" and k in decimal, zero-padded to the
// digits of n-1 and at least two ("lora-07" of 64, "lora-007" of 1,000).
func LoraName(k, n int) string {
	width := max(len(strconv.Itoa(max(n-1, 0))), 2)
	s := strconv.Itoa(k)
	for len(s) < width {
		s = "0" + s
	}
	return "lora-" + s
}

// loraPicker draws adapter names as a LoraSpec says.
type loraPicker struct {
	names []string
	cdf   []float64 // cdf[k]: the probability of adapters 0..k; the last is 1
	base  float64
	rng   *rand.Rand
}

// picker returns s's drawer seeded by seed, or nil when s names no adapter.
func (s LoraSpec) picker(seed uint64) *loraPicker {
	if s.Adapters == 0 {
		return nil
	}
	p := &loraPicker{names: make([]string, s.Adapters), cdf: make([]float64, s.Adapters), base: s.BaseFraction,
		rng: rand.New(rand.NewPCG(seed, loraStream))}
	var sum float64
	for k := range p.cdf {
		p.names[k] = LoraName(k, s.Adapters)
		sum += math.Pow(float64(k+1), -s.Zipf)
		p.cdf[k] = sum
	}
	for k := range p.cdf {
		p.cdf[k] /= sum
	}
	p.cdf[len(p.cdf)-1] = 1
	return p
}

// next draws one request's adapter ("" for the base model): a first draw for the base
// fraction when it is above 0, then the adapter.
func (p *loraPicker) next() string {
	if p == nil {
		return ""
	}
	if p.base > 0 && p.rng.Float64() < p.base {
		return ""
	}
	u := p.rng.Float64()
	k := sort.Search(len(p.cdf), func(i int) bool { return p.cdf[i] > u })
	return p.names[min(k, len(p.names)-1)]
}

// AssignLoras names an adapter for each request of reqs, in order, drawn as spec says
// from seed's lora stream (a trace replayed with adapters: each request independently,
// so requests that share a prefix in the trace may run under different adapters and then
// share no KV). Requests keep everything else. Errors: what spec.Check finds.
func AssignLoras(reqs []Request, spec LoraSpec, seed uint64) error {
	if err := spec.Check(); err != nil {
		return err
	}
	p := spec.picker(seed)
	for i := range reqs {
		reqs[i].Lora = p.next()
	}
	return nil
}

// LoraSummary reports the requests of a run that named a LoRA adapter. Latencies are in
// milliseconds and cover the adapter requests that succeeded.
type LoraSummary struct {
	Requests  int  `json:"requests"`  // sent naming an adapter
	Succeeded int  `json:"succeeded"` // of those
	Adapters  int  `json:"adapters"`  // distinct adapters named
	TTFT      Dist `json:"ttft_ms"`
	// PrefixCacheHitRate is cached / prompt tokens over the adapter requests that
	// succeeded and reported cached tokens; null when none did.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	// Engines holds what the engines did with adapters: a simulation's figures; nil for
	// a real run, whose engines the client does not see.
	Engines *LoraEngines `json:"engines,omitempty"`
}

// LoraEngines is what a fleet's engines did with LoRA adapters during a run.
type LoraEngines struct {
	// Loads counts adapter loads, all engines together; LoadsPerMinute is Loads over
	// the run's duration in minutes. Unplanned counts the loads of requests the router
	// sent to a worker it counted as holding the adapter (its view was stale: the
	// engine had evicted it). Evictions counts adapters unloaded to make room.
	Loads          int64   `json:"loads"`
	LoadsPerMinute float64 `json:"loads_per_minute"`
	Unplanned      int64   `json:"unplanned_loads"`
	Evictions      int64   `json:"evictions"`
	// Hits counts the adapter requests (each leg of a disaggregated one) that found their
	// adapter loaded in their engine, Misses those that waited for a load (their own or
	// one in progress); HitRate is Hits / (Hits + Misses), 0 when there were none.
	// WaitedForSlot counts the misses that first waited for a slot: every slot's
	// adapter was in use by requests in the engine.
	Hits          int64   `json:"hits"`
	Misses        int64   `json:"misses"`
	HitRate       float64 `json:"hit_rate"`
	WaitedForSlot int64   `json:"waited_for_slot"`
}

// summarizeLora reports the adapter requests of results; nil when none named one.
func summarizeLora(results []Result) *LoraSummary {
	var s LoraSummary
	adapters := map[string]struct{}{}
	var ttft []float64
	var prompt, cached int64
	known := false
	for _, r := range results {
		if r.Lora == "" {
			continue
		}
		s.Requests++
		adapters[r.Lora] = struct{}{}
		if r.Error != "" {
			continue
		}
		s.Succeeded++
		ttft = append(ttft, ms(r.TTFT))
		if r.CachedKnown {
			known = true
			prompt += int64(r.PromptTokens)
			cached += int64(r.CachedTokens)
		}
	}
	if s.Requests == 0 {
		return nil
	}
	s.Adapters, s.TTFT = len(adapters), Describe(ttft)
	if known && prompt > 0 {
		rate := float64(cached) / float64(prompt)
		s.PrefixCacheHitRate = &rate
	}
	return &s
}

// check checks a LoraSummary of a summary of requests requests.
func (s *LoraSummary) check(requests int) error {
	switch {
	case s.Requests < 0 || s.Requests > requests || s.Succeeded < 0 || s.Succeeded > s.Requests:
		return fmt.Errorf("lora: requests %d, succeeded %d: want 0 ≤ succeeded ≤ requests ≤ the run's %d", s.Requests, s.Succeeded, requests)
	case s.Adapters < 0 || s.Adapters > s.Requests || (s.Requests > 0) != (s.Adapters > 0):
		return fmt.Errorf("lora: %d adapters for %d requests: want 1 to requests", s.Adapters, s.Requests)
	case s.PrefixCacheHitRate != nil && !(*s.PrefixCacheHitRate >= 0 && *s.PrefixCacheHitRate <= 1):
		return fmt.Errorf("lora: prefix_cache_hit_rate %v: want 0 to 1", *s.PrefixCacheHitRate)
	}
	if err := s.TTFT.check("lora.ttft_ms", s.Succeeded); err != nil {
		return err
	}
	if e := s.Engines; e != nil {
		if e.Loads < 0 || e.Unplanned < 0 || e.Unplanned > e.Loads || e.Evictions < 0 || e.Evictions > e.Loads ||
			e.Hits < 0 || e.Misses < 0 || e.WaitedForSlot < 0 || !(e.LoadsPerMinute >= 0 && e.LoadsPerMinute <= MaxSummaryRate) ||
			!(e.HitRate >= 0 && e.HitRate <= 1) {
			return errors.New("lora.engines: want counts >= 0 (unplanned loads and evictions at most the loads), loads per minute >= 0 and a hit rate from 0 to 1")
		}
		if e.WaitedForSlot > e.Misses {
			return fmt.Errorf("lora.engines: %d waited for a slot, more than the %d misses", e.WaitedForSlot, e.Misses)
		}
	}
	return nil
}
