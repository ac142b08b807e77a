// Package bench measures an OpenAI-compatible completions endpoint under a workload: a
// production trace (Mooncake JSONL with prefix hash ids, Azure LLM inference CSV) or a
// synthetic one (fixed input and output lengths, Poisson or closed-loop arrivals).
//
// Every request is a token-id prompt sent to /v1/completions with stream: true,
// stream_options.include_usage, max_tokens = the output length and ignore_eos: true.
// Each answer is validated (HTTP status, SSE frames, [DONE], the usage chunk, the number
// of generated tokens) and classified by error kind. The results give time to first
// token (TTFT), inter-token latency (ITL: one gap per token-bearing frame after the
// first), end-to-end latency, request and output-token throughput, and the prefix-cache
// hit rate from usage.prompt_tokens_details.cached_tokens when the server reports it.
//
// The pieces are separable: ReadMooncake, ReadAzure and Synthetic build []Request;
// Tokens synthesizes a prompt; Ceiling gives the hit rate an infinite prefix cache would
// reach on a workload; Client.Do runs one request; Runner.Run drives a workload (with
// plain progress lines or a ProgressState callback); Summarize, WriteSummary and
// WriteCSV report; Plot draws an SVG.
//
// Time is an input: the client and runner read a Clock, so tests run on a virtual one.
package bench
