// Package sim replays a workload against a simulated fleet on a virtual clock: the KV
// router core (package kv), one mock engine core per worker (package mocker, docs/reference.md
// §7) and their KV event streams run in one goroutine as a discrete-event simulation,
// so a trace of hours runs in seconds and the result is the same bench.Outcome (and so
// the same report) a real-time `turbine bench` run produces.
//
// Model. Time is virtual; events are kept in a heap ordered by time and, at equal times,
// by kind: faults, KV event batches reaching the router, workers' registrations, engine
// step ends, KV transfers ending, timers, clients' deadlines, request arrivals, then engine step starts (so
// every request that arrives at t joins the step an idle engine starts at t, as a real
// engine loop drains its command queue before it steps). Each request runs through
// flow.Flow, the frontend's own request logic (shell.go carries out its effects): at its
// arrival the flow routes it (kv.Router.Route, with the router's view of the KV caches
// as of that instant, answered as the Router grain answers, kvpb.RouteResponse) and
// sends it to the chosen engine. An engine with work steps back to back: a step that
// starts at t ends at t + its modelled duration (the mock engine's timing model,
// divided by its speedup ratio), and its outputs and KV events become visible at its
// end; the events reach the router EventDelay later. Each output is a chunk of the
// request's leg, as a worker sends it; what the flow hands to the client builds its
// bench.Result: the first token gives its TTFT (and the flow marks the prefill done in
// the router), each later token one ITL gap, the last one its end-to-end latency and
// the usage it reports (cached tokens included), and the flow frees it in the router.
// Prompts are synthesized from the trace's hash ids with bench.Tokens, as a real run
// sends them.
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
// decode worker as an aggregated one. The prefill workers' engines may differ from the
// decode workers' (Config.PrefillEngine: another tensor-parallel size's KV blocks,
// batch limits and timing). Stats.Decisions counts the decisions of every
// route, as the frontend's metric does.
//
// Faults and clients that give up (Config.Faults, Config.RequestTimeout): a killed
// worker's engine drops its requests, the router removes it with its blocks and load,
// and each leg it ran gets its worker's termination notice; the flow then does what the
// frontend does (docs/reference.md §10): after flow.Config.TerminatedGrace it migrates
// the request, with the tokens produced so far, to another worker (Stats.Migrations),
// within flow.Config.MigrationLimit, or fails it; a prefill leg lost, or a KV transfer
// from a killed prefill worker, makes it prefill again elsewhere (Stats.PrefillRetries).
// The flow's stall timeout moves a request that waits too long for its next token. A
// client past its deadline fails with bench.ErrTimeout and its flow cancels what still
// runs, releasing KV blocks a prefill engine pinned for it.
//
// The host (host.go): unless Config says what a real machine adds (its timer
// resolution, a step overhead, a request's cost in the service; FitHost measures them),
// the engines keep to the timing model exactly and a request costs nothing beyond its
// engine's steps.
//
// LoRA adapters (Engine.MaxLoras > 0; lora.go, docs/reference.md §26.5): a request naming
// an adapter (bench.Request.Lora) is routed with its adapter, its KV blocks are salted by
// it, and each engine holds at most MaxLoras adapters: a leg whose adapter is not loaded
// waits for a load (Engine.LoraLoadMillis, during which the engine computes nothing),
// evicting the least recently used adapter no request in the engine uses, or waits for
// such an adapter. Workers register their adapters with the router at each heartbeat
// (Config.Heartbeat) and when a load ends; Stats.Lora counts loads, evictions and hits.
//
// Busy workers (Config.Router.Busy) and the busy queue (Config.QueueDepth): a request
// the router finds every worker busy for fails with ErrAllBusy, or, with a queue, waits
// in the simulator's FIFO as in the gateway's (its flow parks it; a request arriving
// while others wait joins the end without routing): the head routes again whenever a
// request frees load and every Config.QueueRetry, and a request that waited
// Config.QueueTimeout, or found the queue full, fails with ErrAllBusy (Stats.Queued,
// QueueTimeouts, QueueFull count them). A client's deadline takes its request out of
// the queue.
//
// Autoscaling (Config.Autoscaler; autoscale.go, docs/reference.md §27.8): every
// interval a planner (planner.Planner) sees what the frontend measured, the pools and the
// workers' loads, and its target starts workers (ready after a start-up delay, in slots
// made at the start so that names and router indices never change) or drains them (out
// of routing at once, stopped once their requests end); Stats.Autoscale has the pools
// over time and the GPU time they held.
//
// What is not modelled: HTTP, tokenization and the actor messages between gateway,
// router and worker as such (their cost is Config.RequestOverhead's, whatever the
// load), engine load reports (the kv router does not use them), the gateway's bound on
// requests in flight (--max-concurrent-requests), faults other than a worker killed for
// good (an engine that dies and restarts, a frozen process, a network partition),
// draining other than the autoscaler's, and SGLang's bootstrap protocol (the simulated
// legs use the two-phase one, vLLM's).
//
// Runs are deterministic: the same Config (Seed included) and requests give the same
// Outcome, whatever the machine.
package sim
