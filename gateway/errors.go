package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// ErrorKind names one entry of the error catalogue. Every error the HTTP API returns is
// built from one of these kinds, so its status, OpenAI `type` and `code` come from one
// table (Catalogue).
type ErrorKind int

// The catalogue's kinds. Append new kinds at the end; the golden file
// testdata/errors.golden lists the whole table.
const (
	// KindInvalidJSON: the body is not valid JSON or not a JSON object.
	KindInvalidJSON ErrorKind = iota
	// KindInvalidType: a field has the wrong JSON type (param names the field).
	KindInvalidType
	// KindMissingParameter: a required field is absent, null or empty.
	KindMissingParameter
	// KindInvalidValue: a field has the right type but an illegal value.
	KindInvalidValue
	// KindUnsupported: a legal OpenAI field or value that this engine cannot honour, or
	// that this server refuses as configured (a request's chat template without
	// Config.TrustRequestChatTemplate).
	KindUnsupported
	// KindContextLengthExceeded: prompt (or prompt + max_tokens) longer than the model's
	// context length.
	KindContextLengthExceeded
	// KindBodyTooLarge: the request body is larger than Config.MaxBodyBytes.
	KindBodyTooLarge
	// KindModelNotFound: no live worker serves the requested model.
	KindModelNotFound
	// KindRouteNotFound: no such URL path.
	KindRouteNotFound
	// KindMethodNotAllowed: the path exists but not for this HTTP method.
	KindMethodNotAllowed
	// KindNoWorkers: the model is known but has no live worker now.
	KindNoWorkers
	// KindAllBusy: every worker of the model is busy (docs/reference.md §4).
	KindAllBusy
	// KindEngineError: the engine failed the request (a TokenChunk with an error).
	KindEngineError
	// KindBackendError: the cluster could not be reached or failed in transport.
	KindBackendError
	// KindInternal: a fault in the gateway itself (e.g. a model's tokenizer failed to load).
	KindInternal
	// KindClientClosed: the client went away before the response ended. Never written to
	// a client; it labels metrics and logs (status 499 as nginx counts it).
	KindClientClosed
	// KindDraining: the server is shutting down and takes no new request (Server.Drain).
	KindDraining
	// KindTimeout: the request ran past Config.RequestTimeout; its engine request was
	// cancelled.
	KindTimeout
	// KindUnauthorized: Config.APIKeys is set and the request to /v1/ does not present
	// one of them as "Authorization: Bearer <key>" (no header, another scheme, or a wrong
	// key), or Config.AdminAPIKeys is set and the request to /admin/ does not present one
	// of those. Answered with WWW-Authenticate: Bearer.
	KindUnauthorized
	// KindOverloaded: this server already handles Config.MaxConcurrentRequests requests
	// (and its queue, if any, is full or the request waited past QueueTimeout).
	KindOverloaded
	// KindUnsupportedEncoding: the request body's Content-Encoding is not one the server
	// decodes (gzip, deflate, identity), or several codings are stacked. Answered with
	// Accept-Encoding.
	KindUnsupportedEncoding
	// KindInvalidEncoding: the body is not valid data of its Content-Encoding (corrupt or
	// truncated gzip or deflate).
	KindInvalidEncoding
	// KindAdminForbidden: the admin routes (/admin/) are closed to this request: the
	// server has API keys but no admin key, or it has neither and the client is not on
	// loopback (Config.AdminAPIKeys).
	KindAdminForbidden
	// KindLoraNoSlot: a LoRA adapter load found no worker with a free adapter slot: each
	// slot holds a pinned adapter, which an explicit load never evicts (docs/reference.md
	// §26.3). Retrying helps only once an adapter is unloaded.
	KindLoraNoSlot
	// KindLoraUnavailable: no worker could load (or unload) a LoRA adapter: their engines
	// refused for a reason other than the adapter itself, could not be reached, or did
	// not answer in time; or a request's adapter became unavailable while it ran and no
	// other worker has it (AdapterLost).
	KindLoraUnavailable
	// KindPlannerUnavailable: /admin/planner found no planner in the cluster (none was
	// started, or its member is gone); docs/reference.md §27.7.
	KindPlannerUnavailable
)

// CatalogueEntry is one row of the error catalogue.
type CatalogueEntry struct {
	Kind ErrorKind
	// Name is a stable identifier used in logs and in the golden file.
	Name string
	// Status is the HTTP status code.
	Status int
	// Type is the OpenAI error `type` ("invalid_request_error", "server_error").
	Type string
	// Code is the OpenAI error `code` (OpenAI's own where one exists, e.g.
	// "model_not_found", "context_length_exceeded").
	Code string
	// RetryAfter marks errors answered with a Retry-After header.
	RetryAfter bool
}

// catalogue is indexed by ErrorKind.
var catalogue = [...]CatalogueEntry{
	KindInvalidJSON:           {KindInvalidJSON, "invalid_json", http.StatusBadRequest, "invalid_request_error", "invalid_json", false},
	KindInvalidType:           {KindInvalidType, "invalid_type", http.StatusBadRequest, "invalid_request_error", "invalid_type", false},
	KindMissingParameter:      {KindMissingParameter, "missing_parameter", http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", false},
	KindInvalidValue:          {KindInvalidValue, "invalid_value", http.StatusBadRequest, "invalid_request_error", "invalid_value", false},
	KindUnsupported:           {KindUnsupported, "unsupported", http.StatusBadRequest, "invalid_request_error", "unsupported_parameter", false},
	KindContextLengthExceeded: {KindContextLengthExceeded, "context_length_exceeded", http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", false},
	KindBodyTooLarge:          {KindBodyTooLarge, "body_too_large", http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", false},
	KindModelNotFound:         {KindModelNotFound, "model_not_found", http.StatusNotFound, "invalid_request_error", "model_not_found", false},
	KindRouteNotFound:         {KindRouteNotFound, "route_not_found", http.StatusNotFound, "invalid_request_error", "unknown_url", false},
	KindMethodNotAllowed:      {KindMethodNotAllowed, "method_not_allowed", http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", false},
	KindNoWorkers:             {KindNoWorkers, "no_workers", http.StatusServiceUnavailable, "server_error", "no_live_workers", true},
	KindAllBusy:               {KindAllBusy, "all_busy", http.StatusServiceUnavailable, "server_error", "all_workers_busy", true},
	KindEngineError:           {KindEngineError, "engine_error", http.StatusInternalServerError, "server_error", "engine_error", false},
	KindBackendError:          {KindBackendError, "backend_error", http.StatusBadGateway, "server_error", "backend_unavailable", false},
	KindInternal:              {KindInternal, "internal", http.StatusInternalServerError, "server_error", "internal_error", false},
	KindClientClosed:          {KindClientClosed, "client_closed", 499, "invalid_request_error", "client_closed_request", false},
	KindDraining:              {KindDraining, "draining", http.StatusServiceUnavailable, "server_error", "service_draining", true},
	KindTimeout:               {KindTimeout, "timeout", http.StatusGatewayTimeout, "server_error", "request_timeout", false},
	KindUnauthorized:          {KindUnauthorized, "unauthorized", http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", false},
	KindOverloaded:            {KindOverloaded, "overloaded", http.StatusServiceUnavailable, "server_error", "server_overloaded", true},
	KindUnsupportedEncoding:   {KindUnsupportedEncoding, "unsupported_encoding", http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_content_encoding", false},
	KindInvalidEncoding:       {KindInvalidEncoding, "invalid_encoding", http.StatusBadRequest, "invalid_request_error", "invalid_content_encoding", false},
	KindAdminForbidden:        {KindAdminForbidden, "admin_forbidden", http.StatusForbidden, "invalid_request_error", "admin_forbidden", false},
	KindLoraNoSlot:            {KindLoraNoSlot, "lora_no_slot", http.StatusServiceUnavailable, "server_error", "lora_no_slot", true},
	KindLoraUnavailable:       {KindLoraUnavailable, "lora_unavailable", http.StatusServiceUnavailable, "server_error", "lora_unavailable", true},
	KindPlannerUnavailable:    {KindPlannerUnavailable, "planner_unavailable", http.StatusServiceUnavailable, "server_error", "planner_unavailable", true},
}

// Catalogue returns a copy of the whole error table, in ErrorKind order.
func Catalogue() []CatalogueEntry {
	out := make([]CatalogueEntry, len(catalogue))
	copy(out, catalogue[:])
	return out
}

// Entry returns k's catalogue row.
func (k ErrorKind) Entry() CatalogueEntry { return catalogue[k] }

// String returns the kind's catalogue name.
func (k ErrorKind) String() string {
	if k < 0 || int(k) >= len(catalogue) {
		return "ErrorKind(" + strconv.Itoa(int(k)) + ")"
	}
	return catalogue[k].Name
}

// APIError is an error the gateway answers with. Its JSON form is OpenAI's
// `{"error": {"message", "type", "param", "code"}}`.
type APIError struct {
	Kind ErrorKind
	// Message is shown to the client as is.
	Message string
	// Param names the request field at fault in OpenAI's notation
	// (e.g. "messages[0].content"); "" when none (JSON null).
	Param string
	// Cause is the underlying error, for logs only.
	Cause error
}

// Error implements error.
func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("gateway: %s (%s): %s", e.Kind, e.Param, e.Message)
	}
	return fmt.Sprintf("gateway: %s: %s", e.Kind, e.Message)
}

// Unwrap returns the cause.
func (e *APIError) Unwrap() error { return e.Cause }

// Status returns the HTTP status of the error's kind.
func (e *APIError) Status() int { return catalogue[e.Kind].Status }

func newError(kind ErrorKind, param, format string, args ...any) *APIError {
	return &APIError{Kind: kind, Param: param, Message: fmt.Sprintf(format, args...)}
}

// errorObject is the inner object of an error body.
type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

type errorBody struct {
	Error errorObject `json:"error"`
}

func (e *APIError) body() errorBody {
	ent := catalogue[e.Kind]
	obj := errorObject{Message: e.Message, Type: ent.Type, Code: ent.Code}
	if e.Param != "" {
		p := e.Param
		obj.Param = &p
	}
	return errorBody{Error: obj}
}

// MarshalJSON writes the OpenAI error body.
func (e *APIError) MarshalJSON() ([]byte, error) { return encodeJSON(e.body()) }

// writeError writes e as a JSON response with its catalogue status (and Retry-After
// where the catalogue says so).
func writeError(w http.ResponseWriter, e *APIError, retryAfter time.Duration) {
	ent := catalogue[e.Kind]
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if ent.RetryAfter {
		secs := int(retryAfter.Round(time.Second) / time.Second)
		if secs < 1 {
			secs = 1
		}
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	w.WriteHeader(ent.Status)
	b, _ := encodeJSON(e.body())
	_, _ = w.Write(append(b, '\n'))
}

// backendError maps an error from Backend.Generate or Stream.Recv to the catalogue.
// model may come from the request: messages carry it clipped (clipName).
func backendError(model string, err error) *APIError {
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, ErrUnknownModel):
		e := modelNotFound(model)
		e.Cause = err
		return e
	case errors.Is(err, ErrDraining):
		return draining()
	case errors.Is(err, ErrAllBusy):
		return &APIError{Kind: KindAllBusy, Message: fmt.Sprintf("All workers serving model %q are busy; retry later.", clipName(model)), Cause: err}
	case errors.Is(err, ErrNoPrefillWorkers):
		return &APIError{Kind: KindNoWorkers, Message: fmt.Sprintf("No live prefill worker serves model %q and this service enforces disaggregated serving; retry later.", clipName(model)), Cause: err}
	case errors.Is(err, ErrNoWorkers):
		return &APIError{Kind: KindNoWorkers, Message: fmt.Sprintf("No live worker serves model %q now; retry later.", clipName(model)), Cause: err}
	default:
		// The cause (cluster internals) goes to the log, not to the client.
		return &APIError{Kind: KindBackendError, Message: fmt.Sprintf("The request for model %q could not be run on a worker; retry later.", clipName(model)), Cause: err}
	}
}

// RouteError is the error of a request its model's router did not route: outcome is the
// router's answer (or ROUTE_CALL_FAILED when the Route call itself failed), message its
// reason, kept in the error (for a failed call, in its Cause: the log's). This is the one
// table from route outcomes to the catalogue (through backendError):
//
//	ROUTE_OK                  nil
//	ROUTE_NO_WORKERS          ErrNoWorkers (wrapped): 503 no_workers, Retry-After
//	ROUTE_ALL_BUSY            ErrAllBusy (wrapped): 503 all_busy, Retry-After
//	ROUTE_UNKNOWN_MODEL       ErrUnknownModel (wrapped): 404 model_not_found
//	ROUTE_NO_PREFILL_WORKERS  ErrNoPrefillWorkers (wrapped, an ErrNoWorkers): 503, Retry-After
//	ROUTE_CALL_FAILED         *APIError KindNoWorkers wrapping ErrNoWorkers: 503, Retry-After
//	ROUTE_BAD_REQUEST         *APIError KindInvalidValue: 400 (the request itself is at fault)
//	ROUTE_NO_ADAPTER          *APIError KindModelNotFound wrapping ErrUnknownModel: 404, as an
//	                          unknown model (a caller that knows the adapter's name answers
//	                          UnknownAdapter's, naming it)
//
// A value outside the enum (a newer router's) is answered as ROUTE_NO_WORKERS: retryable.
func RouteError(outcome messages.RouteOutcome, message string) error {
	switch outcome {
	case messages.RouteOutcome_ROUTE_OK:
		return nil
	case messages.RouteOutcome_ROUTE_ALL_BUSY:
		return fmt.Errorf("%w: %s", ErrAllBusy, message)
	case messages.RouteOutcome_ROUTE_UNKNOWN_MODEL:
		return fmt.Errorf("%w: %s", ErrUnknownModel, message)
	case messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS:
		return fmt.Errorf("%w: %s", ErrNoPrefillWorkers, message)
	case messages.RouteOutcome_ROUTE_CALL_FAILED:
		// The router is overloaded or moving, or could not be reached: nothing is known to
		// be wrong with the request or the workers.
		return &APIError{Kind: KindNoWorkers, Message: "The request could not be routed to a worker in time; retry later.",
			Cause: fmt.Errorf("%w: route call failed: %s", ErrNoWorkers, message)}
	case messages.RouteOutcome_ROUTE_BAD_REQUEST:
		return &APIError{Kind: KindInvalidValue, Message: "The request cannot be routed: " + message,
			Cause: errors.New("route: bad request: " + message)}
	case messages.RouteOutcome_ROUTE_NO_ADAPTER:
		return &APIError{Kind: KindModelNotFound, Param: "model", Message: "No worker serves the requested LoRA adapter: " + message,
			Cause: fmt.Errorf("%w: route: no adapter: %s", ErrUnknownModel, message)}
	default:
		return fmt.Errorf("%w: %s", ErrNoWorkers, message)
	}
}

// modelNotFound is OpenAI's 404 for model, a request-supplied name, clipped (clipName).
func modelNotFound(model string) *APIError {
	return newError(KindModelNotFound, "model", "The model `%s` does not exist.", clipName(model))
}

func draining() *APIError {
	return newError(KindDraining, "", "This server is shutting down and takes no new request; retry on another.")
}
