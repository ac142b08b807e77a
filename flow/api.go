package flow

import (
	"strconv"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// Config are the knobs of a request's life. The zero value of a field is its meaning
// written on it, not a default: callers start from DefaultConfig.
type Config struct {
	// Credits is how many chunks a worker may send ahead of the consumer
	// (Generate.initial_credits); the consumed count is granted back (a Credit) each time
	// it reaches Credits/2.
	Credits int32
	// MigrationLimit is how many times one request may be re-sent to another worker after
	// faults (worker gone, engine failed, stalled); 0 disables migration.
	MigrationLimit int
	// StallTimeout is how long the consumer waits for the next chunk before the leg it
	// waits on counts as stalled (FAULT_STALLED); 0: never. A leg whose engine answers
	// whole (it asks for the prompt's logprobs) is not bounded until its first chunk.
	StallTimeout time.Duration
	// PrefillReleaseWait is how long a prefill leg cancelled before its last chunk is
	// waited for, so that the ReleaseKV sent to its worker carries the transfer parameters
	// of a leg that finished just before the cancel reached it.
	PrefillReleaseWait time.Duration
	// TerminatedGrace is how long a leg's chunks are still taken after its worker's
	// termination notice (they can overtake each other); then the leg fails with
	// FAULT_WORKER_TERMINATED.
	TerminatedGrace time.Duration
}

// Defaults of Config (the frontend's flags start from these).
const (
	DefaultCredits            = 64
	DefaultMigrationLimit     = 3
	DefaultStallTimeout       = 2 * time.Minute
	DefaultPrefillReleaseWait = 2 * time.Second
	DefaultTerminatedGrace    = 100 * time.Millisecond
	// MaxPrefillFailures is how many failed prefill legs a request survives: after the
	// first it is routed to another prefill worker, after the second it is prefilled on
	// its decode worker, and a third ends it.
	MaxPrefillFailures = 2
)

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{Credits: DefaultCredits, MigrationLimit: DefaultMigrationLimit, StallTimeout: DefaultStallTimeout,
		PrefillReleaseWait: DefaultPrefillReleaseWait, TerminatedGrace: DefaultTerminatedGrace}
}

// Request is what the flow serves.
type Request struct {
	// ID is unique in the cluster: the flow names its routes ID, ID.1, ID.2 ... (each
	// migration or prefill retry routes under a new id).
	ID       string
	Model    string
	Tokens   []uint32                 // the prompt, tokenized
	Sampling *messages.SamplingParams // never changed by the flow
	// Routing hints passed to the router; nil: the router's own.
	OverlapWeight *float64
	Temperature   *float64
	// PinWorker, when set, is asked of the router for the first route only (RouteRequest
	// pin_worker: the siblings of an n > 1 request follow their first choice); a
	// migration or prefill retry routes freely.
	PinWorker string
}

// LegID names one leg of the request inside its flow (1, 2, ...; never reused).
type LegID int32

// Worker is where a leg runs: the router's worker id and its actor (nil in the
// simulator).
type Worker struct {
	ID  string
	Ref *messages.ActorRef
}

// TimerKind is what a timer bounds.
type TimerKind int8

const (
	// TimerStall: the consumer's wait for the next chunk (Config.StallTimeout). It counts
	// only while the consumer waits: a shell whose consumer pulls chunks restarts it from
	// the moment it starts waiting. It is not armed on a leg whose engine answers whole
	// (SamplingParams.prompt_logprobs set: vLLM returns those only without streaming, so
	// the first chunk comes when the engine has finished) until that leg's first chunk;
	// such a leg still fails when its worker terminates or its engine reports an error.
	TimerStall TimerKind = iota + 1
	// TimerPrefillRelease: a cancelled prefill leg's last chunk (Config.PrefillReleaseWait).
	TimerPrefillRelease
	// TimerTerminatedGrace: chunks trailing a worker's termination notice
	// (Config.TerminatedGrace).
	TimerTerminatedGrace
)

// String is "stall", "release" or "grace" (the scripts' names).
func (k TimerKind) String() string {
	switch k {
	case TimerStall:
		return "stall"
	case TimerPrefillRelease:
		return "release"
	case TimerTerminatedGrace:
		return "grace"
	}
	return "TimerKind(" + strconv.Itoa(int(k)) + ")"
}

// Timer names one timer of a flow. Gen tells a timer from the ones it replaced: a
// TimerFired of a timer replaced or stopped since is ignored.
type Timer struct {
	Kind TimerKind
	Leg  LegID
	Gen  uint64
}

// ---- events: what happens to the request ----

// Event is something that happened to the request; Flow.Step takes it.
type Event interface{ isEvent() }

// Start: the request arrived. The flow routes it.
type Start struct{}

// Routed answers the flow's Route effect: Response is the router's answer, or Err says
// the call itself failed (timed out, router unreachable: ROUTE_CALL_FAILED). Room is a
// random 63-bit number, the SGLang bootstrap room if the route needs one.
type Routed struct {
	Response *messages.RouteResponse
	Err      error
	Room     uint64
}

// Chunk: a leg's worker sent this chunk. Chunks of one leg come in index order (the
// shell reorders); chunks of legs the flow forgot are ignored.
type Chunk struct {
	Leg   LegID
	Chunk *messages.TokenChunk
}

// WorkerTerminated: the actor of a leg's worker stopped. The leg's chunks already sent
// may still come; after Config.TerminatedGrace the leg fails.
type WorkerTerminated struct{ Leg LegID }

// TimerFired: a timer the flow set has fired.
type TimerFired struct{ Timer Timer }

// ClientGone: the consumer closed the stream (finished or not: the client left, its
// deadline passed, the server's drain period ended). Every leg still running is
// cancelled; a prefill leg's pinned KV blocks are released.
type ClientGone struct{}

func (Start) isEvent()            {}
func (Routed) isEvent()           {}
func (Chunk) isEvent()            {}
func (WorkerTerminated) isEvent() {}
func (TimerFired) isEvent()       {}
func (ClientGone) isEvent()       {}

// ---- effects: what the shell must do, in the order given ----

// Effect is something the shell must do. Step returns effects in the order they must
// be carried out; the duty each has towards the others is written on it.
type Effect interface{ isEffect() }

// Route: ask the model's router; answer with a Routed event (synchronously or later;
// no other event of this flow needs to wait for it).
type Route struct{ Request *messages.RouteRequest }

// Send: start a leg: send Generate to Worker, with the reply address of a receiver of
// this leg (listening, and watching Worker, before Generate goes).
type Send struct {
	Leg      LegID
	Worker   Worker
	Generate *messages.Generate // ReplyTo unset: the shell's receiver
}

// Ack: the routed work of RequestID was sent (after its Send): RouteAck to Router, the
// router activation that recorded it (nil: none needed).
type Ack struct {
	RequestID string
	Router    *messages.ActorRef
}

// Credit: grant the leg's worker more chunks.
type Credit struct {
	Leg    LegID
	Worker Worker
	Credit *messages.Credit
}

// Cancel: abort the leg in its engine (before the Free of its request id).
type Cancel struct {
	Leg    LegID
	Worker Worker
	Cancel *messages.Cancel
}

// Forget: the flow takes no more events of the leg: stop its receiver and its timers.
type Forget struct{ Leg LegID }

// PrefillDone: tell the router the prompt of RequestID is computed.
type PrefillDone struct{ RequestID string }

// Free: end the router's load tracking of RequestID (exactly once per id routed, after
// the Cancel of its leg).
type Free struct{ RequestID string }

// ReleaseKV: tell a prefill worker to release the KV blocks its engine pinned for a leg
// no decode leg will read.
type ReleaseKV struct {
	Worker  Worker
	Release *messages.ReleaseKv
}

// Emit: hand Chunk to the consumer, after every chunk emitted before it. Its index runs
// on across migrations; the finishing chunk's usage covers the whole request.
type Emit struct{ Chunk *messages.TokenChunk }

// Fail: the request could not be routed (again): the stream ends with this outcome (the
// consumer's error), after every Emit before it.
type Fail struct {
	Outcome messages.RouteOutcome
	Message string
}

// SetTimer: (re)arm Timer to fire After from now; it replaces the timer of the same kind
// and leg.
type SetTimer struct {
	Timer Timer
	After time.Duration
}

// StopTimer: disarm Timer (a TimerFired that already left is ignored by the flow).
type StopTimer struct{ Timer Timer }

// Note: something worth a metric or a log line; nothing to carry out.
type Note struct {
	Kind     NoteKind
	Decision messages.DisaggDecision // NoteDecided, NotePrefillRetried
	Fault    messages.Fault          // NoteMigrated, NotePrefillRetried, NoteNotMigrated
	From, To string                  // workers: the failed one, the new one
	Duration time.Duration           // NotePrefillLeg, NoteTransferWait
	Detail   string                  // a human sentence for the log
}

// NoteKind says what a Note tells.
type NoteKind int8

const (
	NoteDecided        NoteKind = iota + 1 // a route's disaggregation decision (To: the decode worker, From: the prefill worker)
	NoteMigrated                           // re-sent after a fault
	NoteNotMigrated                        // a fault ended the request (Detail: why)
	NotePrefillRetried                     // a prefill leg failed and the request was routed again
	NotePrefillLeg                         // a prefill leg's Send to its last chunk
	NoteTransferWait                       // a decode leg's Send to its first token
	NoteReleased                           // a ReleaseKV was sent
	NoteWarning                            // something odd the operator should see (Detail)
)

func (Route) isEffect()       {}
func (Send) isEffect()        {}
func (Ack) isEffect()         {}
func (Credit) isEffect()      {}
func (Cancel) isEffect()      {}
func (Forget) isEffect()      {}
func (PrefillDone) isEffect() {}
func (Free) isEffect()        {}
func (ReleaseKV) isEffect()   {}
func (Emit) isEffect()        {}
func (Fail) isEffect()        {}
func (SetTimer) isEffect()    {}
func (StopTimer) isEffect()   {}
func (Note) isEffect()        {}

// Info is what the flow can tell about the request while it runs.
type Info struct {
	Worker        string                  // the worker serving it now (the decode worker); "" once it failed for good
	Decision      messages.DisaggDecision // of the latest route
	PrefillWorker string                  // of the latest route, when remote
	DecodeWorker  string                  // of the latest route, when not aggregated
	Migrations    int
}
