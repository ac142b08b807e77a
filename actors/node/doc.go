// Package node is the node agent: a named actor ("node", ActorName), one per node member,
// that knows the machine's GPUs (through NVML, DiscoverGPUs) and starts and stops worker
// actors pinned to disjoint sets of them.
//
// Messages handled (each answered with ctx.Respond; senders may be on other members):
//   - messages.StartWorker → messages.StartWorkerReply: check the request (checkStart),
//     name the worker ("<node id>-<n>" when no id is given), pin tensor_parallel_size
//     GPUs (Allocator), build its props (Config.NewWorker) and spawn it as the child
//     worker.ActorName(id), whose PID id is "node/worker/<id>". A request that cannot be
//     placed is answered with StartWorkerReply.error and leaves nothing pinned.
//     Fields the request leaves empty (engine, card, role) come from Config.Defaults,
//     the node's own kind of worker, so that a planner may ask for "one more" with a
//     role alone (docs/reference.md §27.5).
//   - messages.StartWorker with replace_worker_id → messages.StartWorkerReply at once: a
//     role change. Every check is done and the new worker's props are built first; then
//     the old worker is drained and stopped, and the new one is spawned on exactly the
//     GPUs it freed (Allocator.AllocateExact). Until then the replacement is listed in
//     NodeStatus without an ActorRef and its id is taken.
//   - messages.StopWorker → messages.Ack, sent once the worker is gone and its GPUs are
//     free; an unknown id is answered at once (stopping is idempotent). With drain_ms
//     the worker gets worker.Drain first and is stopped once drained (or after drain_ms
//     plus Config.DrainOverrun); it is reported stopping meanwhile.
//   - messages.NodeStatusRequest → messages.NodeStatus: GPUs with the worker pinned to
//     each, workers with their model, role, GPUs, ActorRef and whether they are stopping,
//     and the node's own model and engine (Config.Defaults).
//   - *actor.Terminated of a child: its GPUs are freed, whether it was asked to stop or
//     failed (workers that fail are stopped, not restarted: see Props). Its end is
//     logged at info when a StopWorker asked for it or the agent itself is stopping
//     (with its process: StopWorkers drains every worker through the agent first), and
//     as a warning only when the worker stopped unasked.
//
// State owned: the Allocator (which GPU is pinned to which worker; authoritative on this
// node, lost with the agent), the running workers (PID, model, role, GPUs, stopping or
// draining, StopWorker requesters waiting for the end, the replacement waiting for its
// GPUs), the replacements waiting. Placement is decided by pure code (checkStart,
// Allocator); the actor only carries it out.
//
// Children: the worker actors (actors/worker), each supervising its engine process,
// whose environment pins it to its GPUs (CUDAEnv). Who may send: operators and the
// planner (StartWorker, StopWorker), anyone (NodeStatusRequest).
//
// CPU mode: without an NVML driver (ErrNoDriver) the node runs mock engines only, with
// tensor_parallel_size 0.
package node
