package dashboard

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.problems from Check's output")

// TestCheck runs Check over every testdata/*.json and compares its problems, one a
// line, with the .problems file beside it.
func TestCheck(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for _, pr := range Check(d) {
				got.WriteString(pr.String() + "\n")
			}
			want := strings.TrimSuffix(p, ".json") + ".problems"
			if *rewrite {
				if err := os.WriteFile(want, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			wb, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(wb) {
				t.Errorf("problems:\n%s\nwant:\n%s", got.String(), wb)
			}
		})
	}
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum(rate(a_total{model=~"$model"}[$__rate_interval]))`, []string{"a_total"}},
		{`histogram_quantile(0.9, sum by (le) (rate(h_seconds_bucket[1m])))`, []string{"h_seconds_bucket"}},
		{`sum(rate(x_sum[1m])) / sum(rate(x_count[1m])) + on() vector(1)`, []string{"x_count", "x_sum"}},
		{`{__name__="vllm:num_requests_running", worker=~"$worker"}`, []string{"vllm:num_requests_running"}},
		{`max_over_time(g[5m:1m]) or b`, []string{"b", "g"}},
		{`vector(0)`, []string{}},
	} {
		e, err := ParseQuery(tc.expr, DefaultSubstitution())
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if got := MetricNames(e); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	fams := map[string]string{"h_seconds": "histogram", "c_total": "counter", "s": "summary", "g_bucket": "gauge"}
	for _, tc := range []struct {
		series, family string
		ok             bool
	}{
		{"c_total", "c_total", true},
		{"h_seconds_bucket", "h_seconds", true},
		{"h_seconds_sum", "h_seconds", true},
		{"h_seconds_count", "h_seconds", true},
		{"h_seconds", "h_seconds", true},
		{"s_count", "s", true},
		{"s_bucket", "", false},
		{"c_total_count", "", false}, // a counter has no _count series
		{"g_bucket", "g_bucket", true},
		{"missing", "", false},
	} {
		sel, ok := Resolve(tc.series, fams)
		if ok != tc.ok || sel.Family != tc.family {
			t.Errorf("Resolve(%s) = %+v, %v; want family %q, %v", tc.series, sel, ok, tc.family, tc.ok)
		}
	}
}

func TestVarsAndApply(t *testing.T) {
	s := `a{m=~"$model",w=~"${worker}",x="${model:regex}"}[$__rate_interval]`
	if got, want := Vars(s), []string{"model", "worker", "model", "__rate_interval"}; !slices.Equal(got, want) {
		t.Errorf("Vars = %v, want %v", got, want)
	}
	got := Substitution{"model": "m1", "__rate_interval": "2m"}.Apply(s)
	if want := `a{m=~"m1",w=~"${worker}",x="m1"}[2m]`; got != want {
		t.Errorf("Apply = %s, want %s", got, want)
	}
}

func TestVariableQuery(t *testing.T) {
	for _, tc := range []struct {
		v    Variable
		want string
		ok   bool
	}{
		{Variable{Type: "query", Query: "label_values(up{job=\"x\"}, instance)"}, `up{job="x"}`, true},
		{Variable{Type: "query", Query: map[string]any{"query": "label_values(a, b)"}}, "a", true},
		{Variable{Type: "query", Query: "query_result(up)"}, "", false},
		{Variable{Type: "datasource", Query: "prometheus"}, "", false},
	} {
		got, ok := VariableQuery(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("VariableQuery(%v) = %q, %v; want %q, %v", tc.v.Query, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParse: any bytes either fail to parse or give a dashboard that Check, Uses and
// Marshal handle, and whose encoding parses back to the same encoding.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.json")
	paths2, _ := filepath.Glob("../*.json")
	for _, p := range append(paths, paths2...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"panels":[{"targets":[{"expr":"$"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err != nil {
			return
		}
		_ = Check(d)
		_ = Uses(d)
		enc, err := Marshal(d)
		if err != nil {
			return // e.g. a float the decoder took and the encoder refuses
		}
		d2, err := Parse(enc)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		enc2, err := Marshal(d2)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("encoding not stable: %v", err)
		}
	})
}
