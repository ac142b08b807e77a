package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// CatalogClient is the part of the Catalog grain a worker talks to.
type CatalogClient interface {
	Announce(*messages.AnnounceModel) (*messages.Ack, error)
}

// Config configures one worker actor.
type Config struct {
	WorkerID string
	// Card is the model deployment card the worker publishes; its KV block size and
	// limits are the ones the engine is started with.
	Card *messages.ModelCard
	// Launcher starts the engine. The engines.Engine its Connect returns is closed when
	// that engine process ends, and the launcher when the worker stops, when they
	// implement io.Closer.
	Launcher engines.Launcher
	// CheckTokenizer makes Props load the card's tokenizer (a local folder or a builtin)
	// and refuse a model whose tokenizer does not load (checkTokenizer).
	CheckTokenizer bool
	// Env is extra environment (KEY=VALUE) for the engine process, after the launcher's
	// own, so that a key set in both takes this value (e.g. node.CUDAEnv: the GPUs the
	// engine may use).
	Env []string
	// Host the engine listens on (default 127.0.0.1).
	Host string
	// Port is the engine's HTTP port; 0: a free one, chosen at each start.
	Port int
	// AdvertiseHost is the host other machines reach the engine at: with the engine's
	// port it makes WorkerInfo.engine_url ("http://<host>:<port>", docs/metrics.md).
	// "" takes Host; set it when Host is a wildcard (0.0.0.0, ::).
	AdvertiseHost string
	// NodeID is the node agent that runs the worker (turbine node --node-id), sent with
	// every registration (WorkerInfo.node_id): the node's KV block manager serves its
	// engine (docs/reference.md §9). "": the worker runs on its own.
	NodeID string
	// Role in disaggregated serving, sent with every registration (WorkerInfo.role):
	// "aggregated" (or ""), "prefill" or "decode" (kv.ParseRole). The engine itself must
	// be started for that role (its launcher's flags).
	Role string
	// BootstrapHost and BootstrapPort: the SGLang bootstrap address a prefill worker
	// advertises (WorkerInfo.bootstrap_host/port; port 0-65535, 0 = none). Both legs of
	// a request it prefills are given it. Left empty (host "" and port 0), the worker
	// advertises the address of its Launcher when that is an engines.Bootstrapper
	// (SGLang, the mock engine in SGLang's dialect), read after each Command: the port
	// may be chosen anew at each start of the engine.
	BootstrapHost string
	BootstrapPort int
	// Heartbeat is the load/registration period (default 1 s).
	Heartbeat time.Duration
	// ReadyTimeout bounds how long a starting engine may take to answer /health
	// (default 120 s; real engines loading weights need minutes: raise it).
	ReadyTimeout time.Duration
	// StopGrace is how long a stopping engine gets between SIGTERM and SIGKILL (default 5 s).
	StopGrace time.Duration
	// CanaryInterval: an engine idle this long gets a one-token canary request; a failed
	// canary takes the worker out of routing until one passes (docs/reference.md §10). 0: off.
	CanaryInterval time.Duration
	// CanaryTimeout bounds a canary request (default 3 s).
	CanaryTimeout time.Duration
	// MaxLoras is how many LoRA adapters the worker holds at once (docs/reference.md
	// §26.2); its engine must be started for as many (launcher.Spec.MaxLoras). 0:
	// adapters off (LoadLora answers LORA_NO_SLOT).
	MaxLoras int
	// MaxLoraRank is the largest adapter rank the engine takes (default
	// DefaultMaxLoraRank, vLLM's); a folder of a larger rank is refused before the
	// engine sees it.
	MaxLoraRank int
	// Loras are adapters (name and path) loaded and pinned once the engine is ready, and
	// again into every restarted engine, before the worker reports ready (--lora). Props
	// checks their folders: at most MaxLoras of them.
	Loras []*messages.LoraAdapter
	// ModelPath is what the engine loads (a model folder or a hub id), against which an
	// adapter's base_model_name_or_path is checked with the served name; "" takes the
	// card's tokenizer when that is a folder (BaseModelOf).
	ModelPath string
	// LoraLoadTimeout bounds one adapter load or unload call to the engine (default
	// DefaultLoraLoadTimeout).
	LoraLoadTimeout time.Duration
	// LoraWaitTimeout bounds how long a request waits for its adapter's load on demand
	// (default DefaultLoraWaitTimeout); past it the request fails as one another worker
	// may serve (FAULT_ENGINE_ERROR).
	LoraWaitTimeout time.Duration
	// LoraUnloadGrace is how long an unload lets the requests using the adapter run
	// (default DefaultLoraUnloadGrace); the rest are then handed back for migration.
	LoraUnloadGrace time.Duration
	// PinnedReleaseGrace is how long after a finished prefill leg's receiver became
	// unreachable the worker releases the blocks its engine pinned for the leg (default
	// DefaultPinnedReleaseGrace; docs/reference.md §18, "Releasing pinned blocks").
	PinnedReleaseGrace time.Duration
	// LoraCheckTimeout bounds an adapter folder's check (default
	// DefaultLoraCheckTimeout); past it the load fails as LORA_ENGINE and the name is
	// free again (docs/reference.md §26.2).
	LoraCheckTimeout time.Duration
	// Now is the clock of the canary schedule (default time.Now).
	Now func() time.Time
	// RequestEnded, when not nil, is called on the worker actor's goroutine once it has
	// handled a request's end (request id; its adapter use released, its blocks pinned
	// for a decode leg): an observer, for tests.
	RequestEnded func(id string)
	// Parking, when open as the worker stops, takes its ready engine instead of the
	// worker stopping it (park.go); nil: engines always stop with their worker.
	Parking *Parking
	// Adopt is an engine parked by the previous worker with this id (Parking.Take): the
	// worker serves it instead of starting one, or starts one when it has exited.
	Adopt   *Parked
	Backoff supervise.Backoff
	Router  RouterClient
	Catalog CatalogClient
	Logger  zerolog.Logger

	loraBase model.BaseModel // what adapters are checked against (BaseModelOf), set by Props
	// checkAdapter checks an adapter folder (default CheckAdapter; tests replace it).
	checkAdapter func(path string, base model.BaseModel, maxRank int) (model.Adapter, error)
}

func (c *Config) defaults() {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.CanaryTimeout <= 0 {
		c.CanaryTimeout = DefaultCanaryTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxLoraRank == 0 {
		c.MaxLoraRank = DefaultMaxLoraRank
	}
	if c.LoraLoadTimeout <= 0 {
		c.LoraLoadTimeout = DefaultLoraLoadTimeout
	}
	if c.LoraWaitTimeout <= 0 {
		c.LoraWaitTimeout = DefaultLoraWaitTimeout
	}
	if c.LoraUnloadGrace <= 0 {
		c.LoraUnloadGrace = DefaultLoraUnloadGrace
	}
	if c.PinnedReleaseGrace <= 0 {
		c.PinnedReleaseGrace = DefaultPinnedReleaseGrace
	}
	if c.LoraCheckTimeout <= 0 {
		c.LoraCheckTimeout = DefaultLoraCheckTimeout
	}
	if c.checkAdapter == nil {
		c.checkAdapter = CheckAdapter
	}
}

// Props returns the props of a worker actor. Errors: a config without id, card, launcher
// or router, an unknown Role (kv.ErrInvalidRole), a BootstrapPort out of range, negative
// adapter limits, more Loras than MaxLoras or one whose folder fails CheckAdapter (or a
// model folder whose config.json does not read, with MaxLoras set), with
// CheckTokenizer a card whose tokenizer (a local folder or a builtin) does not load: the model is refused, the
// reason logged and counted (checkTokenizer).
func Props(cfg Config) (*actor.Props, error) {
	cfg.defaults()
	switch {
	case cfg.WorkerID == "":
		return nil, errors.New("worker: empty worker id")
	case cfg.Card == nil || cfg.Card.Model == "":
		return nil, errors.New("worker: missing model card")
	case cfg.Launcher == nil:
		return nil, errors.New("worker: missing engine launcher")
	case cfg.Router == nil:
		return nil, errors.New("worker: missing router client")
	case cfg.BootstrapPort < 0 || cfg.BootstrapPort > 65535:
		return nil, fmt.Errorf("worker: bootstrap port %d out of range 0-65535", cfg.BootstrapPort)
	}
	role, err := kv.ParseRole(cfg.Role)
	if err != nil {
		return nil, fmt.Errorf("worker: role: %w", err)
	}
	cfg.Role = role.Label()
	if cfg.MaxLoras > 0 {
		if cfg.loraBase, err = BaseModelOf(cfg.Card, cfg.ModelPath); err != nil {
			return nil, fmt.Errorf("worker: LoRA adapters: %w", err)
		}
	}
	if err := checkLoras(&cfg); err != nil {
		return nil, err
	}
	if cfg.CheckTokenizer {
		if err := checkTokenizer(cfg.Card); err != nil {
			cfg.Logger.Error().Str("worker", cfg.WorkerID).Str("model", cfg.Card.Model).Err(err).Msg("model refused")
			return nil, err
		}
	}
	return actor.PropsFromProducer(func() actor.Actor { return newActor(cfg) }), nil
}

// ActorName is the name a worker actor is spawned under on its member.
func ActorName(workerID string) string { return "worker/" + workerID }

type (
	// engineReady: the engine of epoch answered its health check; adopted: it was
	// parked ready, its LoRA adapters loaded.
	engineReady struct {
		epoch   uint64
		adopted bool
	}
	engineFailed struct {
		epoch uint64
		err   error
	}
	engineExited struct {
		epoch uint64
		err   error
		ran   time.Duration
	}
	restartEngine struct{}
	heartbeatTick struct{}
	heartbeatDone struct{ scraped, ok bool }
	// membersChanged: a member joined or left the cluster, so the Router grain may have
	// moved to a new activation that has not heard from this worker.
	membersChanged struct{}
	// requestDone: a request's goroutine ended; kvParams are the transfer parameters of
	// the last chunk it sent for a prefill leg ("" for other requests, or none sent).
	requestDone struct {
		id       string
		kvParams string
	}
	canaryDone struct {
		epoch uint64
		err   error
	}
	drainExpired struct{}
)

// pinnedLeg is a prefill leg that finished and handed its transfer parameters to
// replyTo: its engine keeps the prompt's blocks for a decode leg to read (docs/reference.md
// §18, "Releasing pinned blocks").
type pinnedLeg struct {
	replyTo  *actor.PID
	kvParams string
	at       time.Time // Config.Now at the leg's end, or at its receiver's stop once stopped
	stopped  bool      // the receiver stopped: its request ended at the gateway
	lostAt   time.Time // Config.Now when the receiver's address terminated; zero while not
}

type inflight struct {
	cancel  context.CancelCauseFunc
	credits chan int32
	replyTo *actor.PID
	// gone: the watch on replyTo ended (receiverGone), with why.
	gone    bool
	goneWhy actor.TerminatedReason
	// lora and loraGen: the adapter the request uses and its entry's generation
	// (loraTable.use); "" for the base model.
	lora    string
	loraGen uint64
	// kvParams: a prefill leg's transfer parameters, set by its goroutine as it sends
	// the last chunk (its requestDone may come after the worker parks its engine).
	kvParams atomic.Pointer[string]
}

type workerActor struct {
	cfg Config
	log zerolog.Logger
	// progress is when the engine last produced a chunk, in ns since born (the monotonic
	// clock: a step of the wall clock neither fakes nor hides a stall), written by the
	// request goroutines: unanswered scrapes alone (a busy engine on a starved machine)
	// do not make an engine frozen while its streams still move.
	progress atomic.Int64
	born     time.Time
	relay    *relay
	// relayStop ends the relay (it outlives the actor when its engine is parked).
	relayStop context.CancelFunc
	ctx       context.Context // lives as long as the actor
	cancel    context.CancelFunc

	epoch         uint64
	proc          *supervise.Process
	engine        engines.Engine
	engineStop    context.CancelFunc // ends the engine's KV subscription and readiness wait
	engCtx        context.Context    // ended by engineStop
	ready         bool
	stopping      bool
	draining      bool
	drainDone     []chan struct{} // closed when the last request of a draining worker ends
	drainDeadline time.Time       // when a draining worker ends the requests left (wall clock)
	hbBusy        bool
	hbAgain       bool // a state change came while a heartbeat was in flight: send one more
	failedScrapes int  // consecutive load scrapes the engine did not answer
	backoff       supervise.Backoff
	requests      map[string]*inflight
	// pinned: finished prefill legs whose blocks a decode leg may still read, by request
	// id (receiverGone, sweepPinned).
	pinned map[string]pinnedLeg
	// bootstrapHost and bootstrapPort: the advertised bootstrap address (Config's, else
	// the launcher's for the running engine; "" and 0 for none).
	bootstrapHost string
	bootstrapPort int
	self          *actor.PID
	sys           *actor.ActorSystem
	members       *eventstream.Subscription // membership changes (membersChanged)
	canary        canary
	canaries      int // canary requests sent, for their ids

	// engineURL is the advertised base URL of the engine process last started
	// (WorkerInfo.engine_url): set at each start, before the engine is ready, and kept
	// after it exits until the next start ("" before the first).
	engineURL string

	// LoRA adapters (loraops.go): the slot table, the loads and unloads under way by
	// adapter name, and the engine's measured loads (their count and total time).
	loras         *loraTable
	loraLoads     map[string]*loraLoad
	loraUnloads   map[string]*loraUnload
	loraLoadCount int
	loraLoadTotal time.Duration
	// loraSeq numbers the adapter changes registered at once (registerNow): a heartbeat
	// made before one must not register the adapters it saw (relay).
	loraSeq uint64
}

func newActor(cfg Config) *workerActor {
	log := cfg.Logger.With().Str("worker", cfg.WorkerID).Logger()
	w := &workerActor{cfg: cfg, log: log, born: time.Now(), backoff: cfg.Backoff, requests: map[string]*inflight{}, pinned: map[string]pinnedLeg{},
		canary: canary{interval: cfg.CanaryInterval}, bootstrapHost: cfg.BootstrapHost, bootstrapPort: cfg.BootstrapPort,
		loras: newLoraTable(cfg.MaxLoras), loraLoads: map[string]*loraLoad{}, loraUnloads: map[string]*loraUnload{}}
	for _, a := range cfg.Loras { // checked and completed by Props (checkLoras)
		w.loras.pin(a)
	}
	return w
}

func (w *workerActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		w.self, w.sys = c.Self(), c.ActorSystem()
		if w.cfg.MaxLoras > 0 {
			w.loraMetricsAtZero()
		}
		w.ctx, w.cancel = context.WithCancel(context.Background())
		if !w.adopt(c, w.cfg.Adopt) {
			// Epochs must increase across restarts of this actor (and of its process)
			// too, so they start from the clock rather than from zero.
			w.epoch = uint64(time.Now().UnixNano())
			var relayCtx context.Context
			relayCtx, w.relayStop = context.WithCancel(context.Background())
			w.relay = newRelay(w.cfg.WorkerID, w.cfg.Router, w.log)
			go w.relay.run(relayCtx)
			w.startEngine(c)
		}
		w.watchMembers()
		w.tick(c)
	case *messages.Generate:
		w.generate(c, m)
	case *messages.Embed:
		w.embed(c, m)
	case *messages.Credit:
		if r := w.requests[m.RequestId]; r != nil {
			select {
			case r.credits <- m.Credits:
			default: // the channel holds plenty; a full one means the stream is ending
			}
		}
	case *messages.Cancel:
		if r := w.requests[m.RequestId]; r != nil {
			r.cancel(nil)
		}
	case *messages.ReleaseKv:
		if p, ok := w.pinned[m.RequestId]; ok {
			// A gateway that never got the leg's last chunk sends no parameters: the
			// worker's own copy names the blocks.
			if m.KvTransferParams == "" {
				m = &messages.ReleaseKv{RequestId: m.RequestId, KvTransferParams: p.kvParams}
			}
			delete(w.pinned, m.RequestId)
		}
		w.releaseKV(m)
	case *messages.ModelFilesRequest:
		w.modelFiles(c, m)
	case *messages.DumpBlocksRequest:
		w.relay.in <- relayDump{}
	case *messages.LoadLora:
		w.loadLora(c, m)
	case *messages.UnloadLora:
		w.unloadLora(c, m)
	case loraChecked:
		w.onLoraChecked(c, m)
	case loraLoaded:
		w.onLoraLoaded(m)
	case loraUnloaded:
		w.onLoraUnloaded(m)
	case loraUnloadExpired:
		w.onLoraUnloadExpired(m)
	case loraRestored:
		w.onLoraRestored(c, m)
	case *actor.Terminated:
		for _, r := range w.requests {
			if r.replyTo.Equal(m.Who) {
				r.cancel(nil)
				if !r.gone || m.Why == actor.TerminatedReason_AddressTerminated {
					r.gone, r.goneWhy = true, m.Why
				}
			}
		}
		w.receiverGone(m)
	case requestDone:
		if r := w.requests[m.id]; r != nil {
			r.cancel(nil)
			delete(w.requests, m.id)
			if m.kvParams != "" {
				w.log.Debug().Str("request_id", m.id).Msg("prefill leg finished: its blocks pinned for the decode leg")
				w.pinned[m.id] = pinnedLeg{replyTo: r.replyTo, kvParams: m.kvParams, at: w.cfg.Now()}
				if r.gone { // its receiver's end came first
					w.receiverGone(&actor.Terminated{Who: r.replyTo, Why: r.goneWhy})
				}
			}
			if r.lora != "" {
				w.releaseLora(c, r.lora, r.loraGen)
			}
			w.canary.touch(w.cfg.Now())
			w.drained()
			if f := w.cfg.RequestEnded; f != nil {
				f(m.id)
			}
		}
	case *Drain:
		w.drain(c, m)
	case drainExpired:
		w.abortDraining()
	case canaryDone:
		w.onCanary(c, m)
	case engineReady:
		// A started engine is given the pinned LoRA adapters first (loraRestored); an
		// adopted one has them.
		if m.epoch == w.epoch && (m.adopted || !w.restoreLoras(c, m.epoch)) {
			w.engineUp(c, m.epoch)
		}
	case engineFailed:
		if m.epoch == w.epoch && w.proc != nil {
			w.log.Error().Err(m.err).Msg("engine did not become ready; stopping it")
			go w.proc.Stop(w.cfg.StopGrace)
		}
	case engineExited:
		w.onEngineExited(c, m)
	case restartEngine:
		if !w.stopping && !w.draining {
			w.startEngine(c)
		}
	case heartbeatTick:
		w.sweepPinned()
		w.heartbeat(c)
		w.startCanary(c)
		w.tick(c)
	case membersChanged:
		w.relay.reregister()
	case heartbeatDone:
		w.hbBusy = false
		w.onScrape(m)
		if w.hbAgain {
			w.hbAgain = false
			w.heartbeat(c)
		}
	case *actor.Stopping:
		w.sys.EventStream.Unsubscribe(w.members)
		w.stop()
	}
}

// watchMembers registers with the Router grain at once, with the latest heartbeat's
// info and load (no scrape of the engine), whenever a member joins or leaves the
// cluster. A grain whose member left is activated again elsewhere, empty; it learns of
// this worker, and asks for its block list, with this registration rather than at the
// next heartbeat (docs/reference.md §10, "The Router grain moves"). A change that moved
// nothing costs one extra registration; changes faster than registrations coalesce.
func (w *workerActor) watchMembers() {
	self, sys := w.self, w.sys
	w.members = sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pcluster.ClusterTopology); ok && (len(t.Joined) > 0 || len(t.Left) > 0) {
			sys.Root.Send(self, membersChanged{})
		}
	})
}

// engineUp reports the engine of epoch ready: routers may send it requests.
func (w *workerActor) engineUp(c actor.Context, epoch uint64) {
	w.ready, w.failedScrapes = true, 0
	w.canary.reset(w.cfg.Now())
	w.log.Info().Uint64("epoch", epoch).Msg("engine ready")
	w.heartbeatNow(c)
}

func (w *workerActor) tick(c actor.Context) {
	self, sys := c.Self(), c.ActorSystem()
	time.AfterFunc(w.cfg.Heartbeat, func() { sys.Root.Send(self, heartbeatTick{}) })
}

func (w *workerActor) startEngine(c actor.Context) {
	w.epoch++
	epoch := w.epoch
	self, sys := c.Self(), c.ActorSystem()
	port, err := w.cfg.Port, error(nil)
	if port == 0 {
		port, err = supervise.FreePort(w.cfg.Host)
	}
	if err == nil {
		var kvPort int
		if kvPort, err = supervise.FreePort(w.cfg.Host); err == nil {
			err = w.launch(c, epoch, port, fmt.Sprintf("tcp://%s:%d", w.cfg.Host, kvPort))
		}
	}
	if err != nil {
		delay := w.backoff.Next(0)
		w.log.Error().Err(err).Dur("restart_in", delay).Int("restarts", w.backoff.Restarts()).Msg("engine start failed")
		time.AfterFunc(delay, func() { sys.Root.Send(self, restartEngine{}) })
	}
}

func (w *workerActor) launch(c actor.Context, epoch uint64, port int, kvEndpoint string) error {
	argv, env := w.cfg.Launcher.Command(w.cfg.Host, port, kvEndpoint)
	env = append(slices.Clip(env), w.cfg.Env...)
	log := w.log.With().Uint64("epoch", epoch).Logger()
	w.bootstrap(log)
	proc, err := supervise.Start(argv, env, func(stream, line string) {
		log.Info().Str("stream", stream).Msg(line)
	})
	if err != nil {
		return err
	}
	w.engineURL = engineURL(w.cfg.AdvertiseHost, w.cfg.Host, port)
	log.Info().Int("pid", proc.Pid()).Int("port", port).Str("kv_events", kvEndpoint).Str("engine_url", w.engineURL).Msg("engine started")
	engine := w.cfg.Launcher.Connect(fmt.Sprintf("http://%s:%d", w.cfg.Host, port))
	// The engine's context is not the actor's: a parked engine outlives its worker.
	engCtx, engStop := context.WithCancel(context.Background())
	// The relay forgets the old engine's blocks before any event of the new one arrives.
	rel, launcher := w.relay, w.cfg.Launcher
	rel.in <- relayEpoch{epoch: epoch}
	go func() {
		for engCtx.Err() == nil {
			err := launcher.SubscribeKVEvents(engCtx, kvEndpoint, func(b kv.Batch) { rel.in <- relayBatch{batch: b} })
			if engCtx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("KV event subscription ended; resubscribing")
			select {
			case <-engCtx.Done():
			case <-time.After(resubscribeWait):
			}
		}
	}()
	w.awaitReady(c, epoch, proc, engine, engCtx, false)
	w.proc, w.engine, w.engineStop, w.engCtx = proc, engine, engStop, engCtx
	return nil
}

// awaitReady polls the engine of epoch until it answers its health check
// (engineReady), fails to within Config.ReadyTimeout (engineFailed; adopted, a parked
// engine that was ready: adoptReadyTimeout at most), or its process exits
// (engineExited), which it also reports while the actor lives.
func (w *workerActor) awaitReady(c actor.Context, epoch uint64, proc *supervise.Process, engine engines.Engine,
	engCtx context.Context, adopted bool) {
	self, sys, actx := c.Self(), c.ActorSystem(), w.ctx
	limit := w.cfg.ReadyTimeout
	if adopted {
		limit = min(limit, adoptReadyTimeout)
	}
	go func() {
		deadline := time.Now().Add(limit)
		for {
			hctx, cancel := context.WithTimeout(engCtx, healthTimeout)
			err := engine.Health(hctx)
			cancel()
			if err == nil {
				sys.Root.Send(self, engineReady{epoch: epoch, adopted: adopted})
				return
			}
			if engCtx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				sys.Root.Send(self, engineFailed{epoch: epoch, err: fmt.Errorf("no healthy answer within %v: %w", limit, err)})
				return
			}
			select {
			case <-engCtx.Done():
				return
			case <-proc.Done():
				return
			case <-time.After(healthPoll):
			}
		}
	}()
	go func() {
		select {
		case <-proc.Done():
			sys.Root.Send(self, engineExited{epoch: epoch, err: proc.Err(), ran: time.Since(proc.Started())})
		case <-actx.Done(): // the actor stopped: it stopped the engine, or parked it
		}
	}()
}

// bootstrap settles the bootstrap address to advertise for the engine the latest
// Command describes: Config's when set, else the launcher's (engines.Bootstrapper).
func (w *workerActor) bootstrap(log zerolog.Logger) {
	if w.cfg.BootstrapHost != "" || w.cfg.BootstrapPort != 0 {
		return
	}
	b, ok := w.cfg.Launcher.(engines.Bootstrapper)
	if !ok {
		return
	}
	host, port, ok := b.Bootstrap()
	switch {
	case !ok:
		host, port = "", 0
	case host == "" || port < 1 || port > 65535:
		log.Warn().Str("host", host).Int("port", port).Msg("the engine launcher names an invalid bootstrap address: none advertised")
		host, port = "", 0
	default:
		log.Info().Str("bootstrap", net.JoinHostPort(host, strconv.Itoa(port))).Msg("engine bootstrap address advertised")
	}
	w.bootstrapHost, w.bootstrapPort = host, port
}

func (w *workerActor) onEngineExited(c actor.Context, m engineExited) {
	if m.epoch != w.epoch {
		return
	}
	w.ready = false
	clear(w.pinned) // the engine's pinned blocks ended with it
	if w.engineStop != nil {
		w.engineStop()
	}
	w.closeEngine()
	w.loraEngineLost()
	if w.stopping || w.draining {
		return
	}
	// The engine's KV cache died with it: a new epoch makes the router drop its blocks,
	// and the heartbeat tells it at once that this worker takes no requests.
	w.epoch++
	w.relay.in <- relayEpoch{epoch: w.epoch}
	w.heartbeatNow(c)
	delay := w.backoff.Next(m.ran)
	w.log.Warn().Err(m.err).Dur("ran", m.ran).Dur("restart_in", delay).Int("restarts", w.backoff.Restarts()).Msg("engine exited")
	self, sys := c.Self(), c.ActorSystem()
	time.AfterFunc(delay, func() { sys.Root.Send(self, restartEngine{}) })
}

// closeEngine releases the client of an engine process that has ended (a trtllm client
// runs a stats collector until closed); requests still streaming on it fail.
func (w *workerActor) closeEngine() {
	if c, ok := w.engine.(io.Closer); ok {
		if err := c.Close(); err != nil {
			w.log.Debug().Err(err).Msg("engine client close failed")
		}
	}
	w.engine = nil
}

func (w *workerActor) info() *messages.WorkerInfo {
	return &messages.WorkerInfo{
		WorkerId:      w.cfg.WorkerID,
		Actor:         &messages.ActorRef{Address: w.self.Address, Id: w.self.Id},
		Card:          w.cfg.Card,
		Ready:         w.ready && w.failedScrapes < maxFailedScrapes && w.canary.healthy() && !w.draining,
		EngineEpoch:   w.epoch,
		Role:          w.role(),
		BootstrapHost: w.bootstrapHost,
		BootstrapPort: int32(w.bootstrapPort),
		NoKvEvents:    !publishesKVEvents(w.cfg.Launcher),
		Adapters:      w.loras.held(),
		MaxLoras:      int32(w.maxLoras()),
		MaxLoraRank:   int32(w.cfg.MaxLoraRank),
		LoraLoadMs:    w.loraLoadMs(),
		KnownAdapters: w.loras.knownList(),
		NodeId:        w.cfg.NodeID,
		EngineUrl:     w.engineURL,
		// generate acknowledges every Generate it takes (GenerateAccepted).
		AcknowledgesGenerate: true,
	}
}

// engineURL is the base URL other machines reach an engine listening on host:port at:
// advertise's host when set, else host's.
func engineURL(advertise, host string, port int) string {
	if advertise == "" {
		advertise = host
	}
	return "http://" + net.JoinHostPort(advertise, strconv.Itoa(port))
}

// publishesKVEvents reports whether the engines l starts publish KV events: unless l
// says otherwise (engines.KVEventSource), they do.
func publishesKVEvents(l engines.Launcher) bool {
	if s, ok := l.(engines.KVEventSource); ok {
		return s.KVEvents()
	}
	return true
}

// maxFailedScrapes is how many load scrapes in a row an engine may leave unanswered
// before its worker leaves routing (a hung or frozen engine still holds its port).
const maxFailedScrapes = 3

// onScrape counts unanswered load scrapes and logs when the engine leaves or rejoins
// routing because of them.
func (w *workerActor) onScrape(m heartbeatDone) {
	if !m.scraped {
		return
	}
	if m.ok {
		switch {
		case w.failedScrapes < maxFailedScrapes:
		case w.canary.healthy():
			w.log.Info().Msg("engine answers again: back in routing")
		default:
			w.log.Info().Msg("engine answers load scrapes again; out of routing until a canary passes")
		}
		w.failedScrapes = 0
		return
	}
	w.failedScrapes++
	if w.failedScrapes == maxFailedScrapes {
		w.log.Warn().Int("unanswered_scrapes", w.failedScrapes).Msg("engine does not answer: out of routing until it does")
	}
	// Frozen, not merely slow: no scrape answered and no stream moved for a while. Its
	// requests go back to their gateways (migratable) rather than wait on a stopped process.
	stalled := time.Since(w.born) - time.Duration(w.progress.Load())
	if w.failedScrapes >= maxFailedScrapes && len(w.requests) > 0 && stalled >= w.frozenAfter() {
		w.log.Warn().Int("in_flight", len(w.requests)).Dur("no_progress_for", stalled.Round(time.Millisecond)).
			Msg("engine frozen: its requests handed back for migration")
		for _, r := range w.requests {
			r.cancel(errEngineFrozen)
		}
	}
}

// noteProgress records that the engine produced something now (progress).
func (w *workerActor) noteProgress() { w.progress.Store(int64(time.Since(w.born))) }

// frozenAfter is how long an engine that answers no scrape must also produce no chunk
// before its requests are handed back: maxFailedScrapes heartbeats, at least 5 s.
func (w *workerActor) frozenAfter() time.Duration {
	return max(time.Duration(maxFailedScrapes)*w.cfg.Heartbeat, minFrozenAfter)
}

// heartbeatNow sends a heartbeat for a change of the worker's state (engine ready or
// exited, canary result): if one is in flight, with what was true when it started, another
// follows as soon as it ends, so that the router learns of the change at once rather than
// at the next tick.
func (w *workerActor) heartbeatNow(c actor.Context) {
	if w.hbBusy {
		w.hbAgain = true
		return
	}
	w.heartbeat(c)
}

// heartbeat scrapes the engine's load and registers with the Router grain and the
// Catalog, off the actor's goroutine; at most one runs at a time (a tick that finds one
// in flight is skipped). An engine that leaves maxFailedScrapes scrapes in a row
// unanswered is registered as not ready.
func (w *workerActor) heartbeat(c actor.Context) {
	if w.hbBusy || w.stopping || w.draining {
		return
	}
	w.hbBusy = true
	info, engine, up, fails, healthy, seq := w.info(), w.engine, w.ready, w.failedScrapes, w.canary.healthy(), w.loraSeq
	self, sys := c.Self(), c.ActorSystem()
	go func() {
		done := heartbeatDone{}
		defer func() { sys.Root.Send(self, done) }()
		load := &messages.WorkerLoad{TotalBlocks: w.cfg.Card.TotalKvBlocks}
		if up && engine != nil {
			ctx, cancel := context.WithTimeout(w.ctx, loadTimeout)
			l, err := engine.Load(ctx)
			cancel()
			done.scraped, done.ok = true, err == nil
			if err == nil {
				load, fails = l, 0
				if load.TotalBlocks == 0 {
					load.TotalBlocks = w.cfg.Card.TotalKvBlocks
				}
			} else {
				fails++
				w.log.Debug().Err(err).Msg("engine load scrape failed")
			}
			info.Ready = healthy && fails < maxFailedScrapes
		}
		select {
		case w.relay.in <- relayHeartbeat{info: info, load: load, seq: seq}:
		case <-w.ctx.Done():
			return
		}
		if w.cfg.Catalog != nil && info.Ready {
			w.announce(info)
		}
	}()
}

func (w *workerActor) stop() {
	wasReady := w.ready
	w.stopping = true
	w.ready = false
	for _, r := range w.requests {
		r.cancel(nil)
	}
	parked := wasReady && w.park()
	if !parked {
		if w.proc != nil {
			w.proc.Stop(w.cfg.StopGrace)
		}
		if w.engineStop != nil {
			w.engineStop()
		}
		w.closeEngine()
		if err := closeLauncher(w.cfg.Launcher); err != nil {
			w.log.Warn().Err(err).Msg("engine launcher close failed")
		}
	}
	// A parked engine's worker leaves its router and catalog too: its next worker, at
	// another address under the same id, registers anew.
	if w.cfg.Catalog != nil {
		_, _ = w.cfg.Catalog.Announce(&messages.AnnounceModel{Card: w.cfg.Card, WorkerId: w.cfg.WorkerID, TtlMs: 0,
			Worker: &messages.ActorRef{Address: w.self.Address, Id: w.self.Id}})
	}
	// Let the relay deliver the deregistration, but never hang a shutdown on it.
	done := make(chan struct{})
	select {
	case w.relay.in <- relayLeave{reason: "worker stopping", done: done}:
		select {
		case <-done:
		case <-time.After(leaveWait):
		}
	default:
	}
	switch {
	case parked:
		// Until a worker adopts it, the relay answers for the router and registers no
		// one: a late heartbeat of this worker must not name it to its router.
		w.relay.in <- relayAdopt{router: parkedRouter{}, owner: &messages.ActorRef{}}
	case w.relayStop != nil:
		w.relayStop()
	}
	w.cancel()
}

// role is Config.Role as WorkerInfo carries it (New validated it).
func (w *workerActor) role() messages.Role {
	r, _ := kv.ParseRole(w.cfg.Role)
	return r
}
