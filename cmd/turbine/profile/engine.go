package profile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/engines/vllm"
	"github.com/turbine-llm/turbine/planner"
)

// engineInfo is what an engine's /metrics says of its KV cache (zero: not said).
type engineInfo struct {
	// Usage is the fraction of KV blocks in use; HasUsage says whether a gauge gave it
	// (vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc or sglang:token_usage).
	Usage    float64
	HasUsage bool
	// BlockSize and KVBlocks: vllm:cache_config_info's block_size and num_gpu_blocks, or
	// SGLang's sglang:max_total_num_tokens (in tokens, KVBlocks = tokens / block size 1).
	BlockSize, KVBlocks int
}

// maxMetricsBytes bounds a scraped /metrics body.
const maxMetricsBytes = 16 << 20

// scrape reads GET base/metrics in Prometheus's text format and returns what it says of
// the KV cache, by vLLM's metric names (vllm.LoadFromFamilies) or SGLang's
// (sglang.LoadFromFamilies). Errors: transport, a status other than 200, text that
// does not parse.
func scrape(ctx context.Context, hc *http.Client, base string) (engineInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/metrics", nil)
	if err != nil {
		return engineInfo{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return engineInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return engineInfo{}, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return engineInfo{}, fmt.Errorf("GET /metrics: %w", err)
	}
	return infoFrom(fams), nil
}

// infoFrom extracts engineInfo from parsed metric families.
func infoFrom(fams map[string]*dto.MetricFamily) engineInfo {
	var in engineInfo
	if l, err := vllm.LoadFromFamilies(fams, time.Time{}); err == nil {
		in.Usage, in.BlockSize, in.KVBlocks = l.KVCacheUsage, l.BlockSize, l.NumGPUBlocks
		in.HasUsage = fams["vllm:kv_cache_usage_perc"] != nil || fams["vllm:gpu_cache_usage_perc"] != nil
		return in
	}
	if l, err := sglang.LoadFromFamilies(fams, time.Time{}); err == nil {
		in.Usage, in.HasUsage = l.TokenUsage, fams[sglang.MetricTokenUsage] != nil
		if l.MaxTotalTokens > 0 {
			in.BlockSize, in.KVBlocks = 1, int(l.MaxTotalTokens) // SGLang pages one token at a time
		}
	}
	return in
}

// models asks base's /v1/models (OpenAI's, with vLLM's max_model_len) within timeout.
func models(ctx context.Context, hc *http.Client, base string, timeout time.Duration) ([]vllm.Model, error) {
	c, err := vllm.New(base, hc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.Models(ctx)
}

// lastLines keeps the last lines a process wrote, for an error that says why it ended.
type lastLines struct {
	mu    sync.Mutex
	lines []string
}

const keptLines = 20

func (l *lastLines) add(_, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > keptLines {
		l.lines = l.lines[len(l.lines)-keptLines:]
	}
}

func (l *lastLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// mockEngine is a `turbine mocker` process this command started.
type mockEngine struct {
	base string
	proc *supervise.Process
	tail *lastLines
	cfg  mocker.Config // its limits, as started
}

// stop ends the engine (SIGTERM, then SIGKILL after a grace).
func (m *mockEngine) stop() { m.proc.Stop(5 * time.Second) }

// mockParams are the parameters of a mock engine of tp GPUs at speedup: one GPU's KV
// blocks times tp (the mock engine's tensor-parallel model), or with a profile the
// profile entry's limits (server.ResolveParallel).
func (o *Options) mockParams(tp int, speedup float64, prof *planner.Profile) (server.Params, error) {
	p := server.DefaultParams()
	e := &p.Engine
	e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs = o.blockSize(), o.NumGPUBlocks, o.maxNumSeqs()
	e.MaxNumBatchedTokens, e.MaxModelLen, e.SpeedupRatio = o.maxNumBatchedTokens(), o.maxModelLen(), speedup
	e.TensorParallelSize = tp
	given := server.Given{BlockSize: o.given["block-size"], NumGPUBlocks: false, MaxNumSeqs: o.given["max-num-seqs"]}
	if prof != nil {
		given.NumGPUBlocks = o.given["num-gpu-blocks"]
		p.Profile = o.MockerProfile
	}
	if _, err := server.ResolveParallel(e, prof, given); err != nil {
		if prof != nil {
			return p, fmt.Errorf("--mocker-profile %s: %w", o.MockerProfile, err)
		}
		return p, err
	}
	e.Timing = nil // the engine reads its profile itself (--profile)
	if err := e.Validate(); err != nil {
		return p, fmt.Errorf("TP %d: %w", tp, err)
	}
	return p, nil
}

// startMock starts a mock engine with params (no KV events) on a free local port and
// waits until it answers /health, within readyTimeout. Errors: the process cannot start,
// exits before it is ready (with its last lines), or is not ready in time.
func (o *Options) startMock(ctx context.Context, params server.Params) (*mockEngine, error) {
	m, err := launch.New(launch.Config{Executable: o.MockerExecutable, Model: o.model(), Tokenizer: o.Tokenizer,
		Params: params, NoKVEvents: true})
	if err != nil {
		return nil, err
	}
	const host = "127.0.0.1"
	port, err := launcher.FreePort(host)
	if err != nil {
		return nil, err
	}
	argv, env := m.Command(host, port, "")
	tail := &lastLines{}
	proc, err := supervise.Start(argv, env, tail.add)
	if err != nil {
		return nil, err
	}
	base := "http://" + host + ":" + strconv.Itoa(port)
	eng := m.Connect(base)
	deadline := time.Now().Add(o.ReadyTimeout)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := eng.Health(hctx)
		cancel()
		if err == nil {
			return &mockEngine{base: base, proc: proc, tail: tail, cfg: params.Engine}, nil
		}
		select {
		case <-proc.Done():
			return nil, fmt.Errorf("mock engine %s exited before it was ready (%v); its last lines:\n%s", strings.Join(argv, " "), proc.Err(), tail)
		case <-ctx.Done():
			proc.Stop(5 * time.Second)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			proc.Stop(5 * time.Second)
			return nil, fmt.Errorf("mock engine not ready within --ready-timeout %v (last error %v); its last lines:\n%s", o.ReadyTimeout, err, tail)
		}
	}
}

// errNoAnswer marks an engine at --url that does not answer.
var errNoAnswer = errors.New("the engine does not answer")
