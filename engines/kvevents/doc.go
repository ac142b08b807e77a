// Package kvevents encodes, decodes, publishes and subscribes to KV cache events in
// vLLM's kv-events wire format (vllm/distributed/kv_events.py, docs/reference.md §1).
//
// Transport: a ZeroMQ PUB socket on the engine and a SUB socket on the consumer. Every
// ZeroMQ message has three frames:
//
//	topic   bytes, may be empty (subscribers filter on it by prefix)
//	seq     8 bytes, big-endian unsigned, increasing by one per publication from 0
//	payload msgpack
//
// The payload is an event batch. vLLM encodes it with msgspec; versions up to 0.10 used
// array-like structs, later ones plain structs, so both shapes occur in the field:
//
//	[ts, [event, ...], data_parallel_rank]                          (array form)
//	{"ts": ts, "events": [event, ...], "data_parallel_rank": rank}  (map form)
//
// ts is float seconds since the Unix epoch; data_parallel_rank is an int or nil (older
// engines omit it). Each event is a tagged array whose first element names its type, or
// a map with a "type" key:
//
//	["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil, medium|nil, lora_name|nil, ...]
//	["BlockRemoved", block_hashes, medium|nil, ...]
//	["AllBlocksCleared", ...]
//
// SGLang publishes the same layout (python/sglang/srt/disaggregation/kv_events.py). For a
// request with a cache_salt it sends BlockStoredWithMetadata, tagged "BlockStored", which
// appends a metadata map {"cache_salt": str}: versions that added it put the map in the
// lora_name slot (element 7), later ones keep lora_name nil, carry the salt in vLLM's
// extra_keys slot and the map at element 14. The decoder skips the map wherever it is
// (the salt is already mixed into SGLang's block hashes) and reads the other fields as
// usual.
//
// The encoder here writes the array form with every listed field (msgspec's layout,
// compact integers). The decoder accepts both forms, block hashes as signed or unsigned
// 64-bit integers or as bytes (the low 64 bits of the big-endian value, as vLLM's
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES conversion does), ignores trailing fields and map
// keys it does not know, skips event types it does not know, and reports malformed input
// as an error naming the field; it never panics.
package kvevents
