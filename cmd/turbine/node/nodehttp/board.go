package nodehttp

import (
	"context"
	"errors"
	"sync"

	"github.com/turbine-llm/turbine/messages"
)

// ErrNoAgent is Board.Workers' error while no node agent is attached (before the node
// joins the cluster, and between a lost member and its replacement).
var ErrNoAgent = errors.New("nodehttp: the node agent is not running")

// Board is what the node tells its HTTP port: how to ask the node agent for its
// workers, whether the boot workers were started, and each worker's latest
// registration. The node agent's list is authoritative for which workers exist; a
// registration only adds their readiness and engine URL, and is forgotten once its
// worker leaves the list. Safe for concurrent use.
type Board struct {
	mu        sync.Mutex
	status    func(context.Context) (*messages.NodeStatus, error)
	booted    bool
	latest    map[string]registration
	everReady map[string]bool
	seq       uint64 // registrations recorded
}

// registration is a worker's latest registration and its number on the board.
type registration struct {
	info *messages.WorkerInfo
	seq  uint64
}

// NewBoard returns a board with no node agent attached.
func NewBoard() *Board {
	return &Board{latest: map[string]registration{}, everReady: map[string]bool{}}
}

// Attach attaches a new node agent, asked through status (which must honour ctx). The
// node is not booted until Booted, and registrations of earlier workers are forgotten
// (a new member's workers reuse their ids).
func (b *Board) Attach(status func(context.Context) (*messages.NodeStatus, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status, b.booted = status, false
	clear(b.latest)
	clear(b.everReady)
}

// Booted records that the boot workers of the attached agent were started.
func (b *Board) Booted() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.booted = b.status != nil
}

// Detach detaches the node agent (it stopped).
func (b *Board) Detach() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.status, b.booted = nil, false
}

// Registered records a worker's registration (what it sends the Router grain). It
// does not block.
func (b *Board) Registered(info *messages.WorkerInfo) {
	if info.GetWorkerId() == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	b.latest[info.GetWorkerId()] = registration{info: info, seq: b.seq}
	if info.GetReady() {
		b.everReady[info.GetWorkerId()] = true
	}
}

// Workers asks the node agent for its workers and returns them in its order with their
// state, and whether the node is booted. Errors: ErrNoAgent, or the agent's.
func (b *Board) Workers(ctx context.Context) (booted bool, workers []Worker, err error) {
	b.mu.Lock()
	status, asked := b.status, b.seq
	b.mu.Unlock()
	if status == nil {
		return false, nil, ErrNoAgent
	}
	st, err := status(ctx)
	if err != nil {
		return false, nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	listed := make(map[string]bool, len(st.GetWorkers()))
	for _, nw := range st.GetWorkers() {
		id := nw.GetWorkerId()
		listed[id] = true
		info := b.latest[id].info
		workers = append(workers, Worker{ID: id, Model: nw.GetModel(), Role: nw.GetRole(),
			State: WorkerState(nw, info, b.everReady[id]), EngineURL: info.GetEngineUrl(), Engine: info.GetCard().GetEngine()})
	}
	// A worker the agent no longer lists is forgotten, unless it registered after the
	// agent was asked (it may have been started since).
	for id, r := range b.latest {
		if !listed[id] && r.seq <= asked {
			delete(b.latest, id)
			delete(b.everReady, id)
		}
	}
	return b.booted, workers, nil
}
