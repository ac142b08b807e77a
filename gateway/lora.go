package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
)

// LoRA adapters (docs/reference.md §26): vLLM's POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter over a LoraAdmin backend, and requests that name an adapter in
// `model`.
//
// An adapter is served by its base model's workers: the Backend's model list has one
// entry per live adapter (ModelCard.lora set, model = the adapter's name, the rest its
// base model's card), a request naming one resolves to that entry (findModel), and runs
// on the base model (GenerateRequest.Model) with SamplingParams.lora_name. Its metrics
// and log line carry the base model as `model` and the adapter apart (`lora`), so that
// adapters never multiply the model-labelled series.

// Endpoint labels of the adapter routes (logs, metrics).
const (
	endpointLoadLora   = "load_lora_adapter"
	endpointUnloadLora = "unload_lora_adapter"
)

// Limits of the adapter routes' fields.
const (
	// MaxLoraNameBytes bounds lora_name: it becomes a `model` id, the engine's served
	// name and a metric label.
	MaxLoraNameBytes = 256
	// MaxLoraPathBytes bounds lora_path.
	MaxLoraPathBytes = 4096
	// MaxLoraWorkers bounds the `workers` extension field.
	MaxLoraWorkers = 100000
)

// LoraAdmin is implemented by backends that place LoRA adapters on their workers; the
// server then serves POST /v1/load_lora_adapter and /v1/unload_lora_adapter.
type LoraAdmin interface {
	// LoadLora places the adapter on workers of its base model (pinned, unless
	// req.Unpinned) and reports each worker's outcome. Errors: ErrUnknownModel or ErrNoWorkers (wrapped) for the base
	// model, ErrLoraConflict (wrapped) when a worker holds an adapter of that name loaded
	// from another path, or a transport error.
	LoadLora(ctx context.Context, req LoraLoad) (*LoraResult, error)
	// UnloadLora removes the adapter from every worker of the base model that holds it
	// and reports each one's outcome (none: no worker held it). Errors: as LoadLora's,
	// without ErrLoraConflict.
	UnloadLora(ctx context.Context, req LoraUnload) (*LoraResult, error)
}

// LoraLoad is a load to carry out: the checked body of POST /v1/load_lora_adapter.
type LoraLoad struct {
	Model string // the base model's served name
	Name  string // the adapter's served name (lora_name)
	Path  string // its folder, as the workers' hosts see it (lora_path)
	// Workers is how many workers of each pool of the model (aggregated or decode, and
	// prefill) should hold it; 0: all of them.
	Workers int
	// Unpinned: the body has no "pinned": true (Turbine's field; default false). Each worker
	// loads it unpinned: it may evict it for another adapter, and then keeps it known
	// (registered, loaded again for a request naming it; docs/reference.md §26.2), so an
	// operator may register more adapters than the workers have slots.
	Unpinned bool
}

// LoraUnload is an unload to carry out.
type LoraUnload struct {
	Model string // the base model's served name
	Name  string
}

// LoraResult is what a load or an unload did, one line per worker it concerned: the
// workers chosen to hold the adapter (a load) or those that held it (an unload).
type LoraResult struct {
	Workers []LoraWorker
}

// LoraWorker is one worker's outcome.
type LoraWorker struct {
	WorkerID string
	// Held: a load found the adapter there already and sent nothing: pinned, or for an
	// unpinned load held or known.
	Held bool
	// Failure is the worker's answer (LORA_OK on success); a worker that did not answer
	// in time, or could not be reached, is LORA_ENGINE with Error saying so.
	Failure messages.LoraFailure
	Error   string
}

// ErrLoraConflict: an adapter of that name is loaded from another path.
var ErrLoraConflict = errors.New("gateway: a LoRA adapter of that name is loaded from another path")

// ErrLoraOff: no worker of the model serves adapters (each was started without
// --max-loras).
var ErrLoraOff = errors.New("gateway: LoRA adapters are off on every worker of the model")

// UnknownAdapter is the error of a request for a LoRA adapter that no worker holds any
// more (ROUTE_NO_ADAPTER): the 404 of an unknown model, naming the adapter; detail is
// the router's reason, for the log.
func UnknownAdapter(name, detail string) error {
	e := modelNotFound(name)
	e.Cause = fmt.Errorf("%w: no worker holds LoRA adapter %q: %s", ErrUnknownModel, clipName(name), detail)
	return e
}

// AdapterLost is the error of a request naming a LoRA adapter whose worker gave it up
// (the adapter was unloaded past its grace, or the worker failed or could not load it)
// and whose migration then found no worker that has it or may load it (ROUTE_NO_ADAPTER
// on a route after the first): the adapter was served when the request began, so this
// is the 503 lora_unavailable naming it, not an unknown model's 404
// (docs/reference.md §26.3); detail is the router's reason, for the log.
func AdapterLost(name, detail string) error {
	e := newError(KindLoraUnavailable, "",
		"The LoRA adapter '%s' became unavailable while the request ran (it was unloaded, or the worker serving it failed) and no other worker has it; retry later.",
		clipName(name))
	e.Cause = fmt.Errorf("gateway: no worker holds LoRA adapter %q to continue the request: %s", clipName(name), detail)
	return e
}

// servedNames returns the model a card is served as (the base model for an adapter's
// entry) and its adapter's name ("" for a base model).
func servedNames(card *messages.ModelCard) (model, lora string) {
	if a := card.GetLora(); a != nil {
		return a.GetParent(), card.GetModel()
	}
	return card.GetModel(), ""
}

// isBase reports whether card is a base model's entry (not a LoRA adapter's).
func isBase(card *messages.ModelCard) bool { return card.GetLora() == nil }

// findModel returns the entry of cards a request's `model` names: a base model of that
// name; else the adapter of that name (vLLM's lora_name); else, for "BASE:ADAPTER", the
// adapter ADAPTER of base model BASE (each ':' tried from the left). nil when none. An
// adapter name that several base models serve is a 400 asking for the BASE:ADAPTER form.
func findModel(cards []*messages.ModelCard, name string) (*messages.ModelCard, *APIError) {
	var adapters []*messages.ModelCard
	for _, c := range cards {
		switch {
		case c.GetModel() != name:
		case isBase(c):
			return c, nil
		default:
			adapters = append(adapters, c)
		}
	}
	switch len(adapters) {
	case 1:
		return adapters[0], nil
	case 0:
	default:
		var bases []string
		for _, a := range adapters {
			bases = append(bases, clipName(a.GetLora().GetParent()))
		}
		return nil, newError(KindInvalidValue, "model",
			"The LoRA adapter `%s` is loaded for several base models (%s): name it as BASE:ADAPTER.",
			clipName(name), strings.Join(bases, ", "))
	}
	for i := strings.IndexByte(name, ':'); i >= 0; {
		base, adapter := name[:i], name[i+1:]
		for _, c := range cards {
			if !isBase(c) && c.GetModel() == adapter && c.GetLora().GetParent() == base {
				return c, nil
			}
		}
		j := strings.IndexByte(name[i+1:], ':')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return nil, nil
}

// ---- POST /v1/load_lora_adapter, /v1/unload_lora_adapter ----

// loraBody is the checked body of either route (vLLM's LoadLoRAAdapterRequest and
// UnloadLoRAAdapterRequest, with Turbine's `model`, `workers` and `pinned`).
type loraBody struct {
	Name, Path, Model string
	Workers           int
	Unpinned          bool // a load without "pinned": true
	// Ignored are the fields neither vLLM nor Turbine defines: ignored, as vLLM's
	// request models ignore them.
	Ignored []string
}

// parseLoraBody checks a load (load true) or unload body. Fields: lora_name (both),
// lora_path (load), model and workers (load; model on unload too), pinned (load: a
// boolean, default false: like vLLM, a load never fails for want of room), load_inplace (load: false or absent; true is refused, Turbine
// does not reload an adapter in place), lora_int_id (unload: vLLM's, accepted and not
// used).
func parseLoraBody(body []byte, load bool) (*loraBody, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	o.trackReads()
	b := &loraBody{Unpinned: load}
	b.Name, _ = o.str("lora_name")
	b.Model, _ = o.str("model")
	if load {
		b.Path, _ = o.str("lora_path")
		if n, ok := o.integer("workers"); ok {
			if n < 1 || n > MaxLoraWorkers {
				o.fail(newError(KindInvalidValue, "workers", "Invalid 'workers': want 1 to %d workers, got %d.", MaxLoraWorkers, n))
			}
			b.Workers = int(n)
		}
		if pinned, ok := o.boolean("pinned"); ok {
			b.Unpinned = !pinned
		}
		if inplace, _ := o.boolean("load_inplace"); inplace {
			o.fail(newError(KindUnsupported, "load_inplace",
				"'load_inplace' is not supported: unload the adapter, then load it again."))
		}
	} else {
		o.integer("lora_int_id")
	}
	if o.err != nil {
		return nil, o.err
	}
	b.Ignored = o.unread()
	switch {
	case load && (b.Name == "" || b.Path == ""):
		return nil, newError(KindMissingParameter, "", "Both 'lora_name' and 'lora_path' must be provided.")
	case b.Name == "":
		return nil, newError(KindMissingParameter, "lora_name", "'lora_name' must be provided.")
	}
	if why := badLoraName(b.Name); why != "" {
		return nil, newError(KindInvalidValue, "lora_name", "Invalid 'lora_name': %s.", why)
	}
	if load {
		if len(b.Path) > MaxLoraPathBytes || strings.ContainsFunc(b.Path, unicode.IsControl) {
			return nil, newError(KindInvalidValue, "lora_path", "Invalid 'lora_path': at most %d bytes, without control characters.", MaxLoraPathBytes)
		}
	}
	return b, nil
}

// badLoraName says what is wrong with an adapter name ("" when nothing): 1 to
// MaxLoraNameBytes bytes of UTF-8 without spaces or control characters.
func badLoraName(name string) string {
	switch {
	case len(name) > MaxLoraNameBytes:
		return fmt.Sprintf("at most %d bytes, got %d", MaxLoraNameBytes, len(name))
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "spaces and control characters are not allowed"
	}
	return ""
}

// loraAdmin returns the backend's LoraAdmin, or answers 404 when it has none.
func (s *Server) loraAdmin(w http.ResponseWriter) (LoraAdmin, bool) {
	admin, ok := s.backend.(LoraAdmin)
	if !ok {
		writeError(w, newError(KindRouteNotFound, "", "This server's backend serves no LoRA adapters."), 0)
	}
	return admin, ok
}

// handleLoadLora serves POST /v1/load_lora_adapter: the adapter is placed on workers of
// its base model (LoraAdmin.LoadLora) and the answer is loadAnswer's.
func (s *Server) handleLoadLora(w http.ResponseWriter, r *http.Request) {
	admin, ok := s.loraAdmin(w)
	if !ok {
		return
	}
	b, model, ans := s.runLora(w, r, true, func(b *loraBody, model string) (loraAnswer, error) {
		res, err := admin.LoadLora(r.Context(), LoraLoad{Model: model, Name: b.Name, Path: b.Path, Workers: b.Workers,
			Unpinned: b.Unpinned})
		if err != nil {
			return loraAnswer{}, err
		}
		s.metrics.loraPlacements(model, res)
		return loadAnswer(b.Name, res), nil
	})
	s.finishLora(w, r, endpointLoadLora, b, model, ans)
}

// handleUnloadLora serves POST /v1/unload_lora_adapter: the adapter is removed from
// every worker of its base model that holds it (LoraAdmin.UnloadLora); unloadAnswer
// answers.
func (s *Server) handleUnloadLora(w http.ResponseWriter, r *http.Request) {
	admin, ok := s.loraAdmin(w)
	if !ok {
		return
	}
	b, model, ans := s.runLora(w, r, false, func(b *loraBody, model string) (loraAnswer, error) {
		res, err := admin.UnloadLora(r.Context(), LoraUnload{Model: model, Name: b.Name})
		if err != nil {
			return loraAnswer{}, err
		}
		return unloadAnswer(b.Name, res), nil
	})
	s.finishLora(w, r, endpointUnloadLora, b, model, ans)
}

// runLora reads and checks an adapter route's body, resolves its base model (loraBase)
// and runs do with them. It returns the body (nil when unreadable), the base model's
// name ("" before it is resolved) and the answer.
func (s *Server) runLora(w http.ResponseWriter, r *http.Request, load bool,
	do func(b *loraBody, model string) (loraAnswer, error)) (*loraBody, string, loraAnswer) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		return nil, "", loraAnswer{err: aerr}
	}
	b, aerr := parseLoraBody(body, load)
	if aerr != nil {
		return nil, "", loraAnswer{err: aerr}
	}
	endpoint := endpointUnloadLora
	if load {
		endpoint = endpointLoadLora
	}
	s.warnIgnored(endpoint, b.Ignored)
	base, aerr := s.loraBase(r.Context(), b, load)
	if aerr != nil {
		return b, "", loraAnswer{err: aerr}
	}
	model := base.GetModel()
	ans, err := do(b, model)
	if err != nil {
		return b, model, loraAnswer{err: loraBackendError(b, model, err)}
	}
	return b, model, ans
}

// finishLora counts an adapter route's answer, logs it and writes it.
func (s *Server) finishLora(w http.ResponseWriter, r *http.Request, endpoint string, b *loraBody, model string, a loraAnswer) {
	s.metrics.loraAdminDone(endpoint, model, a.outcome())
	log := s.cfg.Logger
	if a.err != nil {
		ev := log.Warn()
		if a.err.Status() >= 500 {
			ev = log.Error()
		}
		if b != nil {
			ev = ev.Str("lora", clipName(b.Name))
		}
		if a.err.Cause != nil {
			ev = ev.AnErr("cause", a.err.Cause)
		}
		ev.Str("request_id", requestID(r)).Str("endpoint", endpoint).Str("model", model).Int("status", a.err.Status()).
			Str("error_kind", a.err.Kind.String()).Str("error", a.err.Message).Msg("LoRA adapter request refused")
		writeError(w, a.err, s.cfg.RetryAfter)
		return
	}
	ev := log.Info()
	if a.partial {
		ev = log.Warn().Str("failed", a.detail)
	}
	msg := "LoRA adapter unloaded"
	if endpoint == endpointLoadLora {
		msg = "LoRA adapter loaded"
	}
	ev.Str("request_id", requestID(r)).Str("endpoint", endpoint).Str("model", model).Str("lora", b.Name).
		Str("lora_path", b.Path).Strs("workers", a.workers).Msg(msg)
	writeLoraText(w, a)
}

// loraBase returns the card of the base model an adapter route's body concerns: `model`
// when given (a base model; an adapter's name there is a 400), else the adapter's own
// base model when it is served (an unload, or a load that adds workers), else the one
// base model served (several: 400, as vLLM's generation routes answer a request without
// `model`). A load also refuses a name that a base model, or an adapter of another base
// model, already has.
func (s *Server) loraBase(ctx context.Context, b *loraBody, load bool) (*messages.ModelCard, *APIError) {
	cards, err := s.backend.Models(ctx)
	if err != nil {
		return nil, backendError(b.Model, err)
	}
	var bases, helds []*messages.ModelCard // helds: the adapter entries of that name
	for _, c := range cards {
		switch {
		case isBase(c):
			bases = append(bases, c)
			if load && c.GetModel() == b.Name {
				return nil, newError(KindInvalidValue, "lora_name",
					"The lora adapter name '%s' conflicts with a served base model.", clipName(b.Name))
			}
		case c.GetModel() == b.Name && (b.Model == "" || c.GetLora().GetParent() == b.Model):
			helds = append(helds, c)
		}
	}
	var held *messages.ModelCard
	if len(helds) == 1 {
		held = helds[0]
	}
	var base *messages.ModelCard
	switch {
	case b.Model != "":
		c, aerr := s.lookupModel(ctx, b.Model)
		if aerr != nil {
			return nil, aerr
		}
		if !isBase(c) {
			return nil, newError(KindInvalidValue, "model", "'model' must name a base model; `%s` is a LoRA adapter of `%s`.",
				clipName(c.GetModel()), clipName(c.GetLora().GetParent()))
		}
		base = c
	case held != nil:
		for _, c := range bases {
			if c.GetModel() == held.GetLora().GetParent() {
				base = c
			}
		}
	case len(helds) > 1:
		return nil, newError(KindMissingParameter, "model",
			"Missing required parameter: 'model' (the lora adapter '%s' is loaded for %d models).", clipName(b.Name), len(helds))
	case len(bases) == 1:
		base = bases[0]
	case len(bases) == 0:
		return nil, &APIError{Kind: KindNoWorkers, Message: "No model has a live worker now; retry later.", Cause: ErrNoWorkers}
	default:
		return nil, newError(KindMissingParameter, "model", "Missing required parameter: 'model' (this server serves %d models).", len(bases))
	}
	if base == nil { // the adapter's base model left the list meanwhile
		return nil, modelNotFound(held.GetLora().GetParent())
	}
	if load {
		for _, c := range cards {
			if !isBase(c) && c.GetModel() == b.Name && c.GetLora().GetParent() != base.GetModel() {
				return nil, newError(KindInvalidValue, "lora_name", "The lora adapter '%s' has already been loaded for model `%s`.",
					clipName(b.Name), clipName(c.GetLora().GetParent()))
			}
		}
	}
	return base, nil
}

// loraBackendError maps a LoraAdmin error to the catalogue (backendError, and
// ErrLoraConflict as vLLM answers a second load of a name).
func loraBackendError(b *loraBody, model string, err error) *APIError {
	if errors.Is(err, ErrLoraConflict) {
		e := newError(KindInvalidValue, "lora_name",
			"The lora adapter '%s' has already been loaded from another path: unload it before loading it from '%s'.",
			clipName(b.Name), clipName(b.Path))
		e.Cause = err
		return e
	}
	if errors.Is(err, ErrLoraOff) {
		e := newError(KindInvalidValue, "",
			"LoRA is not enabled on the workers of '%s': start them with --max-loras N (adapter slots per worker).", clipName(model))
		e.Cause = err
		return e
	}
	return backendError(model, err)
}

// LoraWorkersHeader names, on a successful answer of either route, the workers that
// hold the adapter pinned after a load (or that it was removed from, after an unload),
// comma-separated.
const LoraWorkersHeader = "X-Turbine-Lora-Workers"

// loraAnswer is the answer of an adapter route.
type loraAnswer struct {
	// text is the plain-text body of a success: vLLM's sentence, followed on a second
	// line by the workers that failed (detail) when some did.
	text    string
	workers []string // the workers that hold it (load) or no longer do (unload)
	detail  string   // "" when every worker concerned succeeded
	partial bool
	err     *APIError // the refusal, instead of the above
}

// outcome labels the answer in metrics: "ok", "partial", or the refusal's error code.
func (a loraAnswer) outcome() string {
	switch {
	case a.err != nil:
		return a.err.Kind.Entry().Code
	case a.partial:
		return "partial"
	}
	return "ok"
}

// failedWorkers is "w1 (reason); w2 (reason)" for the lines of res that fail.
func failedWorkers(res *LoraResult, failed func(LoraWorker) bool) string {
	var parts []string
	for _, w := range res.Workers {
		if failed(w) {
			parts = append(parts, fmt.Sprintf("%s (%s: %s)", w.WorkerID, loraFailureLabel(w.Failure), w.Error))
		}
	}
	return strings.Join(parts, "; ")
}

// loraFailureLabel is a LoraFailure's label: "ok", "invalid", "not_found", "no_slot",
// "engine" (metrics, messages).
func loraFailureLabel(f messages.LoraFailure) string {
	if n, ok := messages.LoraFailure_name[int32(f)]; ok {
		return strings.ToLower(strings.TrimPrefix(n, "LORA_"))
	}
	return fmt.Sprintf("LoraFailure(%d)", int32(f))
}

// loadAnswer decides the answer of a load from what each worker did (docs/reference.md
// §26.3):
//
//   - every worker holds it (loaded now, or pinned there already): 200 with vLLM's
//     success text;
//   - some do: 200 all the same (the adapter serves), the text's second line naming the
//     workers that failed and why; those that loaded it keep it;
//   - none does: a worker that found the adapter invalid → 400 invalid_value with its
//     reason; every worker without a free slot (each of its slots holds a pinned adapter,
//     which an operator's load never evicts, or one that running requests use) → 503
//     lora_no_slot; otherwise (an engine refused or could not be reached, a worker did
//     not answer) → 503 lora_unavailable;
//   - no worker concerned at all: 503 no_workers.
func loadAnswer(name string, res *LoraResult) loraAnswer {
	var ok, invalid, noSlot []LoraWorker
	for _, w := range res.Workers {
		switch w.Failure {
		case messages.LoraFailure_LORA_OK:
			ok = append(ok, w)
		case messages.LoraFailure_LORA_INVALID:
			invalid = append(invalid, w)
		case messages.LoraFailure_LORA_NO_SLOT:
			noSlot = append(noSlot, w)
		}
	}
	n := len(res.Workers)
	switch {
	case n == 0:
		return loraAnswer{err: &APIError{Kind: KindNoWorkers, Message: "No ready worker of the model can take a LoRA adapter now; retry later.",
			Cause: ErrNoWorkers}}
	case len(ok) == 0 && len(invalid) > 0:
		return loraAnswer{err: newError(KindInvalidValue, "lora_path", "Invalid LoRA adapter '%s': %s", clipName(name), invalid[0].Error)}
	case len(ok) == 0 && len(noSlot) == n:
		return loraAnswer{err: newError(KindLoraNoSlot, "",
			"No worker has a free LoRA adapter slot for '%s' (%d asked): each slot holds a pinned adapter, which an explicit load never evicts, or one that running requests use. Unload an adapter first.",
			clipName(name), n)}
	case len(ok) == 0:
		return loraAnswer{err: newError(KindLoraUnavailable, "", "The LoRA adapter '%s' could not be loaded: %s.", clipName(name),
			failedWorkers(res, func(LoraWorker) bool { return true }))}
	}
	a := loraAnswer{text: fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", name)}
	for _, w := range ok {
		a.workers = append(a.workers, w.WorkerID)
	}
	if len(ok) < n {
		a.partial = true
		a.detail = failedWorkers(res, func(w LoraWorker) bool { return w.Failure != messages.LoraFailure_LORA_OK })
		a.text += fmt.Sprintf("\nLoaded on %d of %d workers; not on %s.", len(ok), n, a.detail)
	}
	return a
}

// unloadAnswer decides the answer of an unload: no worker held the adapter (or each
// answered it holds none) → 404 as vLLM's; else 200 with vLLM's success text when every
// holder let it go, with a second line naming those that failed when some did (they
// still hold it); none let it go → 503 lora_unavailable.
func unloadAnswer(name string, res *LoraResult) loraAnswer {
	var gone []string
	notFound := 0
	for _, w := range res.Workers {
		switch w.Failure {
		case messages.LoraFailure_LORA_OK:
			gone = append(gone, w.WorkerID)
		case messages.LoraFailure_LORA_NOT_FOUND:
			notFound++
		}
	}
	failed := func(w LoraWorker) bool {
		return w.Failure != messages.LoraFailure_LORA_OK && w.Failure != messages.LoraFailure_LORA_NOT_FOUND
	}
	switch {
	case notFound == len(res.Workers):
		return loraAnswer{err: newError(KindModelNotFound, "lora_name", "The lora adapter '%s' cannot be found.", clipName(name))}
	case len(gone) == 0:
		return loraAnswer{err: newError(KindLoraUnavailable, "", "The LoRA adapter '%s' could not be unloaded: %s.", clipName(name),
			failedWorkers(res, failed))}
	}
	a := loraAnswer{text: fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", name), workers: gone}
	if len(gone)+notFound < len(res.Workers) {
		a.partial = true
		a.detail = failedWorkers(res, failed)
		a.text += fmt.Sprintf("\nStill held by %s.", a.detail)
	}
	return a
}

// writeLoraText writes a successful adapter route's answer: 200, text/plain, the
// workers in LoraWorkersHeader.
func writeLoraText(w http.ResponseWriter, a loraAnswer) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set(LoraWorkersHeader, strings.Join(a.workers, ","))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(a.text))
}
