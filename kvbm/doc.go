// Package kvbm is Turbine's KV block manager (docs/reference.md §9): a block store with a
// host-memory tier (G2) and a local-disk tier (G3), under byte caps, that the engines of
// a node offload KV blocks to and load them back from instead of recomputing them.
//
// Pieces:
//   - Store (store.go): the tiers, their eviction (priority, then least recently used),
//     the spill policy (Policy), pinning while a block is read, the crash-safe disk
//     layout (a block is written to a temporary file and renamed; Open re-reads the
//     directory), and the inventory changes the shell publishes to the routers.
//   - Block keys (key.go): the keys Turbine's own engines store blocks under, which carry
//     the router's sequence hash, so that the inventory maps into the router's hash space.
//   - Protocol servers over a Store: RESP2 (package kvbm/resp: LMCache's redis:// and
//     resp:// connectors, redis-cli), LMCache's lm:// server protocol (package
//     kvbm/lmserver), and a janitor for an LMCache fs:// directory (janitor.go).
//
// Bulk bytes travel only over these sockets and the disk, never over the actor transport.
package kvbm
