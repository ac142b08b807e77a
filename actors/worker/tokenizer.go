package worker

import (
	"fmt"
	"os"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/turbine-llm/turbine/internal/promlabel"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// refusedMetric is the counter of models a worker refused to register because their
// tokenizer does not load, by model and reason (the loader's error).
const refusedMetric = "turbine_worker_model_refused_total"

// checkTokenizer loads the tokenizer card names when it is a local folder or a builtin
// (what the gateways will load to serve the model): a model whose tokenizer Turbine
// cannot read must not be registered, or it would be listed and then fail every request.
// A tokenizer named otherwise (a hub name the engine resolves) is not checked. The
// refusal is counted in refusedMetric on metrics' default set.
func checkTokenizer(card *messages.ModelCard) error {
	src := card.GetTokenizer()
	if !strings.HasPrefix(src, model.BuiltinPrefix) {
		if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
			return nil
		}
	}
	if _, err := model.LoadModel(src); err != nil {
		metrics.GetOrCreateCounter(refusalName(card.GetModel(), err.Error())).Inc()
		return fmt.Errorf("worker: model %q is not registered: its tokenizer cannot be loaded: %w", card.GetModel(), err)
	}
	return nil
}

// refusalName is the name of refusedMetric's series for model and reason, with the label
// values escaped as the Prometheus text format requires: backslash, double quote and
// newline, and nothing else (a tab or a non-ASCII character is written as it is).
func refusalName(model, reason string) string {
	return refusedMetric + `{model="` + promlabel.Escape(model) + `",reason="` + promlabel.Escape(reason) + `"}`
}
