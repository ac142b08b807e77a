package main

import (
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/deploy/grafana/dashboard"
)

// File is one generated dashboard: its file name under deploy/grafana and its JSON.
type File struct {
	Name string
	Data []byte
}

// spec is one dashboard before layout.
type spec struct {
	file, uid, title, desc string
	tags                   []string
	panels                 []panel
}

// panel is one panel before layout: kind "timeseries" or "stat", width in grid columns
// (of 24) and height in grid rows (0: 8 for a time series, 4 for a stat). A panel with
// newRow starts a new row of the grid.
type panel struct {
	kind, title, desc, unit string
	w, h                    int
	newRow                  bool
	min, max                *float64
	targets                 []target
}

type target struct {
	expr, legend string
}

var ds = &dashboard.Datasource{Type: "prometheus", UID: "${" + dashboard.DatasourceVar + "}"}

func f(v float64) *float64 { return &v }

// Render lays out and encodes every dashboard of specs.go.
func Render() ([]File, error) {
	var out []File
	for _, s := range specs() {
		d := build(s)
		if ps := dashboard.Check(d); len(ps) > 0 {
			var b strings.Builder
			for _, p := range ps {
				fmt.Fprintf(&b, "\n  %s", p)
			}
			return nil, fmt.Errorf("%s:%s", s.file, b.String())
		}
		data, err := dashboard.Marshal(d)
		if err != nil {
			return nil, err
		}
		out = append(out, File{Name: s.file, Data: data})
	}
	return out, nil
}

// build lays the panels out left to right, wrapping at 24 columns, each row as tall as
// its tallest panel.
func build(s spec) *dashboard.Dashboard {
	d := &dashboard.Dashboard{
		UID: s.uid, Title: s.title, Description: s.desc, Tags: s.tags, Editable: true,
		GraphTooltip: 1, Refresh: "30s", SchemaVersion: 39, Version: 1,
		Time: dashboard.TimeRange{From: "now-1h", To: "now"}, Timezone: "browser",
		Templating:  dashboard.Templating{List: variables()},
		Annotations: dashboard.Annotations{List: []any{}}, Links: []any{},
	}
	x, y, rowH := 0, 0, 0
	for i, p := range s.panels {
		h := p.h
		if h == 0 {
			h = 8
			if p.kind == "stat" {
				h = 4
			}
		}
		if x+p.w > 24 || (p.newRow && x > 0) {
			x, y, rowH = 0, y+rowH, 0
		}
		dp := dashboard.Panel{
			ID: i + 1, Type: p.kind, Title: p.title, Description: p.desc, Datasource: ds,
			GridPos: &dashboard.GridPos{H: h, W: p.w, X: x, Y: y},
		}
		fd := dashboard.FieldDefaults{Unit: p.unit, Min: p.min, Max: p.max}
		if p.kind == "timeseries" {
			fd.Custom = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false}
			dp.Options = map[string]any{
				"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
				"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
			}
		} else {
			dp.Options = map[string]any{
				"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
				"colorMode":     "value", "graphMode": "area", "textMode": "auto", "orientation": "auto", "justifyMode": "auto",
			}
		}
		dp.FieldConfig = &dashboard.FieldConfig{Defaults: fd, Overrides: []any{}}
		for j, t := range p.targets {
			dp.Targets = append(dp.Targets, dashboard.Target{
				RefID: string(rune('A' + j)), Datasource: ds, Expr: t.expr, LegendFormat: t.legend, Range: true,
			})
		}
		d.Panels = append(d.Panels, dp)
		x += p.w
		rowH = max(rowH, h)
	}
	return d
}

// variables are the same on every dashboard: the datasource, then model and worker
// (multi-valued, "All" meaning every value).
func variables() []dashboard.Variable {
	none := map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	q := func(name, label, sel, of string) dashboard.Variable {
		def := fmt.Sprintf("label_values(%s, %s)", sel, of)
		return dashboard.Variable{
			Name: name, Label: label, Type: "query", Datasource: ds, Definition: def,
			Query:   map[string]any{"query": def, "refId": "StandardVariableQuery"},
			Refresh: 2, Multi: true, IncludeAll: true, AllValue: ".*", Current: none, Options: []any{}, Sort: 1,
		}
	}
	return []dashboard.Variable{
		{
			Name: dashboard.DatasourceVar, Label: "Prometheus", Type: "datasource", Query: "prometheus",
			Current: map[string]any{}, Options: []any{},
		},
		q("model", "model", "turbine_router_worker_ready", "model"),
		q("worker", "worker", `turbine_router_worker_ready{model=~"$model"}`, "worker"),
	}
}
