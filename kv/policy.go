package kv

import (
	"fmt"
	"math/rand/v2"
	"sort"
)

// Candidate is one worker a routing policy may choose, with the facts the routing cost
// is made of (docs/reference.md §3). The Router only offers workers that are ready, not busy
// and not excluded by the request.
type Candidate struct {
	Worker WorkerID
	// ID is the worker's string id.
	ID string
	// OverlapBlocks: leading prompt blocks already in the worker's KV cache (prefix hit).
	OverlapBlocks int
	// ActiveBlocks: distinct KV blocks of the worker's active requests.
	ActiveBlocks int
	// ActiveRequests: requests routed to the worker and not yet freed.
	ActiveRequests int
	// ActivePrefixBlocks: leading prompt blocks already active on the worker (shared
	// with a running request); PromptBlocks - ActivePrefixBlocks would be new.
	ActivePrefixBlocks int
	// ActivePrefillTokens: prompt tokens the worker still has to prefill (tokens).
	ActivePrefillTokens int64
	// IndexedBlocks: blocks of the worker's KV cache in the index.
	IndexedBlocks int
	// TotalBlocks: the worker's KV capacity in blocks; 0 when unknown.
	TotalBlocks int64
	// MaxNumSeqs: the requests the worker's engine runs at once; 0 when unknown.
	MaxNumSeqs int
	// SessionWorker: the request's session (RouteInput.SessionID) last went to this worker.
	SessionWorker bool
	// DecodingRequests: active requests past their first token; DecodeSeconds: their summed
	// time since it (s), from which the output they have added is estimated.
	DecodingRequests int
	DecodeSeconds    float64
	// PrefillElapsedMs: how long the prefill at the head of the worker's queue has run
	// (ms since the route that found the queue empty or the first token that left more
	// queued; 0 with nothing queued, or while that start is not known).
	PrefillElapsedMs float64
	// SpeedFactor: the worker's observed TTFT over the profile's prediction, smoothed and
	// weighed against the fleet's (docs/reference.md §3.6); 0 before anything was
	// observed (the TTFT policy takes the fleet's speed, SelectInput.SpeedPrior).
	// MeanDecodeSeconds: the smoothed time its requests take from first token to end
	// (0: unknown).
	SpeedFactor       float64
	MeanDecodeSeconds float64
	// AdapterLoadMs: the time to load the request's LoRA adapter first (ms), 0 when the
	// worker holds it (or the request names none); AdapterEvicts: the load evicts another
	// adapter, which later requests may have to load again. See lora.go.
	AdapterLoadMs float64
	AdapterEvicts bool
	// AdapterWaitMs: the wait for a slot before that load (ms), when every unpinned
	// adapter on the worker is in use by an active request.
	AdapterWaitMs float64
	// HostBlocks, DiskBlocks, RemoteBlocks: the prompt blocks right after the GPU hit
	// (OverlapBlocks) that the worker's node holds in host memory, on disk, or that a
	// remote store holds (consecutive: engines load prefixes only; docs/reference.md
	// §9.2). TierCreditTokens: the prompt tokens they count as cached, Config.TierCredit's
	// fraction of a block for each; policies subtract them from the uncached prefill.
	HostBlocks       int
	DiskBlocks       int
	RemoteBlocks     int
	TierCreditTokens float64
}

// SelectInput is what a policy decides on. Policies must not retain it.
type SelectInput struct {
	// Candidates: at least one when the Router calls a policy.
	Candidates []Candidate
	// PromptTokens is the ISL (tokens); PromptBlocks the number of full KV blocks in it.
	PromptTokens int
	PromptBlocks int
	// BlockSize: tokens per KV block.
	BlockSize int
	// OverlapWeight and Temperature: the router's defaults or the request's overrides.
	OverlapWeight float64
	Temperature   float64
	// Profile: the engines' timing profile (Config.Profile); nil means DefaultProfile.
	Profile *Profile
	// PrefixDemand: the requests routed recently whose longest prefix hit ended where
	// this one's does (the candidates' longest), counted with weights decaying with
	// DemandHalfLife (prefixDemand); set for aggregated routing, 0 otherwise.
	PrefixDemand float64
	// SpeedPrior: the fleet's speed (the median of every worker's learnt factor, the
	// router's fleetPrior), what a candidate with none learnt is taken at; 0: not given
	// (the TTFT policy takes fleetPrior of the candidates' factors).
	SpeedPrior float64
}

// Policy chooses a worker for a request: it returns an index into in.Candidates.
// Policies run inside the Router's single-threaded core; a policy value may keep state
// across calls (round-robin's position) but must take its randomness from rng only.
// A nil rng means "no randomness": the policy must still choose, deterministically.
// With no candidates, Select returns ErrNoWorkers.
type Policy interface {
	Select(in *SelectInput, rng *rand.Rand) (int, error)
}

// Term is one named term of a policy's cost for one candidate; the name carries the
// unit ("queue_ms", "overlap_blocks").
type Term struct {
	Name  string
	Value float64
}

// Explainer is implemented by policies that can show the cost they gave a candidate
// (RouteInput.Explain). Explain must not change the policy's state.
type Explainer interface {
	Explain(in *SelectInput, c *Candidate) (cost float64, terms []Term)
}

// PolicyFactory builds a fresh policy value (one per Router).
type PolicyFactory func() Policy

// Names of the built-in routing policies.
const (
	PolicyKV         = "kv"
	PolicyRoundRobin = "round-robin"
	PolicyRandom     = "random"
	PolicyCacheAware = "cache-aware"
)

// Registry maps policy names to factories. It is a plain value: build one with
// NewRegistry or DefaultPolicies, register more, hand it to a Router. Registering a name
// twice is an error (ErrDuplicatePolicy), never a silent overwrite.
type Registry struct {
	factories map[string]PolicyFactory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]PolicyFactory{}} }

// DefaultPolicies returns a new registry holding the built-in policies: "kv" (the
// KV-aware cost of docs/reference.md §3), "round-robin", "random" and "cache-aware" (SGLang's
// cache_aware, see CacheAwarePolicy).
func DefaultPolicies() *Registry {
	r := NewRegistry()
	for name, f := range map[string]PolicyFactory{
		PolicyKV:         func() Policy { return KVPolicy{} },
		PolicyRoundRobin: func() Policy { return &RoundRobinPolicy{} },
		PolicyRandom:     func() Policy { return RandomPolicy{} },
		PolicyCacheAware: func() Policy { return NewCacheAwarePolicy() },
		PolicyTTFT:       func() Policy { return NewTTFTPolicy() },
	} {
		if err := r.Register(name, f); err != nil {
			panic(err)
		}
	}
	return r
}

// Register adds a policy factory under name.
func (r *Registry) Register(name string, f PolicyFactory) error {
	if name == "" || f == nil {
		return fmt.Errorf("%w: policy name %q or factory missing", ErrInvalidConfig, name)
	}
	if _, ok := r.factories[name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicatePolicy, name)
	}
	r.factories[name] = f
	return nil
}

// New builds the policy registered under name.
func (r *Registry) New(name string) (Policy, error) {
	f, ok := r.factories[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (registered: %v)", ErrUnknownPolicy, name, r.Names())
	}
	return f(), nil
}

// Names lists the registered policy names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
