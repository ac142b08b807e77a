package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// DialectName names an HTTP dialect, as --dialect spells it.
type DialectName string

// The dialects the mock engine speaks.
const (
	DialectVLLM   DialectName = "vllm"
	DialectSGLang DialectName = "sglang"
	DialectTRTLLM DialectName = "trtllm"
)

// Dialect is one engine's HTTP surface over the mock engine: its routes, request and
// answer shapes, error shapes and metric names. The rest of the server (the engine loop,
// the KV transfer port, the persona) is the same in every dialect. Each dialect is a
// plugin registered under its name (dialects); Options.Dialect picks one.
type Dialect interface {
	// Name is the dialect's name.
	Name() DialectName
	// check refuses the options the dialect's engine has no such setting for (errors
	// name the option). It runs on options whose defaults are filled in.
	check(o *Options) error
	// kvEvents reads a KV events configuration (vLLM's --kv-events-config) as the
	// dialect's engine does.
	kvEvents(c kvevents.Config) kvevents.Config
	// bind returns the dialect's surface on s, registering its metrics in s.metrics.
	// New calls it once, with the KV transfer port up.
	bind(s *Server) surface
}

// surface is a dialect bound to one server. The engine loop calls kvEvents with the KV
// events of every step that has any (a step that only admitted lower-tier loads too),
// update after every change of the stats, step after every engine step that ran and
// finished for each request the step finished (in that order, before the step's outputs
// are handed out); handler's routes run concurrently with the loop.
type surface interface {
	handler() http.Handler
	kvEvents(events []kv.Event)
	update(st *mocker.Stats)
	step(res *mocker.StepResult, st *mocker.Stats)
	finished(r mocker.FinishReason)
}

// dialectRegistry holds the dialects by name, in registration order (the default
// first).
type dialectRegistry struct {
	names  []DialectName
	byName map[DialectName]Dialect
}

// newDialectRegistry registers ds; a name registered twice is an error.
func newDialectRegistry(ds ...Dialect) (*dialectRegistry, error) {
	r := &dialectRegistry{byName: map[DialectName]Dialect{}}
	for _, d := range ds {
		if _, dup := r.byName[d.Name()]; dup {
			return nil, fmt.Errorf("server: dialect %q registered twice", d.Name())
		}
		r.byName[d.Name()] = d
		r.names = append(r.names, d.Name())
	}
	return r, nil
}

// lookup returns the dialect named name. Errors name the registered ones.
func (r *dialectRegistry) lookup(name DialectName) (Dialect, error) {
	if d, ok := r.byName[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("server: dialect %q: want %s", name, r.want())
}

// want lists the names for errors: "a, b or c".
func (r *dialectRegistry) want() string {
	s := make([]string, len(r.names))
	for i, n := range r.names {
		s[i] = string(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// dialects are the dialects the mock engine speaks, vLLM's (the default) first.
var dialects = func() *dialectRegistry {
	r, err := newDialectRegistry(vllmDialect{}, sglangDialect{}, trtllmDialect{})
	if err != nil {
		panic(err)
	}
	return r
}()

// Dialects lists the dialects' names, the default first.
var Dialects = dialects.names

// DialectChoices names the dialects for messages: "vllm, sglang or trtllm".
func DialectChoices() string { return dialects.want() }

// ParseDialect checks a dialect name. Errors name the accepted ones.
func ParseDialect(s string) (DialectName, error) {
	d, err := dialects.lookup(DialectName(s))
	if err != nil {
		return "", err
	}
	return d.Name(), nil
}

// Options a dialect's engine may lack, refused by its check.

func errEventBuffer(d DialectName) error {
	return fmt.Errorf("server: an event buffer for /kv_cache_events needs the trtllm dialect, not %s", d)
}

func errIncrementalOutput(d DialectName) error {
	return fmt.Errorf("server: incremental streaming output is an SGLang option; the dialect is %s", d)
}

func errRecompute(d DialectName) error {
	return fmt.Errorf("server: --kv-load-failure-policy recompute is vLLM's; %s has no such fallback (use fail)", d)
}

// noStep is the step and kvEvents of dialects that record nothing per engine step (their
// KV events go out over ZeroMQ).
type noStep struct{}

func (noStep) step(*mocker.StepResult, *mocker.Stats) {}
func (noStep) kvEvents([]kv.Event)                    {}

// vllmEvents is vLLM's KVEventsConfig: events are on when enable_kv_cache_events is.
type vllmEvents struct{}

func (vllmEvents) kvEvents(c kvevents.Config) kvevents.Config { return c }

// vllmDialect is vLLM's OpenAI server (http.go, vllm_disagg.go, metrics.go): it has
// neither SGLang's incremental output nor trtllm-serve's event buffer, and alone has the
// recompute load-failure policy and NIXL's transfer metrics.
type vllmDialect struct{ vllmEvents }

func (vllmDialect) Name() DialectName { return DialectVLLM }

func (d vllmDialect) check(o *Options) error {
	switch {
	case o.EventBufferMaxSize > 0:
		return errEventBuffer(d.Name())
	case o.IncrementalStreamingOutput:
		return errIncrementalOutput(d.Name())
	}
	return nil
}

func (vllmDialect) bind(s *Server) surface {
	statsNow := func() *mocker.Stats { return s.stats.Load() }
	s.xfer.nixl = newNIXLMetrics(s.metrics, s.opts.ServedModelName)
	return vllmSurface{s: s, serverMetrics: newServerMetrics(s.metrics, s.opts.ServedModelName, s.opts.Engine, statsNow)}
}

type vllmSurface struct {
	noStep
	serverMetrics
	s *Server
}

func (v vllmSurface) handler() http.Handler { return v.s.vllmHandler() }

// sglangDialect is SGLang's native API (sglang.go, sglang_disagg.go).
type sglangDialect struct{}

func (sglangDialect) Name() DialectName { return DialectSGLang }

// kvEvents: SGLang's KVEventsConfig has no enable flag; a zmq publisher is on.
func (sglangDialect) kvEvents(c kvevents.Config) kvevents.Config {
	if c.Publisher == "zmq" {
		c.EnableKVCacheEvents = true
	}
	return c
}

func (d sglangDialect) check(o *Options) error {
	switch {
	case o.EventBufferMaxSize > 0:
		return errEventBuffer(d.Name())
	case o.KVTransfer.LoadFailurePolicy == LoadFailureRecompute:
		return errRecompute(d.Name())
	}
	return nil
}

func (sglangDialect) bind(s *Server) surface {
	statsNow := func() *mocker.Stats { return s.stats.Load() }
	return sglangSurface{s: s, sglangMetrics: newSGLangMetrics(s.metrics, s.opts.ServedModelName, s.opts.Engine, statsNow)}
}

type sglangSurface struct {
	noStep
	*sglangMetrics
	s *Server
}

func (g sglangSurface) handler() http.Handler { return g.s.sglangHandler() }

// trtllmDialect is trtllm-serve's OpenAI server (trtllm.go, trtllm_disagg.go): the only
// one with a KV event buffer (POST /kv_cache_events) and iteration stats, which it
// records at every step.
type trtllmDialect struct{ vllmEvents }

func (trtllmDialect) Name() DialectName { return DialectTRTLLM }

func (d trtllmDialect) check(o *Options) error {
	switch {
	case o.EventBufferMaxSize > 0 && !o.Engine.EnablePrefixCaching:
		return fmt.Errorf("server: KV cache events need prefix caching (block reuse)")
	case o.IncrementalStreamingOutput:
		return errIncrementalOutput(d.Name())
	case o.KVTransfer.LoadFailurePolicy == LoadFailureRecompute:
		return errRecompute(d.Name())
	}
	return nil
}

func (trtllmDialect) bind(s *Server) surface {
	return trtllmSurface{s: s, trtllmState: newTRTLLMState(s.opts, s.created)}
}

type trtllmSurface struct {
	*trtllmState
	s *Server
}

func (t trtllmSurface) handler() http.Handler { return t.s.trtllmHandler(t.trtllmState) }
