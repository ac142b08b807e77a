// Package trtllm is TensorRT-LLM for Turbine: a client for trtllm-serve, TensorRT-LLM's
// OpenAI-compatible server, an engines.Engine adapter over it (streamed token-id
// completions, health, load from the iteration statistics, KV cache events polled over
// HTTP), and the launcher that starts trtllm-serve with its options file (Launcher,
// launcher.go). Turbine's mock engine speaks the same dialect (turbine mocker --dialect
// trtllm) and is driven through the same adapter.
//
// Wire formats, as TensorRT-LLM's sources define them (NVIDIA/TensorRT-LLM:
// tensorrt_llm/serve/openai_server.py, openai_protocol.py, postprocess_handlers.py,
// tensorrt_llm/executor/result.py, tensorrt_llm/_utils.py (KVCacheEventSerializer),
// cpp/tensorrt_llm/executor/jsonSerialization.cpp):
//
// Completion: POST /v1/completions with a CompletionRequest. model is required and
// unknown fields are refused (the request model forbids extras). Token ids come back
// only with "detokenize": false (trtllm-serve from mid-2025, NVIDIA/TensorRT-LLM#5382):
// text is then "" and each choice carries token_ids. The client sends
//
//	{"model": "m", "prompt": [1, 2, 3], "max_tokens": 16, "stream": true,
//	 "stream_options": {"include_usage": true}, "detokenize": false, ...}
//
// and reads Server-Sent Events: "data: {json}" chunks, then "data: [DONE]". A chunk is
//
//	{"id": "cmpl-...", "object": "text_completion", "created": 1700000000, "model": "m",
//	 "choices": [{"index": 0, "text": "", "token_ids": [42], "logprobs": null,
//	              "finish_reason": null, "stop_reason": null, "avg_decoded_tokens_per_iter": null}],
//	 "usage": null}
//
// token_ids are the chunk's new tokens. finish_reason ends the choice: "stop", "length",
// "timeout" or "cancelled"; stop_reason is the stop_token_ids entry (an integer) or stop
// string that matched, null for EOS. Unlike vLLM, the stop token is not among the
// returned ids: EOS is never returned and a matched stop sequence is trimmed unless
// include_stop_str_in_output. With include_usage a last chunk with "choices": [] carries
// "usage": {"prompt_tokens", "total_tokens", "completion_tokens",
// "prompt_tokens_details": {"cached_tokens"}}. A failure inside a stream closes the
// connection without [DONE]. Error answers are {"object": "error", "message", "type",
// "param", "code"} (e.g. 400 BadRequestError), request validation failures 400
// {"error": "<text>"}. The server aborts a request whose connection closed (it checks
// once a second).
//
// Health: GET /health answers 200, or 503 with a text body when the executor failed.
//
// Load: GET /metrics answers a JSON array of the iteration statistics recorded since
// the previous call (it drains them; [] when no iteration ran, or when the PyTorch
// backend runs without enable_iter_perf_stats). Each entry has, among others,
//
//	{"timestamp": "...", "iter": 12, "iterLatencyMS": 16.5, "numActiveRequests": 3,
//	 "numQueuedRequests": 0, "numCompletedRequests": 1, "maxNumActiveRequests": 256,
//	 "gpuMemUsage": 56401920000,
//	 "kvCacheStats": {"maxNumBlocks", "freeNumBlocks", "usedNumBlocks", "tokensPerBlock",
//	                  "allocTotalBlocks", "allocNewBlocks", "reusedBlocks", "missedBlocks",
//	                  "cacheHitRate"},
//	 "inflightBatchingStats": {"numScheduledRequests", "numContextRequests",
//	                           "numGenRequests", "numPausedRequests", "numCtxTokens",
//	                           "microBatchId", "avgNumDecodedTokensPerIter"}}
//
// KV events: with kv_cache_config.enable_block_reuse and event_buffer_max_size > 0,
// POST /kv_cache_events answers (and drains) a JSON array of events (created, stored,
// removed, updated; docs/reference.md §1 gives their shapes). EventConverter turns them
// into kv.Batch values; Client.PollKVEvents polls and converts.
package trtllm
