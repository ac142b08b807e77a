package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/flow"
)

// Fault is a failure the simulation injects into its fleet.
type Fault struct {
	// At is when it strikes, from the first arrival (0 to MaxSimulatedTime).
	At time.Duration
	// Worker names the worker: worker-N (aggregated), decode-N or prefill-N (N from 0).
	Worker string
	// Kind is what happens to it.
	Kind FaultKind
}

// FaultKind is what a Fault does.
type FaultKind uint8

const (
	// FaultKill kills the worker for good, as when its process dies and its member
	// leaves the cluster: its engine drops every request and pinned block, the router
	// removes it with its blocks and load (as the Router grain does when a member
	// leaves), the legs it ran get their worker's termination notice (each request's
	// flow then migrates it, after flow.Config.TerminatedGrace), and a decode leg
	// reading KV blocks from it gets a KV transfer failure (its prefill is retried).
	FaultKill FaultKind = iota
)

// String returns "kill".
func (k FaultKind) String() string {
	if k == FaultKill {
		return "kill"
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// ParseFault parses "WORKER@AT" (e.g. "worker-1@30s": AT a Go duration from the first
// arrival) as a FaultKill. Errors name the part that is wrong.
func ParseFault(s string) (Fault, error) {
	name, at, ok := strings.Cut(s, "@")
	if !ok || name == "" {
		return Fault{}, fmt.Errorf("%q: want WORKER@TIME, e.g. worker-1@30s", s)
	}
	d, err := time.ParseDuration(at)
	if err != nil || d < 0 || d > MaxSimulatedTime {
		return Fault{}, fmt.Errorf("%q: time %q: want a duration from 0 to %v after the first arrival, e.g. 30s", s, at, MaxSimulatedTime)
	}
	return Fault{At: d, Worker: name, Kind: FaultKill}, nil
}

// WorkerNames are the names of a fleet's workers, in the router's order: worker-0 ...
// (aggregated), or decode-0 ... then prefill-0 ... when prefillWorkers > 0.
func WorkerNames(workers, prefillWorkers int) []string {
	prefix := "worker-"
	if prefillWorkers > 0 {
		prefix = "decode-"
	}
	names := make([]string, 0, workers+prefillWorkers)
	for i := range workers {
		names = append(names, prefix+strconv.Itoa(i))
	}
	for i := range prefillWorkers {
		names = append(names, "prefill-"+strconv.Itoa(i))
	}
	return names
}

// DescribeWorkers names a fleet's workers for a message: "worker-0 to worker-3", or
// "decode-0 to decode-1, prefill-0".
func DescribeWorkers(workers, prefillWorkers int) string {
	span := func(prefix string, n int) string {
		if n == 1 {
			return prefix + "0"
		}
		return fmt.Sprintf("%s0 to %s%d", prefix, prefix, n-1)
	}
	if prefillWorkers == 0 {
		return span("worker-", workers)
	}
	return span("decode-", workers) + ", " + span("prefill-", prefillWorkers)
}

// fault strikes with Config.Faults[k].
func (s *simulator) fault(k int) {
	f := s.cfg.Faults[k]
	wi := s.byName[f.Worker]
	w := s.workers[wi]
	if w.dead {
		return
	}
	s.stats.Faults[k].Struck = true
	w.dead = true
	w.pending, w.pendingHead = nil, 0 // its KV events in flight are lost with it
	s.router.RemoveWorker(w.name)
	// Legs sent later go elsewhere (the router no longer has the worker): only the
	// legs there now are visited, by slot, so the run stays deterministic. A flow
	// stepped here may send legs (s.legs grows): no pointer into it is kept across.
	for slot, n := int32(0), int32(len(s.legs)); slot < n; slot++ {
		lg := &s.legs[slot]
		switch {
		case lg.worker == wi:
			if lg.state == legTransfer { // its reader is gone: the prefill engine releases the blocks
				s.releasePinned(lg.src)
			}
			lg.state, lg.pinned, lg.gen = legEnded, false, nil
			if lg.watched {
				s.step(int(lg.req), flow.WorkerTerminated{Leg: lg.id})
			}
		case lg.state == legTransfer && s.legs[lg.src].worker == wi:
			s.kvFailed(slot, "the prefill worker "+w.name+" is gone")
		}
	}
}
