package options

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/registry"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// RealEngineReadyTimeout is the readiness wait of vLLM, SGLang and trtllm-serve workers
// when --ready-timeout is not given: loading weights and capturing CUDA graphs takes
// minutes.
const RealEngineReadyTimeout = 10 * time.Minute

// Launch are the flags that say how a node starts its engines: the served model name and
// the real engines' executables and memory share (vLLM, SGLang, trtllm-serve), and the
// mock engine's dialect.
type Launch struct {
	ServedModelName      string
	GPUMemoryUtilization float64 // fraction of GPU memory; 0: the engine's default
	EngineExecutable     string  // vllm or trtllm-serve; "": the engine's default name on PATH
	Python               string  // runs SGLang
	MockerDialect        string  // "", vllm, sglang or trtllm
}

// DefaultLaunch returns the defaults: the engines' own executables and memory share.
func DefaultLaunch() Launch { return Launch{Python: sglang.DefaultPython} }

// Flags registers the launch flags on fs.
func (o *Launch) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.ServedModelName, "served-model-name", o.ServedModelName, "model id clients name (default: --model)")
	fs.Float64Var(&o.GPUMemoryUtilization, "gpu-memory-utilization", o.GPUMemoryUtilization,
		"fraction of GPU memory a real engine may take (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction); 0: the engine's default")
	fs.StringVar(&o.EngineExecutable, "engine-executable", o.EngineExecutable,
		"executable of --engine vllm or trtllm (default: vllm or trtllm-serve on PATH)")
	fs.StringVar(&o.Python, "python", o.Python, "Python interpreter that runs --engine sglang (python -m sglang.launch_server)")
	fs.StringVar(&o.MockerDialect, "mocker-dialect", o.MockerDialect,
		"HTTP dialect of --engine mocker: vllm (default), sglang or trtllm; the worker uses that engine's client")
}

// Validate checks the launch options; errors name the flag.
func (o *Launch) Validate() error {
	switch {
	case math.IsNaN(o.GPUMemoryUtilization) || o.GPUMemoryUtilization < 0 || o.GPUMemoryUtilization > 1:
		return fmt.Errorf("--gpu-memory-utilization %g: want 0 (engine default) or a fraction in (0, 1]", o.GPUMemoryUtilization)
	case o.Python == "":
		return errors.New("--python: empty")
	}
	return CheckMockerDialect(o.MockerDialect)
}

// CheckMockerDialect checks a --mocker-dialect value: "" (the mock engine's default) or a
// dialect the mock engine speaks (server.ParseDialect).
func CheckMockerDialect(dialect string) error {
	if dialect == "" {
		return nil
	}
	if _, err := server.ParseDialect(dialect); err != nil {
		return fmt.Errorf("--mocker-dialect %q: want %s", dialect, server.DialectChoices())
	}
	return nil
}

// IsDir reports whether path names a folder.
func IsDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// NodeCard returns the model deployment card of the workers a node starts with engine.
// When --model names a folder the card comes from it (model.FromFolder: tokenizer,
// context length, EOS ids, architecture); --max-model-len, when given, sets the context
// length (it also does when the folder names none). Otherwise the tokenizer is --tokenizer
// (Card); a real engine then needs --tokenizer to be the model's folder, since token ids
// of another vocabulary would reach it. The served name is --served-model-name, else
// --model as given (vLLM's rule). Errors name the flag.
func (o *Engine) NodeCard(engine string, l Launch) (*messages.ModelCard, error) {
	var card *messages.ModelCard
	if IsDir(o.Model) {
		c, err := model.FromFolder(o.Model)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", o.Model, err)
		}
		if o.MaxModelLenSet || c.ContextLength == 0 {
			c.ContextLength = int32(o.MaxModelLen)
		}
		m, err := model.LoadModel(o.Model)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", o.Model, err)
		}
		o.SetParsers(c, m.ChatTemplate)
		if err := o.SetRunner(c); err != nil {
			return nil, fmt.Errorf("--model %s: %w", o.Model, err)
		}
		card = c
	} else {
		if registry.Real(engine) && strings.HasPrefix(o.Tokenizer, "builtin:") {
			return nil, fmt.Errorf("--engine %s --model %s: not a model folder, and --tokenizer is %s; give the model's folder as --model or --tokenizer, so that prompts are tokenized with the model's vocabulary",
				engine, o.Model, o.Tokenizer)
		}
		c, err := o.Card()
		if err != nil {
			return nil, err
		}
		card = c
	}
	card.Model = l.ServedModelName
	if card.Model == "" {
		card.Model = o.Model
	}
	card.KvBlockSize, card.TotalKvBlocks = int32(o.BlockSize), int64(o.NumGPUBlocks)
	card.MaxNumSeqs, card.MaxNumBatchedTokens = int32(o.MaxNumSeqs), int32(o.MaxNumBatchedTokens)
	card.Engine = engine
	return card, nil
}

// WorkerReadyTimeout is the readiness wait of a worker running engine: --ready-timeout,
// else RealEngineReadyTimeout for real engines and the default for the mock engine.
func (o *Engine) WorkerReadyTimeout(engine string) time.Duration {
	if registry.Real(engine) && !o.ReadyTimeoutSet {
		return RealEngineReadyTimeout
	}
	return o.ReadyTimeout
}

// Spec returns the launcher spec of a real engine serving card on tp GPUs: modelPath is
// what the engine loads, maxModelLen the context length to impose (0: the engine derives
// it), extra the arguments appended untouched.
func (o *Launch) Spec(engine, modelPath string, card *messages.ModelCard, tp, maxModelLen int, extra []string) launcher.Spec {
	return launcher.Spec{Engine: engine, ModelPath: modelPath, ServedModelName: card.Model, TensorParallelSize: tp,
		GPUMemoryUtilization: o.GPUMemoryUtilization, BlockSize: int(card.KvBlockSize), MaxModelLen: maxModelLen,
		MaxNumSeqs: int(card.MaxNumSeqs), MaxNumBatchedTokens: int(card.MaxNumBatchedTokens),
		Executable: o.EngineExecutable, Python: o.Python, ReasoningParser: card.GetReasoningParser(),
		Pooling: card.GetRunner() == messages.Runner_RUNNER_POOLING, Extra: extra}
}
