package mocker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
)

// LoRA adapters (docs/reference.md §26.1). The engine holds at most Config.MaxLoras
// adapters, each loaded by LoadLora and removed by UnloadLora. A load takes
// Config.LoraLoadMillis of modelled time during which the engine computes nothing, as
// vLLM's engine core loads an adapter between two steps. A request names its adapter in
// Request.LoraName: the name is mixed into its generation seed (so base and adapters
// answer the same prompt differently, each deterministically) and into its block hashes
// (kv.LoraSeed), and its BlockStored events carry it.

// Adapter is a LoRA adapter the engine holds.
type Adapter struct {
	// Name is the adapter's served name (vLLM's lora_name); requests name it.
	Name string
	// Path is the folder it was loaded from (vLLM's lora_path).
	Path string
	// Rank is its rank (adapter_config.json r), at most Config.MaxLoraRank.
	Rank int
	// ID is vLLM's lora_int_id: 1, 2, ... in load order, never reused by the engine.
	ID int
}

// LoraRequests is how many waiting and running requests name one adapter.
type LoraRequests struct {
	Name             string
	Waiting, Running int
}

// Errors of LoadLora and UnloadLora (wrapped with the adapter's name).
var (
	// ErrLoraOff: the engine serves no adapters (Config.MaxLoras 0).
	ErrLoraOff = errors.New("LoRA adapters are off (--max-loras 0)")
	// ErrLoraLoaded: an adapter of that name is loaded already.
	ErrLoraLoaded = errors.New("LoRA adapter already loaded")
	// ErrLoraSlots: Config.MaxLoras adapters are loaded already.
	ErrLoraSlots = errors.New("every LoRA adapter slot holds an adapter")
	// ErrLoraRank: the adapter's rank is above Config.MaxLoraRank (or below 1).
	ErrLoraRank = errors.New("LoRA rank out of range")
	// ErrLoraNotLoaded: no adapter of that name is loaded.
	ErrLoraNotLoaded = errors.New("LoRA adapter not loaded")
)

// loraState is the engine's adapters and how requests use them.
type loraState struct {
	adapters []*loraSlot // in load order
	// use counts the waiting and running requests naming each adapter (loaded or not).
	use    map[string]int
	clock  uint64 // advanced at each load and each request naming an adapter
	nextID int
}

type loraSlot struct {
	Adapter
	used uint64 // loraState.clock when it was loaded or last named by a request
}

func (l *loraState) find(name string) int {
	return slices.IndexFunc(l.adapters, func(a *loraSlot) bool { return a.Name == name })
}

// added records a request naming name ("" for the base model) entering the engine.
func (l *loraState) added(name string) {
	if name == "" {
		return
	}
	if l.use == nil {
		l.use = map[string]int{}
	}
	l.use[name]++
	l.clock++
	if i := l.find(name); i >= 0 {
		l.adapters[i].used = l.clock
	}
}

// left records a request naming name leaving the engine (finished or aborted).
func (l *loraState) left(name string) {
	if name == "" {
		return
	}
	if l.use[name]--; l.use[name] <= 0 {
		delete(l.use, name)
	}
}

// MaxLoraRankOrDefault is the largest adapter rank the engine takes: MaxLoraRank, or
// DefaultMaxLoraRank when that is 0.
func (c Config) MaxLoraRankOrDefault() int {
	if c.MaxLoraRank > 0 {
		return c.MaxLoraRank
	}
	return DefaultMaxLoraRank
}

// LoraLoadTime is how long one adapter load takes: Config.LoraLoadMillis divided by the
// speed-up ratio.
func (c Config) LoraLoadTime() time.Duration {
	return time.Duration(c.LoraLoadMillis / c.SpeedupRatio * float64(time.Millisecond))
}

// LoadLora loads adapter a (its ID is assigned) and returns it with the time the load
// takes (Config.LoraLoadTime). The adapter counts as loaded at once, but the engine
// computes nothing until that time has passed: the caller waits that long before its
// next Step (a live server) or starts that Step that much later (a simulation). Errors
// (nothing changed): ErrLoraOff, ErrLoraLoaded, ErrLoraRank (a rank below 1 or above
// the limit), ErrLoraSlots, each wrapped with the adapter's name; an empty name.
func (e *Engine) LoadLora(a Adapter) (Adapter, time.Duration, error) {
	l := &e.lora
	switch {
	case a.Name == "":
		return Adapter{}, 0, errors.New("mocker: LoRA adapter without a name")
	case e.cfg.MaxLoras == 0:
		return Adapter{}, 0, fmt.Errorf("mocker: %q: %w", a.Name, ErrLoraOff)
	case l.find(a.Name) >= 0:
		return Adapter{}, 0, fmt.Errorf("mocker: %q: %w", a.Name, ErrLoraLoaded)
	case a.Rank < 1 || a.Rank > e.cfg.MaxLoraRankOrDefault():
		return Adapter{}, 0, fmt.Errorf("mocker: %q: %w: rank %d, want 1 to %d", a.Name, ErrLoraRank, a.Rank, e.cfg.MaxLoraRankOrDefault())
	case len(l.adapters) >= e.cfg.MaxLoras:
		return Adapter{}, 0, fmt.Errorf("mocker: %q: %w (%d)", a.Name, ErrLoraSlots, e.cfg.MaxLoras)
	}
	l.nextID++
	l.clock++
	a.ID = l.nextID
	l.adapters = append(l.adapters, &loraSlot{Adapter: a, used: l.clock})
	e.stats.LoraLoads++
	return a, e.cfg.LoraLoadTime(), nil
}

// UnloadLora removes the adapter named name. Requests that run with it already finish
// with it; new ones are the server's to refuse. Errors: ErrLoraNotLoaded, wrapped with
// the name.
func (e *Engine) UnloadLora(name string) error {
	i := e.lora.find(name)
	if i < 0 {
		return fmt.Errorf("mocker: %q: %w", name, ErrLoraNotLoaded)
	}
	e.lora.adapters = slices.Delete(e.lora.adapters, i, i+1)
	e.stats.LoraUnloads++
	return nil
}

// Loras returns the loaded adapters in load order.
func (e *Engine) Loras() []Adapter {
	out := make([]Adapter, len(e.lora.adapters))
	for i, a := range e.lora.adapters {
		out[i] = a.Adapter
	}
	return out
}

// Lora returns the loaded adapter named name; ok is false when none is.
func (e *Engine) Lora(name string) (a Adapter, ok bool) {
	if i := e.lora.find(name); i >= 0 {
		return e.lora.adapters[i].Adapter, true
	}
	return Adapter{}, false
}

// IdleLora returns the loaded adapter that no waiting or running request names and that
// was loaded or last named by a request the longest ago: the one a load on demand may
// evict. ok is false when every loaded adapter is in use, or none is loaded.
func (e *Engine) IdleLora() (a Adapter, ok bool) {
	var best *loraSlot
	for _, s := range e.lora.adapters {
		if e.lora.use[s.Name] == 0 && (best == nil || s.used < best.used) {
			best = s
		}
	}
	if best == nil {
		return Adapter{}, false
	}
	return best.Adapter, true
}

// loraRequests counts the waiting and running requests of each adapter, by name.
func (e *Engine) loraRequests() []LoraRequests {
	if len(e.lora.use) == 0 {
		return nil
	}
	by := map[string]*LoraRequests{}
	count := func(seqs []*sequence, running bool) {
		for _, s := range seqs {
			name := s.req.LoraName
			if name == "" {
				continue
			}
			r := by[name]
			if r == nil {
				r = &LoraRequests{Name: name}
				by[name] = r
			}
			if running {
				r.Running++
			} else {
				r.Waiting++
			}
		}
	}
	count(e.waiting, false)
	count(e.running, true)
	out := make([]LoraRequests, 0, len(by))
	for _, r := range by {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b LoraRequests) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// loraSeedMix is mixed into a request's generation seed: 0 for the base model, else the
// xxh3 hash of the adapter's name, so that each adapter answers deterministically and
// differently from the base model and from the other adapters.
func loraSeedMix(name string) uint64 {
	if name == "" {
		return 0
	}
	return xxh3.HashString("lora:" + name)
}
