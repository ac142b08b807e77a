// Package registry is the one table of the engines a worker can launch: each engine's
// name (launcher.EngineMocker, EngineVLLM, EngineSGLang, EngineTRTLLM) and the
// constructor of its launcher, which lives in the engine's own package (engines/vllm,
// engines/sglang, engines/trtllm, engines/mocker/launch). The commands look engines up
// here by name; nothing else chooses among them.
package registry

import (
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/sglang"
	"github.com/turbine-llm/turbine/engines/trtllm"
	"github.com/turbine-llm/turbine/engines/vllm"
)

// Config is what a worker's engine launcher is built from: a real engine reads Spec,
// the mock engine Mock.
type Config struct {
	Spec launcher.Spec
	Mock launch.Config
}

// Engine is one registered engine.
type Engine struct {
	// Name is the engine's name (--engine, messages.StartWorker.engine).
	Name string
	// Real: a real inference engine. It runs on GPUs (at least one per worker), loads
	// the model's weights for minutes before it serves, and must be sent the model's own
	// token ids. The mock engine is none of these: it runs on CPUs as the turbine binary.
	Real bool
	// New builds the engine's launcher from c.
	New func(c Config) (engines.Launcher, error)
}

// Registry holds engines by name, in registration order.
type Registry struct {
	engines []Engine
}

// New returns a registry of es. Errors: a name registered twice, an entry without a
// name or constructor.
func New(es ...Engine) (*Registry, error) {
	seen := map[string]bool{}
	for _, e := range es {
		switch {
		case e.Name == "" || e.New == nil:
			return nil, fmt.Errorf("registry: engine %q without a name or constructor", e.Name)
		case seen[e.Name]:
			return nil, fmt.Errorf("registry: engine %q registered twice", e.Name)
		}
		seen[e.Name] = true
	}
	return &Registry{engines: es}, nil
}

// Lookup returns the engine named name.
func (r *Registry) Lookup(name string) (Engine, bool) {
	for _, e := range r.engines {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// Names lists the engines' names in registration order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.engines))
	for i, e := range r.engines {
		out[i] = e.Name
	}
	return out
}

// Launcher builds the launcher of the engine named name from c. Errors: an unknown
// engine, and the engine's constructor's (an invalid spec, a limit the engine refuses, a
// file it cannot write).
func (r *Registry) Launcher(name string, c Config) (engines.Launcher, error) {
	e, ok := r.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("registry: unknown engine %q (want %s)", name, strings.Join(r.Names(), ", "))
	}
	return e.New(c)
}

// Default is the registry of every engine Turbine launches, the mock engine (the default
// of `turbine node --engine`) first.
var Default = must(New(
	Engine{Name: launcher.EngineMocker, New: func(c Config) (engines.Launcher, error) { return asLauncher(launch.New(c.Mock)) }},
	Engine{Name: launcher.EngineVLLM, Real: true, New: func(c Config) (engines.Launcher, error) { return asLauncher(vllm.NewLauncher(c.Spec)) }},
	Engine{Name: launcher.EngineSGLang, Real: true, New: func(c Config) (engines.Launcher, error) { return asLauncher(sglang.NewLauncher(c.Spec)) }},
	Engine{Name: launcher.EngineTRTLLM, Real: true, New: func(c Config) (engines.Launcher, error) { return asLauncher(trtllm.NewLauncher(c.Spec)) }},
))

// Real reports whether name is a registered real engine (Engine.Real) in Default.
func Real(name string) bool {
	e, ok := Default.Lookup(name)
	return ok && e.Real
}

// asLauncher returns l as an engines.Launcher, or nil and err (never a nil pointer
// inside a non-nil interface).
func asLauncher[L engines.Launcher](l L, err error) (engines.Launcher, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

func must(r *Registry, err error) *Registry {
	if err != nil {
		panic(err)
	}
	return r
}
