package epp

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/turbine-llm/turbine/epp/pool"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// Turbine is the Turbine side of a pick: the cluster's model cards, tokenizers and Router
// grains (ClusterTurbine; tests use fakes).
type Turbine interface {
	// Prepare validates and tokenizes the request as the frontend does (the model's
	// chat template and tokenizer from its card). Errors: the gateway's own answer
	// (KindUpstream: 400 for a bad body, 404 for a model no worker serves, 503 …).
	Prepare(ctx context.Context, req *PickRequest) (*gateway.GenerateRequest, *Error)
	// Workers lists the model's workers with their engine endpoints ("ip:port"; "" when
	// the worker does not say).
	Workers(ctx context.Context, model string) ([]Worker, error)
	// WorkerEndpoints is every endpoint a worker of any model is known at.
	WorkerEndpoints(ctx context.Context) map[string]bool
	// Route asks the model's Router grain for a worker.
	Route(ctx context.Context, model string, rr *messages.RouteRequest) (*messages.RouteResponse, error)
	// Started acknowledges a route (RouteAck to the grain activation that answered).
	Started(model, requestID string, router *messages.ActorRef)
	// Free ends the router's load tracking of a request; fire and forget.
	Free(model, requestID string)
	// Reachable reports whether the cluster is up (readiness).
	Reachable(ctx context.Context) bool
}

// Worker is one Turbine worker of a model as the EPP sees it.
type Worker struct {
	ID       string
	Endpoint string // "ip:port" of its engine; "" when unknown
	Ready    bool
}

// Picker picks endpoints: the Router grain's choice among the Turbine workers allowed,
// the least loaded of the other endpoints. Safe for concurrent use.
type Picker struct {
	Source  pool.Source
	Turbine Turbine // nil: every endpoint is picked by its load
	// Fallbacks is how many endpoints after the primary the answer lists (the next best
	// candidates), for gateways that retry on them (docs/epp.md).
	Fallbacks int

	seq         atomic.Uint64
	mu          sync.Mutex
	outstanding map[string]int // endpoint -> requests picked by load and not ended
}

// Pick answers a PickRequest. Errors are immediate responses.
func (p *Picker) Pick(ctx context.Context, req *PickRequest) (*Pick, *Error) {
	eligible := Eligible(p.Source.Endpoints(), req.Subset, req.SubsetPresent)
	if len(eligible) == 0 {
		if req.SubsetPresent {
			return nil, newError(KindNoEndpoint, "No ready endpoint is in the gateway's subset hint.")
		}
		return nil, newError(KindNoEndpoint, "No ready endpoint in the pool.")
	}
	if req.Body == nil || len(req.Body) == 0 { // GET /v1/models and the like: any endpoint
		return p.byLoad(eligible, "")
	}
	info, perr := ParseRequest(req.Body)
	if perr != nil {
		return nil, perr
	}
	if p.Turbine == nil {
		return p.byLoad(eligible, info.Model)
	}
	gen, perr := p.Turbine.Prepare(ctx, req)
	if perr != nil {
		if perr.HTTPStatus() != 404 {
			return nil, perr
		}
		// A model Turbine does not know: the endpoints that are not Turbine workers may
		// serve it (plain vLLM or SGLang pods), picked by their load.
		known := p.Turbine.WorkerEndpoints(ctx)
		var others []string
		for _, e := range eligible {
			if !known[e] {
				others = append(others, e)
			}
		}
		if len(others) == 0 {
			return nil, perr
		}
		return p.byLoad(others, info.Model)
	}
	return p.route(ctx, req, gen, eligible)
}

// route asks the model's Router grain, excluding the workers not allowed.
func (p *Picker) route(ctx context.Context, req *PickRequest, gen *gateway.GenerateRequest, eligible []string) (*Pick, *Error) {
	workers, err := p.Turbine.Workers(ctx, gen.Model)
	if err != nil {
		return nil, newError(KindNoEndpoint, "The router of model %q cannot be reached; retry later.", gen.Model)
	}
	allowed := make(map[string]bool, len(eligible))
	for _, e := range eligible {
		allowed[e] = true
	}
	endpointOf := make(map[string]string, len(workers))
	var exclude []string
	usable := 0
	for _, w := range workers {
		endpointOf[w.ID] = w.Endpoint
		if w.Endpoint == "" || !allowed[w.Endpoint] {
			exclude = append(exclude, w.ID)
		} else if w.Ready {
			usable++
		}
	}
	if usable == 0 {
		return nil, newError(KindNoEndpoint, "No ready endpoint serves model %q among those allowed.", gen.Model)
	}
	id := req.RequestID + "#epp-" + strconv.FormatUint(p.seq.Add(1), 10)
	rr := &messages.RouteRequest{RequestId: id, TokenIds: gen.TokenIDs, LoraName: gen.Sampling.GetLoraName(),
		OverlapWeight: gen.OverlapWeight, Temperature: gen.Temperature, ExcludeWorkers: exclude, LocalPrefill: true,
		WillAck: true, CacheSalt: gen.Sampling.GetCacheSalt(), SessionId: gen.SessionID, Explain: p.Fallbacks > 0,
		Traceparent: req.Headers["traceparent"]}
	resp, err := p.Turbine.Route(ctx, gen.Model, rr)
	if err != nil {
		p.Turbine.Free(gen.Model, id) // the grain may have recorded it
		return nil, newError(KindNoEndpoint, "The router of model %q did not answer; retry later.", gen.Model)
	}
	if e := outcomeError(resp.GetOutcome(), gen.Model, resp.GetError()); e != nil {
		return nil, e
	}
	ids := []string{id}
	if pid := resp.GetPrefillRequestId(); pid != "" {
		ids = append(ids, pid)
	}
	primary := endpointOf[resp.GetWorkerId()]
	if primary == "" || !allowed[primary] { // the router chose a worker it had not listed
		for _, i := range ids {
			p.Turbine.Free(gen.Model, i)
		}
		return nil, newError(KindNoEndpoint, "The router chose worker %q, whose endpoint is not allowed.", resp.GetWorkerId())
	}
	p.Turbine.Started(gen.Model, id, resp.GetRouter())
	endpoints := append([]string{primary}, Fallbacks(resp.GetCandidates(), endpointOf, allowed, primary, p.Fallbacks)...)
	return &Pick{Endpoints: endpoints, Release: Release{Model: gen.Model, RouteIDs: ids, Endpoint: primary, Turbine: true}}, nil
}

// byLoad picks the least loaded of endpoints (and fallbacks after it).
func (p *Picker) byLoad(endpoints []string, model string) (*Pick, *Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outstanding == nil {
		p.outstanding = map[string]int{}
	}
	order := LeastLoaded(endpoints, p.Source.Load, p.outstanding)
	n := min(len(order), 1+p.Fallbacks)
	p.outstanding[order[0]]++
	return &Pick{Endpoints: order[:n], Release: Release{Model: model, Endpoint: order[0]}}, nil
}

// Release ends a request's bookkeeping: the router's load (every route id freed) or the
// endpoint's outstanding count.
func (p *Picker) Release(o *Outcome) {
	if o == nil || o.Pick == nil {
		return
	}
	r := o.Pick.Release
	if r.Turbine {
		for _, id := range r.RouteIDs {
			p.Turbine.Free(r.Model, id)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outstanding[r.Endpoint]--; p.outstanding[r.Endpoint] <= 0 {
		delete(p.outstanding, r.Endpoint)
	}
}

// Eligible is the pool's ready endpoints allowed by the subset hint, sorted.
func Eligible(ready []pool.Endpoint, subset []string, subsetPresent bool) []string {
	var in map[string]bool
	if subsetPresent {
		in = make(map[string]bool, len(subset))
		for _, s := range subset {
			in[s] = true
		}
	}
	out := make([]string, 0, len(ready))
	for _, e := range ready {
		if !subsetPresent || in[e.Address] {
			out = append(out, e.Address)
		}
	}
	sort.Strings(out)
	return out
}

// LeastLoaded orders endpoints from least to most loaded: fewest waiting requests (as the
// model server reports them), then least KV cache in use, then fewest requests this EPP
// sent there and not ended, then fewest running, then by address. An endpoint without a
// load report counts as idle.
func LeastLoaded(endpoints []string, load func(string) (pool.Load, bool), outstanding map[string]int) []string {
	type entry struct {
		addr string
		l    pool.Load
		out  int
	}
	es := make([]entry, len(endpoints))
	for i, e := range endpoints {
		l, _ := load(e)
		es[i] = entry{e, l, outstanding[e]}
	}
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		switch {
		case a.l.Waiting != b.l.Waiting:
			return a.l.Waiting < b.l.Waiting
		case a.l.KVUsage != b.l.KVUsage:
			return a.l.KVUsage < b.l.KVUsage
		case a.out != b.out:
			return a.out < b.out
		case a.l.Running != b.l.Running:
			return a.l.Running < b.l.Running
		}
		return a.addr < b.addr
	})
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.addr
	}
	return out
}

// Fallbacks lists up to n endpoints after primary, from the router's candidates by
// ascending cost (the next best workers), each allowed and listed once.
func Fallbacks(cands []*messages.RouteCandidate, endpointOf map[string]string, allowed map[string]bool, primary string, n int) []string {
	if n <= 0 {
		return nil
	}
	sorted := append([]*messages.RouteCandidate(nil), cands...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].GetCost() < sorted[j].GetCost() })
	seen := map[string]bool{primary: true}
	var out []string
	for _, c := range sorted {
		e := endpointOf[c.GetWorkerId()]
		if e == "" || !allowed[e] || seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, e)
		if len(out) == n {
			break
		}
	}
	return out
}

// outcomeError maps the router's outcome to the client's answer (docs/epp.md, "Errors"):
// busy is 429, the rest as the frontend answers them.
func outcomeError(o messages.RouteOutcome, model, why string) *Error {
	switch o {
	case messages.RouteOutcome_ROUTE_OK:
		return nil
	case messages.RouteOutcome_ROUTE_ALL_BUSY:
		return newError(KindBusy, "All workers serving model %q are busy; retry later.", model)
	case messages.RouteOutcome_ROUTE_UNKNOWN_MODEL, messages.RouteOutcome_ROUTE_NO_ADAPTER:
		return newError(KindNotFound, "The model %q does not exist or no worker serves it.", model)
	case messages.RouteOutcome_ROUTE_BAD_REQUEST:
		return newError(KindBadRequest, "The request cannot be routed: %s", why)
	default:
		return newError(KindNoEndpoint, "No live worker serves model %q now; retry later.", model)
	}
}

// errNoCluster is Workers' error while the EPP has no cluster member.
var errNoCluster = errors.New("epp: not a cluster member yet")
