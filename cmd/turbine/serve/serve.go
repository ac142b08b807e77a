// Package serve is `turbine serve`: a whole Turbine service in one process — a gateway on
// an HTTP port, the Router and Catalog grains, and N worker actors each supervising its
// own mock-engine subprocess — on an in-process cluster (no Consul needed).
package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/frontend"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/messages"
)

// Options are serve's flags, with their defaults.
type Options struct {
	Host, LogFormat, LogLevel string
	Port                      int
	Workers                   int
	Model, Tokenizer          string
	RouterMode                string
	OverlapWeight             float64
	RouterTemperature         float64
	BlockSize                 int
	NumGPUBlocks              int
	MaxNumSeqs                int
	MaxNumBatchedTokens       int
	MaxModelLen               int
	SpeedupRatio              float64
	MeanOutputTokens          int
	Seed                      int64
	Heartbeat                 time.Duration
	ReadyTimeout              time.Duration
	MaxBodyBytes              int64
}

// Defaults are the embedded defaults (REFERENCE §3, §7).
func Defaults() Options {
	return Options{
		Host: "127.0.0.1", Port: 8000, Workers: 2, LogFormat: "auto", LogLevel: "info",
		Model: "turbine-mock", Tokenizer: "builtin:cl100k_base",
		RouterMode: "kv", OverlapWeight: 1.0,
		BlockSize: 64, NumGPUBlocks: 16384, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
		MaxModelLen: 32768, SpeedupRatio: 1.0, MeanOutputTokens: 128,
		Heartbeat: time.Second, ReadyTimeout: 2 * time.Minute, MaxBodyBytes: 4 << 20,
	}
}

func flags(o *Options, fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address the OpenAI HTTP API listens on")
	fs.IntVar(&o.Port, "port", o.Port, "port of the OpenAI HTTP API (0 picks a free one)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "number of aggregated workers, each with its own mock engine")
	fs.StringVar(&o.Model, "model", o.Model, "served model name")
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "tokenizer: builtin:cl100k_base, builtin:o200k_base, or an HF model folder (tokenizer.json, tokenizer_config.json)")
	fs.StringVar(&o.RouterMode, "router-mode", o.RouterMode, "routing policy: kv, round-robin or random")
	fs.Float64Var(&o.OverlapWeight, "overlap-weight", o.OverlapWeight, "weight of prefill blocks against decode blocks in the kv routing cost")
	fs.Float64Var(&o.RouterTemperature, "router-temperature", o.RouterTemperature, "softmax temperature of the kv routing choice (0 = lowest cost)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV block size in tokens (engines and router)")
	fs.IntVar(&o.NumGPUBlocks, "num-gpu-blocks", o.NumGPUBlocks, "KV blocks per mock engine")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "running sequences per mock engine")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "tokens per engine step")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "context length in tokens (prompt + output)")
	fs.Float64Var(&o.SpeedupRatio, "speedup-ratio", o.SpeedupRatio, "mock engine speed relative to the timing model (10 = ten times faster)")
	fs.IntVar(&o.MeanOutputTokens, "mean-output-tokens", o.MeanOutputTokens, "mock engine: mean output length in tokens when EOS is not ignored")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "mock engine seed (same seed, same tokens)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "worker load and registration period")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", o.ReadyTimeout, "how long start-up waits for a worker's engine to become ready")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest accepted HTTP request body in bytes")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
}

// Validate checks the options; errors name the flag.
func (o *Options) Validate() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("--port %d: want 0..65535", o.Port)
	case o.Workers < 1 || o.Workers > 256:
		return fmt.Errorf("--workers %d: want 1..256", o.Workers)
	case o.Model == "":
		return errors.New("--model: empty")
	case o.RouterMode != "kv" && o.RouterMode != "round-robin" && o.RouterMode != "random":
		return fmt.Errorf("--router-mode %q: want kv, round-robin or random", o.RouterMode)
	case !finite(o.OverlapWeight) || o.OverlapWeight < 0:
		return fmt.Errorf("--overlap-weight %g: must be a finite number ≥ 0", o.OverlapWeight)
	case !finite(o.RouterTemperature) || o.RouterTemperature < 0:
		return fmt.Errorf("--router-temperature %g: must be a finite number ≥ 0", o.RouterTemperature)
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
	case !finite(o.SpeedupRatio) || o.SpeedupRatio <= 0:
		return fmt.Errorf("--speedup-ratio %g: must be a finite number > 0", o.SpeedupRatio)
	case int64(o.NumGPUBlocks)*int64(o.BlockSize) < int64(o.MaxModelLen):
		return fmt.Errorf("--num-gpu-blocks %d × --block-size %d = %d tokens of KV cache cannot hold one --max-model-len %d sequence",
			o.NumGPUBlocks, o.BlockSize, int64(o.NumGPUBlocks)*int64(o.BlockSize), o.MaxModelLen)
	case o.MeanOutputTokens < 1:
		return fmt.Errorf("--mean-output-tokens %d: must be ≥ 1", o.MeanOutputTokens)
	case o.Heartbeat < 10*time.Millisecond:
		return fmt.Errorf("--heartbeat %v: must be ≥ 10ms", o.Heartbeat)
	case o.ReadyTimeout <= 0:
		return fmt.Errorf("--ready-timeout %v: must be > 0", o.ReadyTimeout)
	case o.MaxBodyBytes < 1024:
		return fmt.Errorf("--max-body-bytes %d: must be ≥ 1024", o.MaxBodyBytes)
	}
	return nil
}

// Run is `turbine serve`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := Defaults()
	fs := flag.NewFlagSet("turbine serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags(&o, fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: turbine serve [flags]\n\nEvery flag can also be set with TURBINE_<FLAG> (upper case, '-' as '_'),\ne.g. TURBINE_WORKERS=4. Flags:\n")
		fs.PrintDefaults()
	}
	if help, err := cli.ParseCommand(fs, args); help || err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	log, err := cli.Logger(stderr, o.LogFormat, o.LogLevel)
	if err != nil {
		return err
	}
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	return serve(ctx, o, log)
}

func serve(ctx context.Context, o Options, log zerolog.Logger) error {
	model, err := preprocess.LoadModel(o.Tokenizer)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	card := &messages.ModelCard{
		Model: o.Model, Tokenizer: o.Tokenizer, ContextLength: int32(o.MaxModelLen),
		KvBlockSize: int32(o.BlockSize), TotalKvBlocks: int64(o.NumGPUBlocks),
		MaxNumSeqs: int32(o.MaxNumSeqs), MaxNumBatchedTokens: int32(o.MaxNumBatchedTokens),
		EosTokenIds: model.EOSTokenIDs,
	}
	// Bind the HTTP port first: a taken port fails fast, before any engine starts.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	defer ln.Close()

	routerCfg := router.Config{BlockSize: o.BlockSize, Mode: o.RouterMode, OverlapWeight: o.OverlapWeight,
		Temperature: o.RouterTemperature, Logger: log}
	member, err := cluster.Start(cluster.Config{Name: "turbine-serve", Discovery: "local", Logger: log,
		Kinds: []*pcluster.Kind{router.Kind(routerCfg), catalog.Kind()}})
	if err != nil {
		return err
	}
	defer member.Stop()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable for the mock engines: %w", err)
	}
	if strings.HasSuffix(self, ".test") {
		// The engines are `<this executable> mocker`: a Go test binary would run its
		// tests again in every engine, and those could start more engines.
		return fmt.Errorf("serve: the mock engines run as %q mocker, which is a test binary; run the turbine binary instead", self)
	}
	mock := launcher.Mocker{Executable: self, Model: o.Model, Tokenizer: o.Tokenizer,
		BlockSize: o.BlockSize, NumGPUBlocks: o.NumGPUBlocks, MaxNumSeqs: o.MaxNumSeqs,
		MaxNumBatchedTokens: o.MaxNumBatchedTokens, MaxModelLen: o.MaxModelLen,
		SpeedupRatio: o.SpeedupRatio, MeanOutputTokens: o.MeanOutputTokens, Seed: o.Seed}
	routerClient, catalogClient := worker.GrainClients(member.Cluster, o.Model, catalog.Identity)
	root := member.System.Root
	for i := 0; i < o.Workers; i++ {
		id := fmt.Sprintf("w%d", i)
		props, err := worker.Props(worker.Config{WorkerID: id, Card: card, Launcher: &mock,
			Heartbeat: o.Heartbeat, Router: routerClient, Catalog: catalogClient, Logger: log})
		if err != nil {
			return err
		}
		pid, err := root.SpawnNamed(props, worker.ActorName(id))
		if err != nil {
			return fmt.Errorf("spawn worker %s: %w", id, err)
		}
		defer func() { _ = root.PoisonFuture(pid).Wait() }()
	}

	backend := frontend.New(member.Cluster, frontend.Config{Logger: log})
	handler, err := gateway.New(gateway.Config{Logger: log, MaxBodyBytes: o.MaxBodyBytes}, backend)
	if err != nil {
		return err
	}
	// Answer only once the model is served, so that the first client never sees a 404
	// for a model whose engines are still starting; connections wait in the backlog.
	log.Info().Int("workers", o.Workers).Msg("waiting for the first worker's engine to be ready")
	if err := waitForModel(ctx, backend, o.Model, o.ReadyTimeout); err != nil {
		return err
	}
	// Bodies must arrive within ReadTimeout (slow or stalled uploads would otherwise hold
	// connections forever); no WriteTimeout, since streams last as long as generation.
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info().Str("url", "http://"+ln.Addr().String()).Str("model", o.Model).Int("workers", o.Workers).
		Str("router_mode", o.RouterMode).Msg("turbine serving")
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// waitForModel polls the catalog until model has a live worker, ctx ends, or limit passes.
func waitForModel(ctx context.Context, b *frontend.Backend, model string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cards, err := b.Models(ctx)
		if err == nil {
			for _, c := range cards {
				if c.Model == model {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no worker became ready within --ready-timeout %v (see the engine log lines above)", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
