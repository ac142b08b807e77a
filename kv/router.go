package kv

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Router is the pure core of one model's router: worker registrations, the KV block
// index fed by their event batches, the active-sequence load tracking and the routing
// policy. The Router grain wraps it: it turns messages into calls and results into
// replies. No I/O, goroutines, clocks or global randomness: time and a *rand.Rand come
// in as arguments. Not safe for concurrent use.
//
// Ownership and invariants:
//   - workers (by WorkerID) and byName are the registrations; a WorkerID is handed out
//     at first registration (lowest free) and freed by RemoveWorker.
//   - The index holds, for each worker, the blocks of its KV event stream applied up to
//     lastSeq of its current engine epoch. It is authoritative only while the worker
//     is synced; after a gap it may lack blocks (never hold extra ones it was not told
//     about) until a dump replaces them.
//   - Event batches are numbered per worker from 1 within an engine epoch (0 = none
//     sent yet). Epochs should increase with each engine start (a start time will
//     do): batches and dumps of a lower epoch than the registered one are dropped as
//     late, a higher one means a restart; a registration with any other epoch does.
//   - active holds every routed request until Free, Expire or RemoveWorker; a remote
//     decision holds two (the decode leg under the request id, the prefill leg under
//     PrefillRequestID of it).
//   - awaiting maps each request id routed with WillAck, and neither acknowledged nor
//     freed since, to the generation of that routing; ackQueue holds (id, generation,
//     routing time) in routing order (expiryQueue), so every awaiting entry has a
//     queue entry of its generation. Entries of ids acknowledged, freed or routed again
//     are skipped and compacted away. An awaiting id may have lost its sequences
//     already (RemoveWorker, MaxSequenceAge): expiring it then frees nothing.
//   - roleCount[role] is the number of registered workers with that role (kept by
//     Register and RemoveWorker); prefill or decode workers switch Route to
//     disaggregated serving (disagg.go).
type Router struct {
	cfg           Config
	policy        Policy // aggregated and decode workers
	prefillPolicy Policy // prefill workers: a value of its own, so stateful policies keep separate cycles
	roleCount     [numRoles]int
	decisions     [numKinds]int64
	index         *Index
	active        *ActiveSequences
	workers       []*routerWorker // by WorkerID; nil = free id
	byName        map[string]*routerWorker
	routed        int64
	prompt        int64
	overlap       int64
	skipped       int64 // events skipped in dumps (invalid or orphaned)
	awaiting      map[string]uint64
	ackQueue      expiryQueue
	ackGen        uint64
	expired       Expired // cumulative, for Stats
	pinned        int64   // requests routed to their PinWorker
	pinFallbacks  int64   // requests whose PinWorker could not be used
	hashBuf       []uint64
	now           time.Time // the current Route's time (decode ages)
	// nowClock and nowActive: now on the router's clock (clock) and in seconds since
	// the active sequences' origin, worked out once per Route for every candidate.
	nowClock  time.Duration
	nowActive float64
	// prior: the fleet's speed (fleetPrior), what an unobserved worker's factor is taken
	// as and an idle one's relaxes toward, worked out at priorStep (a relaxation step of
	// the clock). priorDirty: a factor changed since; priorStale: the set of workers with
	// a factor changed since (a first factor learnt, or such a worker removed).
	prior      float64
	priorStep  time.Duration
	priorDirty bool
	priorStale bool
	// demand: the recent requests per prefix (the replica credit's evidence).
	demand prefixDemand
	// base: the clock's origin, the first time it was asked (hasBase).
	base    time.Time
	hasBase bool
	ovBuf   []uint32
	apBuf   []uint32
	candBuf []Candidate
	// pred: the predicted placements (approx.go); pdBuf their overlaps for the prompt
	// being routed, routeHashes its sequence hashes. sessions: the session store
	// (session.go); sessionWorker is the worker the request's session last went to
	// (noWorker: none).
	pred          *predictions
	pdBuf         []uint32
	routeHashes   []uint64
	sessions      *sessions
	sessionWorker WorkerID
	// explaining: the Route in progress explains itself (RouteInput.Explain); explained
	// holds the candidates of its first policy call (explain.go), nil otherwise.
	explaining bool
	explained  []ExplainedCandidate
	// lora: what the Route in progress asks of LoRA adapters (lora.go).
	lora loraRoute
	// tiers: the nodes' lower-tier inventories (tier_index.go); tierHits counts the
	// routed prompt blocks found in each lower tier on the worker that prefilled.
	tiers    *TierIndex
	tierHits [NumTiers]int64
}

type routerWorker struct {
	id          WorkerID
	name        string
	role        Role
	totalBlocks int64
	maxSeqs     int // WorkerSpec.MaxNumSeqs
	ready       bool
	epoch       uint64
	lastSeq     uint64
	synced      bool
	dumpPart    int // next dump part expected; -1 when no dump is in progress
	pending     []pendingBatch
	// droppedSeq is the highest seq of a batch dropped from a full pending buffer; a
	// dump that does not cover it leaves a gap.
	droppedSeq uint64
	// speed: observed over predicted TTFT, smoothed (0: nothing observed yet); decodeSecs:
	// the smoothed time from first token to end (0: none seen). Learnt by PrefillDoneAt and
	// FreeAt (docs/reference.md §3.6).
	speed      float64
	decodeSecs float64
	// speedAt: when speed was last learnt (Router.clock); speedStep, speedPrior and
	// speedRel cache speed relaxed by that many steps since speedAt toward that prior
	// (speedNow, relaxedSpeed).
	speedAt    time.Duration
	speedStep  time.Duration
	speedPrior float64
	speedRel   float64
	// evidence counts the first tokens speed was learnt from, each weighing
	// 2^(−age/SpeedHalfLife) at speedAt (relaxedSpeed's n).
	evidence float64
	// lora: the router's view of the worker's LoRA adapters (lora.go).
	lora workerLoras
	// noEvents: the registration says the engine publishes no KV events. approx: the
	// worker is in approximate mode (noEvents, or silent: see Config.ApproxAfterRequests).
	// silentRoutes counts the requests with a full block routed to it since its last
	// event batch (or engine start), the first of them at silentSince.
	noEvents     bool
	approx       bool
	silentRoutes int
	silentSince  time.Time
	// node: the worker's node slot in the tier index (-1: none), registered as nodeName.
	node     int32
	nodeName string
}

type pendingBatch struct {
	seq    uint64
	events []Event
}

// WorkerSpec is a worker's registration (RegisterWorker): identity, model card facts
// and where its event stream stands.
type WorkerSpec struct {
	// ID is the worker's unique string id.
	ID string
	// Node: the node agent running the worker ("" for none); its KV block manager's
	// inventory (ApplyInventory) counts as the worker's lower tiers (docs/reference.md §9).
	Node string
	// BlockSize: the engine's KV block size in tokens; must equal the router's.
	BlockSize int
	// TotalBlocks: the engine's KV capacity in blocks (0 = unknown).
	TotalBlocks int64
	// MaxNumSeqs: the requests the engine runs at once (its max_num_seqs; 0 = unknown);
	// more wait in its queue for a slot.
	MaxNumSeqs int
	// Ready: the engine is healthy and serving; not-ready workers get no requests.
	Ready bool
	// Epoch: the engine process generation; it increases with every engine start.
	Epoch uint64
	// LastSeq: the seq of the last event batch the worker sent in this epoch (0 = none).
	LastSeq uint64
	// Role in disaggregated serving (zero value: aggregated). A registration may change
	// it; the worker's blocks and active requests stay.
	Role Role
	// NoKVEvents: the engine was started without KV events; the worker is routed in
	// approximate mode (IndexApproximate) until an event batch of it arrives.
	NoKVEvents bool
	// Adapters: the LoRA adapters the engine holds; MaxLoras how many it may hold (0: it
	// serves no adapter requests); LoraLoadMs its measured mean load time (ms; 0: none
	// yet, Config.LoraLoadMs is assumed). See lora.go.
	Adapters   []AdapterSpec
	MaxLoras   int
	LoraLoadMs float64
	// KnownAdapters: adapters the worker loaded before and evicted since; it loads one
	// again for a request naming it (at the cost of the load).
	KnownAdapters []AdapterSpec
}

// RouteInput is one routing request.
type RouteInput struct {
	// RequestID names the request in the load tracking (PrefillDone, Free).
	RequestID string
	// Tokens: the whole templated prompt's token ids.
	Tokens []uint32
	// LoraName: the LoRA adapter, "" for the base model.
	LoraName string
	// CacheSalt: the request's cache salt, mixed into its first block's hash as the
	// engine mixes it into its own (AppendSaltedSequenceHashes); "" for none.
	CacheSalt string
	// Per-request overrides of the router's overlap weight and temperature.
	HasOverlapWeight bool
	OverlapWeight    float64
	HasTemperature   bool
	Temperature      float64
	// Exclude: worker ids not to use (e.g. those a migrated request failed on); in
	// disaggregated serving, for the decode (or aggregated) worker.
	Exclude []string
	// ExcludePrefill: prefill worker ids not to use for the prefill leg (a prefill leg
	// failed there). Disaggregated serving only.
	ExcludePrefill []string
	// LocalPrefill: prefill on the decode worker, never remotely (DisaggLocalRequested).
	LocalPrefill bool
	// WillAck: the caller acknowledges the routing (Ack) once it has sent the work, and
	// the request, with its prefill leg, is expired when that has not happened within
	// Config.MaxUnackedAge — a caller that never learnt the decision (its call timed out)
	// cannot free it. Without WillAck only MaxSequenceAge bounds it.
	WillAck bool
	// PinWorker: route to this worker, bypassing the policy, when it is registered,
	// ready, not in Exclude and may take the request's decode (aggregated or decode role;
	// any role while no worker is prefill or decode). Busy thresholds do not apply: the
	// siblings of an n > 1 request (docs/reference.md §22) follow their first choice,
	// whose own load may have made the worker busy. The load is tracked as usual, with
	// the worker's prefix hit. Otherwise (unknown, removed, not ready, excluded) the
	// request is routed normally and counted in Stats.PinFallbacks. Empty: no pin.
	PinWorker string
	// Explain: fill Decision.Candidates with every candidate's cost terms.
	Explain bool
	// SessionID: the client's session ("" for none); the worker the session last went to
	// is marked in its Candidate (SessionWorker) for the policy to weigh.
	SessionID string
	// BlockHashes: the prompt's chained block hashes (AppendSaltedSequenceHashes under
	// LoraName and CacheSalt, at the router's block size) computed by the caller, used
	// when Tokens is empty; PromptTokens is then the prompt's length in tokens, and
	// BlockHashes must hold exactly its full blocks (PromptTokens / block size of them),
	// else the route fails with ErrInvalidRequest (hashes made at another block size).
	// With Tokens set, both are ignored. The Router does not keep or modify BlockHashes.
	BlockHashes  []uint64
	PromptTokens int
	// Admitted: the request already runs (a migration, a prefill retry): the busy
	// thresholds, which gate new work, do not apply to it. A busy worker is a candidate
	// like any other (the policy still weighs its load), so such a request is never
	// refused with ErrAllBusy; the prefill pool's busy workers still count as a long
	// queue (the request is prefilled on its decode worker instead).
	Admitted bool
	// LoraOnDemand: a worker that does not hold the request's adapter (LoraName) but has a
	// slot for it is a candidate too, at the cost of loading it (Decision.LoraPath).
	// Without it only workers holding the adapter are. See lora.go.
	LoraOnDemand bool
	// LoraPath: the adapter's folder for a load on demand (the fleet's adapter registry);
	// "" means the folder a worker holding the adapter reports.
	LoraPath string
}

// Expired counts the tracked sequences (a remote decision's two legs count two)
// that expiry freed, by cause.
type Expired struct {
	// Unacked: routed with WillAck and not acknowledged within MaxUnackedAge.
	Unacked int64
	// Stale: older than MaxSequenceAge.
	Stale int64
}

// Total is Unacked + Stale.
func (e Expired) Total() int64 { return e.Unacked + e.Stale }

// Decision is the outcome of Route.
type Decision struct {
	WorkerID string
	Worker   WorkerID
	// OverlapBlocks: prompt blocks already cached on the chosen worker (prefix hit).
	OverlapBlocks int
	// PromptBlocks: full KV blocks in the prompt.
	PromptBlocks int
	// PrefillTokens: prompt tokens the worker has to compute (ISL - OverlapBlocks*B, less
	// the tier credit of the blocks its node's tiers hold, docs/reference.md §9.2), as
	// tracked in its load; 0 for the decode worker of a remote decision.
	PrefillTokens int64
	// Disagg: the disaggregation decision, one of DisaggAggregated, DisaggRemote,
	// DisaggLocalShortPrefill, DisaggLocalPrefillQueue, DisaggLocalNoPrefillWorkers,
	// DisaggLocalRequested (see disagg.go). WorkerID/Worker is the decode worker, or the
	// only worker when the decision is not remote.
	Disagg DisaggDecision
	// UncachedPrefillTokens: ISL minus the worker's prefix hit (tokens) and its credited
	// tier tokens (Candidate.TierCreditTokens), what the worker would prefill itself.
	UncachedPrefillTokens int64
	// Prefill: where the prefill leg runs; set only when Disagg is DisaggRemote.
	Prefill *PrefillLeg
	// Candidates: every candidate the policy weighed, with its cost terms; only when
	// RouteInput.Explain was set.
	Candidates []ExplainedCandidate
	// LoraPath: the adapter's folder when a chosen worker (decode or prefill) does not
	// hold the request's adapter and loads it on demand first; "" otherwise.
	LoraPath string
	// HostBlocks, DiskBlocks, RemoteBlocks: the prompt blocks after the GPU hit that the
	// worker computing the prompt (the prefill worker of a remote decision) finds in a
	// lower tier (Candidate's; docs/reference.md §9.2). OverlapBlocks stays the GPU hit.
	HostBlocks, DiskBlocks, RemoteBlocks int
}

// ExplainedCandidate is one candidate of a routing decision with its policy's cost.
type ExplainedCandidate struct {
	WorkerID      string
	OverlapBlocks int
	Cost          float64
	Terms         []Term
	Chosen        bool
}

// NewRouter validates cfg and returns an empty router.
func NewRouter(cfg Config) (*Router, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: BlockSize %d must be positive", ErrInvalidConfig, cfg.BlockSize)
	}
	if !(cfg.OverlapWeight >= 0) || math.IsInf(cfg.OverlapWeight, 0) {
		return nil, fmt.Errorf("%w: OverlapWeight %v must be a finite number >= 0", ErrInvalidConfig, cfg.OverlapWeight)
	}
	if !(cfg.Temperature >= 0) || math.IsInf(cfg.Temperature, 0) {
		return nil, fmt.Errorf("%w: Temperature %v must be a finite number >= 0", ErrInvalidConfig, cfg.Temperature)
	}
	if err := validateBusy(cfg.Busy); err != nil {
		return nil, err
	}
	if err := validateDisagg(cfg.Disagg); err != nil {
		return nil, err
	}
	if cfg.Profile == (Profile{}) {
		cfg.Profile = DefaultProfile()
	}
	if err := cfg.Profile.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policies == nil {
		cfg.Policies = DefaultPolicies()
	}
	if cfg.Policy == "" {
		cfg.Policy = DefaultPolicy
	}
	if cfg.MaxBufferedBatches <= 0 {
		cfg.MaxBufferedBatches = DefaultMaxBufferedBatches
	}
	if cfg.ApproxTTL <= 0 {
		cfg.ApproxTTL = DefaultApproxTTL
	}
	if cfg.PredictBlocks <= 0 {
		cfg.PredictBlocks = DefaultPredictBlocks
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if !(cfg.LoraLoadMs >= 0) || math.IsInf(cfg.LoraLoadMs, 0) {
		return nil, fmt.Errorf("%w: LoraLoadMs %v must be a finite number >= 0", ErrInvalidConfig, cfg.LoraLoadMs)
	}
	if cfg.LoraLoadMs == 0 {
		cfg.LoraLoadMs = DefaultLoraLoadMs
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if err := cfg.TierCredit.Validate(); err != nil {
		return nil, err
	}
	p, err := cfg.Policies.New(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("Policy: %w", err)
	}
	pp, err := cfg.Policies.New(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("Policy: %w", err)
	}
	return &Router{
		cfg:           cfg,
		policy:        p,
		prefillPolicy: pp,
		index:         newRouterIndex(cfg),
		active:        NewActiveSequences(cfg.MaxSequenceAge),
		byName:        make(map[string]*routerWorker),
		awaiting:      make(map[string]uint64),
		pred:          newPredictions(),
		sessions:      newSessions(cfg.SessionTTL, cfg.MaxSessions),
		tiers:         NewTierIndex(),
	}, nil
}

func validateBusy(b BusyThresholds) error {
	if math.IsNaN(b.KVUsage) || math.IsInf(b.KVUsage, 0) {
		return fmt.Errorf("%w: Busy.KVUsage %v must be finite", ErrInvalidConfig, b.KVUsage)
	}
	return nil
}

// BlockSize is the router's KV block size in tokens.
func (r *Router) BlockSize() int { return r.cfg.BlockSize }

// Index gives read access to the block index (tests, benchmarks, snapshots). Callers
// must not apply events to it directly.
func (r *Router) Index() *Index { return r.index }

// Register registers a worker, or refreshes its registration (heartbeat; idempotent).
// A KV block size other than the router's is refused with ErrBlockSizeMismatch naming
// both. An engine epoch other than the one the router knows means the engine
// restarted: the worker's blocks are dropped (its active requests stay until freed). needDump is true
// while the router lacks part of the worker's block list — a new worker that already
// sent events, a gap, trailing batches the router never got — and no dump is in
// progress, so a lost dump request is repeated at the next heartbeat.
func (r *Router) Register(spec WorkerSpec) (needDump bool, err error) {
	if spec.ID == "" {
		return false, fmt.Errorf("%w: worker registration without an id", ErrInvalidRequest)
	}
	if spec.BlockSize != r.cfg.BlockSize {
		return false, fmt.Errorf("%w: worker %q uses KV block size %d, the router uses %d",
			ErrBlockSizeMismatch, spec.ID, spec.BlockSize, r.cfg.BlockSize)
	}
	if spec.TotalBlocks < 0 {
		return false, fmt.Errorf("%w: worker %q total KV blocks %d is negative", ErrInvalidRequest, spec.ID, spec.TotalBlocks)
	}
	if spec.Role < 0 || spec.Role >= numRoles {
		return false, fmt.Errorf("%w: worker %q: %v", ErrInvalidRole, spec.ID, spec.Role.Label())
	}
	rw := r.byName[spec.ID]
	if rw == nil {
		id := WorkerID(0)
		for int(id) < len(r.workers) && r.workers[id] != nil {
			id++
		}
		if id > MaxWorkerID {
			return false, fmt.Errorf("%w: more than %d workers", ErrInvalidRequest, MaxWorkerID+1)
		}
		rw = &routerWorker{id: id, name: spec.ID, role: spec.Role, epoch: spec.Epoch, lastSeq: spec.LastSeq,
			synced: spec.LastSeq == 0, dumpPart: -1, noEvents: spec.NoKVEvents, approx: spec.NoKVEvents,
			node: r.tiers.addWorker(spec.Node), nodeName: spec.Node}
		r.roleCount[spec.Role]++
		if int(id) == len(r.workers) {
			r.workers = append(r.workers, rw)
		} else {
			r.workers[id] = rw
		}
		r.byName[spec.ID] = rw
	} else {
		switch {
		case spec.Epoch != rw.epoch:
			// Registrations come in order from the worker, so any other epoch is a new
			// engine (an epoch lower than before: the worker itself restarted).
			r.restart(rw, spec.Epoch)
			rw.lastSeq = spec.LastSeq
			rw.synced = spec.LastSeq == 0
		case spec.Epoch == rw.epoch && rw.synced && spec.LastSeq != rw.lastSeq:
			// Batches the router never got (or numbering that went backwards).
			rw.synced = false
		}
	}
	if rw.role != spec.Role {
		r.roleCount[rw.role]--
		r.roleCount[spec.Role]++
		rw.role = spec.Role
	}
	if rw.nodeName != spec.Node {
		r.tiers.removeWorker(rw.node)
		rw.node, rw.nodeName = r.tiers.addWorker(spec.Node), spec.Node
	}
	if rw.noEvents != spec.NoKVEvents {
		rw.noEvents, rw.approx, rw.silentRoutes = spec.NoKVEvents, spec.NoKVEvents, 0
	}
	rw.ready, rw.totalBlocks, rw.maxSeqs = spec.Ready, spec.TotalBlocks, spec.MaxNumSeqs
	rw.lora.register(spec.MaxLoras, spec.LoraLoadMs, spec.Adapters, spec.KnownAdapters, r.now)
	return !rw.synced && rw.dumpPart < 0, nil
}

// restart drops a worker's blocks for a new engine epoch.
func (r *Router) restart(rw *routerWorker, epoch uint64) {
	r.index.ClearWorker(rw.id)
	r.pred.clearWorker(rw.id)
	rw.approx, rw.silentRoutes = rw.noEvents, 0
	rw.epoch, rw.lastSeq, rw.synced = epoch, 0, true
	rw.dumpPart, rw.pending, rw.droppedSeq = -1, nil, 0
}

// RemoveWorker removes a worker (deregistration, heartbeat expiry): its blocks leave the
// index and its active requests are freed. It returns how many requests were freed, or
// ErrUnknownWorker.
func (r *Router) RemoveWorker(workerID string) (int, error) {
	rw := r.byName[workerID]
	if rw == nil {
		return 0, fmt.Errorf("%w: %q", ErrUnknownWorker, workerID)
	}
	r.index.RemoveWorker(rw.id)
	r.pred.removeWorker(rw.id)
	n := r.active.RemoveWorker(rw.id)
	r.tiers.removeWorker(rw.node)
	r.roleCount[rw.role]--
	if rw.speed > 0 {
		r.priorStale = true
	}
	r.workers[rw.id] = nil
	for len(r.workers) > 0 && r.workers[len(r.workers)-1] == nil {
		r.workers = r.workers[:len(r.workers)-1]
	}
	delete(r.byName, workerID)
	return n, nil
}

// ApplyBatch applies one numbered event batch of a worker (KvEventBatch). needDump is
// true when the router has just lost track of the worker's blocks and wants its full
// block list: a gap in seq, a BlockStored whose parent it does not know, or a batch from
// an unknown worker (which must register first; err is then ErrUnknownWorker). It is
// reported once per loss; Register repeats it while the dump is outstanding. Batches
// that arrive while a dump is awaited are kept (the newest MaxBufferedBatches) and
// replayed after it; the Router keeps references to their events. Batches of an older epoch and
// duplicates are ignored. Invalid events are skipped and reported in err; the rest of
// the batch still applies.
func (r *Router) ApplyBatch(workerID string, epoch, seq uint64, events []Event) (needDump bool, err error) {
	rw := r.byName[workerID]
	if rw == nil {
		return true, fmt.Errorf("%w: event batch from %q", ErrUnknownWorker, workerID)
	}
	if epoch < rw.epoch {
		return false, nil
	}
	if epoch > rw.epoch {
		r.restart(rw, epoch)
	}
	r.eventsArrived(rw)
	if !rw.synced {
		r.buffer(rw, seq, events)
		return false, nil
	}
	if seq <= rw.lastSeq {
		return false, nil
	}
	if seq != rw.lastSeq+1 {
		rw.synced = false
		r.buffer(rw, seq, events)
		return true, nil
	}
	lost, err := r.applyEvents(rw, events, false)
	rw.lastSeq = seq
	if lost {
		rw.synced = false
		return true, err
	}
	return false, err
}

func (r *Router) buffer(rw *routerWorker, seq uint64, events []Event) {
	if seq <= rw.lastSeq && rw.dumpPart < 0 {
		return
	}
	if len(rw.pending) >= r.cfg.MaxBufferedBatches {
		// Keep the newest: the dump usually covers the oldest anyway.
		rw.droppedSeq = max(rw.droppedSeq, rw.pending[0].seq)
		rw.pending[0] = pendingBatch{}
		rw.pending = append(rw.pending[:0], rw.pending[1:]...)
	}
	rw.pending = append(rw.pending, pendingBatch{seq: seq, events: events})
}

// applyEvents applies events to the index for rw. In a batch (inDump false) an unknown
// parent stops the batch and reports lost; in a dump it is skipped like an invalid
// event, since asking for another dump would not help.
func (r *Router) applyEvents(rw *routerWorker, events []Event, inDump bool) (lost bool, err error) {
	var errs []error
	for i := range events {
		e := r.index.Apply(rw.id, events[i])
		if e == nil {
			continue
		}
		if errors.Is(e, ErrUnknownParent) && !inDump {
			return true, errors.Join(errs...)
		}
		if inDump {
			r.skipped++
		}
		if len(errs) < 8 {
			errs = append(errs, fmt.Errorf("%w (worker %q, event %d)", e, rw.name, i))
		}
	}
	return false, errors.Join(errs...)
}

// ApplyDump applies one part of a worker's full block list (BlockDump), which replaces
// the blocks the router held for it. Parts are numbered from 0 and must arrive in
// order; part 0 clears the worker's blocks. After the last part the worker's stream
// resumes at lastSeq+1: batches buffered meanwhile with a higher seq are replayed.
// needDump is true when the dump could not be used (a part out of order, buffered
// batches lost or with a gap). Events of the dump that are invalid or whose parent is
// missing are skipped and reported in err.
func (r *Router) ApplyDump(workerID string, epoch, lastSeq uint64, events []Event, part int, last bool) (needDump bool, err error) {
	rw := r.byName[workerID]
	if rw == nil {
		return false, fmt.Errorf("%w: block dump from %q", ErrUnknownWorker, workerID)
	}
	if epoch < rw.epoch {
		return false, nil
	}
	if epoch > rw.epoch {
		r.restart(rw, epoch)
	}
	if part == 0 {
		r.index.ClearWorker(rw.id)
		rw.synced, rw.dumpPart = false, 0
	}
	if part != rw.dumpPart {
		want := fmt.Sprintf("expected part %d", rw.dumpPart)
		if rw.dumpPart < 0 {
			want = "no dump in progress; part 0 starts one"
		}
		rw.synced, rw.dumpPart = false, -1
		return true, fmt.Errorf("%w: worker %q sent part %d (%s)", ErrDumpOrder, workerID, part, want)
	}
	_, err = r.applyEvents(rw, events, true)
	rw.dumpPart++
	if !last {
		return false, err
	}
	rw.dumpPart = -1
	rw.lastSeq, rw.synced = lastSeq, true
	pending, dropped := rw.pending, rw.droppedSeq
	rw.pending, rw.droppedSeq = nil, 0
	if dropped > lastSeq {
		rw.synced = false
		return true, err
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].seq < pending[j].seq })
	for i, p := range pending {
		if p.seq <= rw.lastSeq {
			continue
		}
		if p.seq != rw.lastSeq+1 {
			rw.synced = false
			rw.pending = slices.Clone(pending[i:])
			return true, err
		}
		lost, e := r.applyEvents(rw, p.events, false)
		rw.lastSeq = p.seq
		err = errors.Join(err, e)
		if lost {
			rw.synced = false
			return true, err
		}
	}
	return false, err
}

// DumpWorker returns a worker's blocks as KV events (see Index.Dump) with the epoch and
// last batch seq they reflect: what a new router replica would apply with ApplyDump.
// ErrInvalidRequest with Config.NoDump.
func (r *Router) DumpWorker(workerID string) (epoch, lastSeq uint64, events []Event, err error) {
	rw := r.byName[workerID]
	if rw == nil {
		return 0, 0, nil, fmt.Errorf("%w: %q", ErrUnknownWorker, workerID)
	}
	if r.cfg.NoDump {
		return 0, 0, nil, fmt.Errorf("%w: the router keeps no token ids to dump (Config.NoDump)", ErrInvalidRequest)
	}
	return rw.epoch, rw.lastSeq, r.index.Dump(rw.id), nil
}

// SetBusyThresholds changes the busy thresholds at run time (values <= 0 disable).
func (r *Router) SetBusyThresholds(b BusyThresholds) error {
	if err := validateBusy(b); err != nil {
		return err
	}
	r.cfg.Busy = b
	return nil
}

// BusyThresholds returns the thresholds in force.
func (r *Router) BusyThresholds() BusyThresholds { return r.cfg.Busy }

func (r *Router) busy(rw *routerWorker, l Load) bool {
	b := r.cfg.Busy
	if b.KVUsage > 0 && rw.totalBlocks > 0 && float64(l.ActiveBlocks)/float64(rw.totalBlocks) > b.KVUsage {
		return true
	}
	return b.PrefillTokens > 0 && l.PrefillTokens > b.PrefillTokens
}

// Route chooses a worker for a request and records it as active there (free it with
// Free; PrefillDone at its first token; with in.WillAck, Ack once the work is sent). It
// first expires what Expire would at now and forgets any earlier placement of the same
// request id (both legs), so routing one id twice (a retried call) tracks it once.
// While some worker has role prefill or decode it also decides where the prefill runs
// (disaggregated serving, see disagg.go); otherwise Decision.Disagg is
// DisaggAggregated. Errors: ErrInvalidRequest (empty id, negative or non-finite
// overrides), ErrNoWorkers (no ready worker, or all excluded), ErrAllBusy (every
// remaining worker busy; never for in.Admitted), ErrNoPrefillWorkers (Disagg.Enforce
// and no prefill worker), or a policy's error; a request that fails is not tracked. It allocates only the
// active-sequence records (and the PrefillLeg of a remote decision, the entry of a
// request awaiting its acknowledgement, and with in.Explain the Decision's Candidates).
func (r *Router) Route(in RouteInput, now time.Time, rng *rand.Rand) (Decision, error) {
	r.explaining, r.explained = in.Explain, nil
	d, err := r.route(&in, now, rng)
	if err == nil {
		d.LoraPath = r.placeLora(in.RequestID, &d, now)
		r.recordPlacement(&in, &d, now)
	}
	r.lora = loraRoute{}
	if r.explaining {
		if err == nil {
			d.Candidates = r.explained
		}
		r.explaining, r.explained = false, nil
	}
	if err == nil && in.WillAck && r.cfg.MaxUnackedAge > 0 {
		r.ackGen++
		r.awaiting[in.RequestID] = r.ackGen
		r.ackQueue.push(in.RequestID, r.ackGen, now)
		r.compactAcks()
	}
	return d, err
}

func (r *Router) route(in *RouteInput, now time.Time, rng *rand.Rand) (Decision, error) {
	if in.RequestID == "" {
		return Decision{}, fmt.Errorf("%w: empty request id", ErrInvalidRequest)
	}
	if err := in.checkPrompt(r.cfg.BlockSize); err != nil {
		return Decision{}, err
	}
	sel := SelectInput{
		PromptTokens:  in.promptTokens(),
		BlockSize:     r.cfg.BlockSize,
		OverlapWeight: r.cfg.OverlapWeight,
		Temperature:   r.cfg.Temperature,
	}
	if in.HasOverlapWeight {
		if !(in.OverlapWeight >= 0) || math.IsInf(in.OverlapWeight, 0) {
			return Decision{}, fmt.Errorf("%w: overlap weight %v must be a finite number >= 0", ErrInvalidRequest, in.OverlapWeight)
		}
		sel.OverlapWeight = in.OverlapWeight
	}
	if in.HasTemperature {
		if !(in.Temperature >= 0) || math.IsInf(in.Temperature, 0) {
			return Decision{}, fmt.Errorf("%w: temperature %v must be a finite number >= 0", ErrInvalidRequest, in.Temperature)
		}
		sel.Temperature = in.Temperature
	}
	r.Expire(now)
	retried := r.Free(in.RequestID)
	r.setNow(now)
	sel.Profile = &r.cfg.Profile
	sel.SpeedPrior = r.prior
	r.startLora(in)

	hashes := in.BlockHashes // the caller's (checkPrompt), never written to
	if len(in.Tokens) > 0 {
		r.hashBuf = AppendSaltedSequenceHashes(r.hashBuf[:0], in.Tokens, r.cfg.BlockSize, in.LoraName, in.CacheSalt)
		hashes = r.hashBuf
	}
	sel.PromptBlocks = len(hashes)
	r.ovBuf = r.index.Overlaps(hashes, r.ovBuf)
	if cap(r.apBuf) < len(r.workers) {
		r.apBuf = make([]uint32, len(r.workers))
	}
	r.apBuf = r.apBuf[:len(r.workers)]
	r.active.ActivePrefix(hashes, r.apBuf)
	r.lookupPredicted(in, hashes, now)
	r.tiers.beginRoute()

	pin, pinned := r.pinCandidate(in)
	if pinned && r.explaining {
		r.explained = explainCandidates(r.policy, &SelectInput{Candidates: []Candidate{pin}, PromptTokens: sel.PromptTokens,
			PromptBlocks: sel.PromptBlocks, BlockSize: sel.BlockSize, OverlapWeight: sel.OverlapWeight, Temperature: sel.Temperature}, 0)
	}
	if r.disaggregated() {
		if pinned {
			return r.placeDisagg(in, &sel, hashes, pin, now, rng)
		}
		return r.routeDisagg(in, &sel, hashes, now, rng)
	}
	if pinned {
		return r.placeLocal(in, hashes, pin, kindAggregated, now), nil
	}
	cands, eligible := r.gather(maskAggregated|maskPrefill|maskDecode, in.Exclude, in.Admitted)
	if eligible == 0 {
		return Decision{}, r.noEligible(fmt.Sprintf("%d registered, none ready and not excluded", len(r.byName)))
	}
	if len(cands) == 0 {
		return Decision{}, fmt.Errorf("%w: %d ready workers over the busy thresholds", ErrAllBusy, eligible)
	}
	sel.Candidates = cands
	if _, ttft := r.policy.(TTFTPolicy); ttft {
		// A request routed again under its id (a retry) was counted the first time.
		if best := bestOverlap(cands); best > 0 && best <= len(hashes) {
			sel.PrefixDemand = r.demand.note(hashes[best-1], r.nowClock, !retried)
		}
	}
	c, err := r.choose(r.policy, &sel, rng)
	if err != nil {
		return Decision{}, err
	}
	return r.placeLocal(in, hashes, c, kindAggregated, now), nil
}

// pinCandidate returns the candidate facts of in.PinWorker when the request may be
// placed there (see RouteInput.PinWorker) and counts the outcome: pinned, or a
// fallback to the policy. The overlap and active-prefix buffers must be filled.
func (r *Router) pinCandidate(in *RouteInput) (Candidate, bool) {
	if in.PinWorker == "" {
		return Candidate{}, false
	}
	rw := r.byName[in.PinWorker]
	roles := uint8(maskAggregated | maskPrefill | maskDecode)
	if r.disaggregated() {
		roles = maskAggregated | maskDecode
	}
	if rw == nil || !rw.ready || roles&(1<<rw.role) == 0 || excluded(in.Exclude, rw.name) {
		r.pinFallbacks++
		return Candidate{}, false
	}
	r.pinned++
	return r.candidate(rw, r.active.Load(rw.id)), true
}

// gather collects, in r.candBuf, the ready, non-busy workers whose role is in mask
// (a set of 1<<Role bits) and whose id is not in exclude, with their routing facts
// for the prompt whose overlaps and active prefixes are in r.ovBuf and r.apBuf; with
// admitted (RouteInput.Admitted) busy workers are collected too. eligible counts the
// ready, non-excluded workers of those roles, busy or not.
func (r *Router) gather(mask uint8, exclude []string, admitted bool) (cands []Candidate, eligible int) {
	cands = r.candBuf[:0]
	for _, rw := range r.workers {
		if rw == nil || mask&(1<<rw.role) == 0 || !rw.ready || excluded(exclude, rw.name) {
			continue
		}
		fits, loadMs, evicts, waitMs := r.loraFit(rw)
		if !fits {
			r.lora.misfit++
			continue
		}
		eligible++
		l := r.active.Load(rw.id)
		if !admitted && r.busy(rw, l) {
			continue
		}
		// Filled in place, written once: a Candidate is a few hundred bytes.
		if len(cands) < cap(cands) {
			cands = cands[:len(cands)+1]
		} else {
			cands = append(cands, Candidate{})
		}
		c := &cands[len(cands)-1]
		r.fillCandidate(rw, l, c)
		if !r.cfg.IgnoreAdapters {
			c.AdapterLoadMs, c.AdapterEvicts, c.AdapterWaitMs = loadMs, evicts, waitMs
		}
	}
	r.candBuf = cands
	return cands, eligible
}

// candidate is rw's routing facts, with load l, for the prompt whose overlaps and
// active prefixes are in r.ovBuf and r.apBuf.
func (r *Router) candidate(rw *routerWorker, l Load) Candidate {
	var c Candidate
	r.fillCandidate(rw, l, &c)
	return c
}

// fillCandidate is candidate writing into c (every field of c is overwritten).
func (r *Router) fillCandidate(rw *routerWorker, l Load, c *Candidate) {
	// Field by field: a composite literal is built on the stack and copied.
	c.Worker, c.ID = rw.id, rw.name
	c.OverlapBlocks = 0
	if int(rw.id) < len(r.ovBuf) {
		c.OverlapBlocks = int(r.ovBuf[rw.id])
	}
	c.ActiveBlocks, c.ActiveRequests = l.ActiveBlocks, l.Sequences
	c.ActivePrefixBlocks = int(r.apBuf[rw.id])
	c.ActivePrefillTokens = l.PrefillTokens
	c.IndexedBlocks = r.index.Blocks(rw.id)
	c.TotalBlocks, c.MaxNumSeqs = rw.totalBlocks, rw.maxSeqs
	c.SessionWorker = false
	c.DecodingRequests = l.Decoding
	c.DecodeSeconds = r.active.decodeSecondsAt(rw.id, r.nowActive)
	c.PrefillElapsedMs = r.active.prefillElapsedAt(rw.id, r.nowActive) * 1000
	c.SpeedFactor = rw.speedNow(r.nowClock, r.prior)
	c.MeanDecodeSeconds = rw.decodeSecs
	c.AdapterLoadMs, c.AdapterEvicts, c.AdapterWaitMs = 0, false, 0
	c.HostBlocks, c.DiskBlocks, c.RemoteBlocks, c.TierCreditTokens = 0, 0, 0, 0
	r.predictedFacts(rw, c)
	if !r.tiers.Empty() {
		r.tierFacts(rw, c)
	}
}

// choose runs policy p on sel (at least one candidate) and returns a copy of the
// chosen candidate.
func (r *Router) choose(p Policy, sel *SelectInput, rng *rand.Rand) (Candidate, error) {
	i, err := p.Select(sel, rng)
	if err != nil {
		return Candidate{}, err
	}
	if i < 0 || i >= len(sel.Candidates) {
		return Candidate{}, fmt.Errorf("kv: policy %q chose candidate %d of %d", r.cfg.Policy, i, len(sel.Candidates))
	}
	if r.explaining {
		r.noteChoice(p, sel, i)
	}
	return sel.Candidates[i], nil
}

// bestOverlap is the longest prefix hit among cands (blocks).
func bestOverlap(cands []Candidate) int {
	best := 0
	for i := range cands {
		best = max(best, cands[i].OverlapBlocks)
	}
	return best
}

func excluded(list []string, name string) bool {
	for _, x := range list {
		if x == name {
			return true
		}
	}
	return false
}

// PrefillDone records a request's first token (its prompt tokens stop counting as
// prefill load); for a request id it also marks its prefill leg done (the first token
// comes after the prefill). It reports whether the id (or its prefill leg) was active.
func (r *Router) PrefillDone(reqID string) bool {
	a := r.active.PrefillDone(reqID)
	b := r.active.PrefillDone(PrefillRequestID(reqID))
	return a || b
}

// PrefillDoneAt is PrefillDone with the time the first token came: the router also learns
// the worker's speed from it (observed against predicted TTFT) and counts the request as
// decoding from now on (its output grows the worker's load).
func (r *Router) PrefillDoneAt(reqID string, now time.Time) bool {
	done := false
	for _, id := range [2]string{reqID, PrefillRequestID(reqID)} {
		ft, ok := r.active.PrefillDoneAt(id, now)
		if !ok {
			done = done || r.active.PrefillDone(id)
			continue
		}
		done = true
		ratio := float64(ft.TTFT) / float64(time.Millisecond) / ft.PredictedMs
		if rw := r.workerByID(ft.Worker); rw != nil && ratio > 0 && !math.IsInf(ratio, 0) {
			at := r.clock(now)
			age := max(at-rw.speedAt, 0)
			r.priorStale = r.priorStale || rw.speed == 0
			r.priorDirty = true
			rw.speed = learnSpeedAfter(rw.speed, ratio, age)
			rw.evidence = 1 + rw.evidence*math.Exp2(-age.Seconds()/SpeedHalfLife.Seconds())
			rw.speedAt, rw.speedStep = at, -1
		}
	}
	return done
}

// FreeAt is Free at time now: the router also learns how long the worker's requests
// decode.
func (r *Router) FreeAt(reqID string, now time.Time) bool {
	if w, secs, ok := r.active.DecodeAge(reqID, now); ok {
		if rw := r.workerByID(w); rw != nil {
			rw.decodeSecs = smooth(rw.decodeSecs, secs)
		}
	}
	return r.Free(reqID)
}

// setNow makes now the current Route's time.
func (r *Router) setNow(now time.Time) {
	r.now, r.nowClock, r.nowActive = now, r.clock(now), r.active.since(now)
	// The fleet's speed moves with every observation, slowly: it is worked out again at
	// most once per relaxation step, and at this route when the set of workers with a
	// factor changed.
	step := r.nowClock / (SpeedHalfLife / speedSteps)
	if r.prior == 0 || r.priorStale || (r.priorDirty && step != r.priorStep) {
		var buf [64]float64
		v := buf[:0]
		for _, rw := range r.workers {
			if rw != nil && rw.speed > 0 {
				v = append(v, rw.speed)
			}
		}
		r.prior, r.priorStep, r.priorDirty, r.priorStale = fleetPrior(v), step, false, false
	}
}

// clock is t as a duration since the router's first reading (monotonic when t carries
// a monotonic reading, as time.Now's do).
func (r *Router) clock(t time.Time) time.Duration {
	if !r.hasBase {
		r.base, r.hasBase = t, true
	}
	return t.Sub(r.base)
}

// speedNow is rw's learnt speed factor at now: weighed against prior, the fleet's speed
// (Router.prior), by how many observations it rests on and how old they are
// (relaxedSpeed; 0 while nothing was observed).
func (rw *routerWorker) speedNow(now time.Duration, prior float64) float64 {
	if rw.speed == 0 {
		return 0
	}
	elapsed := max(now-rw.speedAt, 0)
	step := elapsed / (SpeedHalfLife / speedSteps)
	if step != rw.speedStep || prior != rw.speedPrior {
		rw.speedStep, rw.speedPrior, rw.speedRel = step, prior, relaxedSpeed(rw.speed, prior, elapsed, rw.evidence)
	}
	return rw.speedRel
}

func (r *Router) workerByID(w WorkerID) *routerWorker {
	if int(w) < len(r.workers) {
		return r.workers[w]
	}
	return nil
}

// Free ends a request (finished, cancelled, failed): the id given — a request id or
// the PrefillRequestID of a prefill leg — and, for a request id, its prefill leg too if
// still tracked, so a caller that forgets the leg leaks nothing. It reports whether
// anything was active. Unknown ids and repeated frees are harmless.
func (r *Router) Free(reqID string) bool {
	delete(r.awaiting, reqID)
	a := r.active.Free(reqID)
	b := r.active.Free(PrefillRequestID(reqID))
	return a || b
}

// Ack records that the caller of a Route with WillAck has sent the request's work: the
// request (and its prefill leg) is no longer expired for want of an acknowledgement, only
// by Free, MaxSequenceAge or its worker's removal. It reports whether reqID was awaiting
// its acknowledgement; acknowledging an unknown, freed, expired or already acknowledged
// id is harmless.
func (r *Router) Ack(reqID string) bool {
	if _, ok := r.awaiting[reqID]; !ok {
		return false
	}
	delete(r.awaiting, reqID)
	return true
}

// Expire frees the sequences older than MaxSequenceAge and the requests (both legs)
// routed with WillAck more than MaxUnackedAge before now and not acknowledged since, and
// returns how many sequences it freed. now should not go backwards; if it does, expiry is
// only delayed.
func (r *Router) Expire(now time.Time) Expired {
	e := Expired{Stale: int64(r.active.Expire(now))}
	if r.cfg.MaxUnackedAge > 0 {
		r.ackQueue.expire(now, r.cfg.MaxUnackedAge, func(reqID string, gen uint64) {
			if !r.awaitingAck(reqID, gen) {
				return
			}
			delete(r.awaiting, reqID)
			for _, id := range [2]string{reqID, PrefillRequestID(reqID)} {
				if r.active.Free(id) {
					e.Unacked++
				}
			}
		})
		r.compactAcks()
	}
	r.expired.Unacked += e.Unacked
	r.expired.Stale += e.Stale
	return e
}

// awaitingAck reports whether reqID still awaits the acknowledgement of its routing of
// generation gen (its queue entry is not dead).
func (r *Router) awaitingAck(reqID string, gen uint64) bool {
	g, ok := r.awaiting[reqID]
	return ok && g == gen
}

// compactAcks drops consumed and dead entries of the acknowledgement queue once they
// dominate it.
func (r *Router) compactAcks() { r.ackQueue.compact(len(r.awaiting), r.awaitingAck) }

// ActiveRequests is the number of tracked sequences (Stats.ActiveRequests, cheaply).
func (r *Router) ActiveRequests() int { return r.active.Len() }

// Tracked reports whether reqID — a request id or a prefill leg's id — is active, or, for
// a request id, its prefill leg is.
func (r *Router) Tracked(reqID string) bool {
	if _, ok := r.active.Worker(reqID); ok {
		return true
	}
	_, ok := r.active.Worker(PrefillRequestID(reqID))
	return ok
}

// WorkerStats is one worker's line in Stats.
type WorkerStats struct {
	ID     string
	Worker WorkerID
	Role   Role
	// IndexedBlocks: blocks of its KV cache in the index.
	IndexedBlocks int
	// ActiveBlocks, ActivePrefillTokens (tokens), ActiveRequests: router-tracked load.
	ActiveBlocks        int
	ActivePrefillTokens int64
	ActiveRequests      int
	TotalBlocks         int64
	Busy                bool
	Ready               bool
	Epoch               uint64
	LastSeq             uint64
	// Synced: the index holds the worker's complete block list (no dump outstanding).
	Synced bool
	// IndexMode: whether the worker's KV events feed its prefix hits, or predictions
	// alone (approx.go). PredictedBlocks: blocks predicted on it, kept apart from
	// IndexedBlocks.
	IndexMode       IndexMode
	PredictedBlocks int
	// Node: the node the worker registered on ("" for none), whose KV block manager's
	// tiers count as its own (Stats.Tiers).
	Node string
}

// Stats is a snapshot of the router's state and counters.
type Stats struct {
	// Workers, sorted by ID.
	Workers []WorkerStats
	// Routed requests; PromptBlocks routed in total, OverlapBlocks of them prefix hits
	// on the worker that prefilled (the prefill worker of a remote decision).
	Routed        int64
	PromptBlocks  int64
	OverlapBlocks int64
	// IndexNodes: distinct blocks in the index; ActiveRequests in the load tracking.
	IndexNodes     int
	ActiveRequests int
	// UnknownRemovals: BlockRemoved hashes for blocks not in the index. SkippedEvents:
	// dump events that could not be applied.
	UnknownRemovals uint64
	SkippedEvents   int64
	// Decisions counts routed requests by Decision.Disagg kind (every kind present).
	Decisions map[DisaggDecision]int64
	// Expired: the sequences expiry has freed since the router started, by cause.
	Expired Expired
	// AwaitingAck: requests routed with WillAck and not acknowledged yet.
	AwaitingAck int
	// Pinned: requests routed to their RouteInput.PinWorker (also in Routed);
	// PinFallbacks: requests that named a PinWorker the router could not use and were
	// routed by the policy instead.
	Pinned       int64
	PinFallbacks int64
	// PredictedNodes: distinct blocks predicted on some worker (approx.go), apart from
	// IndexNodes. Sessions: client sessions remembered (session.go).
	PredictedNodes int
	Sessions       int
	// Tiers: the tier index's nodes, sorted by name (docs/reference.md §9.2).
	// TierHitBlocks: routed prompt blocks found in each lower tier (indexed by Tier) after
	// the GPU hit of the worker that prefilled. SkippedTierChanges: inventory changes that
	// named no lower tier; UnknownTierRemovals: removals of blocks not known in that tier.
	Tiers               []TierNodeStats
	TierHitBlocks       [NumTiers]int64
	SkippedTierChanges  uint64
	UnknownTierRemovals uint64
}

// Stats returns a snapshot of the router's state.
func (r *Router) Stats() Stats {
	s := Stats{
		Routed: r.routed, PromptBlocks: r.prompt, OverlapBlocks: r.overlap,
		IndexNodes: r.index.Nodes(), ActiveRequests: r.active.Len(),
		UnknownRemovals: r.index.UnknownRemovals(), SkippedEvents: r.skipped,
		Decisions: make(map[DisaggDecision]int64, numKinds), Expired: r.expired, AwaitingAck: len(r.awaiting),
		Pinned: r.pinned, PinFallbacks: r.pinFallbacks,
		PredictedNodes: r.pred.nodes(), Sessions: r.sessions.len(),
		Tiers: r.tiers.Stats(), TierHitBlocks: r.tierHits,
		SkippedTierChanges: r.tiers.Skipped(), UnknownTierRemovals: r.tiers.UnknownRemovals(),
	}
	for k, n := range r.decisions {
		s.Decisions[disaggKinds[k]] = n
	}
	for _, rw := range r.workers {
		if rw == nil {
			continue
		}
		l := r.active.Load(rw.id)
		s.Workers = append(s.Workers, WorkerStats{
			ID: rw.name, Worker: rw.id, Role: rw.role, IndexedBlocks: r.index.Blocks(rw.id),
			ActiveBlocks: l.ActiveBlocks, ActivePrefillTokens: l.PrefillTokens, ActiveRequests: l.Sequences,
			TotalBlocks: rw.totalBlocks, Busy: r.busy(rw, l), Ready: rw.ready,
			Epoch: rw.epoch, LastSeq: rw.lastSeq, Synced: rw.synced,
			IndexMode: rw.indexMode(), PredictedBlocks: r.pred.blocks(rw.id), Node: rw.nodeName,
		})
	}
	sort.Slice(s.Workers, func(i, j int) bool { return strings.Compare(s.Workers[i].ID, s.Workers[j].ID) < 0 })
	return s
}
