package frontend

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// Config configures the Backend.
type Config struct {
	// Credits is how many chunks a worker may send ahead of the consumer (default 64).
	Credits int32
	// RouteTimeout bounds a Router grain call (default 5 s).
	RouteTimeout time.Duration
	// ModelsTTL is how long the model list from the Catalog grain is reused (default 500 ms).
	ModelsTTL time.Duration
	// ModelMemory is how long a model that had live workers is answered with 503 (no
	// ready worker) rather than 404 (unknown model) once it has none (default 10 min).
	ModelMemory time.Duration
	// ModelCacheDir holds tokenizer folders fetched from workers (LoaderConfig.CacheDir;
	// default DefaultModelCacheDir()).
	ModelCacheDir string
	// FilesTimeout bounds a request for a model's tokenizer files to a worker (default
	// DefaultFilesTimeout).
	FilesTimeout time.Duration
	Logger       zerolog.Logger
}

// Backend implements gateway.Backend on a cluster member.
type Backend struct {
	c   atomic.Pointer[pcluster.Cluster]
	cfg Config

	seq      atomic.Uint64 // makes request ids unique inside the cluster
	mu       sync.Mutex
	models   []*messages.ModelCard
	modelsAt time.Time
	seen     map[string]time.Time // model -> last time the catalog listed it
	loader   *ModelLoader
}

var _ gateway.Backend = (*Backend)(nil)

// New returns a Backend using cluster c.
func New(c *pcluster.Cluster, cfg Config) *Backend {
	if cfg.Credits <= 0 {
		cfg.Credits = 64
	}
	if cfg.RouteTimeout <= 0 {
		cfg.RouteTimeout = 5 * time.Second
	}
	if cfg.ModelsTTL <= 0 {
		cfg.ModelsTTL = 500 * time.Millisecond
	}
	if cfg.ModelMemory <= 0 {
		cfg.ModelMemory = 10 * time.Minute
	}
	b := &Backend{cfg: cfg, seen: map[string]time.Time{}}
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
// fresh id). Streams already started stay on the member they started on.
func (b *Backend) SetCluster(c *pcluster.Cluster) { b.c.Store(c) }

// Models returns the cards of the models that have at least one live worker, from the
// Catalog grain (cached for ModelsTTL).
func (b *Backend) Models(ctx context.Context) ([]*messages.ModelCard, error) {
	b.mu.Lock()
	if b.models != nil && time.Since(b.modelsAt) < b.cfg.ModelsTTL {
		m := b.models
		b.mu.Unlock()
		return m, nil
	}
	b.mu.Unlock()
	list, err := messages.GetCatalogGrainClient(b.c.Load(), catalog.Identity).List(&messages.ListModelsRequest{},
		pcluster.WithTimeout(b.cfg.RouteTimeout))
	if err != nil {
		return nil, fmt.Errorf("frontend: list models: %w", err)
	}
	now := time.Now()
	b.mu.Lock()
	b.models, b.modelsAt = list.Models, now
	for _, m := range list.Models {
		b.seen[m.Model] = now
	}
	b.mu.Unlock()
	return list.Models, nil
}

// Recent reports whether the catalog listed model within the last ModelMemory
// (gateway.RecentModels).
func (b *Backend) Recent(model string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	last, ok := b.seen[model]
	return ok && time.Since(last) < b.cfg.ModelMemory
}

func (b *Backend) router(model string) *messages.RouterGrainClient {
	return messages.GetRouterGrainClient(b.c.Load(), model)
}

// Generate routes req with the model's Router grain and starts it on the chosen worker.
func (b *Backend) Generate(ctx context.Context, req *gateway.GenerateRequest) (gateway.Stream, error) {
	models, err := b.Models(ctx)
	if err != nil {
		return nil, err
	}
	known := false
	for _, m := range models {
		known = known || m.Model == req.Model
	}
	if !known {
		if b.Recent(req.Model) {
			// A model served a moment ago whose engines are all down (restarting) is
			// unavailable, not unknown: 503, which clients retry, rather than 404.
			return nil, fmt.Errorf("%w: %q has no ready worker right now", gateway.ErrNoWorkers, req.Model)
		}
		return nil, fmt.Errorf("%w: %q", gateway.ErrUnknownModel, req.Model)
	}
	// Clients may reuse X-Request-Id; inside the cluster every request needs its own id
	// (the router's load tracking and the worker's in-flight table are keyed by it).
	id := fmt.Sprintf("%s#%d", req.RequestID, b.seq.Add(1))
	rr := &messages.RouteRequest{RequestId: id, TokenIds: req.TokenIDs}
	if req.OverlapWeight != nil {
		rr.HasOverlapWeight, rr.OverlapWeight = true, *req.OverlapWeight
	}
	if req.Temperature != nil {
		rr.HasTemperature, rr.Temperature = true, *req.Temperature
	}
	route, err := b.router(req.Model).Route(rr, pcluster.WithTimeout(b.cfg.RouteTimeout))
	if err != nil {
		return nil, fmt.Errorf("frontend: route: %w", err)
	}
	switch route.ErrorCode {
	case "":
	case "all_busy":
		return nil, fmt.Errorf("%w: %s", gateway.ErrAllBusy, route.Error)
	case "unknown_model":
		return nil, fmt.Errorf("%w: %s", gateway.ErrUnknownModel, route.Error)
	default:
		return nil, fmt.Errorf("%w: %s", gateway.ErrNoWorkers, route.Error)
	}
	s := &stream{b: b, root: b.c.Load().ActorSystem.Root, model: req.Model, requestID: id, workerID: route.WorkerId,
		worker: actor.NewPID(route.Worker.Address, route.Worker.Id), chunks: make(chan *messages.TokenChunk, 4*int(b.cfg.Credits)+8), closed: make(chan struct{})}
	root := s.root
	s.receiver = root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &receiver{s: s} }))
	root.Send(s.worker, &messages.Generate{
		RequestId:      id,
		TokenIds:       req.TokenIDs,
		Sampling:       req.Sampling,
		ReplyTo:        &messages.ActorRef{Address: s.receiver.Address, Id: s.receiver.Id},
		InitialCredits: b.cfg.Credits,
	})
	return s, nil
}

// stream is one request's token stream. Recv and Close are called by one goroutine (the
// HTTP handler); the receiver actor only writes to chunks.
type stream struct {
	b         *Backend
	root      *actor.RootContext // of the member the stream started on
	model     string
	requestID string
	workerID  string
	worker    *actor.PID
	receiver  *actor.PID
	chunks    chan *messages.TokenChunk
	closed    chan struct{}

	consumed  int32
	sawToken  bool
	finished  bool
	closeOnce sync.Once
}

func (s *stream) WorkerID() string { return s.workerID }

func (s *stream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	if s.finished {
		return nil, io.EOF
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case ch := <-s.chunks:
		if ch.FinishReason != "" {
			s.finished = true
		}
		if !s.sawToken && len(ch.TokenIds) > 0 {
			s.sawToken = true
			s.prefillDone()
		}
		if s.consumed++; s.consumed >= s.b.cfg.Credits/2 && !s.finished {
			s.root.Send(s.worker, &messages.Credit{RequestId: s.requestID, Credits: s.consumed})
			s.consumed = 0
		}
		return ch, nil
	}
}

// prefillDone tells the router the prompt is computed (its tokens stop counting as
// prefill load); fire and forget.
func (s *stream) prefillDone() {
	r := s.b.router(s.model)
	id := s.requestID
	go func() {
		_, _ = r.PrefillDone(&messages.RequestRef{RequestId: id}, pcluster.WithTimeout(s.b.cfg.RouteTimeout))
	}()
}

func (s *stream) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		root := s.root
		if !s.finished {
			root.Send(s.worker, &messages.Cancel{RequestId: s.requestID, Reason: "client closed the stream"})
		}
		root.Stop(s.receiver)
		r := s.b.router(s.model)
		id := s.requestID
		go func() {
			if _, err := r.Free(&messages.RequestRef{RequestId: id}, pcluster.WithTimeout(s.b.cfg.RouteTimeout)); err != nil {
				s.b.cfg.Logger.Warn().Err(err).Str("request_id", id).Msg("router free failed; the router expires it later")
			}
		}()
	})
}

// receiver puts the worker's chunks in index order into the stream's channel.
type receiver struct {
	s       *stream
	next    uint32
	pending map[uint32]*messages.TokenChunk
	done    bool
}

func (r *receiver) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		c.Watch(r.s.worker)
	case *messages.TokenChunk:
		if r.done || m.RequestId != r.s.requestID {
			return
		}
		if m.Index != r.next {
			if m.Index > r.next {
				if r.pending == nil {
					r.pending = map[uint32]*messages.TokenChunk{}
				}
				r.pending[m.Index] = m
			}
			return
		}
		r.deliver(m)
		for p, ok := r.pending[r.next]; ok; p, ok = r.pending[r.next] {
			delete(r.pending, p.Index)
			r.deliver(p)
		}
	case *actor.Terminated:
		if !r.done && m.Who.Equal(r.s.worker) {
			r.deliver(&messages.TokenChunk{RequestId: r.s.requestID, Index: r.next, FinishReason: "error",
				Error: "worker " + r.s.workerID + " terminated", Migratable: true, WorkerId: r.s.workerID})
		}
	}
}

func (r *receiver) deliver(m *messages.TokenChunk) {
	r.next = m.Index + 1
	if m.FinishReason != "" {
		r.done = true
	}
	// The channel holds more than the credits granted, so this only blocks when a
	// worker ignores flow control; a closed stream takes nothing more.
	select {
	case r.s.chunks <- m:
	case <-r.s.closed:
	}
}
