// Package sglang is SGLang for Turbine: a client for SGLang's native HTTP API, an
// engines.Engine adapter over it, and the launcher that starts the server (python -m
// sglang.launch_server; Launcher, launcher.go). Turbine's mock engine speaks the same
// dialect (turbine mocker --dialect sglang) and is driven through the same adapter.
//
// Wire formats, as SGLang's sources define them (sgl-project/sglang:
// python/sglang/srt/entrypoints/http_server.py, managers/io_struct.py,
// managers/tokenizer_manager.py and its output processor, managers/schedule_batch.py,
// sampling/sampling_params.py, metrics/collector.py):
//
// Generation: POST /generate with a GenerateReqInput JSON body
//
//	{"rid": "r1", "input_ids": [1, 2, 3], "stream": true,
//	 "sampling_params": {"max_new_tokens": 16, "min_new_tokens": 0, "temperature": 0.7,
//	                     "top_p": 0.9, "top_k": 20, "stop_token_ids": [7], "ignore_eos": false,
//	                     "sampling_seed": 5, "frequency_penalty": 0, "presence_penalty": 0}}
//
// An output constraint is one of sampling_params' "json_schema" (a JSON Schema as JSON
// text), "regex" or "ebnf" (SGLang refuses more than one); see samplingFrom.
//
// A streamed answer is Server-Sent Events: one "data: {json}" line and a blank line per
// chunk, then "data: [DONE]". Each chunk is
//
//	{"text": "...", "output_ids": [...], "meta_info": {"id": "r1", "finish_reason": null,
//	 "prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": 0, ...}}
//
// output_ids are cumulative by default (every chunk repeats all tokens generated so
// far); with the server flag --incremental-streaming-output each chunk carries only its
// new tokens (Options.IncrementalOutput). text follows the same rule. finish_reason is
// null until the last chunk, then one of
//
//	{"type": "stop", "matched": <token id> | "<stop string>"}
//	{"type": "length", "length": <max_new_tokens>}
//	{"type": "abort", "message": "...", "status_code": <int|null>, "err_type": <str|null>}
//
// The generated stop token (EOS or a stop_token_ids entry) is the last id of output_ids.
// A failure inside a stream arrives as "data: {"error": {"message": "..."}}" followed by
// [DONE]; depending on the SGLang version an abort ends the stream that way or with an
// abort finish_reason. Error answers are HTTP 400 {"error": {"message": "..."}}, or
// {"object": "error", "message", "type", "param", "code"} for request validation and
// HTTP exceptions.
//
// Abort: POST /abort_request {"rid": "r1", "abort_all": false} (HTTP 200, empty body).
// SGLang also aborts a streamed request when its connection closes; the client does
// both when the caller stops.
//
// Health: GET /health (and /health_generate) answers 200 once the server has warmed up,
// 503 while it starts, shuts down or when a one-token probe generation does not answer.
// GET /get_model_info answers {"model_path", "tokenizer_path", "is_generation",
// "preferred_sampling_params", "weight_version", ...}.
//
// Load: GET /metrics (server flag --enable-metrics), Prometheus text with the gauges
// sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage (0..1),
// sglang:num_used_tokens, sglang:max_total_num_tokens and sglang:cache_hit_rate, labelled
// model_name, engine_type, tp_rank, pp_rank (and dp_rank, moe_ep_rank, priority in some
// configurations).
//
// KV events: SGLang publishes over ZeroMQ in vLLM's layout (python/sglang/srt/
// disaggregation/kv_events.py: --kv-events-config '{"publisher": "zmq", "endpoint":
// "tcp://*:5557", "topic": "..."}'); engines/kvevents decodes them. Differences from
// vLLM: the batch's third field is attn_dp_rank, BlockStored carries no lora_name, and
// older versions send no medium fields.
package sglang
