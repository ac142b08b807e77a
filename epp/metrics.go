package epp

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics are the EPP's families (docs/epp.md, "Metrics").
type Metrics struct {
	set        *metrics.Set
	pickTime   *metrics.Histogram
	aborted    *metrics.Counter
	prompt     *metrics.Counter
	completion *metrics.Counter
	cached     *metrics.Counter
}

// NewMetrics returns empty families in their own set.
func NewMetrics() *Metrics {
	s := metrics.NewSet()
	return &Metrics{set: s,
		pickTime:   s.NewHistogram("turbine_epp_pick_duration_seconds"),
		aborted:    s.NewCounter("turbine_epp_aborted_requests_total"),
		prompt:     s.NewCounter("turbine_epp_prompt_tokens_total"),
		completion: s.NewCounter("turbine_epp_completion_tokens_total"),
		cached:     s.NewCounter("turbine_epp_cached_tokens_total"),
	}
}

// Set is the metric set (to register with metrics.RegisterSet or write).
func (m *Metrics) Set() *metrics.Set { return m.set }

// WritePrometheus writes the families in Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) { m.set.WritePrometheus(w) }

func (m *Metrics) picked(p *Pick, perr *Error, took time.Duration) {
	m.pickTime.Update(took.Seconds())
	if perr != nil {
		return // counted in done, with the Machine's own answers (413)
	}
	how := "load"
	if p.Release.Turbine {
		how = "router"
	}
	m.set.GetOrCreateCounter(`turbine_epp_picks_total{by="` + how + `"}`).Inc()
}

func (m *Metrics) done(o *Outcome) {
	if o.Aborted {
		m.aborted.Inc()
	}
	if o.Err != nil {
		m.set.GetOrCreateCounter(fmt.Sprintf(`turbine_epp_immediate_responses_total{code="%d"}`, o.Err.HTTPStatus())).Inc()
	}
	if o.Pick != nil && o.Status != 0 && o.Status != 200 {
		// The served endpoint comes from the gateway: only an "ip:port" is taken as a
		// label value (any other string could break the series); else the primary.
		ep := o.Pick.Release.Endpoint
		if _, err := netip.ParseAddrPort(o.Served); err == nil {
			ep = o.Served
		}
		m.set.GetOrCreateCounter(`turbine_epp_model_server_errors_total{endpoint="` + ep + `",code="` + strconv.Itoa(o.Status) + `"}`).Inc()
	}
	if o.HasUsage {
		m.prompt.Add(o.Usage.PromptTokens)
		m.completion.Add(o.Usage.CompletionTokens)
		m.cached.Add(o.Usage.CachedTokens)
	}
}
