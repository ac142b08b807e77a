package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turbine-llm/turbine/tracing"
)

// Spans of a request (docs/tracing.md): gateway.receive from the request's arrival to
// its log line (begin to end, record.go), preprocess around the template and the
// tokenization; the Backend's spans (route, prefill, decode) are children of
// gateway.receive through the request's context. With tracing off none of this runs:
// rec.span stays nil.

// startReceive starts rec's gateway.receive span, the child of the client's traceparent
// when it sent one. Nothing when tracing is off.
func (rec *requestRecord) startReceive(r *http.Request) {
	if !tracing.Enabled() {
		return
	}
	route := r.Pattern
	if route == "" {
		route = r.URL.Path
	}
	_, rec.span = tracing.Start(tracing.ExtractHeaders(r.Context(), r.Header), tracing.SpanReceive,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.AttrHTTPMethod.String(r.Method), tracing.AttrHTTPRoute.String(route),
			tracing.AttrRequestID.String(rec.id), tracing.AttrEndpoint.String(rec.endpoint)))
}

// traced is r with rec's span in its context (r itself when tracing is off), so that the
// spans of what the request runs are its children.
func (rec *requestRecord) traced(r *http.Request) *http.Request {
	if rec.span == nil {
		return r
	}
	return r.WithContext(trace.ContextWithSpan(r.Context(), rec.span))
}

// endReceive ends rec's span with how the request ended: status, model, tokens, worker,
// the error's kind.
func (rec *requestRecord) endReceive() {
	sp := rec.span
	if sp == nil {
		return
	}
	attrs := []attribute.KeyValue{tracing.AttrHTTPStatus.Int(rec.status), tracing.AttrModel.String(rec.model),
		tracing.AttrStream.Bool(rec.stream), tracing.AttrRequestID.String(rec.id)}
	if rec.worker != "" {
		attrs = append(attrs, tracing.AttrWorker.String(rec.worker))
	}
	if d := rec.disagg; d.Decision != "" {
		attrs = append(attrs, tracing.AttrDisagg.String(d.Decision))
		if d.PrefillWorker != "" {
			attrs = append(attrs, tracing.AttrPrefillWorker.String(d.PrefillWorker))
		}
	}
	if rec.generated {
		attrs = append(attrs, tracing.AttrInputTokens.Int(rec.usage.PromptTokens),
			tracing.AttrOutputTokens.Int(rec.usage.CompletionTokens),
			tracing.AttrCachedTokens.Int(rec.usage.PromptTokensDetails.CachedTokens))
	}
	sp.SetAttributes(attrs...)
	if rec.err != nil {
		sp.SetAttributes(tracing.AttrErrorType.String(rec.err.Kind.String()))
		if rec.status >= 500 {
			sp.SetStatus(codes.Error, rec.err.Message)
		}
	}
	sp.End()
}

// startPreprocess starts the preprocess span (template, tokenization) under ctx's span;
// nil when tracing is off.
func startPreprocess(ctx context.Context) trace.Span {
	if !tracing.Enabled() {
		return nil
	}
	_, sp := tracing.Start(ctx, tracing.SpanPreprocess)
	return sp
}

// endPreprocess ends sp (nil: nothing) with the prompt's length, or the error that
// refused the request.
func endPreprocess(sp trace.Span, p *prepared, aerr *APIError) {
	if sp == nil {
		return
	}
	if aerr != nil {
		sp.SetAttributes(tracing.AttrErrorType.String(aerr.Kind.String()))
		sp.SetStatus(codes.Error, aerr.Message)
	} else if p != nil && p.gen != nil {
		sp.SetAttributes(tracing.AttrInputTokens.Int(len(p.gen.TokenIDs)), tracing.AttrModel.String(p.gen.Model))
	}
	sp.End()
}
