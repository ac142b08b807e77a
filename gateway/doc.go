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
//   - answer.go: the seam every API renders through; chat_answer.go, response.go: the
//     chat completions and completions bodies and chunks; sse.go: SSE framing;
//     outparse.go: the output parsers' choice.
//   - responses.go, responses_request.go: the OpenAI Responses API (POST /v1/responses).
//   - embeddings.go: POST /v1/embeddings for embedding models (a Backend that is an
//     Embedder; docs/reference.md §23): each input tokenized, checked and embedded on
//     its own; generation endpoints refuse such models (checkRunner).
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
//   - planner.go: the Observer (Config.Observer) that gets every generation's TTFT,
//     inter-token gaps, queue wait and token counts, and GET/POST /admin/planner over a
//     PlannerAdmin backend (docs/reference.md §27.7).
//   - tokenize.go: vLLM's POST /tokenize and /detokenize (docs/reference.md §24),
//     answered from the model's tokenizer and chat template, no engine involved.
//   - lora.go: vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter over a
//     LoraAdmin backend (admin routes), and the resolution of a request's `model` to a
//     LoRA adapter (findModel: its name or BASE:ADAPTER); lorametrics.go: the per-adapter
//     families (docs/reference.md §26.3).
//   - vllmcompat.go: what `vllm serve` answers besides OpenAI's API (docs/reference.md
//     §5.1): GET /version, GET and POST /ping, vLLM's fields of /v1/models entries; a
//     request without `model` is answered for the one model served (resolveModel,
//     prepare.go).
//
// # Behaviour worth knowing
//
//   - Errors come from one catalogue (Catalogue): status, OpenAI `type` and `code`; the
//     body is {"error": {"message", "type", "param", "code"}}, param in OpenAI's
//     notation ("messages[0].content"). 503s carry Retry-After.
//   - Past Config.MaxConcurrentRequests generation requests at once, a new one is
//     queued or refused with 503 server_overloaded (counted with model ""), so that an
//     overloaded frontend sheds load instead of letting Router grain calls time out. A
//     model name from the request is repeated at most 256 bytes long (clip.go).
//   - Request bodies may be gzip or deflate (Content-Encoding); MaxBodyBytes bounds them
//     as received and decoded (413); other codings get 415.
//   - Every write of an answer has a deadline (Config.StreamWriteTimeout): a client that
//     stops reading is disconnected and its engine request cancelled.
//   - Authentication (API keys, admin keys) and the X-Turbine-* headers: see Server.
//   - Top-level fields vLLM's OpenAI server does not define are ignored, as vLLM ignores
//     them, with one warning log line per field name (sampling.go); fields of the
//     `turbine` extension object are checked strictly.
//   - vLLM's other request fields (docs/reference.md §20.1; vllmfields.go): request_id,
//     return_token_ids, add_special_tokens, truncation_side and, on chat, echo,
//     documents, include_reasoning and return_prompt_text are honoured; beam-search
//     settings without beam search and the render endpoints' fields are accepted without
//     effect, as in vLLM; use_beam_search, prompt_embeds, kv_transfer_params, vllm_xargs,
//     mm_processor_kwargs and the others no engine here serves are 400s (code
//     unsupported_parameter). Choices carry vLLM's stop_reason.
//   - vLLM's sampling and output fields (docs/reference.md §20; sampling.go): top_k,
//     min_p, repetition_penalty, logit_bias, bad_words, allowed_token_ids, priority and
//     cache_salt travel in SamplingParams; stop strings (any number),
//     include_stop_str_in_output, skip_special_tokens, spaces_between_special_tokens,
//     truncate_prompt_tokens, continue_final_message and a request's chat_template are
//     applied here. A field the model's engine cannot honour (engines.Unsupported) is a
//     400 naming the field and the engine. A request's own chat template is rendered
//     only with Config.TrustRequestChatTemplate, else refused with vLLM's 400 before it
//     is compiled (chattemplate.go).
//   - Logprobs (docs/reference.md §21; logprobs.go): chat logprobs/top_logprobs,
//     completions logprobs and echo, vLLM's prompt_logprobs and
//     return_tokens_as_token_ids, rendered as vLLM renders them.
//   - n > 1, best_of = n and batched completions prompts (docs/reference.md §22;
//     choices.go): each choice is its own request to the Backend, the choices of one
//     prompt pinned to the first's worker, streamed interleaved by index.
//   - POST /tokenize, /detokenize (tokenize.go, §24) and /v1/embeddings (embeddings.go,
//     §23) are answered as vLLM answers them.
//   - Legal OpenAI fields that cannot be honoured are refused with 400 (code
//     unsupported_parameter): response_format structural_tag (and structured_outputs'
//     structural_tag and whitespace options), non-text content parts, suffix,
//     best_of > n.
//   - Structured output (docs/reference.md §16; structured.go): the request's output
//     constraint becomes SamplingParams.structured, which each engine client sends in its
//     own dialect. Such a request is never migrated to another worker mid-stream.
//   - Tools and reasoning (docs/reference.md §15): `tools` is passed to the chat template
//     (dropped when tool_choice is "none"); the answer's text goes through the output
//     parsers the model card names (gateway/parse, chosen in outparse.go): tool calls come
//     back as tool_calls with finish_reason "tool_calls", the chain of thought as
//     reasoning and reasoning_content. Offering tools to a model without a tool-call
//     parser is a 400; a call the parser cannot read stays content and is counted
//     (turbine_frontend_malformed_tool_calls_total). parallel_tool_calls false keeps the
//     first call.
//   - max_completion_tokens wins over max_tokens; when neither is given the engine is
//     asked for what is left of the context. A prompt that fills the context, or
//     max_tokens larger than context − prompt, is refused before reaching the Backend.
//   - Streams: the first chat chunk is {"role":"assistant","content":""}; the last
//     content chunk has the finish_reason; with stream_options.include_usage every chunk
//     carries "usage": null and a last chunk with "choices": [] carries the usage. A
//     failure after the 200 header is one `data: {"error": {...}}` frame, then
//     `data: [DONE]`: a request its engine refused (FAULT_INVALID_REQUEST) gets that
//     frame with the 400's error (refused.go, docs/reference.md §10).
//   - Stop strings are never emitted; hitting one (or an EOS/stop token id) finishes with
//     "stop" and closes the Stream, which cancels the engine request. A client that goes
//     away does the same and is counted in turbine_frontend_cancelled_requests_total.
//   - Response ids are "chatcmpl-<request id>" / "cmpl-<request id>", as vLLM does; the
//     request id is X-Request-Id, else the body's request_id, else a new one.
//   - The Responses API (docs/reference.md §17; responses.go) and Anthropic's Messages
//     API (anthropic.go) are translated into a chat request and run on the same path;
//     only the answer's shape and the error body differ (answer.go). The Responses API
//     is stateless: previous_response_id and conversation get 400.
//   - `{"turbine": {"return_worker": true}}` adds a `turbine` object (worker_id,
//     request_id, cached_tokens; with a DisaggStream also disagg, prefill_worker_id and
//     decode_worker_id) to the body, or to the finishing chunk of a stream;
//     `overlap_weight` and `router_temperature` override the router per request;
//     `explain_route` (implying return_worker) adds `route`, the router's decision with
//     every candidate's cost terms, from an ExplainedStream (explain.go).
//     The access log line names where the request ended (after a prefill retried
//     elsewhere or a migration), as the finishing `turbine` object does.
//   - LoRA adapters (docs/reference.md §26.3; lora.go): the Backend lists each live
//     adapter as a model entry with ModelCard.lora set; a request naming one runs on its
//     base model (GenerateRequest.Model) with SamplingParams.lora_name, answers under the
//     adapter's name, and is counted and logged under the base model with the adapter in
//     `lora` (the first MaxLoraMetricLabels names, the others as LoraOtherLabel).
package gateway
