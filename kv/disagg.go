package kv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// Disaggregated serving (xPyD, docs/reference.md §6): prefill and decode run on separate worker
// pools. The Router places both legs of a request and decides, per request, whether the
// prefill leg runs remotely on a prefill worker or locally on the decode worker
// (conditional disaggregation).
//
// Mode: while no registered worker has role prefill or decode, Route behaves exactly
// as an aggregated router (Decision.Disagg = DisaggAggregated). Otherwise:
//
//  1. Decode worker: RouteInput.PinWorker when it is a ready decode or aggregated worker
//     not in RouteInput.Exclude (busy or not); otherwise chosen among the ready,
//     non-busy (for RouteInput.Admitted: busy or not) decode and aggregated workers
//     not in RouteInput.Exclude, for load
//     rather than for prefix reuse: the kv policy runs with overlap weight 0 (its cost
//     is then the decode blocks alone); any other policy runs as configured. If no decode or aggregated worker is ready (and not
//     excluded), the prefill workers serve the request aggregated instead (fallback,
//     Decision.Disagg = DisaggAggregated, chosen KV-aware like any aggregated request,
//     among those in neither RouteInput.Exclude nor ExcludePrefill: a prefill worker
//     this request's prefill already failed on may be dead before the router hears
//     of it) — unless Disagg.Enforce, which keeps prefill workers to prefill legs:
//     then Route fails with ErrNoWorkers. If some decode or aggregated workers are
//     ready but all busy, Route fails with ErrAllBusy, since loading the prefill pool
//     with decodes would slow every other request's TTFT (an admitted request, which
//     the busy thresholds do not gate, takes a busy one).
//  2. uncached = ISL − overlap(decode worker) × B: what the decode worker would compute.
//  3. Local (the decode worker prefills; tracked like an aggregated request, with
//     uncached prefill tokens), checked in this order:
//     - RouteInput.LocalPrefill                        → DisaggLocalRequested
//     - uncached ≤ Disagg.MaxLocalPrefillTokens        → DisaggLocalShortPrefill
//     - no ready prefill worker outside ExcludePrefill → DisaggLocalNoPrefillWorkers,
//     or ErrNoPrefillWorkers when Disagg.Enforce
//     - the prefill pool's queue is long: every ready, non-excluded prefill worker is
//     busy or has more than Disagg.MaxPrefillQueueTokens active prefill tokens
//     → DisaggLocalPrefillQueue
//  4. Remote otherwise (DisaggRemote): the prefill worker is chosen KV-aware by the
//     configured policy (with the request's overlap weight and temperature) among the
//     ready, non-busy prefill workers not in ExcludePrefill. The prefill leg is tracked
//     on it under PrefillRequestID(RequestID) with ISL − overlap(prefill worker) × B
//     prefill tokens; the decode leg is tracked on the decode worker under RequestID
//     with the prompt's blocks (they will be transferred there) and 0 prefill tokens:
//     it computes at most the prompt's last partial block, which is not counted.
//
// The prefill pool has its own policy value (a round-robin cycle of its own).

// Role is a worker's part in disaggregated serving (messages.Role: one vocabulary).
type Role = messages.Role

// Worker roles. The zero value is RoleAggregated.
const (
	// RoleAggregated: prefill and decode of a request on one worker.
	RoleAggregated = messages.Role_ROLE_AGGREGATED
	// RolePrefill: computes prompts' KV blocks, which decode workers then read.
	RolePrefill = messages.Role_ROLE_PREFILL
	// RoleDecode: generates tokens from KV blocks a prefill worker computed (or prefills
	// short prompts itself).
	RoleDecode = messages.Role_ROLE_DECODE
	numRoles   = 3
)

// ParseRole parses a role's label: "aggregated" or "" (aggregated), "prefill", "decode".
// Any other value is an ErrInvalidRole error naming it.
func ParseRole(s string) (Role, error) {
	if r, ok := messages.ParseRole(s); ok {
		return r, nil
	}
	return 0, fmt.Errorf("%w: %q (want aggregated, prefill or decode)", ErrInvalidRole, s)
}

// Decision is where a request's prompt is computed (Decision.Disagg;
// messages.DisaggDecision: one vocabulary).
type DisaggDecision = messages.DisaggDecision

// Decision kinds (Decision.Disagg, RouteResponse.disagg_decision).
const (
	// DisaggAggregated: no prefill/decode pools (or the fallback of prefill workers
	// serving aggregated when no decode or aggregated worker is ready, unless
	// Disagg.Enforce); one worker does everything.
	DisaggAggregated = messages.DisaggDecision_DISAGG_AGGREGATED
	// DisaggRemote: the prefill leg runs on Decision.Prefill, the decode leg on the worker.
	DisaggRemote = messages.DisaggDecision_DISAGG_REMOTE
	// DisaggLocalShortPrefill: the uncached prompt suffix is at most
	// Disagg.MaxLocalPrefillTokens; the decode worker prefills it.
	DisaggLocalShortPrefill = messages.DisaggDecision_DISAGG_LOCAL_SHORT_PREFILL
	// DisaggLocalPrefillQueue: the prefill pool's queue is long; the decode worker prefills.
	DisaggLocalPrefillQueue = messages.DisaggDecision_DISAGG_LOCAL_PREFILL_QUEUE
	// DisaggLocalNoPrefillWorkers: no ready prefill worker (or all excluded); the decode
	// worker prefills.
	DisaggLocalNoPrefillWorkers = messages.DisaggDecision_DISAGG_LOCAL_NO_PREFILL_WORKERS
	// DisaggLocalRequested: RouteInput.LocalPrefill asked for the decode worker to prefill.
	DisaggLocalRequested = messages.DisaggDecision_DISAGG_LOCAL_REQUESTED
)

// disaggKinds indexes the decision counters.
var disaggKinds = [...]DisaggDecision{DisaggAggregated, DisaggRemote, DisaggLocalShortPrefill,
	DisaggLocalPrefillQueue, DisaggLocalNoPrefillWorkers, DisaggLocalRequested}

const (
	kindAggregated = iota
	kindRemote
	kindShort
	kindQueue
	kindNoPrefill
	kindRequested
	numKinds
)

// PrefillRequestSuffix is appended to a request id to name its prefill leg in the load
// tracking (PrefillRequestID).
const PrefillRequestSuffix = "#prefill"

// PrefillRequestID is the id under which the prefill leg of request id is tracked.
func PrefillRequestID(id string) string { return id + PrefillRequestSuffix }

// PrefillLeg is where the prefill leg of a remote decision runs.
type PrefillLeg struct {
	WorkerID string
	Worker   WorkerID
	// OverlapBlocks: prompt blocks already cached on the prefill worker.
	OverlapBlocks int
	// PrefillTokens: prompt tokens the prefill worker computes (ISL − OverlapBlocks×B).
	PrefillTokens int64
	// RequestID: the leg's id in the load tracking (PrefillRequestID of the request);
	// free it with Free when the leg ends.
	RequestID string
}

// DisaggConfig configures conditional disaggregation (docs/reference.md §6). It only matters
// while some worker has role prefill or decode.
type DisaggConfig struct {
	// MaxLocalPrefillTokens (tokens, >= 0): a request whose uncached prompt suffix on
	// its decode worker is at most this long is prefilled there (default 1000, the
	// reference max_local_prefill_length). 0: every request with an uncached token goes
	// remote.
	MaxLocalPrefillTokens int
	// MaxPrefillQueueTokens (tokens, >= 0): the prefill pool's queue counts as long —
	// and requests are prefilled on their decode worker — when every ready, non-busy
	// prefill worker has more active prefill tokens than this. 0: never long.
	MaxPrefillQueueTokens int64
	// Enforce: with no ready prefill worker, a request that would go remote fails with
	// ErrNoPrefillWorkers instead of being prefilled on its decode worker; and with no
	// ready decode (or aggregated) worker, requests fail with ErrNoWorkers instead of
	// being served whole by prefill workers. RouteInput.LocalPrefill is still honoured.
	Enforce bool
}

func validateDisagg(d DisaggConfig) error {
	if d.MaxLocalPrefillTokens < 0 {
		return fmt.Errorf("%w: Disagg.MaxLocalPrefillTokens %d must be >= 0 (tokens)", ErrInvalidConfig, d.MaxLocalPrefillTokens)
	}
	if d.MaxPrefillQueueTokens < 0 {
		return fmt.Errorf("%w: Disagg.MaxPrefillQueueTokens %d must be >= 0 (tokens; 0 = no limit)", ErrInvalidConfig, d.MaxPrefillQueueTokens)
	}
	return nil
}

// Role masks for gather.
const (
	maskAggregated = 1 << RoleAggregated
	maskPrefill    = 1 << RolePrefill
	maskDecode     = 1 << RoleDecode
)

// disaggregated reports whether any registered worker has role prefill or decode.
func (r *Router) disaggregated() bool { return r.roleCount[RolePrefill]+r.roleCount[RoleDecode] > 0 }

// routeDisagg is Route for a fleet with prefill or decode workers (see the top of this
// file). sel carries the request's overlap weight and temperature; hashes are the
// prompt's sequence hashes; the overlap and active-prefix buffers are filled.
func (r *Router) routeDisagg(in *RouteInput, sel *SelectInput, hashes []uint64, now time.Time, rng *rand.Rand) (Decision, error) {
	cands, eligible := r.gather(maskDecode|maskAggregated, in.Exclude, in.Admitted)
	if eligible == 0 {
		// No decode worker at all: the prefill pool serves the request aggregated, without
		// the prefill workers this request failed on, unless prefill workers only prefill.
		if r.cfg.Disagg.Enforce {
			if r.lora.misfit > 0 {
				return Decision{}, r.noEligible("")
			}
			return Decision{}, fmt.Errorf("%w: no decode or aggregated worker ready and not excluded (%d registered), and "+
				"disaggregation is enforced: prefill workers serve no whole request", ErrNoWorkers, len(r.byName))
		}
		exclude := in.Exclude
		if len(in.ExcludePrefill) > 0 {
			exclude = append(slices.Clip(in.Exclude), in.ExcludePrefill...)
		}
		cands, eligible = r.gather(maskPrefill, exclude, in.Admitted)
		if eligible == 0 {
			return Decision{}, r.noEligible(fmt.Sprintf("%d registered, none ready and not excluded", len(r.byName)))
		}
		if len(cands) == 0 {
			return Decision{}, fmt.Errorf("%w: no decode worker ready, %d ready prefill workers over the busy thresholds", ErrAllBusy, eligible)
		}
		sel.Candidates = cands
		c, err := r.choose(r.policy, sel, rng)
		if err != nil {
			return Decision{}, err
		}
		return r.placeLocal(in, hashes, c, kindAggregated, now), nil
	}
	if len(cands) == 0 {
		return Decision{}, fmt.Errorf("%w: %d ready decode and aggregated workers over the busy thresholds", ErrAllBusy, eligible)
	}
	dsel := *sel
	dsel.Candidates = cands
	if r.cfg.Policy == PolicyKV {
		dsel.OverlapWeight = 0 // for load: the decode blocks alone
	}
	dc, err := r.choose(r.policy, &dsel, rng)
	if err != nil {
		return Decision{}, err
	}
	return r.placeDisagg(in, sel, hashes, dc, now, rng)
}

// placeDisagg completes a disaggregated decision whose decode worker is dc (a copy: the
// candidate buffer may be reused): steps 2 to 4 at the top of this file.
func (r *Router) placeDisagg(in *RouteInput, sel *SelectInput, hashes []uint64, dc Candidate, now time.Time, rng *rand.Rand) (Decision, error) {
	isl := int64(in.promptTokens())
	bs := int64(r.cfg.BlockSize)
	uncached := max(0, isl-int64(dc.OverlapBlocks)*bs)
	switch {
	case in.LocalPrefill:
		return r.placeLocal(in, hashes, dc, kindRequested, now), nil
	case uncached <= int64(r.cfg.Disagg.MaxLocalPrefillTokens):
		return r.placeLocal(in, hashes, dc, kindShort, now), nil
	}
	// dc is a copy: the buffer behind cands may be reused now.
	pcands, peligible := r.gather(maskPrefill, in.ExcludePrefill, false)
	switch {
	case peligible == 0 && r.cfg.Disagg.Enforce:
		return Decision{}, fmt.Errorf("%w: %d prefill workers registered, none ready and not excluded", ErrNoPrefillWorkers, r.roleCount[RolePrefill])
	case peligible == 0:
		return r.placeLocal(in, hashes, dc, kindNoPrefill, now), nil
	case r.queueLong(pcands):
		return r.placeLocal(in, hashes, dc, kindQueue, now), nil
	}
	sel.Candidates = pcands
	pc, err := r.choose(r.prefillPolicy, sel, rng)
	if err != nil {
		return Decision{}, err
	}
	pid := PrefillRequestID(in.RequestID)
	ptoks := uncachedTokens(isl, r.cfg.BlockSize, &pc)
	r.active.Add(pid, pc.Worker, hashes, ptoks, now)
	r.countTierHits(&pc)
	r.active.Add(in.RequestID, dc.Worker, hashes, 0, now)
	r.count(kindRemote, len(hashes), pc.OverlapBlocks)
	return Decision{WorkerID: dc.ID, Worker: dc.Worker, OverlapBlocks: dc.OverlapBlocks, PromptBlocks: len(hashes),
		Disagg: DisaggRemote, UncachedPrefillTokens: uncached,
		Prefill: &PrefillLeg{WorkerID: pc.ID, Worker: pc.Worker, OverlapBlocks: pc.OverlapBlocks,
			PrefillTokens: ptoks, RequestID: pid},
		HostBlocks: pc.HostBlocks, DiskBlocks: pc.DiskBlocks, RemoteBlocks: pc.RemoteBlocks}, nil
}

// queueLong reports whether every candidate prefill worker (ready, non-busy, not
// excluded) has more active prefill tokens than Disagg.MaxPrefillQueueTokens; with no
// candidate (all busy) the queue is long too.
func (r *Router) queueLong(cands []Candidate) bool {
	if len(cands) == 0 {
		return true
	}
	limit := r.cfg.Disagg.MaxPrefillQueueTokens
	if limit <= 0 {
		return false
	}
	for i := range cands {
		if cands[i].ActivePrefillTokens <= limit {
			return false
		}
	}
	return true
}

// placeLocal records a request prefilled on its (decode or aggregated) worker c, like an
// aggregated request, and returns its decision of the given kind.
func (r *Router) placeLocal(in *RouteInput, hashes []uint64, c Candidate, kind int, now time.Time) Decision {
	prefill := uncachedTokens(int64(in.promptTokens()), r.cfg.BlockSize, &c)
	r.active.Add(in.RequestID, c.Worker, hashes, prefill, now)
	r.countTierHits(&c)
	// noted at the profile's speed: the observed/predicted ratio is then the worker's speed
	pr := PredictTTFT(&r.cfg.Profile, in.promptTokens(), r.cfg.BlockSize, &c)
	r.active.NotePrediction(in.RequestID, (pr.Total()-pr.AdapterMs)/pr.Speed+pr.AdapterMs)
	r.count(kind, len(hashes), c.OverlapBlocks)
	return Decision{WorkerID: c.ID, Worker: c.Worker, OverlapBlocks: c.OverlapBlocks, PromptBlocks: len(hashes),
		PrefillTokens: prefill, Disagg: disaggKinds[kind], UncachedPrefillTokens: prefill,
		HostBlocks: c.HostBlocks, DiskBlocks: c.DiskBlocks, RemoteBlocks: c.RemoteBlocks}
}

// count updates the routing counters: overlap is the prefix hit of the worker that
// prefills the request.
func (r *Router) count(kind, promptBlocks, overlap int) {
	r.routed++
	r.prompt += int64(promptBlocks)
	r.overlap += int64(overlap)
	r.decisions[kind]++
}
