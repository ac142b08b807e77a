package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/rs/zerolog"
	tcluster "github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Config configures every Router grain of a member.
type Config struct {
	// BlockSize is the KV block size in tokens; workers with another are refused. Zero
	// means: taken from the model deployment card of the first worker that registers
	// (what a frontend serving many models uses).
	BlockSize int
	// Mode is the routing policy: "kv", "round-robin" or "random".
	Mode string
	// OverlapWeight and Temperature of the kv policy (docs/reference.md §3).
	OverlapWeight float64
	Temperature   float64
	// Busy thresholds (docs/reference.md §4); zero values mean off.
	Busy kv.BusyThresholds
	// Disagg: conditional disaggregation (docs/reference.md §6), used while some worker registers
	// with role prefill or decode: MaxLocalPrefillTokens, MaxPrefillQueueTokens, Enforce
	// (see kv.DisaggConfig). nil means kv.DefaultDisaggConfig(); a value is taken as given.
	Disagg *kv.DisaggConfig
	// WorkerTTL: a worker not heard from for this long is removed (default 10 s: ten
	// missed heartbeats at the default period, so a starved machine does not flap).
	WorkerTTL time.Duration
	// MaxUnackedAge: a request routed with will_ack whose RouteAck has not come within
	// this long is expired (kv.Config.MaxUnackedAge). Zero means kv.DefaultMaxUnackedAge;
	// negative, never.
	MaxUnackedAge time.Duration
	// PredictActive: the blocks of requests routed to a worker with KV events and not
	// yet ended count as cached there until its events say so (kv.Config.PredictActive;
	// docs/reference.md §3.3).
	PredictActive bool
	// IgnoreAdapters routes adapter requests as if adapters did not matter
	// (kv.Config.IgnoreAdapters; docs/reference.md §26.4).
	IgnoreAdapters bool
	// TierCredit: the worth of a block in a node's KV block manager's host, disk and
	// remote tiers against a GPU hit (kv.Config.TierCredit; docs/reference.md §9.2). nil:
	// computed from the model card's KV size, the timing profile and TierBandwidth
	// (kv.TierCreditsFor) when the first worker registers.
	TierCredit *kv.TierCredit
	// TierBandwidth: the tiers' bandwidths in GB/s for that computation; a zero figure
	// means kv.DefaultTierBandwidth's.
	TierBandwidth kv.TierBandwidth
	// NodeTTL: a node's inventory is forgotten once no worker is registered on it and it
	// sent none for this long (0: DefaultNodeTTL).
	NodeTTL time.Duration
	// RegistrationWindow: for this long after its activation a grain that no worker has
	// registered with answers Route with ROUTE_NO_WORKERS and a retry_ms, since the
	// workers of a grain that moved register again within a heartbeat and a call's
	// timeout (0: DefaultRegistrationWindow; negative: never).
	RegistrationWindow time.Duration
	Logger             zerolog.Logger
	// Now and Seed are for tests; zero means time.Now and a random seed.
	Now  func() time.Time
	Seed uint64
}

// ControlMethods are the Router grain methods a worker calls (its relay: the
// registration that is its heartbeat, KV event batches, block dumps, leaving).
var ControlMethods = []protoreflect.Name{"Register", "Deregister", "PublishEvents", "PublishDump", "PublishInventory"}

// Kind returns the cluster kind hosting Router grains. Grains are never passivated: the
// index is worth keeping while the member lives. Their mailbox processes the workers'
// calls (ControlMethods) before the gateways' routing traffic (Route, Free, PrefillDone,
// ...), each in arrival order: under load a frontend keeps hundreds of routing calls
// queued in the grain, and a heartbeat or KV event batch waiting behind them would time
// out (a lost batch costs a full block dump). The library's own priority mailbox cannot
// order grain methods (docs/actor-library.md §10).
func Kind(cfg Config) *cluster.Kind {
	k := messages.NewRouterKind(func() messages.Router { return New(cfg) }, 0)
	k.Props.Configure(actor.WithMailbox(tcluster.UrgentGrainMailbox(
		messages.File_services_proto.Services().ByName("Router"), ControlMethods...)))
	return k
}

type workerState struct {
	actor    *messages.ActorRef
	card     *messages.ModelCard
	load     *messages.WorkerLoad
	lastSeen time.Time
	role     kv.Role
	// bootstrapHost and bootstrapPort: a prefill worker's advertised SGLang bootstrap
	// address, given with every remote decision it prefills.
	bootstrapHost string
	bootstrapPort int32
	// acks: the worker acknowledges each Generate (WorkerInfo.acknowledges_generate).
	acks bool
	// adapters and maxLoras: the worker's LoRA adapters and slots, as it last registered
	// them (WorkerStats, for the frontends' placement).
	adapters []*messages.LoraAdapter
	known    []*messages.LoraAdapter
	maxLoras int32
	// node: WorkerInfo.node_id, whose KV block manager's tiers count as the worker's.
	node string
	// engineURL: WorkerInfo.engine_url (WorkerStats, for the endpoint picker).
	engineURL string
}

// Grain implements messages.Router.
type Grain struct {
	cfg   Config
	model string
	kcfg  kv.Config
	core  *kv.Router // nil until the block size is known (and again, fromWorker, once no worker is left)
	// fromWorker: the core's block size is the first worker's, not the configuration's.
	fromWorker bool
	// refusedAt: when each worker's registration was last refused in the log (once a
	// minute per worker, not once a heartbeat).
	refusedAt map[string]time.Time
	initErr   error
	rng       *rand.Rand
	workers   map[string]*workerState
	card      *messages.ModelCard
	log       zerolog.Logger
	sub       *eventstream.Subscription
	system    *actor.ActorSystem
	// owners maps a gateway member's address to the requests it routed and has not freed,
	// so that a gateway that dies mid-request does not leave load behind it.
	owners map[string]map[string]struct{}
	owner  map[string]string // request id -> gateway member address
	// nodeSeen: when each node's KV block manager last sent an inventory batch.
	nodeSeen map[string]time.Time
	// left: the addresses of members that left the cluster, and when. A registration
	// from one is refused until a member joins at that address again: a member the
	// cluster dropped may run on for a moment (a process resumed from a pause) and its
	// workers' heartbeats would register the worker ids their node's new member's
	// workers take over.
	left map[string]time.Time
	// activated: when Init ran (zero for a grain never activated: a test's).
	activated time.Time
}

// Bounds of Grain.left: an address is remembered for leftMemory, and at most
// maxLeftMembers are (the oldest forgotten first).
const (
	leftMemory     = time.Hour
	maxLeftMembers = 4096
)

// DefaultRegistrationWindow is Config.RegistrationWindow's default: a worker's heartbeat
// period (worker.DefaultHeartbeat, 1 s) and its grain call timeout (worker.GrainTimeout,
// 2 s).
const DefaultRegistrationWindow = 3 * time.Second

// registrationRetry is the retry_ms of a route answered within the registration window.
const registrationRetry = 250 * time.Millisecond

// DefaultWorkerTTL is Config.WorkerTTL's default: ten heartbeats of the worker's default
// period.
const DefaultWorkerTTL = 10 * time.Second

// New returns a Router grain; its identity (the model) is set by Init.
func New(cfg Config) *Grain {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WorkerTTL <= 0 {
		cfg.WorkerTTL = DefaultWorkerTTL
	}
	if cfg.NodeTTL <= 0 {
		cfg.NodeTTL = DefaultNodeTTL
	}
	if cfg.RegistrationWindow == 0 {
		cfg.RegistrationWindow = DefaultRegistrationWindow
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	kcfg := kv.DefaultConfig(cfg.BlockSize)
	if cfg.Mode != "" {
		kcfg.Policy = cfg.Mode
	}
	kcfg.OverlapWeight, kcfg.Temperature, kcfg.Busy = cfg.OverlapWeight, cfg.Temperature, cfg.Busy
	kcfg.PredictActive, kcfg.IgnoreAdapters = cfg.PredictActive, cfg.IgnoreAdapters
	if cfg.MaxUnackedAge != 0 {
		kcfg.MaxUnackedAge = cfg.MaxUnackedAge
	}
	if cfg.Disagg != nil {
		kcfg.Disagg = *cfg.Disagg
	}
	if cfg.TierCredit != nil {
		kcfg.TierCredit = *cfg.TierCredit
	}
	// A moved grain rebuilds its index from the workers' block lists, never from a dump
	// of its own: the index keeps no token ids (half its memory at block size 16). So it
	// takes stored blocks hashed by the workers, in dumps and event batches alike (the
	// acks' dump_hash_scheme and event_hash_scheme).
	kcfg.NoDump = true
	g := &Grain{cfg: cfg, kcfg: kcfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		workers: map[string]*workerState{}, log: cfg.Logger,
		owners: map[string]map[string]struct{}{}, owner: map[string]string{}, nodeSeen: map[string]time.Time{},
		left: map[string]time.Time{}}
	if cfg.BlockSize != 0 {
		g.core, g.initErr = kv.NewRouter(kcfg)
	}
	return g
}

func (g *Grain) Init(ctx cluster.GrainContext) {
	g.activated = g.cfg.Now()
	g.model = ctx.Identity()
	g.log = g.cfg.Logger.With().Str("router", g.model).Logger()
	if g.initErr != nil {
		g.log.Error().Err(g.initErr).Msg("router configuration refused")
	}
	// Membership changes reach the grain as messages, so that workers on a member that
	// left the cluster leave routing at once instead of after WorkerTTL.
	self := ctx.Self()
	g.system = ctx.ActorSystem()
	g.sub = g.system.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok && (len(t.Left) > 0 || len(t.Joined) > 0) {
			g.system.Root.Send(self, t)
		}
	})
}

// Terminate stops the membership subscription.
func (g *Grain) Terminate(cluster.GrainContext) {
	if g.sub != nil {
		g.system.EventStream.Unsubscribe(g.sub)
	}
}

// ReceiveDefault handles the messages that are not grain calls: membership changes
// (*cluster.ClusterTopology) and acknowledged routes (*messages.RouteAck).
func (g *Grain) ReceiveDefault(ctx cluster.GrainContext) { g.receive(ctx.Message()) }

func (g *Grain) receive(msg any) {
	switch m := msg.(type) {
	case *cluster.ClusterTopology:
		now := g.cfg.Now()
		for _, l := range m.Left {
			g.membersLeft(l.Address())
			g.gatewayLeft(l.Address())
			g.left[l.Address()] = now
		}
		for _, j := range m.Joined {
			delete(g.left, j.Address())
		}
		g.forgetLeft(now)
	case *messages.RouteAck:
		if g.core != nil {
			g.core.Ack(m.RequestId)
		}
	}
}

// callerAddress is the member address of a grain call's sender ("" when unknown or
// local): a request's future lives on the calling gateway's member.
func callerAddress(ctx cluster.GrainContext) string {
	if ctx == nil {
		return ""
	}
	if p := ctx.Sender(); p != nil {
		return p.Address
	}
	return ""
}

// gatewayLeft ends the load tracking of the requests routed by the gateway member at
// address (it left the cluster, so nobody will free them).
func (g *Grain) gatewayLeft(address string) {
	reqs := g.owners[address]
	if len(reqs) == 0 {
		return
	}
	for id := range reqs {
		if g.core != nil {
			g.core.Free(id)
		}
		delete(g.owner, id)
	}
	delete(g.owners, address)
	g.log.Warn().Str("member", address).Int("requests", len(reqs)).
		Msg("gateway member left the cluster: its requests' load tracking freed")
}

// track records that the gateway at address routed request id (address "" is not tracked:
// a local caller).
func (g *Grain) track(address, id string) {
	if address == "" {
		return
	}
	if g.owners[address] == nil {
		g.owners[address] = map[string]struct{}{}
	}
	g.owners[address][id] = struct{}{}
	g.owner[id] = address
}

// untrack forgets request id's gateway.
func (g *Grain) untrack(id string) {
	if a, ok := g.owner[id]; ok {
		delete(g.owners[a], id)
		if len(g.owners[a]) == 0 {
			delete(g.owners, a)
		}
		delete(g.owner, id)
	}
}

// forgetLeft drops the left members' addresses older than leftMemory, and the oldest
// beyond maxLeftMembers.
func (g *Grain) forgetLeft(now time.Time) {
	for a, at := range g.left {
		if now.Sub(at) > leftMemory {
			delete(g.left, a)
		}
	}
	for len(g.left) > maxLeftMembers {
		oldest, at := "", now
		for a, t := range g.left {
			if !t.After(at) {
				oldest, at = a, t
			}
		}
		delete(g.left, oldest)
	}
}

// membersLeft removes, with their blocks and active requests, the workers whose actors
// live on the member at address (host:port).
func (g *Grain) membersLeft(address string) {
	for id, w := range g.workers {
		if w.actor.GetAddress() != address {
			continue
		}
		n, _ := g.core.RemoveWorker(id)
		delete(g.workers, id)
		g.log.Warn().Str("worker", id).Str("member", address).Int("freed_requests", n).
			Msg("worker's member left the cluster: removed with its blocks")
	}
}

// expire removes workers not heard from within WorkerTTL and expires the requests the
// core no longer should count (kv.Router.Expire: routed and never acknowledged, or older
// than the maximum sequence age). It runs on every heartbeat, route and stats call, so no
// timer is needed: load left by a request nobody will free goes within a heartbeat of
// its bound even without traffic.
func (g *Grain) expire(now time.Time) {
	for id, w := range g.workers {
		if now.Sub(w.lastSeen) > g.cfg.WorkerTTL {
			n, _ := g.core.RemoveWorker(id)
			delete(g.workers, id)
			g.log.Warn().Str("worker", id).Int("freed_requests", n).Msg("worker silent past its TTL: removed with its blocks")
		}
	}
	if e := g.core.Expire(now); e.Total() > 0 {
		g.log.Warn().Int64("unacknowledged", e.Unacked).Int64("stale", e.Stale).
			Dur("max_unacked_age", g.kcfg.MaxUnackedAge).Dur("max_sequence_age", g.kcfg.MaxSequenceAge).
			Msg("expired tracked requests that nobody freed: routed but never acknowledged, or older than the maximum sequence age")
	}
	g.pruneOwners()
	g.forgetNodes(now)
}

// pruneOwners forgets the gateway of requests the core no longer tracks (expired, or
// freed with their worker) once they dominate the map; each call costs O(1) amortized.
func (g *Grain) pruneOwners() {
	if len(g.owner) < 2*g.core.ActiveRequests()+1024 {
		return
	}
	for id := range g.owner {
		if !g.core.Tracked(id) {
			g.untrack(id)
		}
	}
}

// Register records a worker's heartbeat; see kv.Router.Register.
func (g *Grain) Register(req *messages.RegisterWorker, _ cluster.GrainContext) (*messages.RegisterAck, error) {
	if g.initErr != nil {
		return &messages.RegisterAck{Error: g.initErr.Error()}, nil
	}
	info := req.GetWorker()
	if info.GetWorkerId() == "" || info.GetActor() == nil || info.GetCard() == nil {
		return &messages.RegisterAck{Error: "router: registration needs worker_id, actor and card"}, nil
	}
	if info.Card.Model != g.model {
		return &messages.RegisterAck{Error: fmt.Sprintf("router: worker %q serves model %q, this router routes %q",
			info.WorkerId, info.Card.Model, g.model)}, nil
	}
	if at, ok := g.left[info.Actor.GetAddress()]; ok {
		return &messages.RegisterAck{Error: fmt.Sprintf(
			"router: worker %q registers from %s, a member that left the cluster %v ago: its node's new member registers its workers",
			info.WorkerId, info.Actor.GetAddress(), g.cfg.Now().Sub(at).Round(time.Millisecond))}, nil
	}
	now := g.cfg.Now()
	if g.core != nil {
		g.expire(now)
		if g.fromWorker && len(g.workers) == 0 && g.core.BlockSize() != int(info.Card.KvBlockSize) {
			// The block size was the first worker's, and every worker of it has gone: the
			// model's fleet was redeployed with another one. Starting over beats refusing
			// every worker until this frontend restarts.
			g.log.Warn().Int("old_block_size", g.core.BlockSize()).Int("block_size", int(info.Card.KvBlockSize)).
				Str("worker", info.WorkerId).Msg("no worker of the router's KV block size is left: starting over with the registering worker's")
			g.core, g.card = nil, nil
		}
	}
	if g.core == nil {
		kcfg := g.kcfg
		kcfg.BlockSize = int(info.Card.KvBlockSize)
		core, err := kv.NewRouter(kcfg)
		if err != nil {
			return &messages.RegisterAck{Error: fmt.Sprintf("router: worker %q: %v", info.WorkerId, err)}, nil
		}
		g.core, g.fromWorker = core, true
		g.log.Info().Int("block_size", kcfg.BlockSize).Msg("router started with the first worker's KV block size")
	}
	if w := g.workers[info.WorkerId]; w != nil && w.actor.GetAddress() != info.Actor.GetAddress() &&
		now.Sub(w.lastSeen) <= g.cfg.WorkerTTL {
		// Two live workers claim one id (two nodes with the same --node-id): routing by id
		// would mix their KV indexes and loads. The first keeps it until it leaves.
		return &messages.RegisterAck{Error: fmt.Sprintf(
			"router: worker id %q is already registered by %s (seen %v ago); this one is at %s: give each node a unique --node-id",
			info.WorkerId, w.actor.GetAddress(), now.Sub(w.lastSeen).Round(time.Millisecond), info.Actor.GetAddress())}, nil
	}
	total := req.GetLoad().GetTotalBlocks()
	if total == 0 {
		total = info.Card.TotalKvBlocks
	}
	role := info.Role
	if info.BootstrapPort < 0 || info.BootstrapPort > 65535 {
		return &messages.RegisterAck{Error: fmt.Sprintf("router: worker %q: bootstrap port %d out of range 0-65535",
			info.WorkerId, info.BootstrapPort)}, nil
	}
	adapters, known, err := adapterSpecs(info)
	if err != nil {
		return &messages.RegisterAck{Error: fmt.Sprintf("router: worker %q: %v", info.WorkerId, err)}, nil
	}
	needDump, err := g.core.Register(kv.WorkerSpec{ID: info.WorkerId, BlockSize: int(info.Card.KvBlockSize),
		TotalBlocks: total, MaxNumSeqs: int(info.Card.MaxNumSeqs), Ready: info.Ready, Epoch: info.EngineEpoch, LastSeq: req.LastEventSeq, Role: role,
		NoKVEvents: info.NoKvEvents, Adapters: adapters, MaxLoras: int(info.MaxLoras), LoraLoadMs: info.LoraLoadMs,
		KnownAdapters: known, Node: info.NodeId})
	if err != nil {
		if at, ok := g.refusedAt[info.WorkerId]; !ok || now.Sub(at) >= time.Minute {
			if g.refusedAt == nil {
				g.refusedAt = map[string]time.Time{}
			}
			g.refusedAt[info.WorkerId] = now
			g.log.Error().Err(err).Str("worker", info.WorkerId).Msg("worker registration refused (logged once a minute per worker)")
		}
		return &messages.RegisterAck{Error: err.Error()}, nil
	}
	delete(g.refusedAt, info.WorkerId)
	w := g.workers[info.WorkerId]
	if w == nil {
		w = &workerState{role: role}
		g.workers[info.WorkerId] = w
		g.log.Info().Str("worker", info.WorkerId).Bool("ready", info.Ready).Str("role", role.Label()).Msg("worker registered")
	} else if w.role != role {
		g.log.Info().Str("worker", info.WorkerId).Str("from", w.role.Label()).Str("role", role.Label()).Msg("worker changed role")
	}
	w.actor, w.card, w.load, w.lastSeen = info.Actor, info.Card, req.Load, now
	w.role, w.bootstrapHost, w.bootstrapPort = role, info.BootstrapHost, info.BootstrapPort
	w.adapters, w.known, w.maxLoras = info.Adapters, info.KnownAdapters, info.MaxLoras
	w.node, w.engineURL, w.acks = info.NodeId, info.EngineUrl, info.AcknowledgesGenerate
	if g.card == nil {
		g.card = info.Card
		// The tier credits follow from the model's KV size (docs/reference.md §9.2).
		if err := g.core.SetTierCredit(g.tierCredit(info.Card)); err != nil {
			g.log.Error().Err(err).Msg("tier credit refused")
		} else {
			c := g.core.TierCredit()
			g.log.Info().Float64("host", c.Host).Float64("disk", c.Disk).Float64("remote", c.Remote).
				Int64("kv_bytes_per_token", KVBytesPerToken(info.Card)).Msg("tier credits (fractions of a GPU hit)")
		}
	}
	return &messages.RegisterAck{Accepted: true, NeedDump: needDump, DumpHashScheme: kv.HashScheme, EventHashScheme: kv.HashScheme}, nil
}

// Deregister removes a worker with its blocks and active requests.
func (g *Grain) Deregister(req *messages.DeregisterWorker, _ cluster.GrainContext) (*messages.Ack, error) {
	if w := g.workers[req.WorkerId]; w != nil && req.Actor != nil &&
		(w.actor.GetAddress() != req.Actor.Address || w.actor.GetId() != req.Actor.Id) {
		g.log.Warn().Str("worker", req.WorkerId).Str("from", req.Actor.Address).Str("registered", w.actor.GetAddress()).
			Msg("deregistration from another actor than the registered one ignored (duplicate worker id?)")
		return &messages.Ack{}, nil
	}
	if g.core != nil {
		if n, err := g.core.RemoveWorker(req.WorkerId); err == nil {
			g.log.Info().Str("worker", req.WorkerId).Str("reason", req.Reason).Int("freed_requests", n).Msg("worker deregistered")
		}
	}
	delete(g.workers, req.WorkerId)
	return &messages.Ack{}, nil
}

// PublishEvents applies a numbered KV event batch, its stored blocks as token ids or, from
// a worker the acks offered kv.HashScheme, as their sequence hashes; see
// kv.Router.ApplyBatch. A malformed batch (kvpb.BatchEvents) is answered need_dump.
func (g *Grain) PublishEvents(req *messages.KvEventBatch, _ cluster.GrainContext) (*messages.EventAck, error) {
	if g.core == nil {
		return &messages.EventAck{}, nil
	}
	evs, err := kvpb.BatchEvents(req)
	if err != nil {
		g.log.Warn().Err(err).Str("worker", req.WorkerId).Msg("malformed KV event batch: asking for a dump")
		return &messages.EventAck{NeedDump: true, DumpHashScheme: kv.HashScheme, EventHashScheme: kv.HashScheme}, nil
	}
	needDump, err := g.core.ApplyBatch(req.WorkerId, req.EngineEpoch, req.Seq, evs)
	if err != nil && !errors.Is(err, kv.ErrUnknownWorker) {
		g.log.Warn().Err(err).Str("worker", req.WorkerId).Uint64("seq", req.Seq).Msg("KV event batch partly refused")
	}
	if w := g.workers[req.WorkerId]; w != nil {
		w.lastSeen = g.cfg.Now()
	}
	return &messages.EventAck{NeedDump: needDump, DumpHashScheme: kv.HashScheme, EventHashScheme: kv.HashScheme}, nil
}

// PublishDump replaces a worker's blocks with its full list (in parts).
func (g *Grain) PublishDump(req *messages.BlockDump, _ cluster.GrainContext) (*messages.Ack, error) {
	if g.core == nil {
		return &messages.Ack{}, nil
	}
	evs, err := kvpb.DumpEvents(req)
	if err != nil {
		g.log.Warn().Err(err).Str("worker", req.WorkerId).Msg("malformed block dump ignored")
		return &messages.Ack{}, nil
	}
	if _, err := g.core.ApplyDump(req.WorkerId, req.EngineEpoch, req.LastSeq, evs, int(req.Part), req.Last); err != nil {
		g.log.Warn().Err(err).Str("worker", req.WorkerId).Int32("part", req.Part).Msg("block dump refused")
	} else if req.Last {
		g.log.Debug().Str("worker", req.WorkerId).Msg("block dump applied")
	}
	return &messages.Ack{}, nil
}

// route chooses a worker — in disaggregated serving a decode worker and, for a remote
// decision, a prefill worker (see kv.Router.Route). Errors come back in the response
// (outcome ROUTE_NO_WORKERS, ROUTE_ALL_BUSY, ROUTE_NO_PREFILL_WORKERS, or ROUTE_BAD_REQUEST
// for a request without a prompt or id, with an override out of range, or with block
// hashes that are not one per full block of prompt_tokens at the router's block size).
// Within its registration window (Config.RegistrationWindow) a grain that no worker has
// registered with yet answers ROUTE_NO_WORKERS with retry_ms.
// The prompt comes as its token ids or, from a frontend that knows the model's block
// size, as its block hashes and length (docs/reference.md §2): the router then hashes
// nothing. The response names this activation (router), where a will_ack caller sends
// RouteAck. Routing one request id again replaces its earlier placement, so a retried
// call counts once. With tracing on, Route (trace.go) runs it under a router.route span.
func (g *Grain) route(req *messages.RouteRequest, ctx cluster.GrainContext) (*messages.RouteResponse, error) {
	switch {
	case g.initErr != nil:
		return &messages.RouteResponse{Error: g.initErr.Error(), Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}, nil
	case len(req.TokenIds) == 0 && req.GetPromptTokens() <= 0:
		return &messages.RouteResponse{Error: fmt.Sprintf("router: request %q has no prompt (token_ids, or block_hashes with prompt_tokens)", req.RequestId),
			Outcome: messages.RouteOutcome_ROUTE_BAD_REQUEST}, nil
	}
	now := g.cfg.Now()
	if len(g.workers) == 0 && !g.activated.IsZero() && now.Sub(g.activated) < g.cfg.RegistrationWindow {
		return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS, RetryMs: int32(registrationRetry.Milliseconds()),
			Error: fmt.Sprintf("router: activated %v ago, no worker of model %s has registered yet",
				now.Sub(g.activated).Round(time.Millisecond), g.model)}, nil
	}
	if g.core == nil {
		return &messages.RouteResponse{Error: "router: no worker registered for model " + g.model, Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}, nil
	}
	g.expire(now)
	d, err := g.core.Route(kvpb.RouteInput(req), now, g.rng)
	if err != nil {
		return kvpb.RouteResponse(d, err), nil
	}
	w := g.workers[d.WorkerID]
	var pw *workerState
	if d.Prefill != nil {
		pw = g.workers[d.Prefill.WorkerID]
	}
	if w == nil || d.Prefill != nil && pw == nil { // registered in the core but not here: cannot happen; refuse rather than guess
		g.core.Free(req.RequestId)
		return &messages.RouteResponse{Error: "router: chosen worker has no address", Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}, nil
	}
	addr := callerAddress(ctx)
	g.track(addr, req.RequestId)
	resp := kvpb.RouteResponse(d, nil) // the core's answer; the actors' addresses are added here
	resp.Worker, resp.WorkerAcknowledges = w.actor, w.acks
	if ctx != nil {
		if self := ctx.Self(); self != nil {
			resp.Router = &messages.ActorRef{Address: self.Address, Id: self.Id}
		}
	}
	if p := d.Prefill; p != nil {
		g.track(addr, p.RequestID)
		resp.PrefillWorker, resp.PrefillWorkerAcknowledges = pw.actor, pw.acks
		resp.PrefillBootstrapHost, resp.PrefillBootstrapPort = pw.bootstrapHost, pw.bootstrapPort
	}
	return resp, nil
}

// PrefillDone records a request's first token.
func (g *Grain) PrefillDone(req *messages.RequestRef, _ cluster.GrainContext) (*messages.Ack, error) {
	if g.core != nil {
		g.core.PrefillDoneAt(req.RequestId, g.cfg.Now())
	}
	return &messages.Ack{}, nil
}

// Free ends a request's load tracking; unknown ids are harmless. A request id frees
// its prefill leg too when still tracked; a prefill_request_id frees only the leg.
func (g *Grain) Free(req *messages.RequestRef, _ cluster.GrainContext) (*messages.Ack, error) {
	if g.core != nil {
		g.core.FreeAt(req.RequestId, g.cfg.Now())
	}
	g.untrack(req.RequestId)
	g.untrack(kv.PrefillRequestID(req.RequestId))
	return &messages.Ack{}, nil
}

// SetBusyThresholds changes the busy thresholds at run time; absent fields stay unchanged.
func (g *Grain) SetBusyThresholds(req *messages.BusyThresholds, _ cluster.GrainContext) (*messages.Ack, error) {
	if g.initErr != nil {
		return nil, g.initErr
	}
	b := g.kcfg.Busy
	if g.core != nil {
		b = g.core.BusyThresholds()
	}
	if req.KvUsage != nil {
		b.KVUsage = req.GetKvUsage()
	}
	if req.PrefillTokens != nil {
		b.PrefillTokens = req.GetPrefillTokens()
	}
	if g.core == nil { // applied when the first worker registers
		g.kcfg.Busy = b
		return &messages.Ack{}, nil
	}
	if err := g.core.SetBusyThresholds(b); err != nil {
		return nil, err
	}
	return &messages.Ack{}, nil
}

// Stats returns the router's per-worker state and counters.
func (g *Grain) Stats(_ *messages.RouterStatsRequest, _ cluster.GrainContext) (*messages.RouterStats, error) {
	if g.core == nil {
		return &messages.RouterStats{}, nil
	}
	g.expire(g.cfg.Now())
	st := g.core.Stats()
	out := &messages.RouterStats{Routed: st.Routed, PromptBlocks: st.PromptBlocks, OverlapBlocks: st.OverlapBlocks, Card: g.card,
		ExpiredUnacked: st.Expired.Unacked, ExpiredStale: st.Expired.Stale, Pinned: st.Pinned, PinFallbacks: st.PinFallbacks}
	for _, w := range st.Workers {
		ws := &messages.WorkerStats{WorkerId: w.ID, IndexedBlocks: int64(w.IndexedBlocks), ActiveBlocks: int64(w.ActiveBlocks),
			ActivePrefillTokens: w.ActivePrefillTokens, Busy: w.Busy, Ready: w.Ready, ActiveRequests: int32(w.ActiveRequests),
			Role: w.Role, IndexMode: w.IndexMode.String(), PredictedBlocks: int64(w.PredictedBlocks), NodeId: w.Node}
		if s := g.workers[w.ID]; s != nil {
			if s.load != nil {
				ws.EngineRunning, ws.EngineWaiting, ws.EngineKvUsage = s.load.Running, s.load.Waiting, s.load.KvUsage
			}
			ws.Actor, ws.Adapters, ws.MaxLoras, ws.KnownAdapters = s.actor, s.adapters, s.maxLoras, s.known
			ws.EngineUrl = s.engineURL
		}
		out.Workers = append(out.Workers, ws)
	}
	out.HostHitBlocks, out.DiskHitBlocks, out.RemoteHitBlocks =
		st.TierHitBlocks[kv.TierHost], st.TierHitBlocks[kv.TierDisk], st.TierHitBlocks[kv.TierRemote]
	for _, n := range st.Tiers {
		out.TierNodes = append(out.TierNodes, &messages.RouterTierNode{NodeId: n.Node,
			HostBlocks: int64(n.Blocks[kv.TierHost]), DiskBlocks: int64(n.Blocks[kv.TierDisk]), RemoteBlocks: int64(n.Blocks[kv.TierRemote]),
			Workers: int32(n.Workers), Synced: n.Synced, ServesRemote: n.ServesRemote, Epoch: n.Epoch, LastSeq: n.LastSeq})
	}
	return out, nil
}

// maxAdapters bounds the adapters one registration may list (a worker holds at most
// max_loras of them; engines take tens).
const maxAdapters = 4096

// adapterSpecs validates a registration's LoRA adapters, held and known
// (docs/reference.md §26.4): each named once across both lists, max_loras and
// lora_load_ms in range, no more held than max_loras, at most maxAdapters known.
func adapterSpecs(info *messages.WorkerInfo) (held, known []kv.AdapterSpec, err error) {
	n, k := len(info.Adapters), len(info.KnownAdapters)
	switch {
	case info.MaxLoras < 0 || info.MaxLoras > maxAdapters:
		return nil, nil, fmt.Errorf("max_loras %d out of range 0-%d", info.MaxLoras, maxAdapters)
	case n > int(info.MaxLoras):
		return nil, nil, fmt.Errorf("%d LoRA adapters listed, more than its max_loras %d", n, info.MaxLoras)
	case k > maxAdapters:
		return nil, nil, fmt.Errorf("%d known LoRA adapters listed, more than %d", k, maxAdapters)
	case !(info.LoraLoadMs >= 0) || info.LoraLoadMs > 1e9:
		return nil, nil, fmt.Errorf("lora_load_ms %v out of range", info.LoraLoadMs)
	case n+k == 0:
		return nil, nil, nil
	}
	seen := make(map[string]bool, n+k)
	conv := func(list []*messages.LoraAdapter) ([]kv.AdapterSpec, error) {
		var out []kv.AdapterSpec
		for _, a := range list {
			if a.GetName() == "" || seen[a.GetName()] {
				return nil, fmt.Errorf("LoRA adapter name %q empty or listed twice", a.GetName())
			}
			seen[a.GetName()] = true
			out = append(out, kv.AdapterSpec{Name: a.GetName(), Path: a.GetPath(), Pinned: a.GetPinned()})
		}
		return out, nil
	}
	if held, err = conv(info.Adapters); err != nil {
		return nil, nil, err
	}
	if known, err = conv(info.KnownAdapters); err != nil {
		return nil, nil, err
	}
	return held, known, nil
}
