// Package router is the Router grain: one per model (grain kind "Router", identity = the
// served model name), a thin shell around the pure routing core kv.Router.
//
// Messages (messages.Router service): Register (worker heartbeat), Deregister,
// PublishEvents (numbered KV event batches), PublishDump (a worker's full block list),
// PublishInventory (a node's KV block manager's tiers, inventory.go), Route, PrefillDone,
// Free, SetBusyThresholds, Stats. Not calls (ReceiveDefault):
// messages.RouteAck, and membership changes (*cluster.ClusterTopology).
//
// State: the kv.Router (index, active sequences, registrations), each worker's actor
// address and last load heartbeat, and when it was last heard from. All of it is rebuilt
// after the grain moves: workers re-register on every heartbeat and whenever the
// cluster's members change, and a registration the router has not seen events for is
// answered with need_dump, so the worker sends its block list, hashed by the worker when
// the answer offers the router's hash scheme (dump_hash_scheme; docs/reference.md §10).
//
// Prompts: a Route carries the prompt's token ids, or its chained block hashes
// (block_hashes, kv/hash.go, computed by the frontend under the request's cache salt and
// adapter) with its length (prompt_tokens), which is all the routing needs: the grain,
// one activation per model, then spends no time hashing (docs/reference.md §2).
//
// Disaggregated serving (docs/reference.md §6): workers register with a role (WorkerInfo.role:
// aggregated, prefill or decode) and prefill workers with their SGLang bootstrap
// address. While any worker is prefill or decode, Route answers with a decode worker
// (worker/worker_id), the decision (disagg_decision) and, when it is "remote", the
// prefill worker, its bootstrap address and the prefill leg's request id, which is
// load-tracked and owned by the calling gateway like the request itself (Free of the
// request id frees a leg still tracked). Config.Disagg sets the thresholds.
//
// Pinned requests (docs/reference.md §22): a Route naming pin_worker is placed on that
// worker when it is registered, ready, not excluded and (disaggregated) decode or
// aggregated, bypassing the policy and the busy thresholds, its load tracked as usual;
// otherwise it is routed normally. RouterStats.pinned and pin_fallbacks count both.
//
// Worker loss: a worker not heard from for WorkerTTL is removed with its blocks and its
// active requests (checked on every call, so no timer is needed).
//
// Requests nobody frees: a frontend routes with will_ack and, once it has sent the work,
// sends RouteAck to the activation named in the answer (RouteResponse.router). A request
// whose acknowledgement has not come within Config.MaxUnackedAge (kv.DefaultMaxUnackedAge,
// 30 s) is expired with its prefill leg: its Route call failed on the frontend's side
// (timed out while the grain was busy), so the frontend — which frees the id of every
// failed call too — may never free it. Every tracked request is also expired past
// kv.DefaultMaxSequenceAge. Expiry runs on every heartbeat, Route and Stats; it is logged
// and counted (RouterStats.expired_unacked, expired_stale). Routing an id twice (a call
// the cluster retried) tracks it once; a Free or RouteAck of an unknown id is ignored.
//
// Lower KV tiers (docs/reference.md §9.2): the nodes' KV block managers publish which
// blocks they hold in host memory, on disk or for remote nodes; a worker's prefix hit
// continues through its node's tiers at the tier credits, computed from the model card
// when the first worker registers (Config.TierCredit overrides). A node with no worker
// left and no inventory for Config.NodeTTL is forgotten.
//
// Senders: workers (Register, Deregister, PublishEvents, PublishDump), KV block managers
// (PublishInventory), frontends (Route,
// RouteAck, PrefillDone, Free, Stats), operators (SetBusyThresholds).
package router
