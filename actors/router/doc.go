// Package router is the Router grain: one per model (grain kind "Router", identity = the
// served model name), a thin shell around the pure routing core kv.Router.
//
// Messages (messages.Router service): Register (worker heartbeat), Deregister,
// PublishEvents (numbered KV event batches), PublishDump (a worker's full block list),
// Route, PrefillDone, Free, SetBusyThresholds, Stats.
//
// State: the kv.Router (index, active sequences, registrations), each worker's actor
// address and last load heartbeat, and when it was last heard from. All of it is rebuilt
// after the grain moves: workers re-register on every heartbeat, and a registration the
// router has not seen events for is answered with need_dump, so the worker sends its
// block list.
//
// Disaggregated serving (REFERENCE §6): workers register with a role (WorkerInfo.role:
// aggregated, prefill or decode) and prefill workers with their SGLang bootstrap
// address. While any worker is prefill or decode, Route answers with a decode worker
// (worker/worker_id), the decision (disagg_decision) and, when it is "remote", the
// prefill worker, its bootstrap address and the prefill leg's request id, which is
// load-tracked and owned by the calling gateway like the request itself (Free of the
// request id frees a leg still tracked). Config.Disagg sets the thresholds.
//
// Worker loss: a worker not heard from for WorkerTTL is removed with its blocks and its
// active requests (checked on every call, so no timer is needed).
//
// Senders: workers (Register, Deregister, PublishEvents, PublishDump), frontends (Route,
// PrefillDone, Free, Stats), operators (SetBusyThresholds).
package router
