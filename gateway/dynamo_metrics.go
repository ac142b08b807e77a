package gateway

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Dynamo's frontend families (ai-dynamo/dynamo, lib/llm/src/http/service/metrics.rs and
// lib/runtime/src/metrics/prometheus_names.rs), exported alongside Turbine's own
// (metrics.go) so that dashboards built on Dynamo's frontend work unchanged
// (docs/metrics.md). They are recorded at the same points as Turbine's families, from
// the same measurements: one recorder, two names. Labels are Dynamo's: histograms and
// gauges carry model alone; the request counter carries model, endpoint (Dynamo's
// names: "anthropic_messages" for /v1/messages), request_type (stream, unary), status
// (success, error) and error_type ("" on success; dynamoErrorType).
const (
	dynamoRequests     = "dynamo_frontend_requests_total"              // counter {model,endpoint,request_type,status,error_type}
	dynamoInflight     = "dynamo_frontend_inflight_requests"           // gauge {model}: Turbine's inflight gauge, read at scrape time
	dynamoQueued       = "dynamo_frontend_queued_requests"             // gauge {model}: in flight and no token yet
	dynamoDuration     = "dynamo_frontend_request_duration_seconds"    // histogram {model}
	dynamoTTFT         = "dynamo_frontend_time_to_first_token_seconds" // histogram {model}
	dynamoITL          = "dynamo_frontend_inter_token_latency_seconds" // histogram {model}
	dynamoISL          = "dynamo_frontend_input_sequence_tokens"       // histogram {model}
	dynamoOSL          = "dynamo_frontend_output_sequence_tokens"      // histogram {model}
	dynamoCachedTokens = "dynamo_frontend_cached_tokens"               // histogram {model}
)

// Dynamo's default bucket layouts (its DYN_METRICS_*_{MIN,MAX,COUNT} defaults), so that
// histogram_quantile over Dynamo's and Turbine's frontends agree bucket for bucket.
var (
	dynamoDurationBuckets = dynamoLogBuckets(1, 512, 10)
	dynamoTTFTBuckets     = dynamoLogBuckets(0.001, 480, 18)
	dynamoITLBuckets      = dynamoLogBuckets(0.001, 2, 13)
	dynamoISLBuckets      = dynamoLogBuckets(50, 128000, 12) // also the cached tokens'
	dynamoOSLBuckets      = dynamoLogBuckets(50, 32000, 10)
)

// dynamoLogBuckets is Dynamo's generate_log_buckets: 0, then count-1 log-spaced upper
// bounds ending at max (the i-th is min·(max/min)^(i/(count-1)), i = 1..count-1; min
// itself is not one), each rounded to 2 significant figures, repeats dropped.
func dynamoLogBuckets(min, max float64, count int) []float64 {
	if count < 1 {
		return nil
	}
	out := []float64{0}
	for i := 1; i < count; i++ {
		v := math.Exp(math.Log(min) + (math.Log(max)-math.Log(min))*float64(i)/float64(count-1))
		out = append(out, roundSignificant(v, 2))
	}
	return slices.Compact(out)
}

// roundSignificant rounds v to n significant figures (Dynamo's round_to_sig_figs).
func roundSignificant(v float64, n int) float64 {
	if v == 0 {
		return 0
	}
	scale := math.Pow(10, float64(n)-1-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*scale) / scale
}

// dynamoEndpoint is Dynamo's endpoint label for one of Turbine's.
func dynamoEndpoint(endpoint string) string {
	if endpoint == endpointMessages {
		return "anthropic_messages"
	}
	return endpoint
}

// dynamoStatus is Dynamo's status label: success unless the request ended with an error.
func dynamoStatus(kind *ErrorKind) string {
	if kind == nil {
		return "success"
	}
	return "error"
}

// dynamoErrorType is Dynamo's error_type label for the catalogue kind that ended a
// request (nil: success, ""): validation, not_found, overload, unavailable,
// cancelled, not_implemented or internal.
func dynamoErrorType(kind *ErrorKind) string {
	if kind == nil {
		return ""
	}
	switch *kind {
	case KindInvalidJSON, KindInvalidType, KindMissingParameter, KindInvalidValue, KindContextLengthExceeded,
		KindBodyTooLarge, KindMethodNotAllowed, KindUnauthorized, KindUnsupportedEncoding, KindInvalidEncoding,
		KindAdminForbidden:
		return "validation"
	case KindModelNotFound, KindRouteNotFound:
		return "not_found"
	case KindAllBusy, KindOverloaded:
		return "overload"
	case KindNoWorkers, KindDraining, KindLoraNoSlot, KindLoraUnavailable, KindPlannerUnavailable:
		return "unavailable"
	case KindClientClosed, KindTimeout:
		return "cancelled"
	case KindUnsupported:
		return "not_implemented"
	}
	return "internal"
}

// queuedHold is a request's hold on Dynamo's queued gauge of its model: taken once,
// given back once, by whichever of its first tokens or its end comes first (the choices
// of an n > 1 request report first tokens from their own goroutines).
type queuedHold struct{ g atomic.Pointer[metrics.Gauge] }

// dynamoBegin counts rec (whose model is resolved) in Dynamo's gauges: its inflight
// gauge reads Turbine's (rec.inflight), and the queued gauge holds rec until its first
// token or its end (dynamoDequeue).
func (m *frontendMetrics) dynamoBegin(rec *requestRecord) {
	if g := rec.inflight; g != nil {
		m.set.GetOrCreateGauge(name(dynamoInflight, "model", rec.model), g.Get)
	}
	g := m.set.GetOrCreateGauge(name(dynamoQueued, "model", rec.model), nil)
	g.Inc()
	if old := rec.queued.g.Swap(g); old != nil {
		old.Dec()
	}
}

// dynamoDequeue takes rec out of the queued gauge (its first token came, or it ended);
// harmless when it is not in.
func (m *frontendMetrics) dynamoDequeue(rec *requestRecord) {
	if g := rec.queued.g.Swap(nil); g != nil {
		g.Dec()
	}
}
