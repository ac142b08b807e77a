// Package worker is the worker actor: one per engine process, named "worker/<id>" on its
// node member.
//
// Messages handled:
//   - messages.Generate (from gateways): run a request on the engine; a
//     messages.GenerateAccepted goes to reply_to at once (the worker took it; it
//     registers acknowledges_generate), then numbered messages.TokenChunk, at most the granted credits ahead (mailboxes
//     are unbounded: the flow control is Turbine's, docs/actor-library.md §10). A failed
//     request's last chunk names its fault: FAULT_INVALID_REQUEST with the engine's own
//     message when the engine refused the request itself (never re-sent), else one that
//     another worker may mend.
//     A Generate naming a LoRA adapter (sampling lora_name) uses it until it ends; one
//     the worker does not hold is loaded on demand first when the worker knows it (from
//     its folder) or the request carries its folder (lora_path), else it fails as one
//     another worker may serve (loraops.go).
//   - messages.Embed (from gateways, a request-response): the engine's embedding of the
//     tokens, through engines.Embedder off the actor's goroutine, answered with
//     messages.Embedding (its error set when the engine serves no embeddings or failed,
//     its fault FAULT_INVALID_REQUEST when the engine refused the input);
//     in flight like a generation, so Cancel and a drain end it (embed.go).
//   - messages.LoadLora, messages.UnloadLora (from frontends, request-response):
//     load (pinned or not, as the adapter says) or unload a LoRA adapter (a known one is
//     forgotten), answered with messages.LoraReply once the change is registered with
//     the Router grain and announced (docs/reference.md §26.2).
//   - messages.Credit (from the request's receiver): grant more chunks.
//   - messages.Cancel (from gateways): abort the engine request; harmless when finished.
//   - messages.ReleaseKv (from gateways, to a prefill worker): release the KV blocks the
//     engine pinned for a prefill leg whose decode leg will not read them, through
//     engines.KVReleaser off the actor's goroutine (bounded, failures logged); an engine
//     without it frees them on its own timeout.
//   - messages.DumpBlocksRequest (from the Router grain): publish the full block list.
//   - messages.ModelFilesRequest (from gateways without a copy of the tokenizer folder):
//     answered with messages.ModelFiles, read and hashed off the actor's goroutine
//     (files.go).
//   - *actor.Terminated of a reply_to PID: the caller is gone, abort its requests.
//   - *Drain (from the process that hosts the worker, before stopping it; drain.go):
//     deregister and withdraw the card, refuse new requests (migratable), let those in
//     flight run for the grace period, then end the rest with a migratable error chunk.
//   - internal canary timer results (canary.go): an engine idle for CanaryInterval gets
//     a one-token request; a failure registers the worker not ready until one passes.
//   - internal: engine started/ready/exited, restart timer, heartbeat tick, request done;
//     the outcomes of adapter folder checks and engine adapter calls (loraops.go).
//
// State owned: the engine process and its epoch (bumped on every start), readiness, the
// in-flight requests (cancel func + credit channel, the adapter each uses), the LoRA
// adapter slots (loraTable, lora.go: pure; at most Config.MaxLoras, pinned ones never
// evicted, a request's adapter never evicted nor unloaded under it, a request whose
// adapter finds every slot in use waiting for one, and one whose adapter is being
// evicted waiting to load it again; the known adapters, evicted and still
// registered, at most MaxKnownLoras) and the adapter
// loads and unloads under way. A started engine is given the pinned adapters before the
// worker reports ready. The KV block list and the event
// numbering are owned by the relay goroutine (relay.go), which is the only sender to the
// Router grain, so events, dumps and registrations reach it in order. The Router grain
// processes these calls before the gateways' routing calls (router.ControlMethods).
//
// Disaggregated serving: every registration carries the worker's role (Config.Role)
// and, for an SGLang prefill worker, its bootstrap address. A leg's DisaggParams ride in
// Generate.sampling to the engine unchanged; the last chunk carries the engine's
// transfer parameters (TokenChunk.kv_transfer_params). A prefill leg is cancelled like
// any request.
//
// Every heartbeat of a ready engine announces the card to the Catalog grain with this
// actor's ref (AnnounceModel.worker), where gateways fetch tokenizer files from.
//
// Children: none (the engine is an OS process, supervised here with a capped exponential
// backoff; its stdout and stderr lines are logged with the worker id and engine epoch).
// The engine client of each process is closed when the process ends, and the launcher
// when the worker stops, when they implement io.Closer. Who may send: gateways, the Router grain, the node (stop).
package worker
