package node

import (
	"fmt"
	"strings"

	nodeactor "github.com/turbine-llm/turbine/actors/node"
	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/cmd/turbine/node/nodehttp"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/registry"
	"github.com/turbine-llm/turbine/messages"
)

// builder turns the StartWorker requests the node agent accepts into worker
// configurations: the completed card, the engine's launcher, the GPUs' environment and
// the readiness wait. The cluster clients and the logger are added by the caller.
type builder struct {
	o       Options
	boot    *messages.ModelCard // card of the boot workers (Engine.NodeCard)
	self    string              // the turbine binary, which runs the mock engine
	selfErr error               // why self is unusable ("" self)
	// kvbm: the node's KV block manager the engines offload to (--kvbm, --kvbm-external;
	// docs/reference.md §9.5); zero: none.
	kvbm options.Endpoints
	// board is what the node's HTTP port reports (nodehttp): every worker's
	// registrations reach it.
	board *nodehttp.Board
	// ports: the engines' fixed ports (--engine-port); shared by forRole's copies.
	ports *enginePorts
	// parking keeps the engines across a lost cluster member (worker.Parking).
	parking *worker.Parking
	// booted: a member started the boot workers; with parking, later members start
	// the workers their lost predecessor had instead (none, when a planner stopped
	// them all).
	booted bool
}

// worker returns the configuration of worker id for req, pinned to gpus.
func (b *builder) worker(id string, req *messages.StartWorker, gpus []int) (worker.Config, error) {
	card, err := completeCard(req.Card)
	if err != nil {
		return worker.Config{}, err
	}
	card.Engine = req.Engine
	l, err := b.launcher(req, card)
	if err != nil {
		return worker.Config{}, err
	}
	port, err := b.ports.take(id)
	if err != nil {
		return worker.Config{}, err
	}
	cfg := worker.Config{Port: port, WorkerID: id, NodeID: b.o.NodeID, Host: b.o.EngineHost, AdvertiseHost: b.o.engineAdvertiseHost(), Card: card, Launcher: l, Env: nodeactor.CUDAEnv(gpus), Role: b.o.WorkerRole,
		CheckTokenizer: true, Heartbeat: b.o.Heartbeat, ReadyTimeout: b.o.WorkerReadyTimeout(req.Engine),
		ModelPath: b.loraModelPath(req.Engine, card)}
	// --lora adapters were checked against the boot model: only its workers pin them.
	b.o.Lora.SetWorker(&cfg, card.Model == b.boot.Model)
	return cfg, nil
}

// launcher returns the launcher of req's engine for card (registry.Default): a real
// engine is started from the launch flags' spec, the mock engine from its own
// parameters; both get the worker's role and req's engine arguments.
func (b *builder) launcher(req *messages.StartWorker, card *messages.ModelCard) (engines.Launcher, error) {
	e, ok := registry.Default.Lookup(req.Engine)
	if ok && !e.Real && b.selfErr != nil {
		return nil, b.selfErr // the mock engine runs as the turbine binary
	}
	spec := b.o.Launch.Spec(req.Engine, b.modelPath(card), card, int(req.TensorParallelSize), b.maxModelLen(card), req.EngineArgs)
	spec.Role = options.LauncherRole(b.o.WorkerRole)
	b.o.Lora.SetSpec(&spec)
	spec.KVBM = b.o.Kvbm.LauncherKVBM(b.kvbm)
	mock := b.o.Engine.MockerFor(b.self, card, b.o.WorkerRole)
	b.o.Lora.SetMocker(&mock)
	mock.Extra, mock.Params.Dialect = req.EngineArgs, server.DialectName(b.o.MockerDialect)
	mock.KvbmURL = b.kvbm.RESP // the mock engine offloads over RESP ("" without a block manager)
	l, err := registry.Default.Launcher(req.Engine, registry.Config{Spec: spec, Mock: mock})
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", req.Engine, err)
	}
	return l, nil
}

// modelPath is what a real engine loads for card: --model for the boot card's model,
// else the card's tokenizer folder (a card from model.FromFolder names the model
// folder there), else the served name taken as a hub name.
func (b *builder) modelPath(card *messages.ModelCard) string {
	switch {
	case card.Model == b.boot.Model:
		return b.o.Model
	case card.Tokenizer != "" && !strings.HasPrefix(card.Tokenizer, "builtin:"):
		return card.Tokenizer
	}
	return card.Model
}

// loraModelPath is what the LoRA adapters of card's workers are checked against besides
// the served name (worker.Config.ModelPath): what a real engine loads (modelPath); for
// the mock engine a --model folder, else "" (the card's tokenizer folder, when it is
// one).
func (b *builder) loraModelPath(engine string, card *messages.ModelCard) string {
	p := b.modelPath(card)
	if !registry.Real(engine) && !options.IsDir(p) {
		return ""
	}
	return p
}

// maxModelLen is the context length a real engine is told: the card's when
// --max-model-len was given or the request changed it, else 0 (the engine derives it from
// the model as the card did, or knows better than a fallback).
func (b *builder) maxModelLen(card *messages.ModelCard) int {
	if b.o.MaxModelLenSet || card.ContextLength != b.boot.ContextLength {
		return int(card.ContextLength)
	}
	return 0
}
