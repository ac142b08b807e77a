package engines

import "net/http"

// InvalidRequestError is an engine's refusal of a request as invalid: an error answer
// whose status is one InvalidRequestStatus accepts (vLLM's 400 BadRequestError for an
// input longer than the model takes, FastAPI's 422 for a body it cannot validate).
// Re-sending the request to another engine will not mend it; the client has to change
// it, and is told the engine's own message (docs/reference.md §23).
type InvalidRequestError struct {
	// Status is the engine's HTTP status.
	Status int
	// Message is the engine's message as it worded it, without the engine's name or the
	// status ("" when its answer had none).
	Message string
	// Err is the engine's error answer as its client decoded it (e.g. *vllm.Error).
	Err error
}

// Error is Err's text.
func (e *InvalidRequestError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *InvalidRequestError) Unwrap() error { return e.Err }

// InvalidRequestStatus reports whether an engine's HTTP error status refuses the request
// itself (400 Bad Request, 422 Unprocessable Entity), rather than saying that the engine
// failed (5xx), is overloaded (429), timed out (408) or is set up unlike its worker
// (401, 403: a key; 404, 405: a route or model name), which the client cannot mend.
func InvalidRequestStatus(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusUnprocessableEntity
}
