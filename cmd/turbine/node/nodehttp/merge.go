package nodehttp

import (
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// WorkerLabel is the label /metrics adds to every sample an engine exported: the id of
// the worker that runs it (docs/metrics.md).
const WorkerLabel = "worker"

// exportedPrefix renames a label an engine already calls WorkerLabel, as Prometheus
// does with honor_labels false: "worker" becomes "exported_worker".
const exportedPrefix = "exported_"

// ContentType is the media type /metrics answers with: the Prometheus text format 0.0.4.
var ContentType = string(expfmt.NewFormat(expfmt.TypeTextPlain))

// Parse reads a Prometheus text exposition (format 0.0.4, as vLLM, SGLang and the mock
// engine write it; UTF-8 names allowed) into its families by name. Errors: the first
// malformed line (an expfmt.ParseError) or a read error; nothing is returned with an
// error, since a page cut short would report counters that went backwards.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	return fams, nil
}

// Scrape is one engine's exposition, parsed: the families of worker Worker's engine.
type Scrape struct {
	Worker   string
	Families map[string]*dto.MetricFamily
}

// Merged is the node's /metrics page: every family once, sorted by name.
type Merged struct {
	Families []*dto.MetricFamily
	// Conflicts counts, by worker, the engine families left out because a family of the
	// same name came first with another type (the node's own, or an earlier worker's:
	// workers are taken in the order given).
	Conflicts map[string]int
}

// Merge builds the node's page from its own families and its engines' scrapes. Each
// engine sample gets the label worker="<worker id>" (a label the engine already named
// "worker" is kept as "exported_worker"); the node's own samples are left as they are.
// A family exported by the node and by engines, or by several engines, appears once
// with the HELP of the first that has one and the type of the first: a later family of
// another type is left out and counted in Conflicts. Within a family the node's own
// samples come first, then each worker's in the order of scrapes. The inputs are not
// modified.
func Merge(own map[string]*dto.MetricFamily, scrapes []Scrape) Merged {
	out := Merged{Conflicts: map[string]int{}}
	byName := map[string]*dto.MetricFamily{}
	add := func(f *dto.MetricFamily, worker string) bool {
		m, ok := byName[f.GetName()]
		if !ok {
			m = &dto.MetricFamily{Name: proto.String(f.GetName()), Type: f.Type, Unit: f.Unit}
			byName[f.GetName()] = m
		} else if m.GetType() != f.GetType() {
			return false
		}
		if m.GetHelp() == "" && f.GetHelp() != "" {
			m.Help = proto.String(f.GetHelp())
		}
		for _, s := range f.GetMetric() {
			s = proto.Clone(s).(*dto.Metric)
			if worker != "" {
				s.Label = withWorker(s.GetLabel(), worker)
			}
			m.Metric = append(m.Metric, s)
		}
		return true
	}
	for _, name := range sortedNames(own) {
		add(own[name], "")
	}
	for _, sc := range scrapes {
		for _, name := range sortedNames(sc.Families) {
			if !add(sc.Families[name], sc.Worker) {
				out.Conflicts[sc.Worker]++
			}
		}
	}
	for _, name := range sortedNames(byName) {
		out.Families = append(out.Families, byName[name])
	}
	return out
}

// withWorker returns labels with worker="<worker>" added, sorted by name. A label the
// engine already named worker is renamed exported_worker (exported_exported_worker when
// that name is taken too, and so on), as Prometheus does.
func withWorker(labels []*dto.LabelPair, worker string) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(labels)+1)
	taken := func(name string) bool {
		return slices.ContainsFunc(labels, func(l *dto.LabelPair) bool { return l.GetName() == name })
	}
	for _, l := range labels {
		if l.GetName() == WorkerLabel {
			name := exportedPrefix + WorkerLabel
			for taken(name) {
				name = exportedPrefix + name
			}
			l = &dto.LabelPair{Name: proto.String(name), Value: l.Value}
		}
		out = append(out, l)
	}
	out = append(out, &dto.LabelPair{Name: proto.String(WorkerLabel), Value: proto.String(worker)})
	slices.SortStableFunc(out, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

func sortedNames(m map[string]*dto.MetricFamily) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Write writes families in the Prometheus text format 0.0.4 (ContentType), each with
// its HELP and TYPE lines once. A name the format cannot carry is escaped with
// underscores (model.NameEscapingScheme). Errors: the writer's, or a family the encoder
// refuses (its name is in the error).
func Write(w io.Writer, families []*dto.MetricFamily) error {
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("nodehttp: family %q: %w", f.GetName(), err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		return c.Close()
	}
	return nil
}
