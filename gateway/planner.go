package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// The planner's side of the gateway (docs/reference.md §27.7): an Observer that receives
// each generation request's measurements, which the frontend turns into reports for the
// Planner grain, and the admin route /admin/planner that shows the planner's latest
// decision and changes its targets.

// Observer receives the measurements the gateway takes of every generation request (chat
// completions, completions, responses, messages; never embeddings) for one served model
// (a LoRA adapter's requests count for its base model), the same figures the
// turbine_frontend_* latency histograms get. Config.Observer; nil: none.
//
// Its methods are called from the requests' handler goroutines while they answer, often
// concurrently: they must be safe for concurrent use, fast, and must not block. model is
// never empty.
type Observer interface {
	// ObserveTTFT is one time to first token: from the request's arrival to its first
	// token (each choice of a request with several counts once).
	ObserveTTFT(model string, d time.Duration)
	// ObserveITL is one chunk of n ≥ 1 tokens that arrived gap after the previous chunk
	// of its stream: n inter-token gaps of gap/n each.
	ObserveITL(model string, gap time.Duration, n int)
	// ObserveQueue is one request's wait from its arrival until the Backend accepted it
	// (routed to a worker): parsing, waiting for a concurrency slot or in the busy queue,
	// and routing. The engine's own queue is not in it (it is in the TTFT).
	ObserveQueue(model string, d time.Duration)
	// ObserveRequest is one request that ran to its end: its prompt and completion
	// tokens (summed over its choices and prompts).
	ObserveRequest(model string, promptTokens, completionTokens int)
}

// PlannerAdmin is implemented by backends that can reach the planner of a model; the
// server then serves /admin/planner.
type PlannerAdmin interface {
	// PlannerStatus returns model's planner: its configuration and latest decision.
	// Errors: ErrUnknownModel (wrapped) when no live worker serves model, ErrNoPlanner
	// (wrapped) when no planner runs in the cluster, or a transport error.
	PlannerStatus(ctx context.Context, model string) (*PlannerStatus, error)
	// SetPlannerTargets changes model's planner targets and GPU budget (zero fields keep
	// their value) and returns its status afterwards. Errors: those of PlannerStatus, and
	// the planner's refusal (wrapped ErrPlannerRefused, a 400).
	SetPlannerTargets(ctx context.Context, model string, t PlannerTargets) (*PlannerStatus, error)
}

// Errors of a PlannerAdmin (wrapped with detail; match with errors.Is).
var (
	// ErrNoPlanner: no member of the cluster hosts the planner (503 planner_unavailable).
	ErrNoPlanner = errors.New("gateway: no planner runs in the cluster")
	// ErrPlannerRefused: the planner refused new targets (400 invalid_value).
	ErrPlannerRefused = errors.New("gateway: the planner refused the targets")
)

// Bounds of the targets POST /admin/planner accepts.
const (
	// MaxPlannerTargetMs bounds ttft_target_ms and itl_target_ms (one hour).
	MaxPlannerTargetMs = 3600e3
	// MaxPlannerGPUBudget bounds gpu_budget.
	MaxPlannerGPUBudget = 1 << 16
)

// PlannerTargets is the body of POST /admin/planner: the targets to change; an absent or
// zero field keeps its value.
type PlannerTargets struct {
	Model string `json:"model"`
	// TTFTTargetMs and ITLTargetMs: the p90 targets in milliseconds, > 0.
	TTFTTargetMs float64 `json:"ttft_target_ms,omitempty"`
	ITLTargetMs  float64 `json:"itl_target_ms,omitempty"`
	// GPUBudget: the GPUs every pool of the model may use together, > 0.
	GPUBudget int `json:"gpu_budget,omitempty"`
}

// PlannerStatus is the answer of GET (and POST) /admin/planner: the planner's
// configuration, then its latest decision explained — the observation it started from,
// the prediction, the correction factors, every term of its formula, each pool's
// figures, the clamps that changed the formula's result, and whether it held the fleet
// as it was and why. Latencies in milliseconds, loads in requests and tokens per
// interval.
type PlannerStatus struct {
	Model      string  `json:"model"`
	Mode       string  `json:"mode"`      // "load" or "sla"
	Connector  string  `json:"connector"` // "local", "kubernetes", "virtual"
	Predictor  string  `json:"predictor"` // SLA mode's load predictor; "" in load mode, which predicts nothing
	TTFTTarget float64 `json:"ttft_target_ms"`
	ITLTarget  float64 `json:"itl_target_ms"`
	GPUBudget  int     `json:"gpu_budget"`
	MinWorkers int     `json:"min_workers"`
	// Decisions made since the planner started; 0: none yet, and every field below is
	// zero.
	Decisions int64 `json:"decisions"`
	// At is the latest decision's time (RFC 3339, UTC); "" before the first.
	At string `json:"at,omitempty"`
	// The observation: frontends whose reports were merged (0: none came, and the
	// planner holds the fleet), requests that ended, their mean prompt and output
	// tokens, the p90 latencies.
	Frontends  int     `json:"frontends"`
	Requests   uint32  `json:"requests"`
	ISLMean    float64 `json:"isl_mean"`
	OSLMean    float64 `json:"osl_mean"`
	TTFTP90Ms  float64 `json:"ttft_p90_ms"`
	ITLP90Ms   float64 `json:"itl_p90_ms"`
	QueueP90Ms float64 `json:"queue_p90_ms"`
	// The prediction of the next interval.
	PredictedRequests float64 `json:"predicted_requests"`
	PredictedISL      float64 `json:"predicted_isl"`
	PredictedOSL      float64 `json:"predicted_osl"`
	// Correction factors against the profile that the latest decision used: observed /
	// expected TTFT and ITL (SLA mode; 1 until a window with requests measured them); 0
	// before the first decision and in load mode, which uses none.
	CorrectionPrefill float64       `json:"correction_prefill"`
	CorrectionDecode  float64       `json:"correction_decode"`
	Terms             []PlannerTerm `json:"terms"`
	Pools             []PlannerPool `json:"pools"`
	Clamps            []string      `json:"clamps"`
	Held              bool          `json:"held"`
	Reason            string        `json:"reason,omitempty"`
	// Error is the connector's last error ("" when its last step worked).
	Error string `json:"error,omitempty"`
}

// PlannerTerm is one named figure of a decision's formula.
type PlannerTerm struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

// PlannerPool is one pool of a decision: its workers now (ready, starting, stopping),
// what the formula wanted, what the connector was asked for, and the GPUs per worker.
type PlannerPool struct {
	Pool          string `json:"pool"` // "aggregated", "prefill", "decode"
	Ready         int    `json:"ready"`
	Starting      int    `json:"starting"`
	Stopping      int    `json:"stopping"`
	Wanted        int    `json:"wanted"`
	Target        int    `json:"target"`
	GPUsPerEngine int    `json:"gpus_per_engine"`
}

// PlannerTime formats a decision's time for PlannerStatus.At ("" for the zero time).
func PlannerTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// handlePlanner serves GET /admin/planner?model=M (the planner's status) and POST
// /admin/planner with a PlannerTargets body (then answers as GET does). Without model,
// the model served when it is the only one.
func (s *Server) handlePlanner(w http.ResponseWriter, r *http.Request) {
	admin, ok := s.backend.(PlannerAdmin)
	if !ok {
		writeError(w, newError(KindRouteNotFound, "", "This server's backend has no planner."), 0)
		return
	}
	var st *PlannerStatus
	var err error
	model := r.URL.Query().Get("model")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if model == "" {
			if model, ok = s.onlyModel(r.Context()); !ok {
				writeError(w, newError(KindMissingParameter, "model", "The query parameter `model` is required when more than one model is served."), 0)
				return
			}
		}
		st, err = admin.PlannerStatus(r.Context(), model)
	case http.MethodPost:
		t, aerr := s.parsePlannerTargets(w, r)
		if aerr != nil {
			writeError(w, aerr, 0)
			return
		}
		model = t.Model
		if st, err = admin.SetPlannerTargets(r.Context(), model, *t); err == nil && st != nil {
			// The values now in force (a 0 in the request keeps the old one).
			s.cfg.Logger.Info().Str("model", model).Float64("ttft_target_ms", st.TTFTTarget).
				Float64("itl_target_ms", st.ITLTarget).Int("gpu_budget", st.GPUBudget).Msg("planner targets changed")
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use GET or POST).", clipName(r.Method), r.URL.Path), 0)
		return
	}
	if err != nil {
		writeError(w, plannerError(model, err), s.cfg.RetryAfter)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// onlyModel is the one base model served, when there is exactly one.
func (s *Server) onlyModel(ctx context.Context) (string, bool) {
	cards, err := s.backend.Models(ctx)
	if err != nil {
		return "", false
	}
	model := ""
	for _, c := range cards {
		if c.GetLora() != nil {
			continue
		}
		if model != "" {
			return "", false
		}
		model = c.GetModel()
	}
	return model, model != ""
}

// parsePlannerTargets reads and checks a PlannerTargets body.
func (s *Server) parsePlannerTargets(w http.ResponseWriter, r *http.Request) (*PlannerTargets, *APIError) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		return nil, aerr
	}
	return decodePlannerTargets(body)
}

// plannerTargetFields are the fields of a PlannerTargets body, in their order.
var plannerTargetFields = []string{"model", "ttft_target_ms", "itl_target_ms", "gpu_budget"}

// decodePlannerTargets decodes and checks the body of POST /admin/planner strictly: a
// JSON object with only plannerTargetFields (an unknown field is refused, named in
// param), each of its type (a wrong type is invalid_type with the field in param; null
// reads as absent), within its bounds.
func decodePlannerTargets(body []byte) (*PlannerTargets, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	o.trackReads()
	var t PlannerTargets
	t.Model, _ = o.str("model")
	t.TTFTTargetMs, _ = o.number("ttft_target_ms")
	t.ITLTargetMs, _ = o.number("itl_target_ms")
	budget, _ := o.integer("gpu_budget")
	if o.err != nil {
		return nil, o.err
	}
	if extra := o.unread(); len(extra) > 0 {
		return nil, newError(KindInvalidValue, clipName(extra[0]), "Unknown field `%s`: POST /admin/planner takes %s.",
			clipName(extra[0]), strings.Join(plannerTargetFields, ", "))
	}
	target := func(name string, v float64) *APIError {
		if math.IsNaN(v) || v < 0 || v > MaxPlannerTargetMs {
			return newError(KindInvalidValue, name, "`%s` must be a number of milliseconds above 0 and at most %g (0 or absent keeps it), got %v.", name, float64(MaxPlannerTargetMs), v)
		}
		return nil
	}
	switch {
	case t.Model == "":
		return nil, newError(KindMissingParameter, "model", "`model` is required.")
	case t.TTFTTargetMs == 0 && t.ITLTargetMs == 0 && budget == 0:
		return nil, newError(KindMissingParameter, "ttft_target_ms", "Give `ttft_target_ms`, `itl_target_ms`, `gpu_budget` or several.")
	case budget < 0 || budget > MaxPlannerGPUBudget:
		return nil, newError(KindInvalidValue, "gpu_budget", "`gpu_budget` must be a GPU count from 1 to %d (0 or absent keeps it), got %d.", MaxPlannerGPUBudget, budget)
	}
	t.GPUBudget = int(budget)
	if aerr := target("ttft_target_ms", t.TTFTTargetMs); aerr != nil {
		return nil, aerr
	}
	if aerr := target("itl_target_ms", t.ITLTargetMs); aerr != nil {
		return nil, aerr
	}
	return &t, nil
}

// refusedParam names the field a planner's refusal is about, from the planner core's
// words for its settings (planner.SetTargets: "GPU budget"/"GPUBudget", "TTFT target",
// "ITL target"); "" when it names none.
func refusedParam(why string) string {
	switch w := strings.ToLower(why); {
	case strings.Contains(w, "budget"):
		return "gpu_budget"
	case strings.Contains(w, "ttft"):
		return "ttft_target_ms"
	case strings.Contains(w, "itl"):
		return "itl_target_ms"
	}
	return ""
}

// plannerError maps a PlannerAdmin error to the catalogue.
func plannerError(model string, err error) *APIError {
	switch {
	case errors.Is(err, ErrNoPlanner):
		return &APIError{Kind: KindPlannerUnavailable, Cause: err,
			Message: "No planner runs in this cluster: start `turbine serve --planner load|sla`, or a `turbine planner` member."}
	case errors.Is(err, ErrPlannerRefused):
		why := strings.TrimPrefix(err.Error(), ErrPlannerRefused.Error()+": ")
		return &APIError{Kind: KindInvalidValue, Param: refusedParam(why), Cause: err, Message: "The planner refused the targets: " + clipName(why) + "."}
	}
	var ae *APIError
	if errors.Is(err, ErrUnknownModel) || errors.As(err, &ae) {
		return adminError(model, err)
	}
	// The cause (cluster internals) goes to the log, not to the client.
	return &APIError{Kind: KindBackendError, Cause: err,
		Message: fmt.Sprintf("The planner of model %q did not answer; retry later.", clipName(model))}
}

// observer's methods record into the Config.Observer, when there is one.

func (m *frontendMetrics) observeQueue(model string, d time.Duration) {
	if m.obs != nil && model != "" {
		m.obs.ObserveQueue(model, d)
	}
}
