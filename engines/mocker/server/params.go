package server

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// Params are the mock engine's parameters, declared once: a Server is built from them
// (Options.Params), `turbine mocker` reads them from its flags (Flags) and a launcher
// writes them as those flags (Args). DefaultParams holds their defaults; zero values in
// Options take the same ones.
type Params struct {
	// Engine is the core's configuration: its limits, speed-up, mean output length and
	// generation seed.
	Engine mocker.Config
	// Dialect is the HTTP surface served: vLLM's (default), SGLang's or trtllm-serve's.
	Dialect DialectName
	// IncrementalStreamingOutput (SGLang dialect, SGLang's --incremental-streaming-output):
	// streamed output_ids and text hold each chunk's new tokens instead of all so far.
	IncrementalStreamingOutput bool
	// EventBufferMaxSize (trtllm dialect, kv_cache_config.event_buffer_max_size): the KV
	// cache events kept for POST /kv_cache_events, oldest dropped first; 0 records none.
	EventBufferMaxSize int
	// Role is the engine's part in disaggregated serving (default RoleAggregated); see
	// disagg.go for what it changes.
	Role Role
	// KVTransfer configures the KV transfer port, opened by New in every role.
	KVTransfer KVTransferOptions
	// ToolCallParser and ReasoningParser name the model family the engine plays (vLLM's
	// --tool-call-parser and --reasoning-parser names, persona.ToolParsers and
	// ReasoningParsers): when either is set, answers are planned by
	// engines/mocker/persona from the decoded prompt (tool calls in that family's
	// syntax, a thinking block) instead of drawn words. "" for none.
	ToolCallParser, ReasoningParser string
	// Runner is what the engine serves, as vLLM's --runner: RunnerGenerate ("" too) or
	// RunnerPooling, an embedding model that answers POST /v1/embeddings (embed.go) and
	// refuses generation.
	Runner Runner
	// EmbeddingSize is the pooling engine's vector size (0: the model folder's
	// hidden_size, else mocker.DefaultEmbeddingSize).
	EmbeddingSize int
	// Profile is the path of an engine profile (`turbine profile`, docs/reference.md
	// §27.1) whose entry for Engine.TensorParallelSize becomes the engine's timing and
	// limits: `turbine mocker` reads it (ResolveParallel) into Engine before New, which
	// does not read the file itself; "" for the reference timing.
	Profile string
	// KvbmURL is the node's KV block manager (resp://host:port, redis://...; "" for
	// none): evicted KV blocks are offloaded to it and a prefix it holds is onboarded
	// instead of computed (kvbm.go, docs/reference.md §9).
	KvbmURL string
}

// DefaultParams returns the defaults: the reference mock engine's limits and timing
// (mocker.DefaultConfig), vLLM's dialect, the aggregated role, the KV transfer's
// defaults (DefaultKVTransferBandwidth, DefaultKVTransferTimeout, the connect and read
// timeouts, LoadFailureFail; the model's KV bytes per token) and no persona.
func DefaultParams() Params {
	return Params{Engine: mocker.DefaultConfig(), Dialect: DialectVLLM, Role: RoleAggregated,
		KVTransfer: KVTransferOptions{Bandwidth: DefaultKVTransferBandwidth, Timeout: DefaultKVTransferTimeout,
			ConnectTimeout: DefaultKVTransferConnectTimeout, ReadTimeout: DefaultKVTransferReadTimeout,
			LoadFailurePolicy: LoadFailureFail}}
}

// Flags registers the parameters' flags on fs, with p's values as their defaults. Names
// follow vLLM's engine arguments (--num-gpu-blocks-override, --max-num-seqs, ...), and
// SGLang's and TensorRT-LLM's for their dialects' settings.
func (p *Params) Flags(fs *flag.FlagSet) {
	e := &p.Engine
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "KV block size in tokens")
	fs.IntVar(&e.NumGPUBlocks, "num-gpu-blocks-override", e.NumGPUBlocks, "number of KV blocks")
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "maximum running requests")
	fs.IntVar(&e.MaxNumBatchedTokens, "max-num-batched-tokens", e.MaxNumBatchedTokens, "maximum tokens computed per engine step")
	fs.IntVar(&e.MaxModelLen, "max-model-len", e.MaxModelLen, "context length in tokens (prompt + output)")
	fs.Float64Var(&e.SpeedupRatio, "speedup-ratio", e.SpeedupRatio, "divides every modelled step duration (10 = ten times faster)")
	fs.IntVar(&e.TensorParallelSize, "tensor-parallel-size", e.TensorParallelSize,
		"GPUs the engine plays (no GPU is used): the reference step times divided by N^0.8 and N times the KV blocks unless --num-gpu-blocks-override is given; with --profile, the profile's entry for N")
	fs.StringVar(&p.Profile, "profile", p.Profile,
		"engine profile `file` (turbine profile): the step times of its entry for --tensor-parallel-size, and its KV blocks, block size and max seqs unless their flags are given")
	fs.IntVar(&e.MeanOutputTokens, "mean-output-tokens", e.MeanOutputTokens, "mean output length in tokens of requests that may end on EOS")
	fs.Var((*seedFlag)(&e.Seed), "seed", "generation seed of requests without one (same seed, same prompt: same output on every engine)")
	fs.BoolVar(&e.EnablePrefixCaching, "enable-prefix-caching", e.EnablePrefixCaching, "keep full KV blocks for reuse across requests")
	fs.BoolVar(&e.EnableChunkedPrefill, "enable-chunked-prefill", e.EnableChunkedPrefill, "split long prefills over several steps")
	fs.IntVar(&e.MaxLoras, "max-loras", e.MaxLoras,
		"LoRA adapters the engine holds at once, loaded through the dialect's API (vllm: POST /v1/load_lora_adapter; 0: adapters off, loads refused as vLLM refuses them without --enable-lora)")
	fs.IntVar(&e.MaxLoraRank, "max-lora-rank", e.MaxLoraRank, "largest LoRA adapter rank (adapter_config.json r) a load takes")
	fs.Float64Var(&e.LoraLoadMillis, "lora-load-ms", e.LoraLoadMillis,
		"modelled time of one LoRA adapter load in ms (divided by --speedup-ratio): the engine computes nothing meanwhile")
	fs.StringVar((*string)(&p.Dialect), "dialect", string(p.Dialect), "HTTP dialect served: "+dialects.want())
	fs.BoolVar(&p.IncrementalStreamingOutput, "incremental-streaming-output", p.IncrementalStreamingOutput,
		"sglang dialect: stream each chunk's new output_ids and text instead of all so far (SGLang's flag)")
	fs.IntVar(&p.EventBufferMaxSize, "event-buffer-max-size", p.EventBufferMaxSize,
		"trtllm dialect: KV cache events kept for POST /kv_cache_events (kv_cache_config.event_buffer_max_size; 0: none)")
	fs.StringVar((*string)(&p.Role), "role", string(p.Role), "disaggregated serving role: aggregated, prefill or decode (every role serves both legs, "+
		"as vLLM's kv_both; the sglang dialect takes the leg of bootstrap requests from it)")
	x := &p.KVTransfer
	fs.StringVar(&x.Host, "kv-transfer-host", x.Host, "address of the KV transfer port, advertised to decode legs (default: --host)")
	fs.IntVar(&x.Port, "kv-transfer-port", x.Port, "KV transfer port (vLLM's remote_port, SGLang's bootstrap port; 0 picks a free one)")
	fs.Float64Var(&x.Bandwidth, "kv-transfer-bandwidth", x.Bandwidth,
		"KV transfer bandwidth in bytes/s at which decode legs read this engine's blocks, 1e6 to 1e13 (multiplied by --speedup-ratio)")
	fs.Int64Var(&x.BytesPerToken, "kv-bytes-per-token", x.BytesPerToken,
		fmt.Sprintf("KV cache bytes per token, at most %d (default: from the model folder's config.json, else %d, Llama-3.1-8B in bfloat16)",
			kvtransfer.MaxBytesPerToken, DefaultKVBytesPerToken))
	fs.DurationVar(&x.Timeout, "kv-transfer-timeout", x.Timeout,
		"how long pinned KV blocks of a prefill leg wait for their decode leg (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT)")
	fs.DurationVar(&x.ConnectTimeout, "kv-transfer-connect-timeout", x.ConnectTimeout,
		"how long a decode leg waits to connect to the prefill engine's KV transfer port before its KV load fails")
	fs.DurationVar(&x.ReadTimeout, "kv-transfer-read-timeout", x.ReadTimeout,
		"how long a decode leg's KV read waits for the prefill engine's next answer, keepalive or data before it fails (a frozen prefill engine)")
	fs.StringVar(&x.LoadFailurePolicy, "kv-load-failure-policy", x.LoadFailurePolicy,
		"a decode leg whose KV read failed: fail (answer the dialect's KV transfer error) or recompute (compute the prompt itself; vLLM dialect only, vLLM's kv_load_failure_policy)")
	fs.StringVar(&p.ToolCallParser, "tool-call-parser", p.ToolCallParser,
		"answer like a tool-calling model whose calls vLLM's parser of this name reads (hermes, llama3_json, openai, ...): calls to the prompt's tools in that syntax (default and none: no tool calls)")
	fs.StringVar((*string)(&p.Runner), "runner", string(p.Runner),
		"what the engine serves, as vLLM's --runner: generate (completions) or pooling (an embedding model: POST /v1/embeddings; the vllm and sglang dialects)")
	fs.IntVar(&p.EmbeddingSize, "embedding-size", p.EmbeddingSize,
		fmt.Sprintf("--runner pooling: the embedding vector's size (default: the model folder's hidden_size, else %d)", mocker.DefaultEmbeddingSize))
	fs.StringVar(&p.KvbmURL, "kvbm-url", p.KvbmURL,
		"the node's KV block manager, resp://host:port or redis://host:port (turbine kvbm, or any RESP server): evicted KV blocks are offloaded to it "+
			"(--kv-bytes-per-token × --block-size real bytes each) and a prefix it holds is loaded back at the modelled host-tier bandwidth instead of computed")
	fs.StringVar(&p.ReasoningParser, "reasoning-parser", p.ReasoningParser,
		"answer like a reasoning model whose thinking vLLM's parser of this name reads (qwen3, deepseek_r1, openai_gptoss, ...): a thinking block first (default and none: no thinking)")
}

// Args renders p as the flags Flags reads back into it: the engine's limits, speed-up,
// mean output length, seed and tensor-parallel size always (an engine started for a
// worker does not take them from an inherited TURBINE_* variable); the LoRA adapter settings (--max-loras,
// --max-lora-rank, --lora-load-ms) when adapters are on; every other parameter when it
// is set (not zero, not the aggregated role; the two scheduler features when off), so
// that an unset one keeps the engine's default. The KV transfer port's address (KVTransfer.Host and Port)
// is not rendered: a launcher gives it at each start. Nor is Engine.Timing, a Go value:
// Profile names the file it comes from.
func (p Params) Args() []string {
	e := p.Engine
	args := []string{
		"--block-size", strconv.Itoa(e.BlockSize),
		"--num-gpu-blocks-override", strconv.Itoa(e.NumGPUBlocks),
		"--max-num-seqs", strconv.Itoa(e.MaxNumSeqs),
		"--max-num-batched-tokens", strconv.Itoa(e.MaxNumBatchedTokens),
		"--max-model-len", strconv.Itoa(e.MaxModelLen),
		"--speedup-ratio", strconv.FormatFloat(e.SpeedupRatio, 'g', -1, 64),
		"--mean-output-tokens", strconv.Itoa(e.MeanOutputTokens),
		"--seed", seedFlag(e.Seed).String(),
		"--tensor-parallel-size", strconv.Itoa(e.TensorParallelSize),
	}
	if !e.EnablePrefixCaching {
		args = append(args, "--enable-prefix-caching=false")
	}
	if !e.EnableChunkedPrefill {
		args = append(args, "--enable-chunked-prefill=false")
	}
	if e.MaxLoras > 0 { // the adapter settings mean nothing with adapters off
		args = append(args, "--max-loras", strconv.Itoa(e.MaxLoras), "--max-lora-rank", strconv.Itoa(e.MaxLoraRank),
			"--lora-load-ms", strconv.FormatFloat(e.LoraLoadMillis, 'g', -1, 64))
	}
	opt := func(flag, value string, set bool) {
		if set {
			args = append(args, flag, value)
		}
	}
	x := p.KVTransfer
	opt("--dialect", string(p.Dialect), p.Dialect != "")
	args = appendBool(args, "--incremental-streaming-output", p.IncrementalStreamingOutput)
	opt("--event-buffer-max-size", strconv.Itoa(p.EventBufferMaxSize), p.EventBufferMaxSize != 0)
	opt("--role", string(p.Role), p.Role != "" && p.Role != RoleAggregated)
	opt("--kv-transfer-bandwidth", strconv.FormatFloat(x.Bandwidth, 'g', -1, 64), x.Bandwidth != 0)
	opt("--kv-bytes-per-token", strconv.FormatInt(x.BytesPerToken, 10), x.BytesPerToken != 0)
	opt("--kv-transfer-timeout", x.Timeout.String(), x.Timeout != 0)
	opt("--kv-transfer-connect-timeout", x.ConnectTimeout.String(), x.ConnectTimeout != 0)
	opt("--kv-transfer-read-timeout", x.ReadTimeout.String(), x.ReadTimeout != 0)
	opt("--kv-load-failure-policy", x.LoadFailurePolicy, x.LoadFailurePolicy != "")
	opt("--tool-call-parser", p.ToolCallParser, p.ToolCallParser != "")
	opt("--reasoning-parser", p.ReasoningParser, p.ReasoningParser != "")
	opt("--runner", string(p.Runner), p.Runner != "" && p.Runner != RunnerGenerate)
	opt("--embedding-size", strconv.Itoa(p.EmbeddingSize), p.EmbeddingSize != 0)
	opt("--profile", p.Profile, p.Profile != "")
	opt("--kvbm-url", p.KvbmURL, p.KvbmURL != "")
	return args
}

func appendBool(args []string, flag string, on bool) []string {
	if on {
		return append(args, flag)
	}
	return args
}

// seedFlag is the generation seed as a flag: a signed or unsigned 64-bit integer (a
// negative seed is its two's complement).
type seedFlag uint64

func (s seedFlag) String() string { return strconv.FormatInt(int64(s), 10) }

func (s *seedFlag) Set(v string) error {
	if n, err := strconv.ParseInt(v, 0, 64); err == nil {
		*s = seedFlag(n)
		return nil
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return fmt.Errorf("want a 64-bit integer")
	}
	*s = seedFlag(n)
	return nil
}
