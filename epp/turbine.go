package epp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"

	fe "github.com/turbine-llm/turbine/actors/frontend"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// Defaults of ClusterConfig.
const (
	DefaultRouteTimeout = 5 * time.Second        // ClusterConfig.RouteTimeout
	DefaultWorkersTTL   = 500 * time.Millisecond // ClusterConfig.WorkersTTL
)

// ClusterConfig configures a ClusterTurbine; the zero value of a field means its default.
type ClusterConfig struct {
	// RouteTimeout bounds one Router grain call.
	RouteTimeout time.Duration
	// WorkersTTL is how long a model's worker list (from its Router grain's Stats) is
	// reused.
	WorkersTTL time.Duration
	// ModelCacheDir holds tokenizer folders fetched from workers (as the frontend's).
	ModelCacheDir string
	// MaxBodyBytes bounds the request bodies the gateway's validation reads.
	MaxBodyBytes int64
	// EngineEndpoint is a worker's engine endpoint ("ip:port") from its router stats;
	// nil: the stats' engine_url, when the router reports it (WorkerEngineEndpoint).
	EngineEndpoint func(*messages.WorkerStats) string
	Logger         zerolog.Logger
}

// ClusterTurbine is Turbine over a cluster member: model cards from the Catalog grain
// and tokenizers loaded as the frontend loads them (actors/frontend's Backend), the
// request validated and tokenized by the gateway's own code (package gateway, run
// without answering: its Backend captures the tokenized request), and the model's
// Router grain.
type ClusterTurbine struct {
	c       atomic.Pointer[pcluster.Cluster]
	backend *fe.Backend
	pre     *preparer
	cfg     ClusterConfig

	mu      sync.Mutex
	workers map[string]workersEntry // model -> its workers, as last read
}

type workersEntry struct {
	at      time.Time
	workers []Worker
}

// NewClusterTurbine returns the Turbine side over cluster c.
func NewClusterTurbine(c *pcluster.Cluster, cfg ClusterConfig) (*ClusterTurbine, error) {
	if cfg.RouteTimeout <= 0 {
		cfg.RouteTimeout = DefaultRouteTimeout
	}
	if cfg.WorkersTTL <= 0 {
		cfg.WorkersTTL = DefaultWorkersTTL
	}
	if cfg.EngineEndpoint == nil {
		cfg.EngineEndpoint = WorkerEngineEndpoint
	}
	t := &ClusterTurbine{cfg: cfg, workers: map[string]workersEntry{}}
	t.c.Store(c)
	t.backend = fe.New(c, fe.Config{Logger: cfg.Logger, ModelCacheDir: cfg.ModelCacheDir, RouteTimeout: cfg.RouteTimeout})
	pre, err := newPreparer(t.backend, t.backend.ModelLoader(), cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	t.pre = pre
	return t, nil
}

// SetCluster moves onto another member's cluster (a member restarted with a fresh id).
func (t *ClusterTurbine) SetCluster(c *pcluster.Cluster) {
	t.c.Store(c)
	t.backend.SetCluster(c)
}

// models is where the gateway's validation finds the model cards.
type models interface {
	Models(ctx context.Context) ([]*messages.ModelCard, error)
	Recent(model string) bool
}

// capture is the gateway's Backend: the models are the cluster's, and Generate records
// the tokenized request in the slot its context carries instead of running it.
type capture struct{ b models }

// preparer runs requests through the gateway's validation and tokenization only.
type preparer struct{ gw *gateway.Server }

// newPreparer returns a preparer over the cards of m, loading tokenizers with loader
// (nil: the gateway's default, model.LoadModel of the card's tokenizer).
func newPreparer(m models, loader gateway.ModelLoader, maxBody int64) (*preparer, error) {
	var opts []gateway.Option
	if loader != nil {
		opts = append(opts, gateway.WithModelLoader(loader))
	}
	gw, err := gateway.New(gateway.Config{Logger: zerolog.Nop(), MaxBodyBytes: maxBody}, capture{m}, opts...)
	if err != nil {
		return nil, err
	}
	return &preparer{gw: gw}, nil
}

type slotKey struct{}

type slot struct {
	mu  sync.Mutex
	req *gateway.GenerateRequest
}

var errCaptured = errors.New("epp: request captured")

func (c capture) Models(ctx context.Context) ([]*messages.ModelCard, error) { return c.b.Models(ctx) }
func (c capture) Recent(model string) bool                                  { return c.b.Recent(model) }

// RecentCard forwards gateway.RecentCards when the models have it (a model the catalog
// listed a moment ago is served as the frontend serves it).
func (c capture) RecentCard(model string) *messages.ModelCard {
	if r, ok := c.b.(gateway.RecentCards); ok {
		return r.RecentCard(model)
	}
	return nil
}
func (c capture) Generate(ctx context.Context, req *gateway.GenerateRequest) (gateway.Stream, error) {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.mu.Lock()
		if s.req == nil {
			s.req = req
		}
		s.mu.Unlock()
	}
	return nil, errCaptured
}

// Prepare runs the request through the gateway's validation, chat template and
// tokenizer; the gateway's error answer, if any, is returned as it is (KindUpstream).
func (t *ClusterTurbine) Prepare(ctx context.Context, req *PickRequest) (*gateway.GenerateRequest, *Error) {
	return t.pre.prepare(ctx, req)
}

func (p *preparer) prepare(ctx context.Context, req *PickRequest) (*gateway.GenerateRequest, *Error) {
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	s := &slot{}
	hr, err := http.NewRequestWithContext(context.WithValue(ctx, slotKey{}, s), method, req.Path, bytes.NewReader(req.Body))
	if err != nil {
		return nil, newError(KindBadRequest, "The request path cannot be read.")
	}
	for k, v := range req.Headers {
		if strings.HasPrefix(k, ":") || k == "content-length" || k == "authorization" || k == "x-api-key" {
			continue
		}
		hr.Header.Set(k, v)
	}
	hr.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	p.gw.ServeHTTP(rec, hr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.req != nil {
		return s.req, nil
	}
	return nil, &Error{Kind: KindUpstream, Status: rec.Code, Body: rec.Body.Bytes(), Message: "refused by validation"}
}

// Workers lists the model's workers from its Router grain's Stats, reused for WorkersTTL.
func (t *ClusterTurbine) Workers(ctx context.Context, model string) ([]Worker, error) {
	t.mu.Lock()
	if e, ok := t.workers[model]; ok && time.Since(e.at) < t.cfg.WorkersTTL {
		t.mu.Unlock()
		return e.workers, nil
	}
	t.mu.Unlock()
	c := t.c.Load()
	if c == nil {
		return nil, errNoCluster
	}
	st, err := messages.GetRouterGrainClient(c, model).Stats(&messages.RouterStatsRequest{}, pcluster.WithTimeout(t.cfg.RouteTimeout))
	if err != nil {
		return nil, err
	}
	ws := make([]Worker, 0, len(st.GetWorkers()))
	for _, w := range st.GetWorkers() {
		ws = append(ws, Worker{ID: w.GetWorkerId(), Endpoint: t.cfg.EngineEndpoint(w), Ready: w.GetReady()})
	}
	t.mu.Lock()
	t.workers[model] = workersEntry{at: time.Now(), workers: ws}
	t.mu.Unlock()
	return ws, nil
}

// WorkerEndpoints is the endpoints of every base model's workers.
func (t *ClusterTurbine) WorkerEndpoints(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	cards, err := t.backend.Models(ctx)
	if err != nil {
		return out
	}
	for _, c := range cards {
		if c.GetLora() != nil {
			continue
		}
		ws, _ := t.Workers(ctx, c.GetModel())
		for _, w := range ws {
			if w.Endpoint != "" {
				out[w.Endpoint] = true
			}
		}
	}
	return out
}

// Route asks the model's Router grain, waiting at most RouteTimeout (router.Call: asked
// again while the grain is in its registration window).
func (t *ClusterTurbine) Route(ctx context.Context, model string, rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	c := t.c.Load()
	if c == nil {
		return nil, errNoCluster
	}
	deadline := time.Now().Add(t.cfg.RouteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return router.Call(ctx, messages.GetRouterGrainClient(c, model), rr, deadline, router.RealClock)
}

// Started sends RouteAck to the grain activation that answered the route (a message).
func (t *ClusterTurbine) Started(_, requestID string, r *messages.ActorRef) {
	if c := t.c.Load(); c != nil && r != nil {
		c.ActorSystem.Root.Send(actor.NewPID(r.Address, r.Id), &messages.RouteAck{RequestId: requestID})
	}
}

// Free ends the router's load tracking of requestID, off the caller's goroutine (the
// router expires what it never hears about).
func (t *ClusterTurbine) Free(model, requestID string) {
	c := t.c.Load()
	if c == nil {
		return
	}
	go func() {
		if _, err := messages.GetRouterGrainClient(c, model).Free(&messages.RequestRef{RequestId: requestID}, pcluster.WithTimeout(t.cfg.RouteTimeout)); err != nil {
			t.cfg.Logger.Warn().Err(err).Str("request_id", requestID).Msg("router free failed; the router expires it later")
		}
	}()
}

// Reachable reports whether the Catalog grain answers (the model list).
func (t *ClusterTurbine) Reachable(ctx context.Context) bool {
	if t.c.Load() == nil {
		return false
	}
	_, err := t.backend.Models(ctx)
	return err == nil
}

// WorkerEngineEndpoint is the "host:port" of a worker's engine_url as its router's
// Stats report it (WorkerInfo.engine_url, docs/epp.md); "" when the worker did not say.
func WorkerEngineEndpoint(ws *messages.WorkerStats) string {
	return EndpointOf(ws.GetEngineUrl())
}

// EndpointOf turns an engine's base URL ("http://10.0.0.7:8001") into the endpoint
// ("10.0.0.7:8001") a gateway is told; "" when it has no host and port.
func EndpointOf(engineURL string) string {
	u, err := url.Parse(engineURL)
	if err != nil || u.Host == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}
