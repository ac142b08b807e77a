package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

// load stores the scrapes as Prometheus' scraper would (histograms as _bucket, _sum and
// _count series).
func load(ss []scrape) (storage.Queryable, error) {
	st := newMemStore()
	for _, s := range ss {
		samples, err := parseSamples(s.text)
		if err != nil {
			return nil, fmt.Errorf("scrape at %s: %w", s.at.Format(time.RFC3339), err)
		}
		for _, smp := range samples {
			st.add(smp.lset, s.at.UnixMilli(), smp.v)
		}
	}
	return st, nil
}

type sample struct {
	lset labels.Labels
	v    float64
}

// parseSamples flattens a /metrics page into series the way Prometheus stores them.
func parseSamples(text []byte) ([]sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out []sample
	add := func(name string, m *dto.Metric, v float64, extra ...string) {
		b := labels.NewScratchBuilder(len(m.GetLabel()) + 2)
		b.Add(labels.MetricName, name)
		for _, l := range m.GetLabel() {
			b.Add(l.GetName(), l.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			b.Add(extra[i], extra[i+1])
		}
		b.Sort()
		out = append(out, sample{lset: b.Labels(), v: v})
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				inf := false
				for _, bk := range h.GetBucket() {
					le := bk.GetUpperBound()
					inf = inf || math.IsInf(le, 1)
					add(name+"_bucket", m, float64(bk.GetCumulativeCount()), "le", formatLe(le))
				}
				if !inf {
					add(name+"_bucket", m, float64(h.GetSampleCount()), "le", "+Inf")
				}
				add(name+"_sum", m, h.GetSampleSum())
				add(name+"_count", m, float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				add(name+"_sum", m, s.GetSampleSum())
				add(name+"_count", m, float64(s.GetSampleCount()))
			}
		}
	}
	return out, nil
}

func formatLe(le float64) string {
	if math.IsInf(le, 1) {
		return "+Inf"
	}
	return model.SampleValue(le).String()
}

// series is one line of a panel: its legend and its points (unix seconds, value; NaN
// where the query had no value).
type series struct {
	legend string
	t, v   []float64
}

// panelData is what one panel's targets evaluated to.
type panelData struct {
	series []series
	err    error
}

// evaluate runs every panel's targets as range queries over [start, end].
func evaluate(ctx context.Context, db storage.Queryable, d *dashboard.Dashboard, sub dashboard.Substitution, start, end time.Time, step time.Duration) (map[int]panelData, error) {
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	out := map[int]panelData{}
	for _, p := range d.Panels {
		var pd panelData
		for _, tg := range p.Targets {
			q, err := eng.NewRangeQuery(ctx, db, nil, sub.Apply(tg.Expr), start, end, step)
			if err != nil {
				return nil, fmt.Errorf("panel %q target %s: %w", p.Title, tg.RefID, err)
			}
			res := q.Exec(ctx)
			if res.Err != nil {
				q.Close()
				return nil, fmt.Errorf("panel %q target %s: %w", p.Title, tg.RefID, res.Err)
			}
			mat, err := res.Matrix()
			if err != nil {
				q.Close()
				return nil, err
			}
			sort.Slice(mat, func(i, j int) bool { return labels.Compare(mat[i].Metric, mat[j].Metric) < 0 })
			for _, s := range mat {
				sr := series{legend: legend(tg.LegendFormat, s.Metric)}
				for _, f := range s.Floats {
					sr.t = append(sr.t, float64(f.T)/1000)
					sr.v = append(sr.v, f.F)
				}
				pd.series = append(pd.series, sr)
			}
			q.Close()
		}
		out[p.ID] = pd
	}
	return out, nil
}

// legend expands Grafana's {{label}} references; an empty format shows the series'
// labels as Grafana does ({} for a series without labels becomes "value").
func legend(format string, l labels.Labels) string {
	if format == "" {
		s := l.String()
		if s == "{}" {
			return "value"
		}
		return s
	}
	out := format
	l.Range(func(lb labels.Label) {
		out = strings.ReplaceAll(out, "{{"+lb.Name+"}}", lb.Value)
		out = strings.ReplaceAll(out, "{{ "+lb.Name+" }}", lb.Value)
	})
	return out
}
