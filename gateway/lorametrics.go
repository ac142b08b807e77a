package gateway

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metric families of LoRA adapters (docs/reference.md §26.3), written with their HELP
// text on /metrics. `model` is the base model; `lora` the adapter, one label value per
// adapter name for the first MaxLoraMetricLabels names this server counts, the others
// together under LoraOtherLabel, so that hundreds of adapters cannot multiply the series
// without bound.
const (
	metricLoraRequests     = "turbine_frontend_lora_requests_total"
	metricLoraTTFT         = "turbine_frontend_lora_time_to_first_token_seconds"
	metricLoraPromptTokens = "turbine_frontend_lora_prompt_tokens_total"
	metricLoraCachedTokens = "turbine_frontend_lora_cached_tokens_total"
	metricLoraLoads        = "turbine_frontend_lora_loads_total"
	metricLoraUnloads      = "turbine_frontend_lora_unloads_total"
	metricLoraPlacements   = "turbine_frontend_lora_placements_total"
)

// loraFamilies are the families above in the order /metrics writes them: name, type and
// HELP text.
var loraFamilies = []struct{ name, typ, help string }{
	{metricLoraRequests, "counter", "requests naming a LoRA adapter, by base model, adapter and HTTP status"},
	{metricLoraTTFT, "histogram", "time to the first token of requests naming a LoRA adapter (seconds)"},
	{metricLoraPromptTokens, "counter", "prompt tokens of finished requests naming a LoRA adapter"},
	{metricLoraCachedTokens, "counter", "of those prompt tokens, the ones the engine found in its prefix cache (hit rate: this over the prompt tokens)"},
	{metricLoraLoads, "counter", "POST /v1/load_lora_adapter answers by base model and outcome (ok, partial: some workers failed, or the error code)"},
	{metricLoraUnloads, "counter", "POST /v1/unload_lora_adapter answers by base model and outcome (ok, partial, or the error code)"},
	{metricLoraPlacements, "counter", "LoadLora sent to a worker by a load, by base model and the worker's answer (ok, invalid, no_slot, engine)"},
}

const (
	// MaxLoraMetricLabels is how many adapter names get a `lora` label value of their own.
	MaxLoraMetricLabels = 64
	// LoraOtherLabel is the `lora` label of every adapter past MaxLoraMetricLabels.
	LoraOtherLabel = "(other)"
)

// loraMetrics records the LoRA families into a set of their own (written with HELP text
// by write).
type loraMetrics struct {
	set *metrics.Set

	mu     sync.Mutex
	labels map[string]bool // adapter names with a label value of their own
}

func newLoraMetrics() *loraMetrics {
	return &loraMetrics{set: metrics.NewSet(), labels: map[string]bool{}}
}

// label is the `lora` label value of adapter name: its name while fewer than
// MaxLoraMetricLabels names have one, else LoraOtherLabel.
func (m *loraMetrics) label(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.labels[name] {
		return name
	}
	if len(m.labels) >= MaxLoraMetricLabels {
		return LoraOtherLabel
	}
	m.labels[name] = true
	return name
}

// requestDone counts a finished request naming an adapter (nothing for the others).
func (m *loraMetrics) requestDone(rec *requestRecord) {
	if rec.lora == "" {
		return
	}
	lora := m.label(rec.lora)
	m.set.GetOrCreateCounter(name(metricLoraRequests, "model", rec.model, "lora", lora, "status", strconv.Itoa(rec.status))).Inc()
	if rec.generated {
		m.set.GetOrCreateCounter(name(metricLoraPromptTokens, "model", rec.model, "lora", lora)).Add(rec.usage.PromptTokens)
		m.set.GetOrCreateCounter(name(metricLoraCachedTokens, "model", rec.model, "lora", lora)).
			Add(rec.usage.PromptTokensDetails.CachedTokens)
	}
}

// observeLoraTTFT records the time to the first token of a request naming an adapter.
func (m *frontendMetrics) observeLoraTTFT(rec *requestRecord, d time.Duration) {
	if rec.lora == "" {
		return
	}
	m.lora.set.GetOrCreatePrometheusHistogramExt(name(metricLoraTTFT, "model", rec.model, "lora", m.lora.label(rec.lora)),
		ttftBuckets).Update(d.Seconds())
}

// loraAdminDone counts an answer of an adapter route (model "" when the body named no
// served base model).
func (m *frontendMetrics) loraAdminDone(endpoint, model, outcome string) {
	family := metricLoraUnloads
	if endpoint == endpointLoadLora {
		family = metricLoraLoads
	}
	m.lora.set.GetOrCreateCounter(name(family, "model", model, "outcome", outcome)).Inc()
}

// loraPlacements counts the LoadLora a load sent, by each worker's answer.
func (m *frontendMetrics) loraPlacements(model string, res *LoraResult) {
	for _, w := range res.Workers {
		if !w.Held {
			m.lora.set.GetOrCreateCounter(name(metricLoraPlacements, "model", model, "outcome", loraFailureLabel(w.Failure))).Inc()
		}
	}
}

// write writes the LoRA families that have series, each under its own HELP and TYPE
// lines (whatever metadata the set writes is replaced).
func (m *loraMetrics) write(w io.Writer) {
	var buf bytes.Buffer
	m.set.WritePrometheus(&buf)
	if buf.Len() == 0 {
		return
	}
	byFamily := map[string][]string{}
	for _, line := range strings.Split(buf.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, f := range loraFamilies {
			if rest, ok := strings.CutPrefix(line, f.name); ok && familyLine(rest, f.typ) {
				byFamily[f.name] = append(byFamily[f.name], line)
				break
			}
		}
	}
	for _, f := range loraFamilies {
		if lines := byFamily[f.name]; len(lines) > 0 {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s\n", f.name, f.help, f.name, f.typ, strings.Join(lines, "\n"))
		}
	}
}

// familyLine reports whether a sample line whose metric name starts with a family's
// name, rest following it, belongs to that family: the name ends there (a label set or
// the value follows), or, for a histogram, it goes on with _bucket, _sum or _count.
func familyLine(rest, typ string) bool {
	if typ == "histogram" {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if r, ok := strings.CutPrefix(rest, suffix); ok {
				rest = r
				break
			}
		}
	}
	return strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")
}
