package router

import (
	"context"

	"github.com/asynkron/protoactor-go/cluster"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/tracing"
)

// Route is route (grain.go) under a router.route span (docs/tracing.md), the child of
// the frontend's route span named by req.traceparent, when tracing is on in this
// process and the request carries one; route alone otherwise. The span records the
// decision: the worker, the prefix hit in blocks, the workers registered
// (candidates, before exclusions and busy filters) and the outcome.
func (g *Grain) Route(req *messages.RouteRequest, ctx cluster.GrainContext) (*messages.RouteResponse, error) {
	if req.Traceparent == "" || !tracing.Enabled() {
		return g.route(req, ctx)
	}
	_, sp := tracing.Start(tracing.FromTraceparent(context.Background(), req.Traceparent), tracing.SpanRouterRoute,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.AttrRequestID.String(req.RequestId), tracing.AttrModel.String(g.model),
			tracing.AttrCandidates.Int(len(g.workers))))
	resp, err := g.route(req, ctx)
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
	} else if resp != nil {
		sp.SetAttributes(tracing.AttrOutcome.String(resp.Outcome.String()), tracing.AttrWorker.String(resp.WorkerId),
			tracing.AttrOverlapBlocks.Int(int(resp.OverlapBlocks)), tracing.AttrPromptBlocks.Int(int(resp.PromptBlocks)),
			tracing.AttrDisagg.String(resp.DisaggDecision.String()))
		if resp.PrefillWorkerId != "" {
			sp.SetAttributes(tracing.AttrPrefillWorker.String(resp.PrefillWorkerId))
		}
		if resp.Outcome != messages.RouteOutcome_ROUTE_OK {
			sp.SetStatus(codes.Error, resp.Error)
		}
	}
	sp.End()
	return resp, err
}
