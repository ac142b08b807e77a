// Package frontend is the actor side of a frontend member: it implements gateway.Backend
// over the cluster. For each request it asks the model's Router grain for a worker,
// spawns a short-lived receiver actor, sends Generate to the worker with the receiver as
// reply_to, and hands the chunks to the HTTP handler in order, granting the worker
// credits as they are consumed (flow control).
//
// Receiver actor messages: messages.TokenChunk (from the worker), *actor.Terminated of
// the worker (the worker is gone: a migratable error). One receiver per leg: a
// disaggregated request has one for its prefill leg and one for its decode leg. State: the next expected chunk
// index and out-of-order chunks. Who may send: the worker serving the request.
//
// Model loading (models.go): the gateway's ModelLoader loads each card's tokenizer from
// this machine when it has the folder with the card's tokenizer_digest, else asks the
// worker named by the card's files_from (ModelFilesRequest, answered with ModelFiles) and
// keeps the files under <cache>/models/<digest>/. No actor of its own: it uses futures.
//
// Migration (stream.go, migration.go): when a worker is lost (Terminated), its engine
// fails (a migratable error chunk) or the stream stalls (Config.StallTimeout), the stream
// re-sends the prompt plus the tokens produced so far, with max_tokens and min_tokens
// reduced, to another worker (the failed ones excluded), under a new internal request id,
// up to Config.MigrationLimit times; Recv hides this from the gateway. Counted in
// turbine_frontend_migrations_total{model,reason}. A structured output request
// (SamplingParams.structured) is never migrated: its stream ends with the fault.
//
// Disaggregated serving (disagg.go): when the Router grain answers "remote", the stream
// runs a prefill leg (max_tokens 1) on the prefill worker under the route's
// prefill_request_id, with its own receiver, then sends the decode leg with the
// returned transfer parameters to the decode worker (SGLang: both legs at once, with a
// bootstrap room). Workers also receive messages.ReleaseKv (a decode leg ended before
// its first token: the prefill engine releases the blocks it pinned). A prefill leg that
// fails migratably is routed again (exclude_prefill_workers, then local_prefill).
// Decisions are counted in turbine_frontend_disagg_decisions_total{model,decision} and
// reported to the gateway (gateway.DisaggStream).
//
// Load tracking: every attempt routed is freed in the Router grain exactly once, on
// every path (finish, error, cancel, client gone, migration, prefill retry): a
// migration frees the failed attempt, Stream.Close the current one; a prefill leg is
// freed (after PrefillDone) when its last chunk arrives, or when its request ends. A
// Route call that fails (it timed out, the grain could not be reached) frees its id as
// well, since the grain may have recorded it after the caller gave up; routes are made
// with will_ack, and once the work is sent a messages.RouteAck goes to the grain, which
// expires requests never acknowledged (a free that was lost as well).
//
// Routing failures: a request that cannot be routed — the Route call failed, no worker
// is live or free (workers re-registering after a restart), no prefill worker under
// --enforce-disagg — is answered 503 with Retry-After, also when a migration or prefill
// retry finds no worker (Recv then returns the error); a worker failure that cannot be
// migrated (migration off, limit reached) stays a 502.
//
// Busy thresholds (busy.go): the Backend is a gateway.BusyAdmin; it changes a model's
// thresholds with the Router grain's SetBusyThresholds and reads its workers' busy flags
// from Stats.
package frontend
