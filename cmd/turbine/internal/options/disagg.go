package options

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// Disagg are the Router's conditional-disaggregation flags (serve, frontend; docs/reference.md
// §6). They matter once some worker registers with role prefill or decode.
type Disagg struct {
	// MaxLocalPrefillTokens: a request whose uncached prompt suffix on its decode
	// worker is at most this many tokens is prefilled there (0: every request with an
	// uncached token goes to a prefill worker).
	MaxLocalPrefillTokens int
	// MaxPrefillQueueTokens: when every prefill worker has more active prefill tokens
	// than this, requests are prefilled on their decode worker (0: no limit).
	MaxPrefillQueueTokens int64
	// EnforceDisagg: with no live prefill worker, requests that would go to one are
	// answered 503 instead of being prefilled on their decode worker; with no live
	// decode worker, requests are answered 503 instead of being served whole by a
	// prefill worker.
	EnforceDisagg bool
}

// DefaultDisagg returns the router's defaults (kv.DefaultDisaggConfig): 1000 tokens,
// 32768 tokens, not enforced.
func DefaultDisagg() Disagg {
	d := kv.DefaultDisaggConfig()
	return Disagg{MaxLocalPrefillTokens: d.MaxLocalPrefillTokens, MaxPrefillQueueTokens: d.MaxPrefillQueueTokens,
		EnforceDisagg: d.Enforce}
}

// Flags registers the disaggregation flags on fs.
func (o *Disagg) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.MaxLocalPrefillTokens, "max-local-prefill-tokens", o.MaxLocalPrefillTokens,
		"disaggregated serving: a request whose uncached prompt suffix on its decode worker is at most this many `tokens` is prefilled there (0: always on a prefill worker)")
	fs.Int64Var(&o.MaxPrefillQueueTokens, "max-prefill-queue-tokens", o.MaxPrefillQueueTokens,
		"disaggregated serving: when every prefill worker has more active prefill `tokens` than this, requests are prefilled on their decode worker (0: no limit)")
	fs.BoolVar(&o.EnforceDisagg, "enforce-disagg", o.EnforceDisagg,
		"disaggregated serving: answer 503 instead of falling back, i.e. instead of prefilling on the decode workers when no prefill worker is live, "+
			"and instead of serving whole requests on the prefill workers when no decode worker is live")
}

// Validate checks the disaggregation options; errors name the flag.
func (o *Disagg) Validate() error {
	switch {
	case o.MaxLocalPrefillTokens < 0:
		return fmt.Errorf("--max-local-prefill-tokens %d: must be ≥ 0 (tokens)", o.MaxLocalPrefillTokens)
	case o.MaxPrefillQueueTokens < 0:
		return fmt.Errorf("--max-prefill-queue-tokens %d: must be ≥ 0 (tokens; 0 = no limit)", o.MaxPrefillQueueTokens)
	}
	return nil
}

// Config returns the Router grain's disaggregation configuration (router.Config.Disagg).
func (o *Disagg) Config() *kv.DisaggConfig {
	return &kv.DisaggConfig{MaxLocalPrefillTokens: o.MaxLocalPrefillTokens,
		MaxPrefillQueueTokens: o.MaxPrefillQueueTokens, Enforce: o.EnforceDisagg}
}

// ParseWorkerRole checks a worker role flag's value (flag names the flag, for errors)
// and returns its canonical name: "aggregated", "prefill" or "decode" ("" is
// aggregated).
func ParseWorkerRole(flag, value string) (string, error) {
	r, err := kv.ParseRole(value)
	if err != nil {
		return "", fmt.Errorf("%s %q: want aggregated, prefill or decode", flag, value)
	}
	return r.Label(), nil
}

// CheckPoolingLayout refuses, before anything starts, the workers an embedding model
// (--runner pooling) cannot be served by; with --runner generate it refuses nothing
// (docs/reference.md §23). disagg lists the flags that ask for workers of a
// disaggregated role, each with its value (e.g. "--prefill-workers 1", "--worker-role
// decode"): an embedding has no prefill and decode phases to split, and neither vLLM
// nor the mock engine starts such an engine (a worker would restart it without end).
// engineFlag and engine name the workers' engine (e.g. "--engine", "vllm" or
// "--mocker-dialect", "trtllm"): trtllm-serve serves no embeddings. Errors name the
// flags.
func (o *Engine) CheckPoolingLayout(engineFlag, engine string, disagg ...string) error {
	switch {
	case o.Runner != RunnerPooling:
		return nil
	case len(disagg) > 0:
		return fmt.Errorf("--runner pooling: an embedding model has no prefill or decode workers (%s); serve it with aggregated workers",
			strings.Join(disagg, ", "))
	case engine == launcher.EngineTRTLLM || engine == string(server.DialectTRTLLM):
		return fmt.Errorf("--runner pooling: %s %s: trtllm-serve serves no embeddings; use vllm or sglang", engineFlag, engine)
	}
	return nil
}

// IntVarTracked registers an int flag on fs that records in set whether it was given
// (on the command line or through its environment variable).
func IntVarTracked(fs *flag.FlagSet, p *int, set *bool, name, usage string) {
	fs.Var(&tracked[int]{p: p, set: set, parse: strconv.Atoi}, name, usage)
}

// LauncherRole is the launcher's name of a worker role ("aggregated" is "").
func LauncherRole(role string) launcher.Role {
	switch role {
	case "prefill":
		return launcher.RolePrefill
	case "decode":
		return launcher.RoleDecode
	}
	return ""
}

// MockerFor is Mocker for a worker of role ("aggregated", "prefill" or "decode"): the
// mock engine is started with --role (and, as every mock engine, a KV transfer port).
func (o *Engine) MockerFor(executable string, card *messages.ModelCard, role string) launch.Config {
	m := o.Mocker(executable, card)
	m.Params.Role, _ = server.ParseRole(role)
	return m
}
