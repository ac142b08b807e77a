// Package enginehttp is the HTTP side that the engine clients (engines/vllm,
// engines/sglang, engines/trtllm) share: one client per server with the engine's name on
// its errors and a connection pool of its own (NewHTTPClient: a bounded number of idle
// connections, each closed after a timeout), error bodies read in the shapes engines
// answer, a Server-Sent Events reader, the stream that the first error ends, writers for
// hand-built JSON bodies with token-id arrays, the Prometheus scrape, OpenAI-style
// completion bodies, streams, usage and stop reasons (vLLM, trtllm-serve), Turbine's
// optional sampling parameters, and the loop that hands a stream's chunks to an
// engines.Engine caller.
//
// What differs between engines stays in their packages, in small functions: which error
// shapes they answer and in what order, their error types, their stream chunks.
package enginehttp
