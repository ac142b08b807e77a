// Package frontend is the actor side of a frontend member: it implements gateway.Backend
// over the cluster. Each request's life — routes, legs, credits, retries, migration,
// release of KV blocks, cancellation — is decided by its flow (package flow, pure); the
// stream (stream.go) is the flow's shell: it turns the receivers' messages, timers and
// the client's Close into flow events, and carries out the effects: Route calls to the
// model's Router grain, Generate to workers with a short-lived receiver process as
// reply_to, Credit, Cancel and ReleaseKv to workers, RouteAck, PrefillDone and Free to
// the router, chunks and errors to the HTTP handler, metrics and log lines.
//
// Receiver messages (receiver.go: a process, not an actor): messages.GenerateAccepted and
// messages.TokenChunk (from the worker), *actor.Terminated of the worker (handed to the flow, which still takes the worker's
// trailing chunks for a moment, then counts the leg as lost). One receiver per leg: a
// disaggregated request has one for its prefill leg and one for its decode leg; all of
// a stream's receivers deliver into one channel, which the stream reads one event at a
// time. State: the next expected chunk index and out-of-order chunks. Who may send: the
// worker serving the leg.
//
// Model loading (models.go): the gateway's ModelLoader loads each card's tokenizer from
// this machine when it has the folder with the card's tokenizer_digest, else asks the
// worker named by the card's files_from (ModelFilesRequest, answered with ModelFiles) and
// keeps the files under <cache>/models/<digest>/. No actor of its own: it uses futures.
//
// Migration, disaggregated serving, prefill retries and load tracking (every id routed
// freed exactly once, routes acknowledged with RouteAck) are the flow's: see package
// flow, docs/reference.md §6 and §10. The shell counts them in
// turbine_frontend_migrations_total{model,reason} and
// turbine_frontend_disagg_decisions_total{model,decision}, and reports the
// disaggregation to the gateway (gateway.DisaggStream).
//
// Routing failures reach the client as gateway.RouteError maps the router's outcome,
// also when a migration or prefill retry finds no worker (Recv then returns the error);
// a worker failure that cannot be migrated (migration off, limit reached) stays a 502.
//
// Predicted against delivered prefix-cache hits (hits.go, hitgap.go, docs/reference.md
// §3.2): the stream pairs each route's predicted hit with the cached tokens the engine
// reports on the last chunk of the leg that computed the prompt, and the Backend counts
// them per worker (turbine_frontend_predicted_cached_tokens_total,
// turbine_frontend_delivered_cached_tokens_total) and flags a sustained shortfall (one
// warning line; turbine_frontend_cache_hit_gap). A request that asked for it
// (gateway.GenerateRequest.ExplainRoute) gets its latest route explained
// (gateway.ExplainedStream).
//
// Busy queueing: a request every worker is busy for waits in the place the gateway's
// per-model FIFO gave it (GenerateRequest.Parking) when the gateway's queue is on; its
// flow decides when the wait ends (routed, the queue timeout, a drain, its deadline),
// the gateway decides the order across requests. A request whose --request-timeout
// passes is told to its flow as flow.Deadline, counted in
// turbine_frontend_deadline_exceeded_total{model}.
//
// Busy thresholds (busy.go): the Backend is a gateway.BusyAdmin; it changes a model's
// thresholds with the Router grain's SetBusyThresholds and reads its workers' busy flags
// from Stats.
//
// LoRA adapters (lora.go, loraplace.go; docs/reference.md §26.3): the Backend is a
// gateway.LoraAdmin. A load reads the base model's workers from its Router grain's Stats,
// chooses where the adapter goes (placeLora, pure) and sends LoadLora to those worker
// actors (pinned, unless the load asked otherwise), an unload UnloadLora to every worker
// holding or knowing it and then to the other ready workers with slots (a load of it may
// be under way there), each a request answered with LoraReply within
// Config.LoraTimeout. Models lists the adapters the catalog lists (base
// models first), and those this frontend loaded or unloaded a moment ago as they are now.
// A request naming an adapter runs on its base model; its flow names the adapter on every
// route (and lora_on_demand with Config.LoraOnDemand) and gives each leg the route's
// lora_path; ROUTE_NO_ADAPTER is gateway.UnknownAdapter's 404 (on a migration's route,
// gateway.AdapterLost's 503: the adapter was served when the request began).
//
// Planner (planner.go; docs/reference.md §27.7): with Config.PlannerReports on (or auto
// while a member hosts the Planner kind), the Backend is the gateway's Observer: each
// request's TTFT, inter-token gaps, queue wait and token counts go into one
// planner.Window per model, and RunPlannerReports sends every model's window to its
// Planner grain (Report) every Config.PlannerReportInterval, an empty one for a model
// without traffic; a failed report is merged back into the next. The Backend is a
// gateway.PlannerAdmin (the grain's Status and SetTargets behind /admin/planner), and
// WritePrometheus adds the planner's turbine_planner_* families from each grain's
// status.
package frontend
