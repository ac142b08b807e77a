// Package launcher holds what the launchers of every engine share: the engine-neutral
// Spec a real engine is started from, the engines' names, rendering a command line's
// optional limits (AppendInt, AppendFloat), free ports and bootstrap addresses, the ZMQ
// KV event subscription (SubscribeZMQ) and the engine a malformed URL connects to
// (FailedEngine). Each engine's launcher lives with its client and adapter, in the
// engine's package: engines/vllm, engines/sglang, engines/trtllm, and for the mock
// engine engines/mocker/launch; engines/registry is the one table that maps an engine's
// name to its launcher.
//
// Each launcher serves one worker: a worker calls Command, then Connect, then
// SubscribeKVEvents for every start of its engine, and closes the engines.Engine Connect
// returned when the process ends and the launcher itself when the worker stops, when
// they implement io.Closer (TensorRT-LLM's launcher and its engine do). Each engine
// Connect returns has an HTTP connection pool of its own (enginehttp.DefaultPool).
//
// Each launcher's doc gives its command line and the upstream file its flag names were
// checked against; golden files under each engine package's testdata/commands hold one
// rendering of each (go test -rewrite regenerates them). Spec.Role starts an engine as a
// prefill or decode worker (docs/reference.md §6).
package launcher
