package frontend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// DefaultEmbedTimeout bounds one input's Embed call to its worker when the request's
// context has no earlier deadline.
const DefaultEmbedTimeout = 5 * time.Minute

var _ gateway.Embedder = (*Backend)(nil)

// Embed embeds one tokenized input of model (gateway.Embedder; docs/reference.md §23).
// The model's Router grain chooses the worker as for a generation with local prefill
// (the input's tokens count as that worker's prefill load; an embedding model's engine
// publishes no KV blocks, so the choice is by load); the request is sent to the worker
// as messages.Embed, a request-response, and freed in the router when it ends. A
// context that ends first cancels the worker's engine request. Errors: as Generate's
// (unknown model, no workers, the router's refusal as gateway.RouteError maps it),
// ctx.Err(), or the worker not answering within DefaultEmbedTimeout (502).
func (b *Backend) Embed(ctx context.Context, model, requestID string, tokens []uint32, dimensions int) (*messages.Embedding, error) {
	if err := b.knownModel(ctx, model); err != nil {
		return nil, err
	}
	c := b.c.Load()
	routing := &grainRouting{c: messages.GetRouterGrainClient(c, model), root: c.ActorSystem.Root, timeout: b.cfg.RouteTimeout, log: b.cfg.Logger}
	id := b.nextID(requestID)
	resp, err := routing.Route(&messages.RouteRequest{RequestId: id, TokenIds: tokens, LocalPrefill: true})
	// The router may have recorded the request even when the call failed: free it on
	// every path.
	defer routing.Free(id)
	if err != nil {
		return nil, gateway.RouteError(messages.RouteOutcome_ROUTE_CALL_FAILED, err.Error())
	}
	if err := gateway.RouteError(resp.GetOutcome(), resp.GetError()); err != nil {
		return nil, err
	}
	ref := resp.GetWorker()
	if ref == nil {
		return nil, gateway.RouteError(messages.RouteOutcome_ROUTE_NO_WORKERS, "router: no worker address for "+id)
	}
	worker := actor.NewPID(ref.GetAddress(), ref.GetId())
	timeout := DefaultEmbedTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(d), time.Millisecond))
	}
	root := c.ActorSystem.Root
	f := root.RequestFuture(worker, &messages.Embed{RequestId: id, TokenIds: tokens, Dimensions: int32(dimensions)}, timeout)
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f.Result()
		done <- result{v, err}
	}()
	select {
	case <-ctx.Done():
		root.Send(worker, &messages.Cancel{RequestId: id})
		return nil, ctx.Err()
	case r := <-done:
		if r.err != nil {
			if errors.Is(r.err, actor.ErrTimeout) {
				root.Send(worker, &messages.Cancel{RequestId: id})
			}
			return nil, fmt.Errorf("frontend: embed %s on worker %s: %w", id, resp.GetWorkerId(), r.err)
		}
		e, ok := r.v.(*messages.Embedding)
		if !ok {
			return nil, fmt.Errorf("frontend: embed %s: worker %s answered %T", id, resp.GetWorkerId(), r.v)
		}
		return e, nil
	}
}
