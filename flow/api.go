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
	// (Generate.initial_credits; the worker merges the chunks that wait for a credit); the
	// consumed count is granted back (a Credit) each time it reaches Credits/2.
	Credits int32
	// MigrationLimit is how many times one request may be re-sent to another worker after
	// faults (worker gone, engine failed, stalled); 0 disables migration.
	MigrationLimit int
	// StallTimeout is how long the consumer waits for the next chunk before the leg it
	// waits on counts as stalled (FAULT_STALLED); 0: never. A leg whose engine answers
	// whole (it asks for the prompt's logprobs) is not bounded until its first chunk.
	StallTimeout time.Duration
	// AcceptTimeout is how long a leg's worker has to acknowledge the leg (Accepted: a
	// worker does so as soon as it takes the Generate; any chunk counts too) before the
	// request looks for another worker: the current leg asks the router for one while it
	// waits on, and moves there (a migration, FAULT_STALLED) if the router names one and
	// the leg is still unacknowledged; a prefill leg is retried elsewhere as after a
	// stall; 0: never. It bounds the way to the worker (a partition that loses the Generate, a
	// paused worker process), not the engine's queue or prefill, which come after the
	// acknowledgement. Only legs on workers that acknowledge (Worker.Acks) are bounded.
	AcceptTimeout time.Duration
	// PrefillReleaseWait is how long a prefill leg cancelled before its last chunk is
	// waited for, so that the ReleaseKV sent to its worker carries the transfer parameters
	// of a leg that finished just before the cancel reached it.
	PrefillReleaseWait time.Duration
	// TerminatedGrace is how long a leg's chunks are still taken after its worker's
	// termination notice (they can overtake each other); then the leg fails with
	// FAULT_WORKER_TERMINATED.
	TerminatedGrace time.Duration
	// QueueTimeout is how long a request the router answers ROUTE_ALL_BUSY on arrival
	// may wait in its shell's busy queue (Park) before it fails with that outcome; 0: no
	// queue, it fails at once. A request that already ran (a migration, a prefill retry)
	// is never queued.
	QueueTimeout time.Duration
	// LoraOnDemand: a request naming a LoRA adapter (SamplingParams.lora_name) may be
	// routed to a worker that does not hold it, which loads it first (RouteRequest
	// lora_on_demand; the frontend's --lora-on-demand, docs/reference.md §26.3).
	LoraOnDemand bool
}

// Defaults of Config (the frontend's flags start from these).
const (
	DefaultCredits            = 16
	DefaultMigrationLimit     = 3
	DefaultStallTimeout       = 2 * time.Minute
	DefaultAcceptTimeout      = 15 * time.Second
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
		AcceptTimeout: DefaultAcceptTimeout, PrefillReleaseWait: DefaultPrefillReleaseWait, TerminatedGrace: DefaultTerminatedGrace}
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
	// Explain asks the router to explain every route of the request (RouteRequest
	// explain: each candidate's cost terms in the answer).
	Explain bool
	// SessionID is the client's session (RouteRequest session_id), sent with every
	// route; "" for none.
	SessionID string
	// QueuedAt is when the request joined its shell's busy queue before the flow started
	// (it waited there for its turn or a slot; Config.QueueTimeout is then what is left of
	// its wait); zero: it had not. The wait a queue timeout reports counts from then, else
	// from the flow's first Park; and its first route takes it out of the queue (a Drain
	// before the answer ends it as a parked request).
	QueuedAt time.Time
}

// LegID names one leg of the request inside its flow (1, 2, ...; never reused).
type LegID int32

// Worker is where a leg runs: the router's worker id and its actor (nil in the
// simulator).
type Worker struct {
	ID  string
	Ref *messages.ActorRef
	// Acks: the worker acknowledges each Generate it takes (Accepted;
	// RouteResponse.worker_acknowledges): only then is its leg's wait for that bounded
	// (Config.AcceptTimeout).
	Acks bool
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
	// TimerQueue: a parked request's wait in the busy queue (Config.QueueTimeout), from
	// its first Park to its leaving the queue; its Leg is 0.
	TimerQueue
	// TimerAccept: a leg's wait for its worker's acknowledgement (Config.AcceptTimeout),
	// from its Send to its Accepted or first chunk.
	TimerAccept
)

// String is "stall", "release", "grace", "queue" or "accept" (the scripts' names).
func (k TimerKind) String() string {
	switch k {
	case TimerStall:
		return "stall"
	case TimerPrefillRelease:
		return "release"
	case TimerTerminatedGrace:
		return "grace"
	case TimerQueue:
		return "queue"
	case TimerAccept:
		return "accept"
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

// Start: the request arrived. The flow routes it; with Behind (other requests wait in
// the shell's busy queue, and Config.QueueTimeout is set) it parks it first, without
// routing, so that requests leave the queue in the order they came.
type Start struct{ Behind bool }

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

// Accepted: a leg's worker acknowledged its Generate (messages.GenerateAccepted): the
// leg reached the worker, which runs it.
type Accepted struct{ Leg LegID }

// WorkerTerminated: the actor of a leg's worker stopped, or (ReceiverLost) the leg's
// receiver did: the shell's cluster member was replaced, so the worker's chunks go to
// an actor that is gone, though the worker may be healthy. The leg's chunks already
// sent may still come; after Config.TerminatedGrace the leg fails, and the request
// moves as for a stopped worker, except that a worker lost only to its receiver is not
// excluded from the new route.
type WorkerTerminated struct {
	Leg          LegID
	ReceiverLost bool
}

// TimerFired: a timer the flow set has fired.
type TimerFired struct{ Timer Timer }

// ClientGone: the consumer closed the stream (finished or not: the client left, the
// server's drain period ended and cut it). Every leg still running is cancelled; a
// prefill leg's pinned KV blocks are released; a parked request leaves the queue.
type ClientGone struct{}

// Deadline: the request's own time limit passed (the frontend's --request-timeout, a
// client's timeout in the simulator). The request ends as with ClientGone, with a
// NoteDeadline and legs cancelled for that reason; the consumer's answer (504 in the
// gateway) is the shell's.
type Deadline struct{}

// Unparked answers Park: the shell's queue reached the request (it is the head of its
// model's queue) and a worker may be free: the flow routes it again, under a new id,
// with what it excluded so far.
type Unparked struct{}

// QueueFull answers Park when the shell's queue has no room for the request: it fails
// with ROUTE_ALL_BUSY (FailQueueFull); Message says why, for the log.
type QueueFull struct{ Message string }

// Drain: the server started draining. A parked request leaves the queue and fails
// (FailDraining): at once, or, while its route from the queue is awaited, when the
// answer comes, whatever it says (a worker it was given is freed unsent: the request
// never ran). A shell that learns of the drain from a route's answer (no worker: they
// left routing for the drain) steps Drain before that Routed. A request running goes
// on; one that finds every worker busy later fails at once instead of parking.
type Drain struct{}

func (Start) isEvent()            {}
func (Routed) isEvent()           {}
func (Chunk) isEvent()            {}
func (Accepted) isEvent()         {}
func (WorkerTerminated) isEvent() {}
func (TimerFired) isEvent()       {}
func (ClientGone) isEvent()       {}
func (Deadline) isEvent()         {}
func (Unparked) isEvent()         {}
func (QueueFull) isEvent()        {}
func (Drain) isEvent()            {}

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
// consumer's error), after every Emit before it (and, for a parked request, after its
// Unpark). Cause says whether the router's answer ended it or its wait in the busy
// queue did; the queue's ends carry ROUTE_ALL_BUSY.
type Fail struct {
	Outcome messages.RouteOutcome
	Message string
	Cause   FailCause
}

// FailCause is what ended a request with Fail.
type FailCause int8

const (
	// FailRouted: the router's answer (Outcome), or a Route call that failed.
	FailRouted FailCause = iota
	// FailQueueFull: the request found every worker busy and the queue full (QueueFull).
	FailQueueFull
	// FailQueueTimeout: it waited Config.QueueTimeout in the queue.
	FailQueueTimeout
	// FailDraining: it waited in the queue when the server started draining (Drain); the
	// consumer gets the server's draining answer rather than Outcome's.
	FailDraining
)

// String is the cause's name in the scripts: "routed", "queue-full", "queue-timeout",
// "draining".
func (c FailCause) String() string {
	switch c {
	case FailRouted:
		return "routed"
	case FailQueueFull:
		return "queue-full"
	case FailQueueTimeout:
		return "queue-timeout"
	case FailDraining:
		return "draining"
	}
	return "FailCause(" + strconv.Itoa(int(c)) + ")"
}

// Park: every worker is busy; put the request in its model's busy queue — at its end,
// or keeping its place when it holds one (a head whose new route found every worker
// busy again) — and answer Unparked when it is the queue's head and a worker may be
// free, or QueueFull at once when there is no room. The order across requests (first
// in, first out; heads woken when load goes down) is the shell's. Nothing else of the
// flow waits for it.
type Park struct{}

// Unpark: the request leaves the queue (it was routed, failed or gone): the shell wakes
// the next head. It comes after the Sends and Ack of the route that took the request
// out, so that the next head's route sees this one's load.
type Unpark struct{}

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
	NoteDeadline                           // the request's deadline passed (Deadline) before it ended
	NoteNotMoved                           // a leg its worker did not acknowledge waits on: no other worker (From; Detail: why)
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
func (Park) isEffect()        {}
func (Unpark) isEffect()      {}

// Info is what the flow can tell about the request while it runs.
type Info struct {
	Worker        string                  // the worker serving it now (the decode worker); "" once it failed for good
	Decision      messages.DisaggDecision // of the latest route
	PrefillWorker string                  // of the latest route, when remote
	DecodeWorker  string                  // of the latest route, when not aggregated
	Migrations    int
	Parked        bool // the request waits in the busy queue (between Park and Unpark)
}
