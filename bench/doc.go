// Package bench measures an OpenAI-compatible completions endpoint under a workload: a
// production trace (Mooncake JSONL with prefix hash ids, Azure LLM inference CSV) or a
// synthetic one (input and output lengths fixed or drawn from a distribution, shared
// prefixes in groups, Poisson or closed-loop arrivals, a request count or a duration).
//
// Every request is a token-id prompt sent to /v1/completions (its model the client's, or
// the LoRA adapter the request names: Request.Lora) with stream: true,
// stream_options.include_usage, max_tokens = the output length and ignore_eos: true; or,
// on request, the same prompt written as words (Text) sent to /v1/chat/completions.
// Each answer is validated (HTTP status, SSE frames, [DONE], the usage chunk, the number
// of generated tokens) and classified by error kind. The results give time to first
// token (TTFT), inter-token latency (ITL: one gap per token-bearing frame after the
// first), end-to-end latency, request and output-token throughput, and the prefix-cache
// hit rate from usage.prompt_tokens_details.cached_tokens when the server reports it.
//
// The pieces are separable: ReadMooncake, ReadAzure, Synthetic and SyntheticSpec (with
// ParseLength's distributions, LoraSpec's adapters) build []Request, or a Generator draws
// them one by one, and AssignLoras gives a trace's requests LoRA adapters;
// Tokens and Text synthesize a prompt; Ceiling gives the hit rate an infinite prefix
// cache would reach on a workload, CeilingPooled that of one LRU cache of a fleet's KV
// memory; SLO (ParseSLO) says whether a run met latency targets, and CapacitySearch
// finds the fastest time scale that meets one, given a function that runs a probe;
// Client.Do and Client.DoChat run one request;
// Runner.Run drives a workload and Runner.RunFor a closed loop for a duration (with plain
// progress lines or a ProgressState callback); Summarize, WriteSummary and WriteCSV
// report; Plot draws an SVG.
//
// Time is an input: the client and runner read a Clock, so tests run on a virtual one.
package bench
