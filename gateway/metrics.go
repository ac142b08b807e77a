package gateway

import (
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/turbine-llm/turbine/internal/promlabel"
)

// Metric families of the frontend (docs/reference.md §11), named in the style of Dynamo's and
// vLLM's frontends with the prefix turbine_frontend_; Dynamo's own names are recorded
// alongside at the same points (dynamo_metrics.go, docs/metrics.md). Histograms are Prometheus
// histograms (le buckets) so that histogram_quantile works on them. Units: seconds and
// tokens.
const (
	metricRequests     = "turbine_frontend_requests_total"              // counter {model,endpoint,request_type,status}
	metricInflight     = "turbine_frontend_inflight_requests"           // gauge {model}
	metricDuration     = "turbine_frontend_request_duration_seconds"    // histogram {model,endpoint}
	metricTTFT         = "turbine_frontend_time_to_first_token_seconds" // histogram {model}
	metricITL          = "turbine_frontend_inter_token_latency_seconds" // histogram {model}
	metricISL          = "turbine_frontend_input_sequence_tokens"       // histogram {model}
	metricOSL          = "turbine_frontend_output_sequence_tokens"      // histogram {model}
	metricCachedTokens = "turbine_frontend_cached_tokens"               // histogram {model}
	metricRejected     = "turbine_frontend_rejected_requests_total"     // counter {model,reason}: 503s by code; model "" for server_overloaded refused on arrival
	metricCancelled    = "turbine_frontend_cancelled_requests_total"    // counter {model,endpoint}
	metricQueued       = "turbine_frontend_queued_requests_total"       // counter {model}: requests that waited in the queue (busy workers or no slot free)
	metricQueueDepth   = "turbine_frontend_queue_depth"                 // gauge {model}: requests waiting now
	// metricMalformedToolCalls counts tool calls the model wrote that could not be parsed
	// (unterminated, arguments not JSON, unknown function): they reached the client as
	// content.
	metricMalformedToolCalls = "turbine_frontend_malformed_tool_calls_total" // counter {model}
)

// Histogram buckets (upper bounds).
var (
	durationBuckets = metrics.ExponentialBuckets(0.005, 2, 17)  // 5 ms .. 328 s
	ttftBuckets     = metrics.ExponentialBuckets(0.001, 2, 18)  // 1 ms .. 131 s
	itlBuckets      = metrics.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms .. 4.1 s
	tokenBuckets    = metrics.ExponentialBuckets(1, 2, 18)      // 1 .. 131072 tokens
)

// frontendMetrics records into a metrics.Set the server owns.
type frontendMetrics struct {
	set  *metrics.Set
	lora *loraMetrics // the LoRA adapters' families (lorametrics.go)
	obs  Observer     // Config.Observer (nil: none); it gets the same measurements
}

func newFrontendMetrics(obs Observer) *frontendMetrics {
	return &frontendMetrics{set: metrics.NewSet(), lora: newLoraMetrics(), obs: obs}
}

// name builds `family{k1="v1",...}` from label pairs, escaping values as the Prometheus
// text format requires.
func name(family string, kv ...string) string {
	if len(kv) == 0 {
		return family
	}
	var b strings.Builder
	b.WriteString(family)
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(promlabel.Escape(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func (m *frontendMetrics) inflight(model string) *metrics.Gauge {
	return m.set.GetOrCreateGauge(name(metricInflight, "model", model), nil)
}

func (m *frontendMetrics) hist(family string, buckets []float64, kv ...string) *metrics.PrometheusHistogram {
	return m.set.GetOrCreatePrometheusHistogramExt(name(family, kv...), buckets)
}

// begin counts rec's generation in flight for its model (rec.model is resolved):
// rec.inflight, which Server.end decrements, and Dynamo's gauges (dynamo_metrics.go).
func (m *frontendMetrics) begin(rec *requestRecord) {
	rec.inflight = m.inflight(rec.model)
	rec.inflight.Inc()
	m.dynamoBegin(rec)
}

// observeTTFT records rec's first token, d after its arrival.
func (m *frontendMetrics) observeTTFT(rec *requestRecord, d time.Duration) {
	model := rec.model
	m.hist(metricTTFT, ttftBuckets, "model", model).Update(d.Seconds())
	m.hist(dynamoTTFT, dynamoTTFTBuckets, "model", model).Update(d.Seconds())
	m.dynamoDequeue(rec)
	if m.obs != nil && model != "" {
		m.obs.ObserveTTFT(model, d)
	}
}

// observeITL records the gap since the previous chunk spread over its n tokens.
func (m *frontendMetrics) observeITL(model string, gap time.Duration, n int) {
	if n <= 0 {
		return
	}
	h := m.hist(metricITL, itlBuckets, "model", model)
	dh := m.hist(dynamoITL, dynamoITLBuckets, "model", model)
	per := gap.Seconds() / float64(n)
	for range n {
		h.Update(per)
		dh.Update(per)
	}
	if m.obs != nil && model != "" {
		m.obs.ObserveITL(model, gap, n)
	}
}

// requestDone records a finished request. model is "" when the request never resolved
// to a served model (its series then carry model="").
func (m *frontendMetrics) requestDone(rec *requestRecord, now time.Time) {
	stream := "unary"
	if rec.stream {
		stream = "stream"
	}
	status := strconv.Itoa(rec.status)
	m.set.GetOrCreateCounter(name(metricRequests, "model", rec.model, "endpoint", rec.endpoint, "request_type", stream, "status", status)).Inc()
	m.set.GetOrCreateCounter(name(dynamoRequests, "model", rec.model, "endpoint", dynamoEndpoint(rec.endpoint), "request_type", stream,
		"status", dynamoStatus(rec.kind), "error_type", dynamoErrorType(rec.kind))).Inc()
	took := now.Sub(rec.start).Seconds()
	m.hist(metricDuration, durationBuckets, "model", rec.model, "endpoint", rec.endpoint).Update(took)
	m.hist(dynamoDuration, dynamoDurationBuckets, "model", rec.model).Update(took)
	m.dynamoDequeue(rec)
	if rec.kind != nil {
		switch *rec.kind {
		case KindNoWorkers, KindAllBusy, KindDraining, KindOverloaded:
			m.set.GetOrCreateCounter(name(metricRejected, "model", rec.model, "reason", rec.kind.Entry().Code)).Inc()
		case KindClientClosed:
			m.set.GetOrCreateCounter(name(metricCancelled, "model", rec.model, "endpoint", rec.endpoint)).Inc()
		}
	}
	m.lora.requestDone(rec)
	if rec.generated {
		m.hist(metricISL, tokenBuckets, "model", rec.model).Update(float64(rec.usage.PromptTokens))
		m.hist(metricOSL, tokenBuckets, "model", rec.model).Update(float64(rec.usage.CompletionTokens))
		m.hist(metricCachedTokens, tokenBuckets, "model", rec.model).Update(float64(rec.usage.PromptTokensDetails.CachedTokens))
		m.hist(dynamoISL, dynamoISLBuckets, "model", rec.model).Update(float64(rec.usage.PromptTokens))
		m.hist(dynamoOSL, dynamoOSLBuckets, "model", rec.model).Update(float64(rec.usage.CompletionTokens))
		m.hist(dynamoCachedTokens, dynamoISLBuckets, "model", rec.model).Update(float64(rec.usage.PromptTokensDetails.CachedTokens))
		if m.obs != nil && rec.model != "" {
			m.obs.ObserveRequest(rec.model, rec.usage.PromptTokens, rec.usage.CompletionTokens)
		}
	}
}

// queued counts one request entering model's queue q, and exposes q's length for model
// as the queue depth gauge (created on the model's first queued request).
// malformedToolCalls counts n tool calls returned as content.
func (m *frontendMetrics) malformedToolCalls(model string, n int) {
	m.set.GetOrCreateCounter(name(metricMalformedToolCalls, "model", model)).Add(n)
}

func (m *frontendMetrics) queued(model string, q *queue) {
	m.set.GetOrCreateCounter(name(metricQueued, "model", model)).Inc()
	m.set.GetOrCreateGauge(name(metricQueueDepth, "model", model), func() float64 { return float64(q.len(model)) })
}
