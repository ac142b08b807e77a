// Package mocker is `turbine mocker`: the mock engine as its own process. It needs no GPU
// and behaves from the outside like the engine --dialect names: vllm (default), sglang or
// trtllm (engines/mocker/server lists each dialect's endpoints). Engine flags follow
// vLLM's names.
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
//
// --tensor-parallel-size N makes the engine play N GPUs (docs/reference.md §27.1): the
// reference step times divided by N^0.8 and N times the KV blocks, unless
// --num-gpu-blocks-override is given. --profile FILE (written by `turbine profile`) makes
// it play the profiled engine instead: the step times of the profile's entry for N, used
// as they are, and that entry's KV blocks, max running sequences and block size unless
// their flags are given (a given block size must be the profile's).
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
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/persona"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/model"
	"github.com/turbine-llm/turbine/planner"
)

// Options are the flags, with their defaults in Defaults: the mock engine's parameters
// (server.Params, whose flags a launcher renders) and the process's own.
type Options struct {
	server.Params
	Host            string
	Port            int
	Model           string
	ServedModelName string
	Tokenizer       string
	KVEventsConfig  string
	NoPrefixCaching bool
	NoChunked       bool
	LogFormat       string
	LogLevel        string
	ShutdownGrace   time.Duration

	// given says which engine limits were set by flag or environment (resolve keeps
	// them against --tensor-parallel-size and --profile).
	given server.Given
}

// DefaultTokenizer is used when neither --tokenizer nor --model names one.
const DefaultTokenizer = "builtin:cl100k_base"

// Defaults returns the flag defaults: the mock engine's (server.DefaultParams, the
// reference mocker's engine limits, docs/reference.md §7) and the process's.
func Defaults() Options {
	return Options{
		Params: server.DefaultParams(),
		Host:   "127.0.0.1", Port: 8000, Model: "turbine-mock",
		LogFormat: "auto", LogLevel: "info", ShutdownGrace: 5 * time.Second,
	}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "HTTP port (0 picks a free one; the ready log line names it)")
	fs.StringVar(&o.Model, "model", o.Model, "model name, or a model folder / builtin:<encoding> whose tokenizer to use")
	fs.StringVar(&o.ServedModelName, "served-model-name", o.ServedModelName, "model id served in the API (default: --model)")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer: builtin:cl100k_base, builtin:o200k_base or an HF model folder (default: --model when it is one, else "+DefaultTokenizer+")")
	o.Params.Flags(fs)
	fs.StringVar(&o.KVEventsConfig, "kv-events-config", o.KVEventsConfig, `KV events, vLLM's JSON, e.g. {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	fs.BoolVar(&o.NoPrefixCaching, "no-enable-prefix-caching", false, "disable prefix caching")
	fs.BoolVar(&o.NoChunked, "no-enable-chunked-prefill", false, "disable chunked prefill")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level: debug, info, warn, error")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace, "how long SIGTERM waits for in-flight requests before aborting them")
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
	o.given = server.Given{BlockSize: given(fs, "block-size"), NumGPUBlocks: given(fs, "num-gpu-blocks-override"),
		MaxNumSeqs: given(fs, "max-num-seqs")}
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
	model, err := model.LoadModel(o.Tokenizer)
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
	srv, err := server.New(server.Options{Params: o.Params,
		ServedModelName: o.ServedModelName, ModelRoot: root, Model: model,
		KVEvents: kvCfg, Logger: log, ShutdownGrace: o.ShutdownGrace,
	})
	if err != nil {
		_ = l.Close()
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return srv.Run(ctx, l, func() {
		ev := log.Info().Str("dialect", string(o.Dialect)).Str("host", o.Host).Int("port", port).Str("model", o.ServedModelName).
			Str("tokenizer", o.Tokenizer).Int("block_size", o.Engine.BlockSize).Int("num_gpu_blocks", o.Engine.NumGPUBlocks).
			Int("max_num_seqs", o.Engine.MaxNumSeqs).Int("tensor_parallel_size", max(o.Engine.TensorParallelSize, 1))
		if o.Profile != "" {
			ev = ev.Str("profile", o.Profile)
		}
		if ep := srv.KVEventsEndpoint(); ep != "" {
			ev = ev.Str("kv_events", ep).Bool("kv_events_bind", kvevents.EngineBinds(kvCfg.Endpoint))
		}
		ev = ev.Str("role", string(o.Role)).Str("kv_transfer", srv.KVTransferAddr()).Str("kv_transfer_engine_id", srv.KVTransferEngineID()).
			Int64("kv_bytes_per_token", o.KVTransfer.BytesPerToken).Str("tool_call_parser", o.ToolCallParser).Str("reasoning_parser", o.ReasoningParser)
		if o.KvbmURL != "" {
			ev = ev.Str("kvbm_url", o.KvbmURL)
		}
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
	d, err := server.ParseDialect(string(o.Dialect))
	if err != nil {
		return fmt.Errorf("--dialect %q: want %s", o.Dialect, server.DialectChoices())
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
	if err := o.resolveParallel(); err != nil {
		return err
	}
	if err := o.Engine.Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "mocker: "))
	}
	if _, err := server.ParseRole(string(o.Role)); err != nil {
		return fmt.Errorf("--role %q: want aggregated, prefill or decode", o.Role)
	}
	x := &o.KVTransfer
	if x.Host == "" {
		x.Host = o.Host
	}
	switch {
	case x.Port < 0 || x.Port > 65535:
		return fmt.Errorf("--kv-transfer-port %d out of range 0-65535", x.Port)
	case !(x.Bandwidth >= kvtransfer.MinBandwidth && x.Bandwidth <= kvtransfer.MaxBandwidth):
		return fmt.Errorf("--kv-transfer-bandwidth %v: want %g..%g bytes/s", x.Bandwidth,
			float64(kvtransfer.MinBandwidth), float64(kvtransfer.MaxBandwidth))
	case x.Bandwidth*o.Engine.SpeedupRatio < 1:
		return fmt.Errorf("--kv-transfer-bandwidth %v × --speedup-ratio %v is below 1 byte/s", x.Bandwidth, o.Engine.SpeedupRatio)
	case x.BytesPerToken < 0 || x.BytesPerToken > kvtransfer.MaxBytesPerToken:
		return fmt.Errorf("--kv-bytes-per-token %d: want 1..%d bytes (16 MiB, above the largest models' KV per token; 0: the model's)",
			x.BytesPerToken, kvtransfer.MaxBytesPerToken)
	case x.Timeout <= 0:
		return fmt.Errorf("--kv-transfer-timeout %v must be positive", x.Timeout)
	case x.ConnectTimeout <= 0:
		return fmt.Errorf("--kv-transfer-connect-timeout %v must be positive", x.ConnectTimeout)
	case x.ReadTimeout < time.Second:
		// Keepalives of a read waiting for its blocks come every 500 ms.
		return fmt.Errorf("--kv-transfer-read-timeout %v: want at least 1s", x.ReadTimeout)
	case x.LoadFailurePolicy != server.LoadFailureFail && x.LoadFailurePolicy != server.LoadFailureRecompute:
		return fmt.Errorf("--kv-load-failure-policy %q: want fail or recompute", x.LoadFailurePolicy)
	case x.LoadFailurePolicy == server.LoadFailureRecompute && d != server.DialectVLLM:
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
	if x.BytesPerToken == 0 {
		n, err := kvBytesPerToken(o.Model, o.Tokenizer)
		if err != nil {
			return err
		}
		x.BytesPerToken = n
	}
	return nil
}

// kvBytesPerToken is the KV size of one token of the model whose folder is --model, or
// else --tokenizer, as its config.json describes it (model.Config.KVBytesPerToken);
// server.DefaultKVBytesPerToken when neither is a folder with a config.json. Errors: a
// config.json that cannot be read or parsed.
func kvBytesPerToken(modelDir, tokenizer string) (int64, error) {
	for _, c := range []struct{ flag, dir string }{{"--model", modelDir}, {"--tokenizer", tokenizer}} {
		if fi, err := os.Stat(c.dir); err != nil || !fi.IsDir() {
			continue
		}
		m, err := model.ReadFolder(c.dir)
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

// resolveParallel applies --tensor-parallel-size and --profile to the engine's limits and
// timing (server.ResolveParallel): the profile's entry for the size, or the reference
// timing with the KV blocks multiplied by the size, flags given explicitly kept.
func (o *Options) resolveParallel() error {
	var prof *planner.Profile
	if o.Profile != "" {
		p, err := planner.LoadProfile(o.Profile)
		if err != nil {
			return fmt.Errorf("--profile %s: %w", o.Profile, err)
		}
		prof = p
	}
	if _, err := server.ResolveParallel(&o.Engine, prof, o.given); err != nil {
		if prof != nil {
			return fmt.Errorf("--profile %s: %w", o.Profile, err)
		}
		return err
	}
	return nil
}

// given reports whether flag name was set on the command line or through its
// environment variable (cli.Parse).
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if _, ok := os.LookupEnv(cli.EnvName(name)); ok {
		set = true
	}
	return set
}
