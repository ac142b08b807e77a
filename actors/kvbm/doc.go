// Package kvbm is the KV block manager actor: a named actor ("kvbm", ActorName), at most
// one per node, on the node's member (`turbine node --kvbm`, `turbine serve --kvbm`) or
// on a member of its own (`turbine kvbm --node-id <node>`). docs/reference.md §9.5.
//
// Open (manager.go) opens the block store (package kvbm: host memory, local disk) and
// binds the protocol servers the node's engines talk to (RESP2 for LMCache's redis:// and
// resp:// and the mock engine, LMCache's lm://): bulk bytes travel over those sockets,
// never over the actor transport. Open fails fast (a taken port, a bad directory) before
// anything joins the cluster.
//
// Messages handled:
//   - messages.KvbmStatusRequest → messages.KvbmStatus: the tiers' figures, the policy,
//     the servers' addresses, the epoch (the start time in Unix nanoseconds unless
//     Config.Epoch says otherwise), the models published (GET /admin/kvbm).
//   - *actor.Started: the publisher starts; *actor.Stopping: it stops, then the servers
//     and the store are closed (Manager.Close) — not by an actor of MemberProps, whose
//     Manager outlives the cluster member (a node's next member spawns the next actor).
//
// Publishing: a publisher goroutine drains Store.Changes every Config.PublishInterval
// (100 ms), groups them per model (Group: pure, through kvbm.ParseBlockKey; other keys
// are counted, not published), numbers them per model within the epoch (Inventory: pure)
// and sends each batch to the model's Router grain (RouterClient.PublishInventory). A
// model's first batch from each publisher (one per member), and its next after a
// need_dump answer, a failed send or a store overflow, is a snapshot (Store.Snapshot)
// that replaces all its router knew of the node.
//
// State owned: the Manager (store, servers, the Inventory: numbering and pending
// snapshots, touched only by a publisher's step under the Manager's lock, so numbering
// goes on across the publishers of successive members) and the models published
// (guarded by a mutex, read for the status). The store's figures are authoritative; the
// routers' tier index is derived from the batches, at most one interval stale. The only
// lock held across a grain call is the Manager's step lock, which nothing else takes
// but the next member's publisher.
//
// Janitor mode (Config.FS): the Manager runs a kvbm.Janitor over an LMCache fs://
// directory from Open until Close (one goroutine, a scan every FS.Interval); its figures
// are KvbmStatus.fs, its inventory changes are drained and published with the store's.
//
// Metrics (status.go): turbine_kvbm_* from the store's figures at each scrape, on the
// default set (turbine_kvbm_fs_* with a janitor). Children: none. Who may send: anyone (status); nobody else.
package kvbm
