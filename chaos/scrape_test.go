package chaos

import (
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func families(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A settled cluster reads clean; each way of holding, missing or drifting is named.
func TestScrapeJudgements(t *testing.T) {
	var fe, node strings.Builder
	for _, n := range topology.Nodes {
		node.Reset()
		for _, w := range workers(n) {
			m := "chaos-agg"
			if n == "n-3" || n == "n-4" {
				m = "chaos-pd"
			}
			fe.WriteString(`turbine_router_worker_ready{model="` + m + `",worker="` + w + `"} 1` + "\n")
			fe.WriteString(`turbine_router_worker_indexed_blocks{model="` + m + `",worker="` + w + `"} 12` + "\n")
			fe.WriteString(`turbine_router_worker_active_requests{model="` + m + `",worker="` + w + `"} 0` + "\n")
		}
	}
	frontText := fe.String() + "turbine_frontend_inflight_requests 0\n"
	nodeText := func(n string, cached string, running string, up string) string {
		var b strings.Builder
		for _, w := range workers(n) {
			b.WriteString(`turbine_node_engine_up{worker="` + w + `"} ` + up + "\n")
			b.WriteString(`turbine_mocker_kv_cached_blocks{worker="` + w + `"} ` + cached + "\n")
			b.WriteString(`turbine_mocker_kv_active_blocks{worker="` + w + `"} 0` + "\n")
			b.WriteString(`vllm:num_requests_running{worker="` + w + `"} ` + running + "\n")
		}
		return b.String()
	}
	build := func(front string, nodes map[string]string) scrape {
		sc := scrape{frontends: map[string]map[string]*dto.MetricFamily{}, nodes: map[string]map[string]*dto.MetricFamily{}}
		for _, f := range topology.Frontends {
			sc.frontends[f] = families(t, front)
		}
		for _, n := range topology.Nodes {
			text, ok := nodes[n]
			if !ok {
				text = nodeText(n, "12", "0", "1")
			}
			sc.nodes[n] = families(t, text)
		}
		return sc
	}
	clean := build(frontText, nil)
	if m, i := clean.members(), clean.index(); len(m) != 0 || len(i) != 0 {
		t.Fatalf("clean cluster: members %v, index %v", m, i)
	}
	for k, v := range clean.held() {
		if v != 0 {
			t.Fatalf("clean cluster holds %s %g", k, v)
		}
	}
	drift := build(frontText, map[string]string{"n-2": nodeText("n-2", "10", "0", "1")})
	if got := drift.index(); len(got) != 4 || !strings.Contains(got[0], "holds 12 blocks of worker n-2-0, whose engine holds 10") {
		t.Errorf("index drift: %v", got)
	}
	busy := build(frontText, map[string]string{"n-1": nodeText("n-1", "12", "1", "1"), "n-4": nodeText("n-4", "12", "0", "0")})
	h := busy.held()
	if h["n-1 vllm:num_requests_running n-1-0"] != 1 || h["n-4 engine of n-4-1 not scraped"] != 1 {
		t.Errorf("held %v", h)
	}
	gone := build(strings.ReplaceAll(frontText, `worker="n-3-0"} 1`, `worker="n-3-0"} 0`), nil)
	if m := gone.members(); !slices.Contains(m, "fe-1 lists 2 ready workers of chaos-pd, want 3") {
		t.Errorf("members %v", m)
	}
	silent := build(frontText, nil)
	silent.frontends["fe-2"] = nil
	if silent.held()["fe-2 /metrics unanswered"] != 1 {
		t.Error("an unanswered frontend holds nothing")
	}
}
