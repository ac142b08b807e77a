package nodehttp

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestWorkerState(t *testing.T) {
	ready := &messages.WorkerInfo{WorkerId: "w", Ready: true}
	down := &messages.WorkerInfo{WorkerId: "w"}
	for _, tc := range []struct {
		name      string
		stopping  bool
		latest    *messages.WorkerInfo
		everReady bool
		want      State
	}{
		{"no registration", false, nil, false, StateStarting},
		{"registered, engine loading", false, down, false, StateStarting},
		{"ready", false, ready, true, StateReady},
		{"was ready, engine restarting", false, down, true, StateNotReady},
		{"stopping while ready", true, ready, true, StateStopping},
		{"stopping before ready", true, nil, false, StateStopping},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := &messages.NodeWorker{WorkerId: "w", Stopping: tc.stopping}
			if got := WorkerState(nw, tc.latest, tc.everReady); got != tc.want {
				t.Fatalf("WorkerState = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	w := func(id string, s State) Worker { return Worker{ID: id, State: s} }
	for _, tc := range []struct {
		name    string
		booted  bool
		workers []Worker
		code    int
		status  Status
	}{
		{"not booted", false, nil, http.StatusServiceUnavailable, StatusStarting},
		{"not booted, workers ready so far", false, []Worker{w("a", StateReady)}, http.StatusServiceUnavailable, StatusStarting},
		{"booted, no workers", true, nil, http.StatusOK, StatusHealthy},
		{"all ready", true, []Worker{w("a", StateReady), w("b", StateReady)}, http.StatusOK, StatusHealthy},
		{"one starting", true, []Worker{w("a", StateReady), w("b", StateStarting)}, http.StatusServiceUnavailable, StatusStarting},
		{"one not ready", true, []Worker{w("a", StateNotReady), w("b", StateStarting)}, http.StatusServiceUnavailable, StatusUnhealthy},
		{"stopping ignored", true, []Worker{w("a", StateReady), w("b", StateStopping)}, http.StatusOK, StatusHealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := Health("n", tc.booted, tc.workers)
			if code != tc.code || body.Status != tc.status || body.Node != "n" || body.Workers == nil {
				t.Fatalf("Health = %d %+v, want %d %s", code, body, tc.code, tc.status)
			}
		})
	}
}

// TestBoard: the agent's list decides which workers exist; registrations add state and
// engine URL; a new agent forgets the old workers; a worker that left is forgotten.
func TestBoard(t *testing.T) {
	b := NewBoard()
	if _, _, err := b.Workers(context.Background()); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("no agent: err %v, want ErrNoAgent", err)
	}
	listed := []*messages.NodeWorker{{WorkerId: "n-0", Model: "m", Role: "aggregated"}, {WorkerId: "n-1", Model: "m"}}
	b.Attach(func(context.Context) (*messages.NodeStatus, error) { return &messages.NodeStatus{Workers: listed}, nil })
	b.Registered(&messages.WorkerInfo{WorkerId: "n-0", Ready: true, EngineUrl: "http://10.0.0.1:4000",
		Card: &messages.ModelCard{Engine: "vllm"}})
	b.Registered(&messages.WorkerInfo{WorkerId: "n-9", Ready: true}) // not listed
	booted, ws, err := b.Workers(context.Background())
	if err != nil || booted {
		t.Fatalf("booted %v err %v, want false nil", booted, err)
	}
	want := []Worker{{ID: "n-0", Model: "m", Role: "aggregated", State: StateReady, EngineURL: "http://10.0.0.1:4000", Engine: "vllm"},
		{ID: "n-1", Model: "m", State: StateStarting}}
	if len(ws) != 2 || ws[0] != want[0] || ws[1] != want[1] {
		t.Fatalf("workers %+v, want %+v", ws, want)
	}
	b.Booted()
	b.Registered(&messages.WorkerInfo{WorkerId: "n-0", EngineUrl: "http://10.0.0.1:4000"}) // engine exited
	if booted, ws, _ = b.Workers(context.Background()); !booted || ws[0].State != StateNotReady {
		t.Fatalf("after the engine exited: booted %v, %+v; want booted, n-0 not_ready", booted, ws[0])
	}
	// n-9 was forgotten: listed later, it has no registration.
	listed = append(listed, &messages.NodeWorker{WorkerId: "n-9"})
	if _, ws, _ = b.Workers(context.Background()); ws[2].State != StateStarting {
		t.Fatalf("n-9 after it left and came back: %+v, want starting", ws[2])
	}
	// A new agent (a new member) starts over.
	b.Attach(func(context.Context) (*messages.NodeStatus, error) {
		return &messages.NodeStatus{Workers: listed[:1]}, nil
	})
	if booted, ws, _ = b.Workers(context.Background()); booted || ws[0].State != StateStarting || ws[0].EngineURL != "" {
		t.Fatalf("after a new agent: booted %v, %+v; want not booted, n-0 starting without engine", booted, ws[0])
	}
	b.Detach()
	if _, _, err := b.Workers(context.Background()); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("detached: err %v, want ErrNoAgent", err)
	}
}
