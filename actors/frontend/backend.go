package frontend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/planner"
)

// Config configures the Backend.
type Config struct {
	// Credits is how many chunks a worker may send ahead of the consumer (default
	// flow.DefaultCredits).
	Credits int32
	// RouteTimeout bounds a Router grain call (default 5 s).
	RouteTimeout time.Duration
	// ModelsTTL is how long the model list from the Catalog grain is reused (default 500 ms).
	ModelsTTL time.Duration
	// ModelMemory is how long a model that had live workers is answered with 503 (no
	// ready worker) rather than 404 (unknown model) once it has none (default 10 min).
	ModelMemory time.Duration
	// CatalogGrace is how long after the catalog last listed a model a request for it is
	// still routed with that card when the catalog no longer lists it (default 10 s): a
	// Catalog grain that has just moved to another member lists only the workers that
	// have registered with it since, while the model's Router grain may know them all.
	// The router then answers as it knows (a worker, or 503 no live workers).
	CatalogGrace time.Duration
	// CatalogTimeout bounds a Catalog grain call while a list it gave within CatalogGrace
	// can answer instead and the catalog has not failed since (default 1 s); otherwise a
	// call waits RouteTimeout (Models).
	CatalogTimeout time.Duration
	// ModelCacheDir holds tokenizer folders fetched from workers (LoaderConfig.CacheDir;
	// default DefaultModelCacheDir()).
	ModelCacheDir string
	// FilesTimeout bounds a request for a model's tokenizer files to a worker (default
	// DefaultFilesTimeout).
	FilesTimeout time.Duration
	// MigrationLimit is flow.Config.MigrationLimit; 0 disables migration. New keeps the
	// value given (callers take flow.DefaultMigrationLimit from their flags).
	MigrationLimit int
	// StallTimeout is flow.Config.StallTimeout (default flow.DefaultStallTimeout;
	// negative: never).
	StallTimeout time.Duration
	// AcceptTimeout is flow.Config.AcceptTimeout (default flow.DefaultAcceptTimeout;
	// negative: never).
	AcceptTimeout time.Duration
	// PrefillReleaseWait is flow.Config.PrefillReleaseWait (default
	// flow.DefaultPrefillReleaseWait).
	PrefillReleaseWait time.Duration
	// Busy are the busy thresholds the Router grains start with (router.Config.Busy), as
	// BusyStatus reports them until they are changed through this frontend.
	Busy kv.BusyThresholds
	// LoraOnDemand lets a request naming a LoRA adapter go to a worker that does not hold
	// it, which loads it first (flow.Config.LoraOnDemand; --lora-on-demand).
	LoraOnDemand bool
	// LoraTimeout bounds one worker's answer to LoadLora or UnloadLora (default
	// DefaultLoraTimeout).
	LoraTimeout time.Duration
	// PlannerReports says when this frontend reports its measurements to the Planner
	// grains (planner.go; docs/reference.md §27.7); the zero value is off.
	PlannerReports PlannerReports
	// PlannerReportInterval is the period of the planner reports (default
	// DefaultPlannerReportInterval).
	PlannerReportInterval time.Duration
	// FrontendID names this frontend in its planner reports (default: "frontend-" and 8
	// random hex digits).
	FrontendID string
	Logger     zerolog.Logger

	// clock makes the streams' timers (stall, prefill release wait, termination grace;
	// see clock.go); nil: wallClock. Only the package's tests set it.
	clock clock
}

// Backend implements gateway.Backend on a cluster member.
type Backend struct {
	c atomic.Pointer[pcluster.Cluster]
	// lost is closed when c is replaced (SetCluster); lostMu orders the two.
	lostMu sync.Mutex
	lost   chan struct{}
	cfg    Config

	seq      atomic.Uint64 // makes request ids unique inside the cluster
	mu       sync.Mutex
	models   []*messages.ModelCard
	modelsAt time.Time
	seen     map[string]time.Time           // model -> last time the catalog listed it
	cards    map[string]*messages.ModelCard // model -> its card when the catalog last listed it
	listedAt time.Time                      // when the catalog last answered (modelsAt may be cleared to force a refresh)
	// catalogDown: the latest Catalog call failed, and none has answered since.
	catalogDown bool
	call        *catalogCall   // the Catalog call in flight; nil when none (Models)
	catalogGen  uint64         // bumped by SetCluster: the answer of a call started before is ignored
	calls       sync.WaitGroup // the Catalog calls in flight
	// list asks the Catalog grain for the models within timeout (listFromCatalog; the
	// package's tests replace it).
	list func(timeout time.Duration) ([]*messages.ModelCard, error)
	busy map[string]kv.BusyThresholds // model -> thresholds set through this frontend
	// loraNotes are the adapters this frontend loaded or unloaded a moment ago, listed
	// as they are now until the catalog agrees (lora.go).
	loraNotes map[loraKey]loraNote
	loader    *ModelLoader
	metrics   *metrics.Set    // the frontend's own counters (migrations, disaggregation)
	rec       *setRecorder    // records the streams' events into metrics
	plan      *plannerReports // the measurements not yet reported (nil: reports off)
}

var (
	_ gateway.Backend      = (*Backend)(nil)
	_ gateway.PlannerAdmin = (*Backend)(nil)
)

// Defaults of Config besides the flow's (flow.DefaultConfig: credits, stall timeout,
// prefill release wait, migration limit) and the model loader's (LoaderConfig).
const (
	DefaultRouteTimeout   = 5 * time.Second        // Config.RouteTimeout
	DefaultModelsTTL      = 500 * time.Millisecond // Config.ModelsTTL
	DefaultModelMemory    = 10 * time.Minute       // Config.ModelMemory
	DefaultCatalogGrace   = 10 * time.Second       // Config.CatalogGrace
	DefaultCatalogTimeout = time.Second            // Config.CatalogTimeout
)

// New returns a Backend using cluster c.
func New(c *pcluster.Cluster, cfg Config) *Backend {
	def := flow.DefaultConfig()
	if cfg.Credits <= 0 {
		cfg.Credits = def.Credits
	}
	if cfg.RouteTimeout <= 0 {
		cfg.RouteTimeout = DefaultRouteTimeout
	}
	if cfg.ModelsTTL <= 0 {
		cfg.ModelsTTL = DefaultModelsTTL
	}
	if cfg.ModelMemory <= 0 {
		cfg.ModelMemory = DefaultModelMemory
	}
	if cfg.CatalogGrace == 0 {
		cfg.CatalogGrace = DefaultCatalogGrace
	}
	if cfg.CatalogTimeout <= 0 {
		cfg.CatalogTimeout = DefaultCatalogTimeout
	}
	if cfg.PrefillReleaseWait <= 0 {
		cfg.PrefillReleaseWait = def.PrefillReleaseWait
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = def.StallTimeout
	}
	if cfg.AcceptTimeout == 0 {
		cfg.AcceptTimeout = def.AcceptTimeout
	}
	if cfg.LoraTimeout <= 0 {
		cfg.LoraTimeout = DefaultLoraTimeout
	}
	if cfg.PlannerReportInterval <= 0 {
		cfg.PlannerReportInterval = DefaultPlannerReportInterval
	}
	if cfg.FrontendID == "" {
		cfg.FrontendID = newFrontendID()
	}
	b := &Backend{cfg: cfg, seen: map[string]time.Time{}, busy: map[string]kv.BusyThresholds{}, metrics: metrics.NewSet()}
	if cfg.PlannerReports != PlannerReportsOff {
		b.plan = &plannerReports{windows: map[string]*planner.Window{}, since: time.Now(), failing: map[string]bool{}}
	}
	b.rec = &setRecorder{set: b.metrics, log: cfg.Logger}
	b.list = b.listFromCatalog
	b.c.Store(c)
	b.loader = NewModelLoader(b.actorSystem,
		LoaderConfig{CacheDir: cfg.ModelCacheDir, FilesTimeout: cfg.FilesTimeout, Logger: cfg.Logger})
	return b
}

func (b *Backend) actorSystem() *actor.ActorSystem {
	if c := b.c.Load(); c != nil {
		return c.ActorSystem
	}
	return nil
}

// ModelLoader returns the gateway's model loader (gateway.WithModelLoader): a
// ModelLoader that fetches tokenizer files from workers through the Backend's current
// member when this machine lacks them.
func (b *Backend) ModelLoader() gateway.ModelLoader { return b.loader.Load }

// SetCluster moves the Backend onto another member's cluster (a member restarted with a
// fresh id, the old one stopped). Streams started on the old member move too: their
// legs, whose chunks went to that member's receivers, count as their workers'
// termination (flow.WorkerTerminated), so the flow migrates them through the new member
// (docs/reference.md §10).
func (b *Backend) SetCluster(c *pcluster.Cluster) {
	// b.mu is held across the swap, so that Models sees the member and its catalog
	// generation change together; the catalog is asked afresh through the new member.
	b.mu.Lock()
	b.lostMu.Lock()
	b.c.Store(c)
	old := b.lost
	b.lost = make(chan struct{})
	b.lostMu.Unlock()
	b.catalogGen++
	b.catalogDown, b.call = false, nil
	b.mu.Unlock()
	if old != nil {
		close(old)
	}
}

// member is the current member's cluster and a channel closed when it is replaced.
func (b *Backend) member() (*pcluster.Cluster, <-chan struct{}) {
	b.lostMu.Lock()
	defer b.lostMu.Unlock()
	if b.lost == nil {
		b.lost = make(chan struct{})
	}
	return b.c.Load(), b.lost
}

// Models returns the cards of the models that have at least one live worker, then of the
// LoRA adapters they hold (ModelCard.lora set), from the Catalog grain (cached for
// ModelsTTL), with the adapters this frontend loaded or unloaded a moment ago as they are
// now (lora.go).
//
// One Catalog call at a time is in flight. A request that finds the list older than
// ModelsTTL starts one and waits for its answer, or, when one is already under way or the
// catalog's last call failed, is answered at once from the list the catalog gave within
// CatalogGrace. With no such list, every request waits for the call in flight (a second
// one when that call had started before the request and failed), at most RouteTimeout in
// all. A call waits CatalogTimeout when such a list can stand in and the catalog has not
// failed since, RouteTimeout otherwise.
//
// Errors: a *gateway.APIError of kind KindNoWorkers (503 with Retry-After) wrapping
// gateway.ErrNoWorkers when the catalog did not answer and no list stands in; ctx's
// error, wrapped, when ctx ends while the request waits.
func (b *Backend) Models(ctx context.Context) ([]*messages.ModelCard, error) {
	arrived := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.models != nil && arrived.Sub(b.modelsAt) < b.cfg.ModelsTTL {
		return b.withLoraNotes(b.models, arrived), nil
	}
	deadline := arrived.Add(b.cfg.RouteTimeout)
	for {
		c, joined := b.startCall(arrived)
		if (joined || b.catalogDown) && b.graceList(time.Now()) {
			return b.withLoraNotes(b.models, time.Now()), nil
		}
		_, lost := b.member() // closed when SetCluster moves to a new member (and generation)
		b.mu.Unlock()
		wait := time.NewTimer(time.Until(deadline))
		select {
		case <-c.done:
		case <-ctx.Done():
		case <-lost:
		case <-wait.C:
		}
		wait.Stop()
		b.mu.Lock()
		moved := c.gen != b.catalogGen
		now := time.Now()
		switch {
		case b.listedAt.After(arrived): // answered since the request arrived
			return b.withLoraNotes(b.models, now), nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("frontend: list models: %w", ctx.Err())
		case b.graceList(now):
			return b.withLoraNotes(b.models, now), nil
		case !now.Before(deadline) || (!moved && !c.started.Before(arrived)):
			return nil, &gateway.APIError{Kind: gateway.KindNoWorkers,
				Message: "The service's model catalog did not answer in time; retry later.",
				Cause:   fmt.Errorf("%w: frontend: list models: %w", gateway.ErrNoWorkers, cmp.Or(c.err, errCatalogLate))}
		}
	}
}

// catalogCall is one Catalog call (Models).
type catalogCall struct {
	started time.Time
	gen     uint64        // Backend.catalogGen when it started
	done    chan struct{} // closed when it has ended
	err     error         // why it failed, once done (nil for one whose member was replaced)
}

// errCatalogLate: the request's time ran out with no answer from the catalog.
var errCatalogLate = errors.New("the catalog did not answer within the route timeout")

// startCall returns the Catalog call in flight (joined) or starts one at now. The caller
// holds b.mu.
func (b *Backend) startCall(now time.Time) (c *catalogCall, joined bool) {
	if b.call != nil {
		return b.call, true
	}
	timeout := b.cfg.RouteTimeout
	if !b.catalogDown && b.graceList(now) {
		timeout = min(timeout, b.cfg.CatalogTimeout)
	}
	c = &catalogCall{started: now, gen: b.catalogGen, done: make(chan struct{})}
	b.call = c
	b.calls.Add(1)
	go b.runCall(c, timeout)
	return c, false
}

// runCall asks the catalog for c and takes its answer, unless the member it went through
// was replaced meanwhile.
func (b *Backend) runCall(c *catalogCall, timeout time.Duration) {
	defer b.calls.Done()
	list, err := b.list(timeout)
	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(c.done)
	if b.call == c {
		b.call = nil
	}
	if c.gen != b.catalogGen {
		return
	}
	c.err = err
	if err != nil {
		if !b.catalogDown {
			b.cfg.Logger.Warn().Err(err).Dur("timeout", timeout).
				Msg("the model catalog did not answer: requests use the list it gave within its grace, or wait for the next call, until it answers again")
		}
		b.catalogDown = true
		return
	}
	if b.catalogDown {
		b.cfg.Logger.Info().Msg("the model catalog answers again")
	}
	b.catalogDown = false
	if list == nil {
		list = []*messages.ModelCard{} // listed, if empty: it is cached and can stand in
	}
	b.listed(list, time.Now())
}

// listFromCatalog asks the Catalog grain for the models (Backend.list).
func (b *Backend) listFromCatalog(timeout time.Duration) ([]*messages.ModelCard, error) {
	list, err := messages.GetCatalogGrainClient(b.c.Load(), catalog.Identity).List(&messages.ListModelsRequest{},
		pcluster.WithTimeout(timeout))
	if err != nil {
		return nil, err
	}
	return list.GetModels(), nil
}

// graceList reports whether the catalog's last list is recent enough to answer for it at
// now (CatalogGrace). The caller holds b.mu.
func (b *Backend) graceList(now time.Time) bool {
	return b.models != nil && b.cfg.CatalogGrace > 0 && now.Sub(b.listedAt) < b.cfg.CatalogGrace
}

// listed takes list, the catalog's answer at now: it is cached, its base models are seen
// (Recent), and it is returned with the adapters this frontend loaded or unloaded a
// moment ago as they are now (withLoraNotes). The caller holds b.mu.
func (b *Backend) listed(list []*messages.ModelCard, now time.Time) []*messages.ModelCard {
	b.models, b.modelsAt, b.listedAt = list, now, now
	for _, m := range list {
		if m.GetLora() == nil { // an unloaded adapter is unknown at once (404), not "recent" (503)
			b.seen[m.Model] = now
			if b.cards == nil {
				b.cards = map[string]*messages.ModelCard{}
			}
			b.cards[m.Model] = m
		}
	}
	return b.withLoraNotes(list, now)
}

// Recent reports whether the catalog listed model within the last ModelMemory
// (gateway.RecentModels).
func (b *Backend) Recent(model string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	last, ok := b.seen[model]
	return ok && time.Since(last) < b.cfg.ModelMemory
}

// RecentCard returns the card of model when the catalog listed it within the last
// CatalogGrace but does not now, else nil (gateway.RecentCards): such a request is still
// routed, and its Router grain decides.
func (b *Backend) RecentCard(model string) *messages.ModelCard {
	b.mu.Lock()
	defer b.mu.Unlock()
	last, ok := b.seen[model]
	if !ok || b.cfg.CatalogGrace < 0 || time.Since(last) >= b.cfg.CatalogGrace {
		return nil
	}
	return b.cards[model]
}

// Generate routes req with the model's Router grain and starts it on the chosen worker.
// The returned stream migrates the request to another worker on migratable faults
// (Config.MigrationLimit). A request every worker is busy for waits in req.Parking, the
// gateway's busy queue, when it has one (the flow's Park). Errors: gateway.ErrUnknownModel
// or ErrNoWorkers (wrapped) when the catalog has no live worker of the model, a failed
// Catalog call (Models), the router's refusal as gateway.RouteError maps it (a failed
// Route call included), the queue's (gateway.ErrAllBusy wrapped, gateway.ErrDraining),
// ctx.Err() when ctx ends while the request waits.
func (b *Backend) Generate(ctx context.Context, req *gateway.GenerateRequest) (gateway.Stream, error) {
	models, err := b.Models(ctx)
	if err != nil {
		return nil, err
	}
	known, blockSize := false, 0
	for _, m := range models {
		if m.Model == req.Model && m.GetLora() == nil { // an adapter runs on its base model
			known, blockSize = true, int(m.GetKvBlockSize())
		}
	}
	if !known {
		if c := b.RecentCard(req.Model); c != nil {
			known, blockSize = true, int(c.GetKvBlockSize())
		}
	}
	if !known {
		if b.Recent(req.Model) {
			// A model served a moment ago whose engines are all down (restarting) is
			// unavailable, not unknown: 503, which clients retry, rather than 404.
			return nil, fmt.Errorf("%w: %q has no ready worker right now", gateway.ErrNoWorkers, req.Model)
		}
		return nil, fmt.Errorf("%w: %q", gateway.ErrUnknownModel, req.Model)
	}
	c, lost := b.member()
	g := &grainRouting{
		c: messages.GetRouterGrainClient(c, req.Model), root: c.ActorSystem.Root, timeout: b.cfg.RouteTimeout, log: b.cfg.Logger,
		blockSize: blockSize,
	}
	s := newStream(c.ActorSystem.Root, g, b.cfg, req, b.nextID, b.rec)
	s.blockSize = blockSize // predicted prefix hits (hits.go)
	s.lost = lost
	s.moveTo = func() (*actor.RootContext, <-chan struct{}) {
		c, lost := b.member()
		g.c, g.root = messages.GetRouterGrainClient(c, req.Model), c.ActorSystem.Root
		return c.ActorSystem.Root, lost
	}
	if err := s.startIn(ctx, req.TokenIDs, req.Sampling); err != nil {
		return nil, err
	}
	return s, nil
}

// nextID makes a request id unique inside the cluster from the client's: clients may
// reuse X-Request-Id, and the router's load tracking and the worker's in-flight table are
// keyed by it; every attempt of a migrated request gets its own.
func (b *Backend) nextID(clientID string) string {
	return fmt.Sprintf("%s#%d", clientID, b.seq.Add(1))
}

// grainRouting is the routing of one model through its Router grain.
type grainRouting struct {
	c       *messages.RouterGrainClient
	root    *actor.RootContext
	timeout time.Duration
	log     zerolog.Logger
	// blockSize is the model's KV block size from its card (0: unknown): with it, routes
	// carry the prompt's block hashes instead of its tokens (hashPrompt).
	blockSize int
	// clock: the wall clock unless set (a test's fake clock).
	clock router.Clock
}

// Route asks the Router grain for a worker, waiting at most the route timeout in all,
// and again while the grain is in its registration window (router.Call). A call that
// fails may still have been recorded by the grain (it answered too late): the caller
// frees the request id either way.
//
// With the model's block size known, the route carries the prompt's block hashes and
// length instead of its token ids (hashPrompt); once answered, rr gets its token ids
// back, keeping the hashes (after a failed call the grain may still be reading rr, which
// is then left as sent). A grain that refuses the hashes (ROUTE_BAD_REQUEST: a router
// whose block size is not the card's, or one older than block hashes) is asked again
// with the token ids, and the refusal is logged once per process.
func (g *grainRouting) Route(rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	clock := g.clock
	if clock.Now == nil {
		clock = router.RealClock
	}
	deadline := clock.Now().Add(g.timeout) // both calls below within one route timeout
	call := func() (*messages.RouteResponse, error) {
		return router.Call(context.Background(), g.c, rr, deadline, clock)
	}
	tokens, hashed := hashPrompt(rr, g.blockSize)
	resp, err := call()
	if !hashed || err != nil {
		return resp, err
	}
	rr.TokenIds = tokens
	if resp.GetOutcome() != messages.RouteOutcome_ROUTE_BAD_REQUEST {
		return resp, err
	}
	if !hashesRefused.Swap(true) {
		g.log.Warn().Str("error", resp.GetError()).Int("block_size", g.blockSize).
			Msg("the router refused a prompt's block hashes: routing with token ids (logged once)")
	}
	rr.BlockHashes, rr.PromptTokens = nil, nil
	return call()
}

// Started sends RouteAck for requestID to router, the grain activation that answered its
// route: a message, not a grain call, since nothing is answered and one more future per
// request would load the busy router and this member for nothing. Messages from one
// member to one actor arrive in the order sent, so the acknowledgement, like a Free sent
// after it, comes after the Route call it acknowledges. A route without the grain's
// address (a router that does not expire unacknowledged requests) needs none.
func (g *grainRouting) Started(requestID string, r *messages.ActorRef) {
	if r != nil && g.root != nil {
		g.root.Send(actor.NewPID(r.Address, r.Id), &messages.RouteAck{RequestId: requestID})
	}
}

// PrefillDone tells the router the prompt is computed (its tokens stop counting as
// prefill load); fire and forget.
func (g *grainRouting) PrefillDone(id string) {
	c := g.c // the stream may move g to another member meanwhile
	go func() {
		_, _ = c.PrefillDone(&messages.RequestRef{RequestId: id}, pcluster.WithTimeout(g.timeout))
	}()
}

// Free ends the router's load tracking of id; fire and forget (the router expires
// requests it never hears about: unacknowledged ones after kv.DefaultMaxUnackedAge, any
// after kv.DefaultMaxSequenceAge).
func (g *grainRouting) Free(id string) {
	c := g.c // the stream may move g to another member meanwhile
	go func() {
		if _, err := c.Free(&messages.RequestRef{RequestId: id}, pcluster.WithTimeout(g.timeout)); err != nil {
			g.log.Warn().Err(err).Str("request_id", id).Msg("router free failed; the router expires it later")
		}
	}()
}

func (b *Backend) router(model string) *messages.RouterGrainClient {
	return messages.GetRouterGrainClient(b.c.Load(), model)
}
