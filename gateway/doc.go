// Package gateway is Turbine's OpenAI-compatible HTTP API (docs/reference.md §5): it validates
// requests, applies the model's chat template, tokenizes, runs the tokenized request on a
// Backend (the cluster: Router grain + worker) and streams the answer back as SSE or one
// JSON body, detokenizing incrementally and applying stop strings on the way.
//
// # Files
//
//   - server.go: New, routes and the small handlers; record.go: per-request metrics/log.
//   - request.go, jsonfields.go: body parsing and validation (no model needed); the body
//     is decoded once into a value tree and read field by field. structured.go: output
//     constraints (response_format, structured_outputs, guided_*, forced tool calls) and
//     the tools' JSON Schemas.
//   - prepare.go: model lookup, chat template, tokenization, context-length checks,
//     SamplingParams.
//   - output.go: the pure token→text core (detokenizer, stop ids, stop strings, counts).
//   - generate.go: the Backend call, the read loop, streaming and non-streaming answers.
//   - response.go: OpenAI body and chunk shapes; sse.go: SSE framing.
//   - responses.go, responses_request.go: the OpenAI Responses API (POST /v1/responses).
//   - anthropic.go (routes, errors, API keys), anthropic_request.go (the body into a chat
//     request), anthropic_answer.go (message and event shapes): Anthropic's Messages API
//     (POST /v1/messages, /v1/messages/count_tokens).
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
//     unsupported_parameter): n > 1, logprobs/top_logprobs, response_format
//     structural_tag (and structured_outputs' structural_tag and whitespace options),
//     non-text content parts, logit_bias, echo, suffix, best_of > 1, batches of prompts.
//   - Structured output (docs/reference.md §16): response_format json_object and
//     json_schema, vLLM's structured_outputs and guided_json/regex/choice/grammar, on chat
//     and completions, become SamplingParams.structured, which each engine client sends in
//     its own dialect; tool_choice "required" or a named function becomes vLLM's JSON
//     Schema for the call. One constraint per request; JSON Schemas (response formats,
//     tools' parameters) must compile, or the request gets 400. Such a request is never
//     migrated to another worker mid-stream.
//   - Tools and reasoning (docs/reference.md §15): `tools` is passed to the chat template
//     (dropped when tool_choice is "none"). The model card names the worker's output
//     parsers (--tool-call-parser, --reasoning-parser, or detected from the model folder);
//     the answer's text goes through them (gateway/parse): tool calls come back as
//     message.tool_calls / delta.tool_calls with finish_reason "tool_calls", the chain of
//     thought as reasoning and reasoning_content. Offering tools to a model without a
//     tool-call parser is a 400. A call the parser cannot read stays content and is counted
//     (turbine_frontend_malformed_tool_calls_total). parallel_tool_calls false keeps the
//     first call. An assistant message's reasoning (either name) and reasoning_effort reach
//     the template. answer.go: the seam every API renders through; chat_answer.go: the
//     chat completions and completions shapes; outparse.go: the parser choice.
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
//   - The Responses API (docs/reference.md §17) is stateless: instructions and input
//     items (messages, function_call, function_call_output, reasoning) become chat
//     messages, function tools the template's tools, text.format the output constraint;
//     previous_response_id, conversation, hosted tools and other item types get 400. The
//     answer is a Response ("resp_<request id>": reasoning, message and function_call
//     items, usage; status "incomplete" when max_output_tokens cut it) or its stream of
//     named events (response.created … response.completed, no [DONE]); a failure after
//     the header is a response.failed event. Errors are OpenAI error bodies.
//   - The Messages API (docs/reference.md §17) is translated into a chat request: system
//     and system messages, user turns (tool_result blocks, first and answering every
//     tool_use of the assistant turn before, become tool messages in the calls' order),
//     assistant turns (text, thinking as the message's reasoning, tool_use as tool calls
//     whose arguments keep the input's key order); consecutive turns of one role merge.
//     Custom tools only; tool_choice auto, any, tool, none as "auto", "required", a named
//     function, "none"; thinking enabled/adaptive/disabled as the template's
//     enable_thinking (the budget is checked, not enforced). Images, documents, server
//     tools, top_k and a prefilled final assistant message get 400. The answer is a
//     message ("msg_<request id>": thinking, text, tool_use blocks; usage with the cached
//     prompt tokens as cache_read_input_tokens) or Anthropic's events (message_start …
//     message_stop; a failure after the header is an `error` event). Errors have
//     Anthropic's shape and the catalogue's status; API keys are also read from x-api-key.
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
