package worker

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
)

// TestPropsRefusesUnloadableTokenizer: a model folder whose tokenizer.json Turbine cannot
// read (here a WordLevel model) is refused before the worker exists, so it never
// registers; the reason is in the worker's log and in the refusal counter. Loadable
// tokenizers and tokenizers named by hub name are not refused.
func TestPropsRefusesUnloadableTokenizer(t *testing.T) {
	var logs bytes.Buffer
	cfg := Config{WorkerID: "w1", Card: &messages.ModelCard{Model: "bad-model", Tokenizer: "testdata/bad-tokenizer"},
		Launcher: shellLauncher{}, Router: nopRouter{}, Logger: zerolog.New(&logs), CheckTokenizer: true}
	_, err := Props(cfg)
	if err == nil {
		t.Fatal("Props accepted a model whose tokenizer does not load")
	}
	var line struct {
		Level, Model, Error string
	}
	if jerr := json.Unmarshal(logs.Bytes(), &line); jerr != nil || line.Level != "error" || line.Model != "bad-model" {
		t.Errorf("log %q: want one error line for bad-model (%v)", logs.String(), jerr)
	}
	for _, want := range []string{`model "bad-model" is not registered`, `model type "WordLevel" is not supported`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
		if !strings.Contains(line.Error, want) {
			t.Errorf("logged error %q does not say %q", line.Error, want)
		}
	}
	var out bytes.Buffer
	metrics.WritePrometheus(&out, false)
	if !strings.Contains(out.String(), refusedMetric+`{model="bad-model",reason="model: testdata/bad-tokenizer/tokenizer.json: model type \"WordLevel\"`) {
		t.Errorf("metrics lack the refusal:\n%s", out.String())
	}
	for _, tok := range []string{"builtin:cl100k_base", "some-org/some-model"} {
		cfg.Card = &messages.ModelCard{Model: "m", Tokenizer: tok}
		if _, err := Props(cfg); err != nil {
			t.Errorf("tokenizer %q: %v", tok, err)
		}
	}
}

// TestPropsLeavesTokenizerUncheckedWhenNotAsked: without CheckTokenizer, Props neither
// refuses a model whose tokenizer does not load nor counts or logs a refusal for it.
func TestPropsLeavesTokenizerUncheckedWhenNotAsked(t *testing.T) {
	var logs bytes.Buffer
	cfg := Config{WorkerID: "w1", Card: &messages.ModelCard{Model: "unchecked-model", Tokenizer: "testdata/bad-tokenizer"},
		Launcher: shellLauncher{}, Router: nopRouter{}, Logger: zerolog.New(&logs)}
	if _, err := Props(cfg); err != nil {
		t.Fatalf("Props without CheckTokenizer: %v", err)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q", logs.String())
	}
	var out bytes.Buffer
	metrics.WritePrometheus(&out, false)
	if strings.Contains(out.String(), refusedMetric+`{model="unchecked-model"`) {
		t.Errorf("a refusal was counted for a model that was not refused:\n%s", out.String())
	}
}

// refusals parses the refusal counter's samples out of metrics' default set as a
// Prometheus scraper reads them: label sets (model, reason) to values.
func refusals(t *testing.T) map[[2]string]float64 {
	t.Helper()
	var out bytes.Buffer
	metrics.WritePrometheus(&out, false)
	var lines strings.Builder
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, refusedMetric+"{") {
			lines.WriteString(line)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(lines.String()))
	if err != nil {
		t.Fatalf("the refusal counter is not valid Prometheus text format: %v\n%s", err, lines.String())
	}
	got := map[[2]string]float64{}
	for _, m := range families[refusedMetric].GetMetric() {
		var key [2]string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "model":
				key[0] = l.GetValue()
			case "reason":
				key[1] = l.GetValue()
			}
		}
		got[key] = m.GetUntyped().GetValue() + m.GetCounter().GetValue()
	}
	return got
}

// TestRefusalCounterEscapesLabels: a refusal whose model name and reason hold a tab, a
// double quote, a newline and a backslash is counted under label values a Prometheus
// scraper reads back unchanged (the text format escapes backslash, double quote and
// newline only).
func TestRefusalCounterEscapesLabels(t *testing.T) {
	// The loader's error names the folder, so an odd folder name reaches the reason.
	dir := filepath.Join(t.TempDir(), "tab\there \"quoted\" new\nline back\\slash é")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "bad-tokenizer", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modelName := "odd\t\"model\"\n\\"
	cfg := Config{WorkerID: "w1", Card: &messages.ModelCard{Model: modelName, Tokenizer: dir},
		Launcher: shellLauncher{}, Router: nopRouter{}, Logger: zerolog.Nop(), CheckTokenizer: true}
	_, err := Props(cfg)
	if err == nil {
		t.Fatal("Props accepted a model whose tokenizer does not load")
	}
	reason := strings.TrimPrefix(err.Error(), `worker: model "`)
	_, reason, _ = strings.Cut(reason, "its tokenizer cannot be loaded: ")
	if !strings.Contains(reason, dir) {
		t.Fatalf("reason %q does not name the folder", reason)
	}
	got := refusals(t)
	if v := got[[2]string{modelName, reason}]; v != 1 {
		t.Errorf("refusal of %q for %q counted %v times, want 1; counted: %v", modelName, reason, v, got)
	}
}

// TestRefusalName checks the refusal counter's name, label values escaped as the
// Prometheus text format escapes them, and read back unchanged by a scraper.
func TestRefusalName(t *testing.T) {
	for _, c := range []struct {
		model, reason, want string
	}{
		{"m", "plain", refusedMetric + `{model="m",reason="plain"}`},
		{"m", "tab\there", refusedMetric + "{model=\"m\",reason=\"tab\there\"}"},
		{"m", `a "quoted" word`, refusedMetric + `{model="m",reason="a \"quoted\" word"}`},
		{"m", "two\nlines", refusedMetric + `{model="m",reason="two\nlines"}`},
		{"m", `back\slash`, refusedMetric + `{model="m",reason="back\\slash"}`},
		{`a\"b` + "\n", "é ✓ 🙂", refusedMetric + `{model="a\\\"b\n",reason="é ✓ 🙂"}`},
		{"", "", refusedMetric + `{model="",reason=""}`},
	} {
		got := refusalName(c.model, c.reason)
		if got != c.want {
			t.Errorf("refusalName(%q, %q) = %q, want %q", c.model, c.reason, got, c.want)
			continue
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(strings.NewReader(got + " 1\n"))
		if err != nil {
			t.Errorf("%q: %v", got, err)
			continue
		}
		labels := map[string]string{}
		for _, l := range families[refusedMetric].GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["model"] != c.model || labels["reason"] != c.reason {
			t.Errorf("%q reads back as %q", got, labels)
		}
	}
}
