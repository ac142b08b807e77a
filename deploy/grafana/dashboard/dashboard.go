// Package dashboard reads, checks and writes the Grafana dashboards of deploy/grafana
// (docs/grafana.md): the subset of Grafana's dashboard JSON model (schemaVersion 39,
// Grafana 10 and 11) that Turbine's dashboards use, the structural checks every
// dashboard passes, and the metric names its PromQL queries read.
//
// Everything here is pure: bytes or values in, values or errors out.
package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// DatasourceVar is the name of the Prometheus datasource template variable every
// panel and target uses as `${DS_PROMETHEUS}`.
const DatasourceVar = "DS_PROMETHEUS"

// Dashboard is one Grafana dashboard.
type Dashboard struct {
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Description   string      `json:"description,omitempty"`
	Tags          []string    `json:"tags"`
	Editable      bool        `json:"editable"`
	GraphTooltip  int         `json:"graphTooltip"`
	Refresh       string      `json:"refresh"`
	SchemaVersion int         `json:"schemaVersion"`
	Version       int         `json:"version"`
	Time          TimeRange   `json:"time"`
	Timezone      string      `json:"timezone"`
	Templating    Templating  `json:"templating"`
	Annotations   Annotations `json:"annotations"`
	Links         []any       `json:"links"`
	Panels        []Panel     `json:"panels"`
}

// TimeRange is the dashboard's default range, in Grafana's relative syntax ("now-1h").
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the template variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Annotations holds annotation queries (none in Turbine's dashboards).
type Annotations struct {
	List []any `json:"list"`
}

// Variable is a template variable: Type "datasource" (Query is the plugin id) or
// "query" (Query a label_values(...) call against Datasource).
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label,omitempty"`
	Type       string      `json:"type"`
	Query      any         `json:"query"`
	Definition string      `json:"definition,omitempty"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Refresh    int         `json:"refresh"`
	Multi      bool        `json:"multi"`
	IncludeAll bool        `json:"includeAll"`
	AllValue   string      `json:"allValue,omitempty"`
	Current    any         `json:"current"`
	Options    []any       `json:"options"`
	Hide       int         `json:"hide"`
	Sort       int         `json:"sort"`
	Regex      string      `json:"regex"`
}

// Datasource names a datasource by plugin type and uid (here always "${DS_PROMETHEUS}").
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// GridPos places a panel on Grafana's 24-column grid; H and Y are in grid rows (30 px).
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Panel is one panel: Type "timeseries" or "stat".
type Panel struct {
	ID          int          `json:"id"`
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Description string       `json:"description,omitempty"`
	Datasource  *Datasource  `json:"datasource,omitempty"`
	GridPos     *GridPos     `json:"gridPos,omitempty"`
	FieldConfig *FieldConfig `json:"fieldConfig,omitempty"`
	Options     any          `json:"options,omitempty"`
	Targets     []Target     `json:"targets"`
}

// FieldConfig carries the panel's unit (Grafana unit ids: "s", "reqps", "percentunit",
// "bytes", "Bps", "short") and its bounds.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

// FieldDefaults is the part of fieldConfig.defaults Turbine sets.
type FieldDefaults struct {
	Unit     string         `json:"unit,omitempty"`
	Min      *float64       `json:"min,omitempty"`
	Max      *float64       `json:"max,omitempty"`
	Decimals *int           `json:"decimals,omitempty"`
	Custom   map[string]any `json:"custom,omitempty"`
}

// Target is one PromQL query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Datasource   *Datasource `json:"datasource,omitempty"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
	Instant      bool        `json:"instant,omitempty"`
	Range        bool        `json:"range,omitempty"`
}

// Parse decodes one dashboard JSON document.
func Parse(b []byte) (*Dashboard, error) {
	var d Dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if dec.More() {
		return nil, errors.New("dashboard: data after the JSON object")
	}
	return &d, nil
}

// Marshal encodes d as Grafana writes it: indented by two spaces, with a final newline.
func Marshal(d *Dashboard) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return buf.Bytes(), nil
}

// builtins are Grafana's own variables a query may use.
var builtins = map[string]bool{
	"__rate_interval": true, "__interval": true, "__interval_ms": true, "__range": true,
	"__range_s": true, "__range_ms": true, "__from": true, "__to": true, "__dashboard": true,
}

// varRef matches $name, ${name} and ${name:format} references.
var varRef = regexp.MustCompile(`\$(?:\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|([A-Za-z0-9_]+))`)

// Vars lists the variable names s references, in order of appearance.
func Vars(s string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		n := m[1]
		if n == "" {
			n = m[2]
		}
		out = append(out, n)
	}
	return out
}

// Substitution gives values to the variables a query references before it is parsed
// or evaluated. Values are inserted as they are (a regex for =~ matchers).
type Substitution map[string]string

// DefaultSubstitution selects every model and worker and uses a one-minute rate window:
// what a query looks like to Prometheus with "All" chosen.
func DefaultSubstitution() Substitution {
	return Substitution{
		"model": ".*", "worker": ".*",
		"__rate_interval": "1m", "__interval": "15s", "__range": "1h",
	}
}

// Apply replaces every variable reference of s that sub names.
func (sub Substitution) Apply(s string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		n := Vars(ref)[0]
		if v, ok := sub[n]; ok {
			return v
		}
		return ref
	})
}

// ParseQuery substitutes sub into expr and parses it as PromQL.
func ParseQuery(expr string, sub Substitution) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(sub.Apply(expr))
}

// histogramSuffixes are the series suffixes of a classic Prometheus histogram family.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// Selector is one metric a query reads: the name in the query (Series) and the family
// that exports it (Family: Series less a histogram suffix when Histogram is true).
type Selector struct {
	Series    string
	Family    string
	Histogram bool
}

// MetricNames lists the distinct metric names (VectorSelector names, and __name__
// equality matchers) of a parsed query, sorted.
func MetricNames(e parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			seen[vs.Name] = true
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" && m.Type == labels.MatchEqual {
				seen[m.Value] = true
			}
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Resolve maps a series name of a query to the family that exports it, given the
// exported families and their types ("counter", "gauge", "histogram", "summary",
// "untyped"). ok is false when no exported family has it: neither the name itself nor,
// for a name ending in _bucket, _sum or _count, a histogram (or, for _sum and _count, a
// summary) family of the name less that suffix.
func Resolve(series string, families map[string]string) (Selector, bool) {
	if _, ok := families[series]; ok {
		return Selector{Series: series, Family: series}, true
	}
	for _, suf := range histogramSuffixes {
		base, found := strings.CutSuffix(series, suf)
		if !found {
			continue
		}
		switch families[base] {
		case "histogram":
			return Selector{Series: series, Family: base, Histogram: true}, true
		case "summary":
			if suf != "_bucket" {
				return Selector{Series: series, Family: base, Histogram: true}, true
			}
		}
	}
	return Selector{Series: series}, false
}

// Problem is one thing wrong with a dashboard, located by panel when it has one.
type Problem struct {
	Panel string // panel title ("" for the dashboard itself)
	What  string
}

func (p Problem) String() string {
	if p.Panel == "" {
		return p.What
	}
	return fmt.Sprintf("panel %q: %s", p.Panel, p.What)
}

// Check lists what is structurally wrong with d: a missing uid or title, a missing
// DS_PROMETHEUS, model or worker variable, a panel without datasource, gridPos or
// targets, overlapping or off-grid panels, duplicate panel ids, a reference to a
// variable that does not exist, and a query that does not parse (after
// DefaultSubstitution). No problems: nil.
func Check(d *Dashboard) []Problem {
	var ps []Problem
	add := func(panel, format string, args ...any) {
		ps = append(ps, Problem{Panel: panel, What: fmt.Sprintf(format, args...)})
	}
	if d.UID == "" || len(d.UID) > 40 {
		add("", "uid %q: want 1 to 40 characters", d.UID)
	}
	if d.Title == "" {
		add("", "no title")
	}
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		if defined[v.Name] {
			add("", "template variable %q defined twice", v.Name)
		}
		defined[v.Name] = true
		if v.Datasource != nil {
			for _, r := range Vars(v.Datasource.UID) {
				if !defined[r] && !builtins[r] {
					add("", "template variable %q uses undefined variable $%s", v.Name, r)
				}
			}
		}
		if sel, ok := VariableQuery(v); ok {
			if _, err := ParseQuery(sel, DefaultSubstitution()); err != nil {
				add("", "template variable %q: %v", v.Name, err)
			}
		} else if v.Type == "query" {
			add("", "template variable %q: want a label_values(SELECTOR, LABEL) query", v.Name)
		}
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				for _, r := range Vars(s) {
					if !defined[r] && !builtins[r] {
						add("", "template variable %q uses undefined variable $%s", v.Name, r)
					}
				}
			}
		}
	}
	for _, want := range []string{DatasourceVar, "model", "worker"} {
		if !defined[want] {
			add("", "no %q template variable", want)
		}
	}
	sub := DefaultSubstitution()
	ids := map[int]bool{}
	var boxes []GridPos
	for _, p := range d.Panels {
		title := p.Title
		if title == "" {
			title = fmt.Sprintf("#%d", p.ID)
			add(title, "no title")
		}
		if ids[p.ID] {
			add(title, "duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			add(title, "no gridPos (or zero width or height)")
		} else {
			g := *p.GridPos
			if g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				add(title, "gridPos %+v outside the 24-column grid", g)
			}
			for _, o := range boxes {
				if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
					add(title, "gridPos %+v overlaps another panel's %+v", g, o)
				}
			}
			boxes = append(boxes, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID == "" {
			add(title, "no datasource")
		} else {
			checkDSVars(p.Datasource.UID, defined, func(r string) { add(title, "datasource uses undefined variable $%s", r) })
		}
		if len(p.Targets) == 0 {
			add(title, "no targets")
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			if t.RefID == "" || refs[t.RefID] {
				add(title, "target refId %q empty or repeated", t.RefID)
			}
			refs[t.RefID] = true
			if t.Datasource != nil {
				checkDSVars(t.Datasource.UID, defined, func(r string) { add(title, "target %s datasource uses undefined variable $%s", t.RefID, r) })
			}
			for _, r := range Vars(t.Expr) {
				if !defined[r] && !builtins[r] {
					add(title, "target %s uses undefined variable $%s", t.RefID, r)
				}
			}
			for _, r := range Vars(t.LegendFormat) {
				add(title, "target %s legend uses $%s (legends take {{label}})", t.RefID, r)
			}
			if _, err := ParseQuery(t.Expr, sub); err != nil {
				add(title, "target %s: %v", t.RefID, err)
			}
		}
	}
	return ps
}

func checkDSVars(uid string, defined map[string]bool, bad func(string)) {
	for _, r := range Vars(uid) {
		if !defined[r] && !builtins[r] {
			bad(r)
		}
	}
}

// Use is one metric name one panel's target reads.
type Use struct {
	Panel  string
	RefID  string
	Series string
}

// Uses lists every metric name d reads: its query variables' (Panel "variable $name")
// and every panel target's, in order. A target whose
// query does not parse is left out (Check reports it).
func Uses(d *Dashboard) []Use {
	var out []Use
	sub := DefaultSubstitution()
	for _, v := range d.Templating.List {
		sel, ok := VariableQuery(v)
		if !ok {
			continue
		}
		if e, err := ParseQuery(sel, sub); err == nil {
			for _, n := range MetricNames(e) {
				out = append(out, Use{Panel: "variable $" + v.Name, Series: n})
			}
		}
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			e, err := ParseQuery(t.Expr, sub)
			if err != nil {
				continue
			}
			for _, n := range MetricNames(e) {
				out = append(out, Use{Panel: p.Title, RefID: t.RefID, Series: n})
			}
		}
	}
	return out
}

// labelValues matches a label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// VariableQuery returns the PromQL selector of a query variable's
// label_values(SELECTOR, LABEL) query; ok is false for other variables.
func VariableQuery(v Variable) (selector string, ok bool) {
	if v.Type != "query" {
		return "", false
	}
	var q string
	switch x := v.Query.(type) {
	case string:
		q = x
	case map[string]any:
		q, _ = x["query"].(string)
	}
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// UniqueUIDs reports the uids that more than one of ds carries.
func UniqueUIDs(ds map[string]*Dashboard) []string {
	by := map[string][]string{}
	for file, d := range ds {
		by[d.UID] = append(by[d.UID], file)
	}
	var out []string
	for uid, files := range by {
		if len(files) > 1 {
			slices.Sort(files)
			out = append(out, fmt.Sprintf("uid %q in %s", uid, strings.Join(files, ", ")))
		}
	}
	sort.Strings(out)
	return out
}
