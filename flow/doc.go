// Package flow is the life of one request, from its arrival to its last chunk, as pure
// code: everything that can happen to a request is decided here, and nothing else. The
// frontend (actors/frontend) and the simulator (bench/sim) run the same Flow; they are
// its shells: they turn what happens (a router's answer, a worker's chunk, a worker's
// actor stopping, a timer, the consumer leaving) into events, and carry out the effects
// Step returns (route, send, credit, cancel, free, release, emit, set a timer). A Flow
// has no goroutine, no clock (now is Step's argument), no randomness (Routed.Room), no
// logging (Note effects) and no I/O; it is tested by the scripts under testdata, which
// read as stories.
//
// What is not a single request's life stays in the shells: admission (the bound on
// requests in flight, --max-concurrent-requests) and the order of the busy queue across
// requests — a FIFO per model, whose head is woken when load goes down — are the
// gateway's (gateway/admission.go, which hands the frontend each request's place as
// gateway.Parking) and, in the simulator, bench/sim's own FIFO on the virtual clock. A
// request's own wait is the flow's: with Config.QueueTimeout set, a first route
// answered ROUTE_ALL_BUSY parks it (Park) instead of failing it; the shell answers
// Unparked when the request is its queue's head and a worker may be free, and the flow
// routes it again; the queue timer, a full queue (QueueFull) or the server draining
// (Drain) fail it with ROUTE_ALL_BUSY (Fail.Cause says which), and it leaves the queue
// (Unpark) once routed, failed or gone. Likewise the answer a client finally gets is
// the shell's: 503 all_workers_busy for the queue's ends, 503 service_draining for a
// drain, 504 when its Deadline passed, nothing for a client gone.
//
// # Events and effects
//
//	Start                      -> Route
//	Routed (a worker)          -> Note(decided), Send(s), Ack, SetTimer(stall) (not while the
//	                              awaited leg answers whole and sent nothing yet, below)
//	Routed (remote, two-phase) -> Send(prefill leg) only; the decode leg's Send follows the
//	                              prefill leg's last chunk (its transfer parameters)
//	Routed (remote, bootstrap) -> Send(prefill leg), Send(decode leg) with the room
//	Routed (no worker)         -> Fail (the consumer's error: the outcome, messages.RouteOutcome)
//	Routed (the call failed)   -> Free, Fail(ROUTE_CALL_FAILED)
//	Send (every leg)           -> SetTimer(accept) after it, when Config.AcceptTimeout is set
//	Accepted, or a first chunk -> StopTimer(accept) of the leg
//	TimerFired (accept)        -> the current leg: Route (its worker excluded) while it waits
//	                              on; a prefill leg: a fault of the leg as a stall
//	Routed (that route)        -> a worker, and the leg still unacknowledged: Cancel, Forget,
//	                              Free of it, then as a migration (FAULT_STALLED); otherwise
//	                              Free of the route, and a route asked meanwhile is asked
//	                              now, or Note(not-moved) and SetTimer(accept) again
//	Chunk (tokens)             -> PrefillDone (first token), Credit (every Credits/2), Emit, SetTimer(stall)
//	Chunk (finish)             -> Emit (usage of the whole request), Forget, Free, StopTimer(stall)
//	Chunk (fault)              -> Cancel, Forget, Free, then Route (migration) or Emit (the error)
//	Chunk (refused)            -> Emit (the error, FAULT_INVALID_REQUEST), Forget, Free: never re-sent
//	WorkerTerminated           -> SetTimer(terminated grace); when it fires, a fault of the leg
//	TimerFired (stall)         -> a fault of the leg waited for
//	TimerFired (release wait)  -> Forget of the prefill leg, ReleaseKV (without transfer parameters)
//	ClientGone                 -> Cancel, Forget, Free of every leg still running; a prefill
//	                              leg not finished: SetTimer(release wait) for its last chunk;
//	                              parked: Unpark
//	Deadline                   -> Note(deadline), then as ClientGone
//	Routed (all busy, queued)  -> SetTimer(queue) on the first, Park (the first route only;
//	                              Start{Behind} parks without routing)
//	Unparked                   -> Route (a new id, the excludes kept)
//	Routed (a worker, parked)  -> ... Ack, then StopTimer(queue), Unpark
//	TimerFired (queue)         -> Unpark, Fail(ROUTE_ALL_BUSY); while a route is awaited, its
//	                              answer decides
//	QueueFull                  -> StopTimer(queue), Fail(ROUTE_ALL_BUSY)
//	Drain                      -> parked: Unpark, Fail (the server's draining answer), when
//	                              its route from the queue is awaited once the answer
//	                              comes (a worker given: Free); running: nothing (a
//	                              later busy route fails at once)
//
// The scripts' commands (start, routed, chunk, terminated, fire, client-gone, deadline,
// unparked, queue-full, drain, advance, config, new) and the text of each effect are
// described at the top of script_test.go (testdata/busy.txt has the busy queue);
// `go test ./flow -rewrite` rewrites the expected outputs. Usage on the finishing chunk
// counts the original prompt and every token emitted; its cached tokens are capped at
// the original prompt (a continuation's prompt includes earlier output).
//
// Each effect says on its type what it must come after (a Cancel before the Free of
// its id, an Emit after the Emits before it, ...); the order Step returns them in
// keeps those duties, so a shell that carries them out in order is right.
//
// # A request's legs
//
// A leg is one Generate on one worker under one request id, with its own receiver in
// the shell. An aggregated request has one leg. Every route after the first uses a new
// request id (ID.1, ID.2, ...), so that a worker and the router never confuse two
// attempts. Every leg sent is forgotten exactly once (Forget), and every id routed is
// freed in the router exactly once (Free) — on every path: finish, fault, migration,
// prefill retry, the consumer leaving, a Route call that failed (the router may have
// recorded the request although the call gave up). A route is acknowledged (Ack) once
// its work is sent; the router expires routes never acknowledged.
//
// # Flow control
//
// A worker may send Config.Credits chunks ahead; each time the consumer has taken
// Credits/2 of them they are granted back (Credit). Chunk indexes handed to the
// consumer run on across every leg and migration; the finishing chunk's usage counts
// the original prompt and every token produced, whichever worker produced it.
//
// # Disaggregated serving (docs/reference.md §6)
//
// When the router decides "remote", the request runs as a prefill leg (the prompt,
// max_tokens 1, on the prefill worker, under the route's prefill_request_id) and a
// decode leg (the whole request, on the decode worker). Two protocols:
//
//   - two-phase (vLLM, TensorRT-LLM): the decode leg is sent once the prefill leg's last
//     chunk brought the engine's transfer parameters, which it carries unchanged;
//   - bootstrap (SGLang, the route names a bootstrap address): both legs are sent at
//     once with the prefill worker's bootstrap address and a random 63-bit room.
//
// The prefill leg's token is never shown; its prefix-cache hit is the request's. A
// prefill leg that fails in a way re-sending may mend (its worker terminated, its
// engine failed, it stalled), or a decode leg whose engine could not load the KV from
// the prefill engine before its first token (FAULT_KV_TRANSFER), is routed again
// without that prefill worker — the decode worker is not blamed — and after
// MaxPrefillFailures failures (or when no prefill worker is left under enforced
// disaggregation) prefilled on the decode worker; a further failure ends the request.
// A prefill leg that fails otherwise (the engine refused the prompt) ends the request
// with its error. A decode leg that ends before its first token has the prefill worker
// release the KV blocks its engine pinned (ReleaseKV); when the prefill leg had not
// delivered its last chunk yet it is cancelled and freed at once, and the release
// waits for that chunk (whose transfer parameters name the blocks) or
// Config.PrefillReleaseWait.
//
// # Migration (docs/reference.md §10)
//
// A leg that fails in a way re-sending may mend — its worker's engine failed (a chunk
// with a fault; a draining worker hands its requests back so), its worker's actor
// stopped (WorkerTerminated, then Config.TerminatedGrace for the chunks that trail the
// notice), its worker did not acknowledge it within Config.AcceptTimeout (Accepted; the
// Generate was lost or held on the way, or the worker does not run) and the router named
// another worker meanwhile (the leg waits on while it is asked, and stays when none is
// named or it is acknowledged by then), or nothing came within Config.StallTimeout while
// the consumer waited — is
// cancelled and freed, and the request continues on another worker (every failed one
// excluded, but not one whose leg failed only because the shell's receiver was lost with
// its cluster member: WorkerTerminated.ReceiverLost) with the prompt followed by the tokens produced so far, max_tokens and
// min_tokens reduced by their count, at most Config.MigrationLimit times. That route,
// like a prefill retry's, is marked admitted (RouteRequest.admitted): the router's busy
// thresholds gate new work, and a request already running is placed on a busy worker
// rather than refused (it is never parked either). It is not
// migrated when migration is off or the limit is reached, when its output is
// constrained (structured output: the constraint cannot resume mid-answer), or when
// max_tokens is used up (then it finishes with "length"): the consumer gets the
// fault's error chunk, which keeps its fault (another try may succeed). When no worker
// can take it (no live or free worker, the Route call failed) the request ends with
// Fail and the router's outcome, which the consumer gets as a retryable error.
//
// A leg that asks for the prompt's logprobs (SamplingParams.prompt_logprobs; completions'
// echo with logprobs sets it) is answered whole: vLLM returns prompt logprobs only
// without streaming, so its first chunk comes when its engine has finished. The stall
// timer does not bound that wait (a long answer would otherwise be migrated, and failed,
// for taking long); from the leg's first chunk on it does. A dead engine is still
// noticed: its worker's termination, or the engine's error. A migration after tokens
// were handed on no longer asks for the prompt's logprobs (the first chunk carried them),
// so that leg streams and is bounded from its Send (testdata/whole.txt).
//
// A leg whose engine refused the request itself (a chunk with FAULT_INVALID_REQUEST: its
// HTTP 400 or 422, a value it does not take) is never migrated, nor its prefill leg
// retried: every engine would refuse it alike. The request ends with an error chunk
// that carries the engine's message unchanged and that fault, which the consumer
// answers with 400 (docs/reference.md §10).
//
// # LoRA adapters (docs/reference.md §26.3)
//
// A request naming an adapter (SamplingParams.lora_name) names it on every route
// (RouteRequest.lora_name, and lora_on_demand with Config.LoraOnDemand); each route's
// legs, prefill leg included, carry the adapter and the route's lora_path (the folder a
// worker that lacks the adapter loads it from), so a migration or a prefill retry keeps
// the adapter and takes the new route's path.
//
// # The end
//
// A request ends when its finishing chunk is emitted, with Fail, when the consumer
// leaves (ClientGone: the client disconnected, the server's drain period ended), or
// when its own deadline passes (Deadline); legs still running are cancelled ("client
// closed the stream", "the request's deadline passed"). A drain (Drain) ends only a
// request waiting in the busy queue. Done reports when nothing more can happen: a route
// asked before the consumer left is freed when its answer comes (and its queue place
// left), and a cancelled prefill leg's release wait has ended.
package flow
