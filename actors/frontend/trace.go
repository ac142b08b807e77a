package frontend

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/tracing"
)

// streamTrace is a stream's spans (docs/tracing.md): one route span per Route effect,
// one prefill or decode span per leg from its Send to its Forget, children of the
// request's span (the gateway's gateway.receive, from the context the request started
// with). The route span's context travels to the Router grain in
// RouteRequest.traceparent and each leg's to its worker in Generate.traceparent. A nil
// *streamTrace (tracing off) does nothing; like the stream, it is used by one goroutine
// at a time.
type streamTrace struct {
	parent context.Context
	legs   map[flow.LegID]*legSpan
	// prefillIDs are the request ids routes gave prefill legs: a Send under one is a
	// prefill leg.
	prefillIDs map[string]bool
	// sent is the decode leg sent since the latest route (nil: none yet), and migration
	// a NoteMigrated whose decode leg is not sent yet (a two-phase remote route sends
	// it after the prefill leg's last chunk).
	sent      *legSpan
	migration *flow.Note
}

// legSpan is a leg's span and what it counts.
type legSpan struct {
	span    trace.Span
	decode  bool
	tokens  int
	first   bool // the first token was seen
	faulted bool
}

// newStreamTrace returns the spans' holder of a request started under ctx; nil when
// tracing is off.
func newStreamTrace(ctx context.Context) *streamTrace {
	if !tracing.Enabled() {
		return nil
	}
	return &streamTrace{parent: ctx, legs: map[flow.LegID]*legSpan{}, prefillIDs: map[string]bool{}}
}

// route starts the span of rr's Route call and puts its context in rr.traceparent.
func (t *streamTrace) route(rr *messages.RouteRequest) trace.Span {
	if t == nil {
		return nil
	}
	t.sent = nil
	ctx, sp := tracing.Start(t.parent, tracing.SpanRoute, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrRequestID.String(rr.RequestId)))
	rr.Traceparent = tracing.Traceparent(ctx)
	return sp
}

// routed ends sp with the router's answer (or the call's failure).
func (t *streamTrace) routed(sp trace.Span, model string, resp *messages.RouteResponse, err error) {
	if t == nil || sp == nil {
		return
	}
	sp.SetAttributes(tracing.AttrModel.String(model))
	switch {
	case err != nil:
		sp.SetStatus(codes.Error, err.Error())
	case resp != nil:
		sp.SetAttributes(tracing.AttrOutcome.String(resp.Outcome.String()), tracing.AttrWorker.String(resp.WorkerId),
			tracing.AttrOverlapBlocks.Int(int(resp.OverlapBlocks)), tracing.AttrPromptBlocks.Int(int(resp.PromptBlocks)),
			tracing.AttrDisagg.String(resp.DisaggDecision.String()))
		if n := len(resp.Candidates); n > 0 {
			sp.SetAttributes(tracing.AttrCandidates.Int(n))
		}
		if resp.PrefillWorkerId != "" {
			sp.SetAttributes(tracing.AttrPrefillWorker.String(resp.PrefillWorkerId))
		}
		if resp.PrefillRequestId != "" {
			t.prefillIDs[resp.PrefillRequestId] = true
		}
		if resp.Outcome != messages.RouteOutcome_ROUTE_OK {
			sp.SetStatus(codes.Error, resp.Error)
		}
	}
	sp.End()
}

// send starts leg e's span (prefill or decode) and puts its context in
// e.Generate.traceparent.
func (t *streamTrace) send(e flow.Send) {
	if t == nil {
		return
	}
	g := e.Generate
	name, decode := tracing.SpanDecode, true
	if t.prefillIDs[g.RequestId] || g.GetSampling().GetDisagg().GetLeg() == messages.Leg_LEG_PREFILL {
		name, decode = tracing.SpanPrefill, false
		delete(t.prefillIDs, g.RequestId)
	}
	ctx, sp := tracing.Start(t.parent, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrRequestID.String(g.RequestId), tracing.AttrWorker.String(e.Worker.ID),
			tracing.AttrPromptTokensIn.Int(len(g.TokenIds))))
	g.Traceparent = tracing.Traceparent(ctx)
	if old := t.legs[e.Leg]; old != nil {
		old.end()
	}
	l := &legSpan{span: sp, decode: decode}
	t.legs[e.Leg] = l
	if decode {
		t.sent = l
		if m := t.migration; m != nil {
			t.migration = nil
			l.migrated(*m)
		}
	}
}

// chunk counts c's tokens on its leg's span: the first one is the first_token event of a
// decode leg; a chunk with an error marks the span failed.
func (t *streamTrace) chunk(c flow.Chunk) {
	if t == nil || c.Chunk == nil {
		return
	}
	l := t.legs[c.Leg]
	if l == nil {
		return
	}
	ch := c.Chunk
	if n := len(ch.TokenIds); n > 0 {
		if !l.first && l.decode {
			l.span.AddEvent(tracing.EventFirstToken)
		}
		l.first = true
		l.tokens += n
	}
	if ch.FinishReason != "" {
		l.span.SetAttributes(tracing.AttrFinishReason.String(ch.FinishReason))
	}
	if ch.Error != "" || ch.Fault != messages.Fault_FAULT_NONE {
		l.faulted = true
		l.span.SetAttributes(tracing.AttrFault.String(ch.Fault.String()))
		l.span.SetStatus(codes.Error, ch.Error)
	}
}

// migrated notes a migration (which the flow notes after the route's Sends): the decode
// leg that continues the request carries its event, and so does the request's span.
func (t *streamTrace) migrated(n flow.Note) {
	if t == nil {
		return
	}
	if t.sent != nil {
		t.sent.migrated(n)
	} else {
		t.migration = &n
	}
	trace.SpanFromContext(t.parent).AddEvent(tracing.EventMigration, migrationAttrs(n))
}

// migrated adds the migration event to a leg's span.
func (l *legSpan) migrated(n flow.Note) { l.span.AddEvent(tracing.EventMigration, migrationAttrs(n)) }

func migrationAttrs(n flow.Note) trace.EventOption {
	return trace.WithAttributes(tracing.AttrReason.String(n.Fault.Label()), tracing.AttrFromWorker.String(n.From),
		tracing.AttrWorker.String(n.To))
}

// forget ends leg id's span.
func (t *streamTrace) forget(id flow.LegID) {
	if t == nil {
		return
	}
	if l := t.legs[id]; l != nil {
		delete(t.legs, id)
		l.end()
	}
}

// end ends every leg span still open (the stream is done).
func (t *streamTrace) end() {
	if t == nil {
		return
	}
	for id, l := range t.legs {
		delete(t.legs, id)
		l.end()
	}
}

func (l *legSpan) end() {
	l.span.SetAttributes(tracing.AttrOutputTokens.Int(l.tokens))
	l.span.End()
}
