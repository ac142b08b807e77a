package node

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// MockerEngine is the engine name of the mock engine, the one engine that runs without a
// GPU (tensor_parallel_size 0).
const MockerEngine = "mocker"

// checkStart says why req cannot be placed on a node, or returns nil. cpuOnly is a node
// without an NVML driver. The check is about the request alone; whether enough GPUs are
// free is the Allocator's answer.
func checkStart(req *messages.StartWorker, cpuOnly bool) error {
	engine, tp := req.GetEngine(), req.GetTensorParallelSize()
	switch {
	case engine == "":
		return errors.New("node: start worker: missing engine")
	case req.GetCard().GetModel() == "":
		return errors.New("node: start worker: missing model card (card.model)")
	case tp < 0:
		return fmt.Errorf("node: start worker: tensor_parallel_size %d < 0", tp)
	case cpuOnly && engine != MockerEngine:
		return fmt.Errorf("node: engine %s needs GPUs; this node has none (no NVML driver)", engine)
	case cpuOnly && tp > 0:
		return fmt.Errorf("node: tensor_parallel_size %d needs GPUs; this node has none (no NVML driver)", tp)
	case tp == 0 && engine != MockerEngine:
		return fmt.Errorf("node: engine %s needs tensor_parallel_size ≥ 1 (0 means no GPU: %s only)", engine, MockerEngine)
	}
	return checkWorkerID(req.GetWorkerId())
}

// checkWorkerID refuses ids that cannot be one actor name segment: "/" would nest the
// name, and spaces or control characters break logs and command lines. Empty is allowed
// (the node names the worker).
func checkWorkerID(id string) error {
	if i := strings.IndexFunc(id, func(r rune) bool { return r == '/' || r <= ' ' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("node: start worker: worker id %q holds %q at byte %d (no '/', spaces or control characters)", id, id[i], i)
	}
	return nil
}
