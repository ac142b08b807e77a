// Package gateway is Turbine's OpenAI-compatible HTTP API (docs/reference.md §5): it validates
// requests, applies the model's chat template, tokenizes, runs the tokenized request on a
// Backend (the cluster: Router grain + worker) and streams the answer back as SSE or one
// JSON body, detokenizing incrementally and applying stop strings on the way.
//
// # Files
//
//   - server.go: New, routes and the small handlers; record.go: per-request metrics/log.
//   - request.go, jsonfields.go: body parsing and validation (no model needed); the body
//     is decoded once into a value tree and read field by field.
//   - prepare.go: model lookup, chat template, tokenization, context-length checks,
//     SamplingParams.
//   - output.go: the pure token→text core (detokenizer, stop ids, stop strings, counts).
//   - generate.go: the Backend call, the read loop, streaming and non-streaming answers.
//   - response.go: OpenAI body and chunk shapes; sse.go: SSE framing.
//   - errors.go: the error catalogue; metrics.go: metric families; clip.go: request-
//     supplied names cut short where answers and logs repeat them.
//   - writetimeout.go: the per-write deadline of every answer (Config.StreamWriteTimeout);
//     encoding.go: gzip and deflate request bodies.
//   - admission.go: Drain, WaitIdle, the bound on the requests handled at once
//     (Config.MaxConcurrentRequests) and the bounded per-model queue of requests that
//     found every worker busy or no slot free; admin.go: /admin/busy_thresholds over a
//     BusyAdmin backend.
//
// # Behaviour worth knowing
//
//   - Errors come from one catalogue (Catalogue): status, OpenAI `type` and `code`; the
//     body is {"error": {"message", "type", "param", "code"}}, param in OpenAI's
//     notation ("messages[0].content"). 503s carry Retry-After.
//   - Past Config.MaxConcurrentRequests generation requests at once, a new one waits in
//     its model's queue (QueueDepth > 0) or is refused at once, before its body is read,
//     with 503 server_overloaded (counted with model ""), so that an overloaded
//     frontend sheds load instead of letting Router grain calls time out. A model name from the
//     request is repeated at most 256 bytes long (then "… (N bytes)").
//   - Request bodies may be gzip or deflate (Content-Encoding); MaxBodyBytes bounds them
//     as received and decoded (413); other codings get 415.
//   - Every write of an answer has a deadline (Config.StreamWriteTimeout, renewed at each
//     write): a client that stops reading is disconnected and its engine request
//     cancelled, counted as a client that went away.
//   - /admin/ takes Config.AdminAPIKeys, not the API keys; without admin keys it is
//     closed when there are API keys, and open to loopback clients only otherwise.
//   - Unknown top-level fields are ignored, as OpenAI does; fields of the `turbine`
//     extension object are checked strictly.
//   - Legal OpenAI fields that cannot be honoured are refused with 400 (code
//     unsupported_parameter): n > 1, logprobs/top_logprobs, response_format json_object
//     and json_schema, non-text content parts, tool_choice "required" or a named
//     function, logit_bias, echo, suffix, best_of > 1, batches of prompts.
//   - Tools: `tools` is passed to the chat template (dropped when tool_choice is "none").
//     The model's tool calls are not parsed: they come back as plain content with
//     finish_reason "stop".
//   - max_completion_tokens wins over max_tokens; when neither is given the engine is
//     asked for what is left of the context. A prompt that fills the context, or
//     max_tokens larger than context − prompt, is refused before reaching the Backend.
//   - Streams: the first chat chunk is {"role":"assistant","content":""}; the last
//     content chunk has the finish_reason; with stream_options.include_usage every chunk
//     carries "usage": null and a last chunk with "choices": [] carries the usage. A
//     failure after the 200 header is one `data: {"error": {...}}` frame, then
//     `data: [DONE]`.
//   - Stop strings are never emitted; hitting one (or an EOS/stop token id) finishes with
//     "stop" and closes the Stream, which cancels the engine request. A client that goes
//     away does the same and is counted in turbine_frontend_cancelled_requests_total.
//   - Response ids are "chatcmpl-<request id>" / "cmpl-<request id>", as vLLM does.
//   - `{"turbine": {"return_worker": true}}` adds a `turbine` object (worker_id,
//     request_id, cached_tokens; with a DisaggStream also disagg, prefill_worker_id and
//     decode_worker_id) to the body, or to the finishing chunk of a stream;
//     `overlap_weight` and `router_temperature` override the router per request.
//   - Disaggregated serving: X-Turbine-Disagg names the router's decision ("remote",
//     "local_short_prefill", ...), X-Turbine-Prefill-Worker the prefill leg's worker.
//     A non-streaming answer's X-Turbine-* headers name the outcome (a prefill retried
//     elsewhere or a migration routes the request again); a stream's are sent before
//     its first chunk, as first routed, and the `turbine` object of its finishing chunk
//     names the outcome. The access log line names the outcome in both cases.
package gateway
