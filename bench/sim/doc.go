// Package sim replays a workload against a simulated fleet on a virtual clock: the KV
// router core (package kv), one mock engine core per worker (package mocker, docs/reference.md
// §7) and their KV event streams run in one goroutine as a discrete-event simulation,
// so a trace of hours runs in seconds and the result is the same bench.Outcome (and so
// the same report) a real-time `turbine bench` run produces.
//
// Model. Time is virtual; events are kept in a heap ordered by time and, at equal times,
// by kind: KV event batches reaching the router, then engine step ends, then request
// arrivals, then engine step starts (so every request that arrives at t joins the step
// an idle engine starts at t, as a real engine loop drains its command queue before it
// steps). At its arrival a request is routed (kv.Router.Route, with the router's view of
// the KV caches as of that instant) and added to the chosen engine. An engine with work
// steps back to back: a step that starts at t ends at t + its modelled duration (the
// mock engine's timing model, divided by its speedup ratio), and its outputs and KV
// events become visible at its end; the events reach the router EventDelay later. The
// first token of a request gives its TTFT and marks its prefill done in the router;
// each later token one ITL gap; the last one its end-to-end latency, and the router
// frees it. Prompts are synthesized from the trace's hash ids with bench.Tokens, as a
// real run sends them.
//
// Disaggregated serving (Config.PrefillWorkers > 0, xPyD, docs/reference.md §6): the router
// registers the workers with their roles and decides per request. A remote decision
// runs the prefill leg on its prefill engine (max_tokens 1, its blocks held when it
// finishes); at that token the router stops tracking the leg and the prompt's full
// blocks travel to the decode worker (blocks × block size × KVBytesPerToken bytes at
// TransferBandwidth × the speedup ratio, as the mock engine's KV transfer port sends
// them); then the prefill engine releases them and the decode leg enters the decode
// engine with those tokens imported, computing only the last prompt token before its
// first output token (the request's TTFT). A local decision runs the request on its
// decode worker as an aggregated one. Stats.Decisions counts the decisions.
//
// What is not modelled: HTTP, tokenization and the actor messages between gateway,
// router and worker (a real run adds a few milliseconds to each TTFT), a real engine
// loop's lateness at every step (its timer fires late on a busy machine; set
// Config.StepOverhead to model it), engine load reports (the kv router does not use
// them), busy-queueing at the gateway (a request refused by every worker's busy
// threshold fails), migration and faults.
//
// Runs are deterministic: the same Config (Seed included) and requests give the same
// Outcome, whatever the machine.
package sim
