// Package kv is the KV-cache-aware routing core: block hashing, the index of which
// workers hold which KV blocks, the router's own load tracking, the routing policies
// and the Router core that ties them together. It is pure, synchronous Go: no I/O, no
// goroutines, no clocks or global randomness (time and a *rand.Rand are arguments),
// and no type in it is safe for concurrent use — the Router grain owns one Router and
// serialises calls to it.
//
// Pieces, each usable alone (the mock engine and the KV block manager use the hashing
// and the index too):
//
//   - Hashing (hash.go, docs/reference.md §2): a prompt is cut into blocks of BlockSize tokens;
//     each full block gets a local xxh3 hash (seed 1337, or 1337 + xxh3(lora name)) and
//     a chained sequence hash, so equal sequence hashes mean equal prefixes.
//   - Index (index.go, dump.go): sequence hash → workers holding that block, fed by the
//     engines' KV events (Event, vLLM kv-events semantics, docs/reference.md §1). Overlaps
//     gives every worker's prefix hit for a prompt, without allocating. Dump turns a
//     worker's blocks back into events that rebuild it exactly (not with
//     NewIndexWithoutDump or Config.NoDump, as the Router grain runs it: no token ids
//     kept, half the memory).
//   - ActiveSequences (active.go, docs/reference.md §3): the requests routed to each worker and
//     not yet finished — active KV blocks (shared prefixes counted once) and prefill
//     tokens. Every way a request ends goes through one release path.
//   - Policies (policy.go, policy_builtin.go): a one-method Policy interface, a
//     Registry value (duplicate names are an error), and the built-ins "kv" (the
//     reference cost), "round-robin", "random" and "cache-aware" (sgl-router's
//     cache_aware policy with load gating). Policies that implement Explainer show
//     each candidate's cost terms when a route asks (RouteInput.Explain, explain.go).
//   - Router (router.go): worker registration (block size check, engine epochs), the
//     per-worker numbered event stream with gap detection and dump/replay, busy
//     thresholds (docs/reference.md §4), Route, and Stats. Expire drops what nobody will free:
//     requests routed with WillAck and not acknowledged (Ack) within MaxUnackedAge, and
//     any request older than MaxSequenceAge.
//   - Predicted placements (approx.go, docs/reference.md §3.3, §3.4): a candidate's
//     prefix hit also counts the blocks of requests routed to it and not yet ended
//     (Config.PredictActive), so requests sharing a prefix meet before its KV events
//     arrive; a worker without KV events (IndexApproximate: registered so, or silent)
//     is routed on a record of what the Router placed there, with a TTL and a
//     capacity bound. Sessions (session.go, §3.5): the worker a client session's last
//     request went to is marked in its Candidate.
//   - Disaggregated serving (disagg.go, docs/reference.md §6): worker roles (aggregated,
//     prefill, decode); Route picks a decode worker for load and, when the uncached
//     prompt suffix is long and the prefill pool's queue short, a prefill worker
//     KV-aware (conditional disaggregation), tracking the prefill leg under its own id.
//
// Defaults live in defaults.go, errors in errors.go (all prefixed "kv: ", tested with
// errors.Is). The scripts under testdata/scripts show the Router's behaviour end to
// end; run `go test ./kv -run Scripts -rewrite` after an intended change.
package kv
