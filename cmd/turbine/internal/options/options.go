// Package options holds the flag groups that several turbine subcommands share — the
// engine and its model deployment card (serve, node), the router (serve, frontend), the
// HTTP listener (serve, frontend), cluster membership (frontend, node) and logging — so
// that each flag has one name, one default and one validation everywhere.
package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Engine are the mock engine's settings and the model deployment card it serves
// (docs/reference.md §7 defaults).
type Engine struct {
	Model, Tokenizer    string
	BlockSize           int // tokens per KV block
	NumGPUBlocks        int // KV blocks per engine
	MaxNumSeqs          int
	MaxNumBatchedTokens int // tokens per engine step
	MaxModelLen         int // context length in tokens
	SpeedupRatio        float64
	MeanOutputTokens    int
	Seed                int64
	// KVBytesPerToken (bytes, at most kvtransfer.MaxBytesPerToken) and
	// KVTransferBandwidth (bytes/s, kvtransfer.MinBandwidth to MaxBandwidth): the mock
	// engines' KV transfer between prefill and decode workers; 0 leaves the mock
	// engine's defaults (the model folder's config.json, else Llama-3.1-8B's 131072
	// bytes; 64e9 bytes/s).
	KVBytesPerToken     int64
	KVTransferBandwidth float64
	// KVLoadFailurePolicy: what a mock decode engine does when it cannot read the
	// prompt's KV blocks ("fail", "recompute"; "" leaves the mock engine's default,
	// fail). Recompute needs the vLLM dialect (CheckKVLoadFailurePolicy).
	KVLoadFailurePolicy string
	Heartbeat           time.Duration
	ReadyTimeout        time.Duration
	// MaxModelLenSet and ReadyTimeoutSet say whether --max-model-len and --ready-timeout
	// were given (flag or environment): real engines derive the context length from the
	// model and get a longer readiness wait unless told otherwise.
	MaxModelLenSet, ReadyTimeoutSet bool
	// ToolCallParser and ReasoningParser name the output parsers (vLLM's names) carried
	// in the card; "" detects them from the model folder, "none" turns detection off.
	ToolCallParser, ReasoningParser string
	// Runner is what the workers' engines serve, as vLLM's --runner: "generate" (chat,
	// completions) or "pooling" (embeddings: POST /v1/embeddings; docs/reference.md §23).
	Runner string
	// EmbeddingSize is a pooling model's vector size for the mock engine; 0: the model
	// folder's hidden_size, else mocker.DefaultEmbeddingSize.
	EmbeddingSize int
	// MockerProfile (a `turbine profile` file) and MockerTensorParallelSize (GPUs the
	// mock engines play, 0 or 1: one): the mock engines' timing and limits
	// (mockerprofile.go, docs/reference.md §27.1).
	MockerProfile            string
	MockerTensorParallelSize int
	// BlockSizeSet, NumGPUBlocksSet and MaxNumSeqsSet say whether those flags were given
	// (flag or environment): a profile or a tensor-parallel size sets the others.
	BlockSizeSet, NumGPUBlocksSet, MaxNumSeqsSet bool
	// mockerBlocks is --num-gpu-blocks as it was before resolveMocker scaled it.
	mockerBlocks int
}

// DefaultEngine returns the engine defaults: the mock engine's limits and timing are its
// own (mocker.DefaultConfig).
func DefaultEngine() Engine {
	m := mocker.DefaultConfig()
	return Engine{
		Model: "turbine-mock", Tokenizer: "builtin:cl100k_base",
		BlockSize: m.BlockSize, NumGPUBlocks: m.NumGPUBlocks, MaxNumSeqs: m.MaxNumSeqs, MaxNumBatchedTokens: m.MaxNumBatchedTokens,
		MaxModelLen: m.MaxModelLen, SpeedupRatio: m.SpeedupRatio, MeanOutputTokens: m.MeanOutputTokens, Seed: int64(m.Seed),
		Heartbeat: time.Second, ReadyTimeout: 2 * time.Minute, Runner: RunnerGenerate,
	}
}

// The --runner values (vLLM's names).
const (
	RunnerGenerate = "generate"
	RunnerPooling  = "pooling"
)

// Flags registers the engine flags on fs.
func (o *Engine) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.Model, "model", o.Model, "served model name")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer: builtin:cl100k_base, builtin:o200k_base, or an HF model folder (tokenizer.json, tokenizer_config.json)")
	IntVarTracked(fs, &o.BlockSize, &o.BlockSizeSet, "block-size", "KV block size in tokens (engines and router; with --mocker-profile, the profile's unless given)")
	IntVarTracked(fs, &o.NumGPUBlocks, &o.NumGPUBlocksSet, "num-gpu-blocks",
		"KV blocks per mock engine (for real engines, the card's figure until the engine reports its own); unless given, times --mocker-tensor-parallel-size, or --mocker-profile's")
	IntVarTracked(fs, &o.MaxNumSeqs, &o.MaxNumSeqsSet, "max-num-seqs", "running sequences per engine (with --mocker-profile, the profile's unless given)")
	o.mockerFlags(fs)
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "tokens per engine step")
	fs.Var(&tracked[int]{p: &o.MaxModelLen, set: &o.MaxModelLenSet, parse: strconv.Atoi}, "max-model-len",
		"context length in `tokens` (prompt + output); turbine node with a model folder: the folder's, and real engines derive their own unless this is given")
	fs.Float64Var(&o.SpeedupRatio, "speedup-ratio", o.SpeedupRatio, "mock engine speed relative to the timing model (10 = ten times faster)")
	fs.IntVar(&o.MeanOutputTokens, "mean-output-tokens", o.MeanOutputTokens, "mock engine: mean output length in tokens when EOS is not ignored")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "mock engine seed (same seed, same tokens)")
	fs.Int64Var(&o.KVBytesPerToken, "kv-bytes-per-token", o.KVBytesPerToken,
		"mock engines: KV cache `bytes` per token, sent from prefill to decode in disaggregated serving and offloaded to the block manager with --kvbm; the model card says it, so the router's tier credits follow; at most 16777216 (0: the model folder's config.json, else 131072)")
	fs.Float64Var(&o.KVTransferBandwidth, "kv-transfer-bandwidth", o.KVTransferBandwidth,
		"mock engines, disaggregated serving: KV transfer pacing in `bytes/s`, 1e6 to 1e13, times --speedup-ratio (0: 64e9)")
	fs.StringVar(&o.KVLoadFailurePolicy, "kv-load-failure-policy", o.KVLoadFailurePolicy,
		"mock engines, disaggregated serving: a decode engine that cannot read the prompt's KV from the prefill engine answers a KV transfer error "+
			"(fail, the default: the request's prefill is retried elsewhere) or computes the prompt itself (recompute, vLLM dialect only)")
	fs.StringVar(&o.ToolCallParser, "tool-call-parser", o.ToolCallParser,
		"how tool calls are parsed from the model's output, by vLLM's parser name ("+strings.Join(parse.ToolParserNames(), ", ")+
			"); empty: detected from the model folder's chat template and config.json; none: no tool calls")
	fs.StringVar(&o.ReasoningParser, "reasoning-parser", o.ReasoningParser,
		"how the chain of thought is separated from the answer, by vLLM's parser name ("+strings.Join(parse.ReasoningParserNames(), ", ")+
			"); empty: detected from the model folder; none: no reasoning parsing")
	fs.StringVar(&o.Runner, "runner", o.Runner,
		"what the model is served as, as vLLM's --runner: generate (chat and completions) or pooling (an embedding model: POST /v1/embeddings; engines vllm, sglang and the mock engine)")
	fs.IntVar(&o.EmbeddingSize, "embedding-size", o.EmbeddingSize,
		fmt.Sprintf("--runner pooling, mock engines: the embedding's size (0: the model folder's hidden_size, else %d)", mocker.DefaultEmbeddingSize))
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "worker load and registration period")
	fs.Var(&tracked[time.Duration]{p: &o.ReadyTimeout, set: &o.ReadyTimeoutSet, parse: time.ParseDuration}, "ready-timeout",
		"how long a worker waits for its engine to become ready, a `duration` (real engines: 10m unless given)")
}

// Validate checks the engine options and settles the mock engines' limits for
// --mocker-tensor-parallel-size and --mocker-profile (resolveMocker); errors name the
// flag.
func (o *Engine) Validate() error {
	if err := o.resolveMocker(); err != nil {
		return err
	}
	switch {
	case o.Model == "":
		return errors.New("--model: empty")
	case o.BlockSize < 1 || o.BlockSize > 4096:
		return fmt.Errorf("--block-size %d: want 1..4096", o.BlockSize)
	case o.NumGPUBlocks < 1:
		return fmt.Errorf("--num-gpu-blocks %d: must be ≥ 1", o.NumGPUBlocks)
	case o.MaxNumSeqs < 1:
		return fmt.Errorf("--max-num-seqs %d: must be ≥ 1", o.MaxNumSeqs)
	case o.MaxNumBatchedTokens < 1:
		return fmt.Errorf("--max-num-batched-tokens %d: must be ≥ 1", o.MaxNumBatchedTokens)
	case o.MaxModelLen < 1:
		return fmt.Errorf("--max-model-len %d: must be ≥ 1", o.MaxModelLen)
	case mocker.CheckSpeedupRatio(o.SpeedupRatio) != nil: // the mock engines' own bound: they would refuse it at their start
		return fmt.Errorf("--speedup-ratio %g: %v", o.SpeedupRatio, mocker.CheckSpeedupRatio(o.SpeedupRatio))
	case int64(o.NumGPUBlocks)*int64(o.BlockSize) < int64(o.MaxModelLen):
		return fmt.Errorf("--num-gpu-blocks %d × --block-size %d = %d tokens of KV cache cannot hold one --max-model-len %d sequence",
			o.NumGPUBlocks, o.BlockSize, int64(o.NumGPUBlocks)*int64(o.BlockSize), o.MaxModelLen)
	case o.MeanOutputTokens < 1:
		return fmt.Errorf("--mean-output-tokens %d: must be ≥ 1", o.MeanOutputTokens)
	case o.KVBytesPerToken < 0 || o.KVBytesPerToken > kvtransfer.MaxBytesPerToken:
		return fmt.Errorf("--kv-bytes-per-token %d: want 0 (the model's) or 1..%d bytes (16 MiB, above the largest models' KV per token)",
			o.KVBytesPerToken, kvtransfer.MaxBytesPerToken)
	case o.KVTransferBandwidth != 0 && !(o.KVTransferBandwidth >= kvtransfer.MinBandwidth && o.KVTransferBandwidth <= kvtransfer.MaxBandwidth):
		return fmt.Errorf("--kv-transfer-bandwidth %g: want 0 (the default) or %g..%g bytes/s", o.KVTransferBandwidth,
			float64(kvtransfer.MinBandwidth), float64(kvtransfer.MaxBandwidth))
	case o.KVLoadFailurePolicy != "" && o.KVLoadFailurePolicy != "fail" && o.KVLoadFailurePolicy != "recompute":
		return fmt.Errorf("--kv-load-failure-policy %q: want fail or recompute", o.KVLoadFailurePolicy)
	case o.ToolCallParser != "" && o.ToolCallParser != "none" && !slices.Contains(parse.ToolParserNames(), o.ToolCallParser):
		return fmt.Errorf("--tool-call-parser %q: want one of %s, or none", o.ToolCallParser, strings.Join(parse.ToolParserNames(), ", "))
	case o.ReasoningParser != "" && o.ReasoningParser != "none" && !slices.Contains(parse.ReasoningParserNames(), o.ReasoningParser):
		return fmt.Errorf("--reasoning-parser %q: want one of %s, or none", o.ReasoningParser, strings.Join(parse.ReasoningParserNames(), ", "))
	case o.Runner != RunnerGenerate && o.Runner != RunnerPooling:
		return fmt.Errorf("--runner %q: want generate or pooling", o.Runner)
	case o.EmbeddingSize < 0 || o.EmbeddingSize > 1<<20:
		return fmt.Errorf("--embedding-size %d: want 0 (the model's) or 1..%d", o.EmbeddingSize, 1<<20)
	case o.Heartbeat < 10*time.Millisecond:
		return fmt.Errorf("--heartbeat %v: must be ≥ 10ms", o.Heartbeat)
	case o.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v: must be > 0", o.ReadyTimeout)
	}
	return nil
}

// Card loads the tokenizer and returns the model deployment card the engines serve, with
// the digest of the tokenizer folder's files (empty for a builtin tokenizer). Errors name
// --tokenizer.
func (o *Engine) Card() (*messages.ModelCard, error) {
	m, err := model.LoadModel(o.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	digest, err := model.SourceDigest(o.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	card := &messages.ModelCard{
		Model: o.Model, Tokenizer: o.Tokenizer, ContextLength: int32(o.MaxModelLen),
		KvBlockSize: int32(o.BlockSize), TotalKvBlocks: int64(o.NumGPUBlocks),
		MaxNumSeqs: int32(o.MaxNumSeqs), MaxNumBatchedTokens: int32(o.MaxNumBatchedTokens),
		EosTokenIds: m.EOSTokenIDs, TokenizerDigest: digest,
	}
	o.SetParsers(card, m.ChatTemplate)
	if err := o.SetRunner(card); err != nil {
		return nil, err
	}
	if o.KVBytesPerToken > 0 {
		// The KV size the mock engines use is the card's: the router's tier credits
		// (docs/reference.md §9.2) are computed from it.
		if card.Architecture == nil {
			card.Architecture = &messages.ModelArchitecture{}
		}
		card.Architecture.KvBytesPerToken = o.KVBytesPerToken
	}
	return card, nil
}

// SetRunner sets what card's model serves (--runner). A pooling model's card gets its
// embedding size (--embedding-size, else the model folder's hidden_size, else
// mocker.DefaultEmbeddingSize) and the folder's Matryoshka support
// (model.ReadPooling); a generating model's keeps none. Errors: a model folder whose
// config.json cannot be read for them.
func (o *Engine) SetRunner(card *messages.ModelCard) error {
	card.Runner, card.EmbeddingSize, card.IsMatryoshka, card.MatryoshkaDimensions = messages.Runner_RUNNER_GENERATE, 0, false, nil
	if o.Runner != RunnerPooling {
		return nil
	}
	card.Runner = messages.Runner_RUNNER_POOLING
	size := o.EmbeddingSize
	if dir := card.GetTokenizer(); IsDir(dir) {
		if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err == nil {
			p, err := model.ReadPooling(dir)
			if err != nil {
				return fmt.Errorf("--runner pooling: %w", err)
			}
			card.IsMatryoshka, card.MatryoshkaDimensions = p.IsMatryoshka, p.MatryoshkaDimensions
			if size == 0 {
				size = p.HiddenSize
			}
		}
	}
	if size == 0 {
		size = mocker.DefaultEmbeddingSize
	}
	card.EmbeddingSize = int32(size)
	return nil
}

// SetParsers sets card's output parsers: --tool-call-parser and --reasoning-parser when
// given, else what a model folder implies (parse.Detect on config.json's architectures and
// chatTemplate; never for a builtin tokenizer); "none" leaves that parser unset. The
// card's parser_source is "flag" when both came from flags (none included), "detected"
// when both were detected, "flag+detected" when one of each, "" when neither is set.
func (o *Engine) SetParsers(card *messages.ModelCard, chatTemplate string) {
	var archs []string
	if a := card.GetArchitecture().GetArchitecture(); a != "" {
		archs = []string{a}
	} else if IsDir(card.Tokenizer) {
		if m, err := model.ReadFolder(card.Tokenizer); err == nil && m.Architecture != "" {
			archs = []string{m.Architecture}
		}
	}
	// Only a model folder says which family the model is: the builtin tokenizers' ChatML
	// template would match hermes, but the default mock model is no tool caller.
	var d parse.Detection
	if !strings.HasPrefix(card.Tokenizer, "builtin:") {
		d = parse.Detect(archs, chatTemplate)
	}
	pick := func(flag, detected string) (string, string) {
		switch flag {
		case "none":
			return "", "flag"
		case "":
			if detected != "" {
				return detected, "detected"
			}
			return "", ""
		}
		return flag, "flag"
	}
	var src1, src2 string
	card.ToolCallParser, src1 = pick(o.ToolCallParser, d.ToolParser)
	card.ReasoningParser, src2 = pick(o.ReasoningParser, d.ReasoningParser)
	switch {
	case src1 == "detected" || src2 == "detected":
		card.ParserSource = "detected"
		if src1 == "flag" || src2 == "flag" {
			card.ParserSource = "flag+detected"
		}
	case src1 == "flag" || src2 == "flag":
		card.ParserSource = "flag"
	}
	if card.ToolCallParser == "" && card.ReasoningParser == "" {
		card.ParserSource = ""
	}
}

// ParserNote describes card's parsers for the start-up log ("" when there are none).
func ParserNote(card *messages.ModelCard) string {
	if card.GetToolCallParser() == "" && card.GetReasoningParser() == "" {
		return ""
	}
	return fmt.Sprintf("tool call parser %q, reasoning parser %q (%s)", card.GetToolCallParser(), card.GetReasoningParser(), card.GetParserSource())
}

// Mocker returns the launch configuration of mock engines for card, run as
// `<executable> mocker`: the mock engine's defaults (server.DefaultParams), the card's
// limits (which win over the flags, so that a StartWorker request can change them) and
// the mock engine flags given, --mocker-tensor-parallel-size and --mocker-profile
// included (the card's limits already hold what they set). Zero KV transfer settings
// keep the mock engine's defaults.
func (o *Engine) Mocker(executable string, card *messages.ModelCard) launch.Config {
	p := server.DefaultParams()
	e := &p.Engine
	e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs = int(card.KvBlockSize), int(card.TotalKvBlocks), int(card.MaxNumSeqs)
	e.MaxNumBatchedTokens, e.MaxModelLen = int(card.MaxNumBatchedTokens), int(card.ContextLength)
	e.SpeedupRatio, e.MeanOutputTokens, e.Seed = o.SpeedupRatio, o.MeanOutputTokens, uint64(o.Seed)
	p.Dialect = "" // the mock engine's default, unless --mocker-dialect names one
	if o.KVBytesPerToken > 0 {
		p.KVTransfer.BytesPerToken = o.KVBytesPerToken
	}
	if o.KVTransferBandwidth > 0 {
		p.KVTransfer.Bandwidth = o.KVTransferBandwidth
	}
	if o.KVLoadFailurePolicy != "" {
		p.KVTransfer.LoadFailurePolicy = o.KVLoadFailurePolicy
	}
	p.ToolCallParser, p.ReasoningParser = card.GetToolCallParser(), card.GetReasoningParser()
	e.TensorParallelSize, p.Profile = o.MockerTensorParallelSize, o.MockerProfile
	if card.GetRunner() == messages.Runner_RUNNER_POOLING {
		p.Runner, p.EmbeddingSize = server.RunnerPooling, int(card.GetEmbeddingSize())
	}
	return launch.Config{Executable: executable, Model: card.Model, Tokenizer: card.Tokenizer, Params: p}
}

// CheckKVLoadFailurePolicy checks --kv-load-failure-policy against --mocker-dialect:
// recompute is vLLM's kv_load_failure_policy; SGLang and TensorRT-LLM have no such
// fallback.
func (o *Engine) CheckKVLoadFailurePolicy(mockerDialect string) error {
	if o.KVLoadFailurePolicy == "recompute" && mockerDialect != "" && mockerDialect != string(server.DialectVLLM) {
		return fmt.Errorf("--kv-load-failure-policy recompute needs --mocker-dialect vllm (%s has no such fallback)", mockerDialect)
	}
	return nil
}

// MockerExecutable returns the turbine binary that runs mock engines (`turbine mocker`).
// A Go test binary is refused: it would run its tests again in every engine.
func MockerExecutable() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable for the mock engines: %w", err)
	}
	if strings.HasSuffix(self, ".test") {
		return "", fmt.Errorf("the mock engines run as %q mocker, which is a test binary; run the turbine binary instead", self)
	}
	return self, nil
}

// Router are the routing-policy flags (docs/reference.md §3).
type Router struct {
	RouterMode        string
	OverlapWeight     float64
	RouterTemperature float64
	// RouterPredictActive: requests routed to a worker and not yet ended count as cached
	// there until its KV events say so (kv.Config.PredictActive).
	RouterPredictActive bool
	// RouterIgnoreAdapters: route adapter requests as if adapters did not matter
	// (kv.Config.IgnoreAdapters), a baseline for benchmarks.
	RouterIgnoreAdapters bool
}

// DefaultRouter returns the routing defaults: kv policy, overlap weight 1, temperature 0,
// tracked requests predicted cached.
func DefaultRouter() Router {
	return Router{RouterMode: kv.DefaultPolicy, OverlapWeight: 1.0, RouterPredictActive: true}
}

// Flags registers the router flags on fs.
func (o *Router) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.RouterMode, "router-mode", o.RouterMode, "routing policy: "+strings.Join(kv.DefaultPolicies().Names(), ", "))
	fs.Float64Var(&o.OverlapWeight, "overlap-weight", o.OverlapWeight, "weight of prefill blocks against decode blocks in the kv routing cost")
	fs.Float64Var(&o.RouterTemperature, "router-temperature", o.RouterTemperature, "softmax temperature of the kv routing choice (0 = lowest cost)")
	fs.BoolVar(&o.RouterPredictActive, "router-predict-active", o.RouterPredictActive,
		"count the prompt blocks of requests routed to a worker and not yet ended as cached there until its KV events say so, so that requests sharing a prefix that arrive together meet on one worker")
	fs.BoolVar(&o.RouterIgnoreAdapters, "router-ignore-adapters", o.RouterIgnoreAdapters,
		"route LoRA adapter requests as if adapters did not matter: any worker with a slot, loading the adapter there, no load counted (a baseline for benchmarks)")
}

// Validate checks the router options; errors name the flag.
func (o *Router) Validate() error {
	switch {
	case !slices.Contains(kv.DefaultPolicies().Names(), o.RouterMode):
		return fmt.Errorf("--router-mode %q: want one of %s", o.RouterMode, strings.Join(kv.DefaultPolicies().Names(), ", "))
	case !finite(o.OverlapWeight) || o.OverlapWeight < 0:
		return fmt.Errorf("--overlap-weight %g: must be a finite number ≥ 0", o.OverlapWeight)
	case !finite(o.RouterTemperature) || o.RouterTemperature < 0:
		return fmt.Errorf("--router-temperature %g: must be a finite number ≥ 0", o.RouterTemperature)
	}
	return nil
}

// Config returns the Router grain configuration; blockSize 0 takes each model's KV block
// size from its first worker's card.
func (o *Router) Config(blockSize int, log zerolog.Logger) router.Config {
	return router.Config{BlockSize: blockSize, Mode: o.RouterMode, OverlapWeight: o.OverlapWeight,
		Temperature: o.RouterTemperature, PredictActive: o.RouterPredictActive, IgnoreAdapters: o.RouterIgnoreAdapters, Logger: log}
}

// Log are the logging flags.
type Log struct{ LogFormat, LogLevel string }

// DefaultLog returns auto format at info level.
func DefaultLog() Log { return Log{LogFormat: "auto", LogLevel: "info"} }

// Flags registers the logging flags on fs.
func (o *Log) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
}

// Logger returns the process logger writing to w; errors name the flag.
func (o *Log) Logger(w io.Writer) (zerolog.Logger, error) {
	return cli.Logger(w, o.LogFormat, o.LogLevel)
}

// tracked is a flag value that records whether it was set (flag package semantics:
// String gives the default shown in help while unset).
type tracked[T any] struct {
	p     *T
	set   *bool
	parse func(string) (T, error)
}

func (v *tracked[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}

func (v *tracked[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p, *v.set = x, true
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Command describes a subcommand for Parse.
type Command struct {
	Name    string // e.g. "frontend"
	Summary string // one line or more, printed under the usage line
	Example string // an environment example, e.g. "TURBINE_WORKERS=4"
	// Flags registers the command's flags; Validate checks them after parsing; Log is the
	// command's logging group (its flags must be among those Flags registers).
	Flags    func(fs *flag.FlagSet)
	Validate func() error
	Log      *Log
}

// Parse parses a subcommand's arguments (environment first, then flags), validates them
// and returns the process logger writing to stderr. help is true (with no error) when -h
// was asked for: the caller returns at once. Errors name the flag that was wrong.
func Parse(c Command, args []string, stderr io.Writer) (log zerolog.Logger, help bool, err error) {
	fs := flag.NewFlagSet("turbine "+c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: turbine %s [flags]\n\n%s\nEvery flag can also be set with TURBINE_<FLAG> (upper case, '-' as '_'),\ne.g. %s. Flags:\n",
			c.Name, c.Summary, c.Example)
		fs.PrintDefaults()
	}
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return zerolog.Nop(), help, err
	}
	if err := c.Validate(); err != nil {
		return zerolog.Nop(), false, err
	}
	log, err = c.Log.Logger(stderr)
	return log, false, err
}

// Main parses and validates a subcommand's arguments (Parse), then calls run with a
// context cancelled on SIGINT or SIGTERM and the process logger. It returns nil for -h.
func Main(ctx context.Context, c Command, args []string, stderr io.Writer,
	run func(ctx context.Context, log zerolog.Logger) error) error {
	log, help, err := Parse(c, args, stderr)
	if help || err != nil {
		return err
	}
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return run(ctx, log)
}
