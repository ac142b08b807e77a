package trtllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/turbine-llm/turbine/engines"
)

// LoRA adapters (docs/reference.md §26.1). trtllm-serve has no API to load or unload an
// adapter: a completion names its adapter in lora_request {"lora_name", "lora_int_id",
// "lora_path"}, and the server loads it from lora_path the first time it sees that
// lora_int_id, keeping up to lora_config's max_loras (GPU) and max_cpu_loras adapters
// and evicting the least recently used. The adapter therefore records what LoadLora is
// given (name, folder, and an id of its own) and sends it with each request.

// loraRef is one recorded adapter.
type loraRef struct {
	path string
	id   int // lora_int_id: 1, 2, ... in the order the engine saw the adapters
}

// loraTable is the adapters an Engine recorded. Safe for concurrent use.
type loraTable struct {
	mu     sync.Mutex
	byName map[string]loraRef
	nextID int
}

// loraRequest is TensorRT-LLM's LoRARequest as a completion carries it.
type loraRequest struct {
	Name string `json:"lora_name"`
	ID   int    `json:"lora_int_id"`
	Path string `json:"lora_path"`
}

// add records an adapter. Errors: an *engines.InvalidRequestError (400) for a name
// already recorded, as vLLM refuses a second load.
func (t *loraTable) add(name, path string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byName[name]; ok {
		return &engines.InvalidRequestError{Status: http.StatusBadRequest,
			Message: fmt.Sprintf("LoRA adapter %s is already loaded", name),
			Err:     fmt.Errorf("trtllm: LoRA adapter %s is already loaded", name)}
	}
	if t.byName == nil {
		t.byName = map[string]loraRef{}
	}
	t.nextID++
	t.byName[name] = loraRef{path: path, id: t.nextID}
	return nil
}

// remove forgets an adapter. Errors: an *engines.InvalidRequestError (404) for a name
// not recorded.
func (t *loraTable) remove(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byName[name]; !ok {
		return &engines.InvalidRequestError{Status: http.StatusNotFound,
			Message: fmt.Sprintf("LoRA adapter %s is not loaded", name),
			Err:     fmt.Errorf("trtllm: LoRA adapter %s is not loaded", name)}
	}
	delete(t.byName, name)
	return nil
}

// attach sets req's lora_request for the adapter name ("" for the base model): the
// recorded one, else one recorded now from path (a load on demand, SamplingParams
// lora_path). Errors: an adapter neither recorded nor given a path (the worker did not
// load it: an engine error, which another worker may not have).
func (t *loraTable) attach(req *CompletionRequest, name, path string) error {
	if name == "" {
		return nil
	}
	t.mu.Lock()
	ref, ok := t.byName[name]
	if !ok && path != "" {
		if t.byName == nil {
			t.byName = map[string]loraRef{}
		}
		t.nextID++
		ref, ok = loraRef{path: path, id: t.nextID}, true
		t.byName[name] = ref
	}
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("trtllm: LoRA adapter %s is not loaded and the request names no folder to load it from", name)
	}
	req.Extra["lora_request"] = loraRequest{Name: name, ID: ref.id, Path: ref.path}
	return nil
}

// LoadLora records the adapter in folder path under name (engines.LoraLoader):
// trtllm-serve loads it from path with the first request that names it. Errors: an
// empty name or path; a name already recorded (*engines.InvalidRequestError, 400).
func (e *Engine) LoadLora(_ context.Context, name, path string) error {
	if name == "" || path == "" {
		return errors.New("trtllm: a LoRA adapter load needs a name and a path")
	}
	return e.loras.add(name, path)
}

// UnloadLora forgets the adapter name (engines.LoraLoader): requests no longer name it,
// and trtllm-serve evicts it from its cache when it needs the room. Errors: a name not
// recorded (*engines.InvalidRequestError, 404).
func (e *Engine) UnloadLora(_ context.Context, name string) error {
	return e.loras.remove(name)
}
