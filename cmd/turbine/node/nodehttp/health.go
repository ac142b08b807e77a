package nodehttp

import (
	"net/http"

	"github.com/turbine-llm/turbine/messages"
)

// State is a worker's state on /health.
type State string

// The states of a worker.
const (
	// StateStarting: its engine has not been ready yet (no registration, or none ready).
	StateStarting State = "starting"
	// StateReady: its latest registration says ready (the engine answers, its canary
	// passes, it is not draining): routers send it requests.
	StateReady State = "ready"
	// StateNotReady: it was ready once and is not now (the engine exited and restarts,
	// stopped answering, or failed its canary).
	StateNotReady State = "not_ready"
	// StateStopping: the node agent is draining or stopping it; it does not count
	// against the node's health.
	StateStopping State = "stopping"
)

// Status is the node's status on /health.
type Status string

// The node's statuses: 200 with StatusHealthy, 503 with the others.
const (
	// StatusHealthy: the boot workers were started and every worker not stopping is
	// ready (a node with no worker is healthy once booted).
	StatusHealthy Status = "healthy"
	// StatusStarting: the node has not joined and started its boot workers yet, or a
	// worker has not been ready yet.
	StatusStarting Status = "starting"
	// StatusUnhealthy: a worker that was ready is not, or the node agent did not answer.
	StatusUnhealthy Status = "unhealthy"
)

// Worker is one worker on /health.
type Worker struct {
	ID    string `json:"worker"`
	Model string `json:"model,omitempty"`
	Role  string `json:"role,omitempty"`
	State State  `json:"state"`
	// EngineURL is the engine's advertised base URL (WorkerInfo.engine_url); "" before
	// its first start.
	EngineURL string `json:"engine_url,omitempty"`
	// Engine is the engine's name (the card's engine: mocker, vllm, sglang, trtllm).
	Engine string `json:"engine,omitempty"`
}

// HealthBody is /health's JSON answer.
type HealthBody struct {
	Status  Status   `json:"status"`
	Node    string   `json:"node"`
	Workers []Worker `json:"workers"`
	Error   string   `json:"error,omitempty"`
}

// WorkerState is the state of worker nw given its latest registration (nil: none yet)
// and whether it has been ready since it was started.
func WorkerState(nw *messages.NodeWorker, latest *messages.WorkerInfo, everReady bool) State {
	switch {
	case nw.GetStopping():
		return StateStopping
	case latest.GetReady():
		return StateReady
	case everReady:
		return StateNotReady
	}
	return StateStarting
}

// Health is /health's answer: the status code and body for a node whose boot workers
// were started (booted) or not, with workers. A worker's state decides the node's as
// HealthBody.Status says; a not-ready worker makes the node unhealthy rather than
// starting.
func Health(node string, booted bool, workers []Worker) (int, HealthBody) {
	body := HealthBody{Status: StatusHealthy, Node: node, Workers: workers}
	if body.Workers == nil {
		body.Workers = []Worker{}
	}
	if !booted {
		body.Status = StatusStarting
	}
	for _, w := range workers {
		switch w.State {
		case StateNotReady:
			body.Status = StatusUnhealthy
		case StateStarting:
			if body.Status == StatusHealthy {
				body.Status = StatusStarting
			}
		}
	}
	if body.Status == StatusHealthy {
		return http.StatusOK, body
	}
	return http.StatusServiceUnavailable, body
}
