package gateway

import (
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// requestRecord is what one generation request leaves behind for metrics and the log.
// It is owned by the request's handler goroutine.
type requestRecord struct {
	id       string
	endpoint string
	start    time.Time
	stream   bool
	// model is the served model's name once the request resolved to one ("" before:
	// unknown names never become metric labels); for a LoRA adapter's request, its base
	// model's, with the adapter's name in lora.
	model  string
	lora   string
	status int
	// kind is the catalogue kind of the error that ended the request (nil on success).
	// For a stream that fails after its 200 header, status is that error's status too.
	kind      *ErrorKind
	err       *APIError
	worker    string
	disagg    DisaggInfo // the backend's disaggregation decision, when it reports one
	usage     Usage
	generated bool // the request ran to its end and usage is final
	inflight  *metrics.Gauge
	ticket    *ticket    // its hold on a slot of Config.MaxConcurrentRequests
	span      trace.Span // gateway.receive (trace.go); nil while tracing is off

	// queued holds the request in Dynamo's queued gauge until its first token
	// (dynamo_metrics.go).
	queued queuedHold
}

func (s *Server) begin(r *http.Request, endpoint string) *requestRecord {
	rec := &requestRecord{id: requestID(r), endpoint: endpoint, start: s.cfg.Now(), status: http.StatusOK}
	rec.startReceive(r)
	return rec
}

func (rec *requestRecord) fail(e *APIError) {
	k := e.Kind
	rec.kind, rec.err, rec.status = &k, e, e.Status()
}

// cancel marks the request as abandoned by its client.
func (rec *requestRecord) cancel() {
	rec.fail(newError(KindClientClosed, "", "The client closed the connection."))
}

func (rec *requestRecord) succeed(u Usage) {
	rec.usage, rec.generated = u, true
}

// end records the request's metrics and writes its log line.
func (s *Server) end(rec *requestRecord) {
	now := s.cfg.Now()
	if rec.inflight != nil {
		rec.inflight.Dec()
	}
	s.metrics.requestDone(rec, now)

	log := s.cfg.Logger
	var ev *zerolog.Event
	switch {
	case rec.status >= 500:
		ev = log.Error()
	case rec.status >= 400:
		ev = log.Warn()
	default:
		ev = log.Info()
	}
	ev = ev.Str("request_id", rec.id).Str("endpoint", rec.endpoint).Str("model", rec.model).
		Bool("stream", rec.stream).Int("status", rec.status).Dur("duration", now.Sub(rec.start))
	if rec.lora != "" {
		ev = ev.Str("lora", rec.lora)
	}
	if rec.worker != "" {
		ev = ev.Str("worker", rec.worker)
	}
	if d := rec.disagg; d.Decision != "" {
		ev = ev.Str("disagg", d.Decision)
		if d.PrefillWorker != "" {
			ev = ev.Str("prefill_worker", d.PrefillWorker)
		}
	}
	if rec.generated {
		ev = ev.Int("prompt_tokens", rec.usage.PromptTokens).Int("completion_tokens", rec.usage.CompletionTokens).
			Int("cached_tokens", rec.usage.PromptTokensDetails.CachedTokens)
	}
	if rec.err != nil {
		ev = ev.Str("error_kind", rec.err.Kind.String()).Str("error", rec.err.Message)
		if rec.err.Cause != nil {
			ev = ev.AnErr("cause", rec.err.Cause)
		}
	}
	ev.Msg("request")
	rec.endReceive()
}
