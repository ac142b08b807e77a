// Package kvevents encodes, decodes, publishes and subscribes to KV cache events in
// vLLM's kv-events wire format (vllm/distributed/kv_events.py), which SGLang shares:
// ZeroMQ PUB/SUB, three frames per message (topic, 8-byte big-endian seq, msgpack
// payload), one batch of BlockStored, BlockRemoved and AllBlocksCleared events per
// payload. docs/reference.md §1 gives the frames, the batch and event layouts and each
// engine's variants.
//
// The encoder writes the array form with every listed field (msgspec's layout, compact
// integers). The decoder accepts the array and the map form, block hashes as signed or
// unsigned 64-bit integers or as bytes (the low 64 bits of the big-endian value, as
// vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES conversion does), and SGLang's cache-salt
// metadata map wherever it is (skipped: the salt is already in SGLang's hashes); it
// ignores trailing fields and map keys it does not know, skips event types it does not
// know, and reports malformed input as an error naming the field; it never panics.
package kvevents
