// Package launcher builds the engine processes a worker supervises: their command lines
// and the clients that talk to them once they are up. New builds the launcher of a real
// engine (vLLM, SGLang, TensorRT-LLM) from an engine-neutral Spec; Mocker launches
// Turbine's mock engine, which can speak any of their dialects.
//
// Each launcher serves one worker: a worker calls Command, then Connect, then
// SubscribeKVEvents for every start of its engine, and closes the engines.Engine Connect
// returned when the process ends and the launcher itself when the worker stops, when
// they implement io.Closer (TRTLLM and its trtllm.Engine do). The HTTP client of each
// engine Connect returns has a connection pool of its own, which keeps at most 64 idle
// connections to the engine and closes each after 30 s unused (enginehttp.DefaultPool);
// the connections streams hold are not bounded.
//
// Command lines, with the sources their flag names were checked against: VLLM (vLLM's
// vllm/engine/arg_utils.py and vllm/config/kv_events.py), SGLang (SGLang's
// python/sglang/srt/server_args.py and disaggregation/kv_events.py), TRTLLM
// (TensorRT-LLM's tensorrt_llm/commands/serve.py and llmapi/llm_args.py). Golden files
// under testdata/commands hold one rendering of each (go test -rewrite regenerates them).
//
// Disaggregated serving (docs/reference.md §6): Spec.Role (and Mocker.Role) starts an engine as
// a prefill or decode worker: vLLM with the NIXL connector (kv_role kv_both), SGLang with
// --disaggregation-mode (and a bootstrap port on prefill engines, which Bootstrapper
// names), TensorRT-LLM with a cache transceiver. The engines Connect returns run the leg
// SamplingParams.disagg names, return the prefill leg's transfer parameters on its last
// chunk (engines.Chunk.KVTransferParams), and, for vLLM and TensorRT-LLM, implement
// engines.KVReleaser.
package launcher
