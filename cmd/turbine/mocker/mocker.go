// Package mocker is `turbine mocker`: the mock engine as its own process. It needs no GPU
// and behaves from the outside like the engine --dialect names: a vLLM server (default:
// OpenAI completions in vLLM's dialect, /health, /v1/models, /metrics with vLLM's names),
// an SGLang server (native /generate, /abort_request, /health, /get_model_info, /metrics
// with SGLang's names) or trtllm-serve (/v1/completions with token ids, /health,
// iteration stats on /metrics, KV cache events on /kv_cache_events). KV events go over
// ZeroMQ in vLLM's wire format, which SGLang shares. Engine flags follow vLLM's names.
//
// Disaggregated serving: every mocker opens a KV transfer port (--kv-transfer-port) and
// serves both legs of a disaggregated request (engines/mocker/server, disagg.go); --role
// says what it registers as. A decode leg reads the prefill engine's KV blocks over
// that port: --kv-bytes-per-token bytes per token of each full prompt block, paced at
// --kv-transfer-bandwidth × --speedup-ratio bytes per second, within
// --kv-transfer-connect-timeout and --kv-transfer-read-timeout; a read that fails is
// answered as --kv-load-failure-policy says (fail, or recompute the prompt).
//
// --tool-call-parser and --reasoning-parser (vLLM's parser names) make the engine answer
// like a model of that family: from the decoded prompt it plans a thinking block, then
// tool calls in the family's syntax to tools the prompt offers, or a text answer after a
// tool result (engines/mocker/persona). A request carrying a structured-output
// constraint is answered with an instance of it whatever the flags.
package mocker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/kvevents"
	enginecore "github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/persona"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/modelcard"
	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/gateway/preprocess"
)

// Options are the flags, with their defaults in Defaults.
type Options struct {
	Host            string
	Port            int
	Model           string
	ServedModelName string
	Tokenizer       string
	Engine          enginecore.Config
	Seed            int64
	KVEventsConfig  string
	NoPrefixCaching bool
	NoChunked       bool
	LogFormat       string
	LogLevel        string
	ShutdownGrace   time.Duration
	// Dialect: vllm, sglang or trtllm.
	Dialect string
	// IncrementalStreamingOutput: SGLang's --incremental-streaming-output.
	IncrementalStreamingOutput bool
	// EventBufferMaxSize: trtllm-serve's kv_cache_config.event_buffer_max_size.
	EventBufferMaxSize int
	// Role in disaggregated serving: aggregated, prefill or decode.
	Role string
	// KVTransferHost and KVTransferPort: the KV transfer port's address (port 0 picks a
	// free one; the ready log line names it).
	KVTransferHost string
	KVTransferPort int
	// KVTransferBandwidth in bytes per second (divided, like every modelled duration, by
	// --speedup-ratio: the effective rate is bandwidth × speed-up).
	KVTransferBandwidth float64
	// KVBytesPerToken: the KV cache size of one token in bytes; 0 takes the model
	// folder's (engines/modelcard) or server.DefaultKVBytesPerToken.
	KVBytesPerToken int64
	// KVTransferTimeout releases pinned blocks nobody read.
	KVTransferTimeout time.Duration
	// KVTransferConnectTimeout and KVTransferReadTimeout bound a decode leg's read of
	// the prefill engine's blocks (connecting; each wait for an answer or data).
	KVTransferConnectTimeout, KVTransferReadTimeout time.Duration
	// KVLoadFailurePolicy: fail or recompute (vLLM's kv_load_failure_policy).
	KVLoadFailurePolicy string
	// ToolCallParser and ReasoningParser: the model family the engine plays (vLLM's
	// --tool-call-parser and --reasoning-parser names); "" for none.
	ToolCallParser, ReasoningParser string
}

// DefaultTokenizer is used when neither --tokenizer nor --model names one.
const DefaultTokenizer = "builtin:cl100k_base"

// Defaults returns the flag defaults (the reference mocker's engine limits, docs/reference.md §7).
func Defaults() Options {
	return Options{
		Host: "127.0.0.1", Port: 8000, Model: "turbine-mock",
		Engine:    enginecore.DefaultConfig(),
		LogFormat: "auto", LogLevel: "info", ShutdownGrace: 5 * time.Second,
		Dialect: string(server.DialectVLLM),
		Role:    string(server.RoleAggregated), KVTransferBandwidth: server.DefaultKVTransferBandwidth,
		KVTransferTimeout:        server.DefaultKVTransferTimeout,
		KVTransferConnectTimeout: server.DefaultKVTransferConnectTimeout, KVTransferReadTimeout: server.DefaultKVTransferReadTimeout,
		KVLoadFailurePolicy: server.LoadFailureFail,
	}
}

func flags(o *Options, fs *flag.FlagSet) {
	e := &o.Engine
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "HTTP port (0 picks a free one; the ready log line names it)")
	fs.StringVar(&o.Model, "model", o.Model, "model name, or a model folder / builtin:<encoding> whose tokenizer to use")
	fs.StringVar(&o.ServedModelName, "served-model-name", o.ServedModelName, "model id served in the API (default: --model)")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer: builtin:cl100k_base, builtin:o200k_base or an HF model folder (default: --model when it is one, else "+DefaultTokenizer+")")
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "KV block size in tokens")
	fs.IntVar(&e.NumGPUBlocks, "num-gpu-blocks-override", e.NumGPUBlocks, "number of KV blocks")
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "maximum running requests")
	fs.IntVar(&e.MaxNumBatchedTokens, "max-num-batched-tokens", e.MaxNumBatchedTokens, "maximum tokens computed per engine step")
	fs.IntVar(&e.MaxModelLen, "max-model-len", e.MaxModelLen, "context length in tokens (prompt + output)")
	fs.Float64Var(&e.SpeedupRatio, "speedup-ratio", e.SpeedupRatio, "divides every modelled step duration (10 = ten times faster)")
	fs.IntVar(&e.MeanOutputTokens, "mean-output-tokens", e.MeanOutputTokens, "mean output length in tokens of requests that may end on EOS")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "generation seed of requests without one (same seed, same prompt: same output on every engine)")
	fs.StringVar(&o.KVEventsConfig, "kv-events-config", o.KVEventsConfig, `KV events, vLLM's JSON, e.g. {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	fs.BoolVar(&e.EnablePrefixCaching, "enable-prefix-caching", e.EnablePrefixCaching, "keep full KV blocks for reuse across requests")
	fs.BoolVar(&o.NoPrefixCaching, "no-enable-prefix-caching", false, "disable prefix caching")
	fs.BoolVar(&e.EnableChunkedPrefill, "enable-chunked-prefill", e.EnableChunkedPrefill, "split long prefills over several steps")
	fs.BoolVar(&o.NoChunked, "no-enable-chunked-prefill", false, "disable chunked prefill")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level: debug, info, warn, error")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace, "how long SIGTERM waits for in-flight requests before aborting them")
	fs.StringVar(&o.Dialect, "dialect", o.Dialect, "HTTP dialect served: vllm, sglang or trtllm")
	fs.BoolVar(&o.IncrementalStreamingOutput, "incremental-streaming-output", false,
		"sglang dialect: stream each chunk's new output_ids and text instead of all so far (SGLang's flag)")
	fs.IntVar(&o.EventBufferMaxSize, "event-buffer-max-size", 0,
		"trtllm dialect: KV cache events kept for POST /kv_cache_events (kv_cache_config.event_buffer_max_size; 0: none)")
	fs.StringVar(&o.Role, "role", o.Role, "disaggregated serving role: aggregated, prefill or decode (every role serves both legs, "+
		"as vLLM's kv_both; the sglang dialect takes the leg of bootstrap requests from it)")
	fs.StringVar(&o.KVTransferHost, "kv-transfer-host", o.KVTransferHost, "address of the KV transfer port, advertised to decode legs (default: --host)")
	fs.IntVar(&o.KVTransferPort, "kv-transfer-port", o.KVTransferPort, "KV transfer port (vLLM's remote_port, SGLang's bootstrap port; 0 picks a free one)")
	fs.Float64Var(&o.KVTransferBandwidth, "kv-transfer-bandwidth", o.KVTransferBandwidth,
		"KV transfer bandwidth in bytes/s at which decode legs read this engine's blocks, 1e6 to 1e13 (multiplied by --speedup-ratio)")
	fs.Int64Var(&o.KVBytesPerToken, "kv-bytes-per-token", o.KVBytesPerToken,
		fmt.Sprintf("KV cache bytes per token, at most %d (default: from the model folder's config.json, else %d, Llama-3.1-8B in bfloat16)",
			kvtransfer.MaxBytesPerToken, server.DefaultKVBytesPerToken))
	fs.DurationVar(&o.KVTransferTimeout, "kv-transfer-timeout", o.KVTransferTimeout,
		"how long pinned KV blocks of a prefill leg wait for their decode leg (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT)")
	fs.DurationVar(&o.KVTransferConnectTimeout, "kv-transfer-connect-timeout", o.KVTransferConnectTimeout,
		"how long a decode leg waits to connect to the prefill engine's KV transfer port before its KV load fails")
	fs.DurationVar(&o.KVTransferReadTimeout, "kv-transfer-read-timeout", o.KVTransferReadTimeout,
		"how long a decode leg's KV read waits for the prefill engine's next answer, keepalive or data before it fails (a frozen prefill engine)")
	fs.StringVar(&o.ToolCallParser, "tool-call-parser", o.ToolCallParser,
		"answer like a tool-calling model whose calls vLLM's parser of this name reads (hermes, llama3_json, openai, ...): calls to the prompt's tools in that syntax (default and none: no tool calls)")
	fs.StringVar(&o.ReasoningParser, "reasoning-parser", o.ReasoningParser,
		"answer like a reasoning model whose thinking vLLM's parser of this name reads (qwen3, deepseek_r1, openai_gptoss, ...): a thinking block first (default and none: no thinking)")
	fs.StringVar(&o.KVLoadFailurePolicy, "kv-load-failure-policy", o.KVLoadFailurePolicy,
		"a decode leg whose KV read failed: fail (answer the dialect's KV transfer error) or recompute (compute the prompt itself; vLLM dialect only, vLLM's kv_load_failure_policy)")
}

// Run parses args and serves until ctx ends or SIGINT/SIGTERM arrives, then shuts down
// gracefully. Errors name the flag that is wrong.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	fs := flag.NewFlagSet("turbine mocker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags(&o, fs)
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	if err := o.resolve(); err != nil {
		return err
	}
	log, err := cli.Logger(stderr, o.LogFormat, o.LogLevel)
	if err != nil {
		return err
	}
	kvCfg, err := kvevents.ParseConfig(o.KVEventsConfig)
	if err != nil {
		return err
	}
	if o.Dialect == string(server.DialectSGLang) && kvCfg.Publisher == "zmq" {
		// SGLang's KVEventsConfig has no enable flag: a zmq publisher is on.
		kvCfg.EnableKVCacheEvents = true
	}
	model, err := preprocess.LoadModel(o.Tokenizer)
	if err != nil {
		return fmt.Errorf("--tokenizer %s: %w", o.Tokenizer, err)
	}
	root := o.Model
	metrics.ExposeMetadata(true) // # HELP and # TYPE lines on /metrics, as vLLM's exposition
	// The HTTP port first: it was picked free by the worker that started this engine,
	// and the KV transfer port (0: any free port) must not take it meanwhile.
	l, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("--host %s --port %d: %w", o.Host, o.Port, err)
	}
	srv, err := server.New(server.Options{
		Engine: o.Engine, ServedModelName: o.ServedModelName, ModelRoot: root, Model: model,
		KVEvents: kvCfg, Logger: log, ShutdownGrace: o.ShutdownGrace,
		Dialect: server.Dialect(o.Dialect), IncrementalStreamingOutput: o.IncrementalStreamingOutput,
		EventBufferMaxSize: o.EventBufferMaxSize, Role: server.Role(o.Role),
		KVTransfer: server.KVTransferOptions{Host: o.KVTransferHost, Port: o.KVTransferPort, Bandwidth: o.KVTransferBandwidth,
			BytesPerToken: o.KVBytesPerToken, Timeout: o.KVTransferTimeout, ConnectTimeout: o.KVTransferConnectTimeout,
			ReadTimeout: o.KVTransferReadTimeout, LoadFailurePolicy: o.KVLoadFailurePolicy},
		ToolCallParser: o.ToolCallParser, ReasoningParser: o.ReasoningParser,
	})
	if err != nil {
		_ = l.Close()
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return srv.Run(ctx, l, func() {
		ev := log.Info().Str("dialect", o.Dialect).Str("host", o.Host).Int("port", port).Str("model", o.ServedModelName).
			Str("tokenizer", o.Tokenizer).Int("block_size", o.Engine.BlockSize).Int("num_gpu_blocks", o.Engine.NumGPUBlocks)
		if ep := srv.KVEventsEndpoint(); ep != "" {
			ev = ev.Str("kv_events", ep).Bool("kv_events_bind", kvevents.EngineBinds(kvCfg.Endpoint))
		}
		ev = ev.Str("role", o.Role).Str("kv_transfer", srv.KVTransferAddr()).Str("kv_transfer_engine_id", srv.KVTransferEngineID()).
			Int64("kv_bytes_per_token", o.KVBytesPerToken).Str("tool_call_parser", o.ToolCallParser).Str("reasoning_parser", o.ReasoningParser)
		ev.Msg("mocker serving")
	})
}

// resolve fills derived options and checks the ones the engine does not.
func (o *Options) resolve() error {
	if o.NoPrefixCaching {
		o.Engine.EnablePrefixCaching = false
	}
	if o.NoChunked {
		o.Engine.EnableChunkedPrefill = false
	}
	if o.Host == "" {
		return errors.New("--host must not be empty")
	}
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("--port %d out of range 0-65535", o.Port)
	}
	if o.Model == "" {
		return errors.New("--model must not be empty")
	}
	if o.ServedModelName == "" {
		o.ServedModelName = o.Model
	}
	if o.Tokenizer == "" {
		o.Tokenizer = DefaultTokenizer
		if strings.HasPrefix(o.Model, "builtin:") {
			o.Tokenizer = o.Model
		} else if fi, err := os.Stat(o.Model); err == nil && fi.IsDir() {
			o.Tokenizer = o.Model
		}
	}
	if o.ShutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace %v must not be negative", o.ShutdownGrace)
	}
	d, err := server.ParseDialect(o.Dialect)
	if err != nil {
		return fmt.Errorf("--dialect %q: want vllm, sglang or trtllm", o.Dialect)
	}
	if o.IncrementalStreamingOutput && d != server.DialectSGLang {
		return fmt.Errorf("--incremental-streaming-output needs --dialect sglang (got %s)", d)
	}
	switch {
	case o.EventBufferMaxSize < 0:
		return fmt.Errorf("--event-buffer-max-size %d must not be negative", o.EventBufferMaxSize)
	case o.EventBufferMaxSize > 0 && d != server.DialectTRTLLM:
		return fmt.Errorf("--event-buffer-max-size needs --dialect trtllm (got %s)", d)
	case o.EventBufferMaxSize > 0 && !o.Engine.EnablePrefixCaching:
		return errors.New("--event-buffer-max-size needs prefix caching (block reuse); drop --no-enable-prefix-caching")
	}
	o.Engine.Seed = uint64(o.Seed)
	if err := o.Engine.Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "mocker: "))
	}
	if _, err := server.ParseRole(o.Role); err != nil {
		return fmt.Errorf("--role %q: want aggregated, prefill or decode", o.Role)
	}
	if o.KVTransferHost == "" {
		o.KVTransferHost = o.Host
	}
	switch {
	case o.KVTransferPort < 0 || o.KVTransferPort > 65535:
		return fmt.Errorf("--kv-transfer-port %d out of range 0-65535", o.KVTransferPort)
	case !(o.KVTransferBandwidth >= kvtransfer.MinBandwidth && o.KVTransferBandwidth <= kvtransfer.MaxBandwidth):
		return fmt.Errorf("--kv-transfer-bandwidth %v: want %g..%g bytes/s", o.KVTransferBandwidth,
			float64(kvtransfer.MinBandwidth), float64(kvtransfer.MaxBandwidth))
	case o.KVTransferBandwidth*o.Engine.SpeedupRatio < 1:
		return fmt.Errorf("--kv-transfer-bandwidth %v × --speedup-ratio %v is below 1 byte/s", o.KVTransferBandwidth, o.Engine.SpeedupRatio)
	case o.KVBytesPerToken < 0 || o.KVBytesPerToken > kvtransfer.MaxBytesPerToken:
		return fmt.Errorf("--kv-bytes-per-token %d: want 1..%d bytes (16 MiB, above the largest models' KV per token; 0: the model's)",
			o.KVBytesPerToken, kvtransfer.MaxBytesPerToken)
	case o.KVTransferTimeout <= 0:
		return fmt.Errorf("--kv-transfer-timeout %v must be positive", o.KVTransferTimeout)
	case o.KVTransferConnectTimeout <= 0:
		return fmt.Errorf("--kv-transfer-connect-timeout %v must be positive", o.KVTransferConnectTimeout)
	case o.KVTransferReadTimeout < time.Second:
		// Keepalives of a read waiting for its blocks come every 500 ms.
		return fmt.Errorf("--kv-transfer-read-timeout %v: want at least 1s", o.KVTransferReadTimeout)
	case o.KVLoadFailurePolicy != server.LoadFailureFail && o.KVLoadFailurePolicy != server.LoadFailureRecompute:
		return fmt.Errorf("--kv-load-failure-policy %q: want fail or recompute", o.KVLoadFailurePolicy)
	case o.KVLoadFailurePolicy == server.LoadFailureRecompute && d != server.DialectVLLM:
		return fmt.Errorf("--kv-load-failure-policy recompute needs --dialect vllm (%s has no such fallback)", d)
	}
	for _, c := range []struct {
		flag  string
		name  *string
		known []string
	}{
		{"--tool-call-parser", &o.ToolCallParser, parserNames(parse.ToolParserNames(), persona.ToolParsers())},
		{"--reasoning-parser", &o.ReasoningParser, parserNames(parse.ReasoningParserNames(), persona.ReasoningParsers())},
	} {
		if *c.name == "none" { // as turbine serve and node take it
			*c.name = ""
		}
		if *c.name != "" && !slices.Contains(c.known, *c.name) {
			return fmt.Errorf("%s %q: want one of %v, or none (the gateway's parsers whose format the mock engine writes)", c.flag, *c.name, c.known)
		}
	}
	if o.KVBytesPerToken == 0 {
		n, err := kvBytesPerToken(o.Model, o.Tokenizer)
		if err != nil {
			return err
		}
		o.KVBytesPerToken = n
	}
	return nil
}

// kvBytesPerToken is the KV size of one token of the model whose folder is --model, or
// else --tokenizer, as its config.json describes it (modelcard.Model.KVBytesPerToken);
// server.DefaultKVBytesPerToken when neither is a folder with a config.json. Errors: a
// config.json that cannot be read or parsed.
func kvBytesPerToken(model, tokenizer string) (int64, error) {
	for _, c := range []struct{ flag, dir string }{{"--model", model}, {"--tokenizer", tokenizer}} {
		if fi, err := os.Stat(c.dir); err != nil || !fi.IsDir() {
			continue
		}
		m, err := modelcard.ReadFolder(c.dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a tokenizer folder without config.json
		}
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w (or set --kv-bytes-per-token)", c.flag, c.dir, err)
		}
		if n := m.KVBytesPerToken(); n > 0 {
			return n, nil
		}
	}
	return server.DefaultKVBytesPerToken, nil
}

// parserNames returns the names in both lists: parsers the gateway reads whose format
// the mock engine writes.
func parserNames(gateway, mock []string) []string {
	var out []string
	for _, n := range gateway {
		if slices.Contains(mock, n) {
			out = append(out, n)
		}
	}
	return out
}
