package worker

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/tracing"
)

// generateSpan is a leg's worker.generate span (docs/tracing.md): the child of the
// frontend's prefill or decode span named by Generate.traceparent, from the leg's start
// on the engine to its end. Its context is the engine call's, so the engine's HTTP
// request carries it as its traceparent header (engines/internal/enginehttp). nil
// (tracing off, or a Generate without traceparent) does nothing.
type generateSpan struct {
	span   trace.Span
	tokens int
}

// startGenerate starts m's span under ctx and returns the context the engine call runs
// in.
func startGenerate(ctx context.Context, m *messages.Generate, workerID string) (context.Context, *generateSpan) {
	if m.Traceparent == "" || !tracing.Enabled() {
		return ctx, nil
	}
	ctx, sp := tracing.Start(tracing.FromTraceparent(ctx, m.Traceparent), tracing.SpanWorkerGenerate,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.AttrRequestID.String(m.RequestId), tracing.AttrWorker.String(workerID),
			tracing.AttrPromptTokensIn.Int(len(m.TokenIds)), tracing.AttrLeg.String(m.GetSampling().GetDisagg().GetLeg().String())))
	return ctx, &generateSpan{span: sp}
}

// counting wraps send to count the tokens sent on g's span; send itself when g is nil.
func (g *generateSpan) counting(send func(*messages.TokenChunk)) func(*messages.TokenChunk) {
	if g == nil {
		return send
	}
	return func(ch *messages.TokenChunk) {
		g.tokens += len(ch.TokenIds)
		if ch.FinishReason != "" {
			g.span.SetAttributes(tracing.AttrFinishReason.String(ch.FinishReason))
		}
		send(ch)
	}
}

// end ends g's span with the engine call's outcome.
func (g *generateSpan) end(err error) {
	if g == nil {
		return
	}
	g.span.SetAttributes(tracing.AttrOutputTokens.Int(g.tokens))
	if err != nil && !errors.Is(err, errCancelled) {
		g.span.SetStatus(codes.Error, err.Error())
	}
	g.span.End()
}
