package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// loraEngine is a healthy engine that holds LoRA adapters as vLLM does: every call is
// reported on events, in order ("load NAME", "unload NAME", "generate NAME", "end NAME",
// "cancelled NAME"). LoadLora waits for loadGate when it is set; loadErr and unloadErr
// give a call's error by adapter name. Generate refuses an adapter it does not hold,
// sends one token, then waits for release (or its context) and finishes.
type loraEngine struct {
	mu        sync.Mutex
	held      map[string]string
	events    chan string
	loadGate  chan struct{}
	loadErr   map[string]error
	unloadErr map[string]error
	release   chan struct{}
	// unloadGate, when set, holds every UnloadLora until it is closed.
	unloadGate chan struct{}
}

func newLoraEngine() *loraEngine {
	return &loraEngine{held: map[string]string{}, events: make(chan string, 1024), release: make(chan struct{}),
		loadErr: map[string]error{}, unloadErr: map[string]error{}}
}

func (*loraEngine) Health(context.Context) error { return nil }
func (*loraEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return &messages.WorkerLoad{TotalBlocks: 16}, nil
}

func (e *loraEngine) Generate(ctx context.Context, _ string, _ []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	name := s.GetLoraName()
	e.mu.Lock()
	_, held := e.held[name]
	e.mu.Unlock()
	if name != "" && !held {
		return &engines.InvalidRequestError{Status: 404, Message: fmt.Sprintf("The model `%s` does not exist.", name)}
	}
	e.events <- "generate " + name
	if err := fn(engines.Chunk{TokenIDs: []uint32{1}}); err != nil {
		return err
	}
	select {
	case <-e.release:
	case <-ctx.Done():
		e.events <- "cancelled " + name
		return ctx.Err()
	}
	e.events <- "end " + name
	return fn(engines.Chunk{TokenIDs: []uint32{2}, FinishReason: "stop", CompletionTokens: 2})
}

func (e *loraEngine) LoadLora(ctx context.Context, name, path string) error {
	e.events <- "load " + name
	if e.loadGate != nil {
		select {
		case <-e.loadGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.loadErr[name]; err != nil {
		return err
	}
	if _, dup := e.held[name]; dup {
		return &engines.InvalidRequestError{Status: 400, Message: fmt.Sprintf("The lora adapter '%s' has already been loaded.", name)}
	}
	e.held[name] = path
	return nil
}

func (e *loraEngine) UnloadLora(_ context.Context, name string) error {
	e.events <- "unload " + name
	if e.unloadGate != nil {
		<-e.unloadGate
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.unloadErr[name]; err != nil {
		return err
	}
	if _, ok := e.held[name]; !ok {
		return &engines.InvalidRequestError{Status: 404, Message: fmt.Sprintf("The lora adapter '%s' cannot be found.", name)}
	}
	delete(e.held, name)
	return nil
}

// forget drops every adapter, as a restarted engine has none.
func (e *loraEngine) forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.held)
}

// loraRouter records every registration; a registration that hold (when set) holds is
// told to entered and returns once gate is closed.
type loraRouter struct {
	nopRouter
	infos   chan *messages.WorkerInfo
	hold    func(*messages.WorkerInfo) bool
	entered chan *messages.WorkerInfo
	gate    chan struct{}
}

func (r *loraRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	r.infos <- m.Worker
	if r.hold != nil && r.hold(m.Worker) {
		r.entered <- m.Worker
		<-r.gate
	}
	return &messages.RegisterAck{Accepted: true}, nil
}

// heldReply sends msg to the worker and waits for either the registration rt holds
// (returned; the reply then follows once gate is closed, on the channel returned) or the
// reply, which fails the test: the router must learn of the change first.
func heldReply(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, rt *loraRouter, msg any) (*messages.WorkerInfo, chan *messages.LoraReply) {
	t.Helper()
	replied := make(chan *messages.LoraReply, 1)
	fut := sys.Root.RequestFuture(pid, msg, 10*time.Second)
	go func() {
		res, _ := fut.Result()
		r, _ := res.(*messages.LoraReply)
		replied <- r
	}()
	select {
	case info := <-rt.entered:
		return info, replied
	case r := <-replied:
		t.Fatalf("%T answered (%v) before the router got the registration of the change", msg, r)
	case <-time.After(10 * time.Second):
		t.Fatal("no registration within 10 s")
	}
	return nil, nil
}

// loraCatalog records the announcements.
type loraCatalog struct{ announced chan *messages.AnnounceModel }

func (c loraCatalog) Announce(m *messages.AnnounceModel) (*messages.Ack, error) {
	select {
	case c.announced <- m:
	default:
	}
	return &messages.Ack{}, nil
}

// writeAdapter writes a LoRA adapter folder of rank r adapting base under a new
// temporary folder and returns its path.
func writeAdapter(t *testing.T, base string, r int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"peft_type": "LORA", "base_model_name_or_path": %q, "r": %d, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}`, base, r)
	for name, data := range map[string]string{"adapter_config.json": cfg, "adapter_model.safetensors": "tiny stand-in weights"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startLoraWorker starts a worker of model "m" over eng with max LoRA adapters max and
// waits for its first ready registration (returned). mod may set Config.Router to a
// *loraRouter of its own.
func startLoraWorker(t *testing.T, eng engines.Engine, max int, mod func(*Config)) (*actor.ActorSystem, *actor.PID, *loraRouter, *messages.WorkerInfo) {
	t.Helper()
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 1024)}
	cfg := Config{WorkerID: "w-lora-" + t.Name(), Card: &messages.ModelCard{Model: "m"}, MaxLoras: max,
		Launcher:  engineLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: eng},
		Heartbeat: time.Hour, StopGrace: time.Second, Router: rt, Logger: zerolog.Nop()}
	if mod != nil {
		mod(&cfg)
	}
	rt = cfg.Router.(*loraRouter)
	props, err := Props(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	return sys, pid, rt, waitReady(t, rt.infos)
}

// waitReady waits up to 10 s for a ready registration and returns it.
func waitReady(t *testing.T, infos chan *messages.WorkerInfo) *messages.WorkerInfo {
	t.Helper()
	return waitInfo(t, infos, func(i *messages.WorkerInfo) bool { return i.Ready })
}

// waitInfo waits up to 10 s for a registration that satisfies ok and returns it.
func waitInfo(t *testing.T, infos chan *messages.WorkerInfo, ok func(*messages.WorkerInfo) bool) *messages.WorkerInfo {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case info := <-infos:
			if ok(info) {
				return info
			}
		case <-deadline:
			t.Fatal("no such registration within 10 s")
			return nil
		}
	}
}

// ask sends msg to the worker and returns its LoraReply.
func ask(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) *messages.LoraReply {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("%T: %v", msg, err)
	}
	r, ok := res.(*messages.LoraReply)
	if !ok {
		t.Fatalf("%T answered %T", msg, res)
	}
	return r
}

// load is an operator's load of name from path, pinned, as the frontend sends it.
func load(name, path string) *messages.LoadLora {
	return &messages.LoadLora{Adapter: &messages.LoraAdapter{Name: name, Path: path, Pinned: true}}
}

// names lists the adapters' names and pins ("a*" pinned).
func names(list []*messages.LoraAdapter) string {
	var out []string
	for _, a := range list {
		n := a.Name
		if a.Pinned {
			n += "*"
		}
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

// nextEvent returns the engine's next event (10 s at most).
func nextEvent(t *testing.T, e *loraEngine) string {
	t.Helper()
	select {
	case ev := <-e.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no engine call within 10 s")
		return ""
	}
}

// noEvent checks that the engine has no event queued.
func noEvent(t *testing.T, e *loraEngine) {
	t.Helper()
	select {
	case ev := <-e.events:
		t.Fatalf("unexpected engine call %q", ev)
	default:
	}
}

// noReplyWhileHeld checks that no reply comes while the router holds the registration:
// a worker that answers first would answer now. The window only gives such a worker
// time to show itself; a correct one cannot answer before the gate opens, however slow
// the machine.
func noReplyWhileHeld(t *testing.T, replied chan *messages.LoraReply) {
	t.Helper()
	select {
	case r := <-replied:
		t.Fatalf("answered (%v) while the router's registration of the change was held", r)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestLoadLora: an operator's load is checked before the engine sees it (the folder,
// its base model, its rank, the name), answered with the adapters the worker holds
// (pinned, with their parent, base model and rank), idempotent for the same name and
// folder; the engine's refusal is LORA_INVALID with its message, its failure LORA_ENGINE.
func TestLoadLora(t *testing.T) {
	eng := newLoraEngine()
	good, other, big := writeAdapter(t, "m", 8), writeAdapter(t, "meta-llama/Llama-3.1-8B", 8), writeAdapter(t, "m", 64)
	refused, broken := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	eng.loadErr["refused"] = &engines.InvalidRequestError{Status: 400, Message: "Loading lora refused failed: bad tensor shapes"}
	eng.loadErr["broken"] = errors.New("vllm: connection refused")
	sys, pid, _, _ := startLoraWorker(t, eng, 4, func(c *Config) { c.MaxLoraRank = 16 })
	for _, tc := range []struct {
		name     string
		msg      *messages.LoadLora
		failure  messages.LoraFailure
		err      string // substring of the reply's error
		engine   string // the engine's call, if it is made
		adapters string
	}{
		{"no such folder", load("a", filepath.Join(t.TempDir(), "nope")), messages.LoraFailure_LORA_INVALID, "does not exist", "", ""},
		{"another base model", load("a", other), messages.LoraFailure_LORA_INVALID, `adapts "meta-llama/Llama-3.1-8B" (base_model_name_or_path), not model "m"`, "", ""},
		{"rank above the engine's", load("a", big), messages.LoraFailure_LORA_INVALID, "has rank 64, above the engine's max_lora_rank 16", "", ""},
		{"no name", load("", good), messages.LoraFailure_LORA_INVALID, "lora_name: empty", "", ""},
		{"the base model's name", load("m", good), messages.LoraFailure_LORA_INVALID, `lora_name "m" is the base model's served name`, "", ""},
		{"no path", load("a", ""), messages.LoraFailure_LORA_INVALID, "lora_path: empty", "", ""},
		{"loaded", load("a", good), messages.LoraFailure_LORA_OK, "", "load a", "a*"},
		{"again: nothing to do", load("a", good+"/"), messages.LoraFailure_LORA_OK, "", "", "a*"},
		{"the name with another folder", load("a", big), messages.LoraFailure_LORA_INVALID, `adapter "a" is already loaded from ` + good, "", "a*"},
		{"the engine refuses", load("refused", refused), messages.LoraFailure_LORA_INVALID,
			`the engine refused adapter "refused": Loading lora refused failed: bad tensor shapes`, "load refused", "a*"},
		{"the engine fails", load("broken", broken), messages.LoraFailure_LORA_ENGINE, "vllm: connection refused", "load broken", "a*"},
	} {
		r := ask(t, sys, pid, tc.msg)
		if r.Failure != tc.failure || !strings.Contains(r.Error, tc.err) || (tc.err == "") != (r.Error == "") {
			t.Errorf("%s: %s %q, want %s %q", tc.name, r.Failure, r.Error, tc.failure, tc.err)
		}
		if got := names(r.Adapters); got != tc.adapters || r.MaxLoras != 4 || r.WorkerId == "" {
			t.Errorf("%s: reply adapters %q max %d, want %q max 4", tc.name, got, r.MaxLoras, tc.adapters)
		}
		if tc.engine != "" {
			if ev := nextEvent(t, eng); ev != tc.engine {
				t.Errorf("%s: engine call %q, want %q", tc.name, ev, tc.engine)
			}
		}
		noEvent(t, eng)
	}
	r := ask(t, sys, pid, load("a", good))
	a := r.Adapters[0]
	if a.Path != good || a.Parent != "m" || a.BaseModel != "m" || a.Rank != 8 || !a.Pinned {
		t.Errorf("adapter %v", a)
	}
}

// TestLoraOffAnswersNoSlot: a worker with max LoRA adapters 0 refuses loads with
// LORA_NO_SLOT and requests naming an adapter as another worker may serve them.
func TestLoraOffAnswersNoSlot(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, _, info := startLoraWorker(t, eng, 0, nil)
	if info.MaxLoras != 0 || len(info.Adapters) != 0 {
		t.Errorf("registration: max_loras %d adapters %v", info.MaxLoras, info.Adapters)
	}
	r := ask(t, sys, pid, load("a", writeAdapter(t, "m", 8)))
	if r.Failure != messages.LoraFailure_LORA_NO_SLOT || !strings.Contains(r.Error, "serves no LoRA adapters") {
		t.Errorf("reply %v", r)
	}
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_NOT_FOUND {
		t.Errorf("unload: %v", r)
	}
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r", TokenIds: []uint32{5}, ReplyTo: ref,
		Sampling: &messages.SamplingParams{MaxTokens: 2, LoraName: "a", LoraPath: writeAdapter(t, "m", 8)}})
	if c := next(t, chunks); c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, "serves no LoRA adapters") {
		t.Errorf("chunk %v", c)
	}
	noEvent(t, eng)
}

// TestLoadLoraRegistersBeforeReplying: the Router grain learns of a loaded adapter
// before the caller of LoadLora does, and the Catalog is told too.
func TestLoadLoraRegistersBeforeReplying(t *testing.T) {
	eng := newLoraEngine()
	cat := loraCatalog{announced: make(chan *messages.AnnounceModel, 64)}
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 1024), entered: make(chan *messages.WorkerInfo, 1),
		gate: make(chan struct{}), hold: func(i *messages.WorkerInfo) bool { return len(i.Adapters) > 0 }}
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.Catalog, c.Router = cat, rt })
	info, replied := heldReply(t, sys, pid, rt, load("a", writeAdapter(t, "m", 8)))
	noReplyWhileHeld(t, replied)
	if names(info.Adapters) != "a*" || info.MaxLoras != 2 || info.MaxLoraRank != DefaultMaxLoraRank || info.LoraLoadMs <= 0 {
		t.Errorf("registration: adapters %q max_loras %d max_lora_rank %d lora_load_ms %g", names(info.Adapters),
			info.MaxLoras, info.MaxLoraRank, info.LoraLoadMs)
	}
	close(rt.gate)
	if r := <-replied; r == nil || r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatalf("reply %v", r)
	}
	for {
		select {
		case m := <-cat.announced:
			if names(m.Adapters) == "a*" {
				return
			}
		default:
			t.Fatal("the Catalog had no announcement listing the adapter when LoadLora answered")
		}
	}
}

// generate sends a request of adapter name (loaded from path when not held; "" none)
// and returns its chunks.
func generate(sys *actor.ActorSystem, pid *actor.PID, id, name, path string) chan *messages.TokenChunk {
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: id, TokenIds: []uint32{5}, ReplyTo: ref,
		Sampling: &messages.SamplingParams{MaxTokens: 2, LoraName: name, LoraPath: path}})
	return chunks
}

// finish reads a request's chunks to its end: its first token, then (once the engine
// is released) its last; it fails the test on an error chunk.
func finishRequest(t *testing.T, chunks chan *messages.TokenChunk) {
	t.Helper()
	for {
		c := next(t, chunks)
		if c.Error != "" {
			t.Fatalf("error chunk %v", c)
		}
		if c.FinishReason != "" {
			return
		}
	}
}

// TestLoraOnDemand: a request naming an adapter the worker does not hold, with its
// folder, has it loaded first; concurrent requests of that adapter, and an operator's
// load of it, wait for that one load (the operator's pins it); the worker registers it
// at once.
func TestLoraOnDemand(t *testing.T) {
	eng := newLoraEngine()
	eng.loadGate = make(chan struct{})
	close(eng.release)
	sys, pid, rt, _ := startLoraWorker(t, eng, 2, nil)
	path := writeAdapter(t, "m", 8)
	first := generate(sys, pid, "r1", "a", path)
	if ev := nextEvent(t, eng); ev != "load a" {
		t.Fatalf("engine call %q, want the load first", ev)
	}
	second := generate(sys, pid, "r2", "a", path)
	// Sent (queued in the worker's mailbox) before the load can end.
	operator := sys.Root.RequestFuture(pid, load("a", path), 10*time.Second)
	close(eng.loadGate)
	finishRequest(t, first)
	finishRequest(t, second)
	calls := map[string]int{}
	for range 4 {
		calls[nextEvent(t, eng)]++
	}
	if calls["generate a"] != 2 || calls["end a"] != 2 {
		t.Fatalf("engine calls %v, want the two requests (one load for all)", calls)
	}
	res, err := operator.Result()
	if r, ok := res.(*messages.LoraReply); err != nil || !ok || r.Failure != messages.LoraFailure_LORA_OK || names(r.Adapters) != "a*" {
		t.Errorf("operator's load: %v %v", res, err)
	}
	noEvent(t, eng)
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return names(i.Adapters) == "a*" })
}

// TestLoraOnDemandEvictsLeastRecentlyUsed: a worker whose slots are full evicts the
// least recently used unpinned adapter that no request uses; when every slot holds a
// pinned adapter, the request fails at once as one another worker may serve (one whose
// slots' adapters are in use waits: lorawait_test.go).
func TestLoraOnDemandEvictsLeastRecentlyUsed(t *testing.T) {
	eng := newLoraEngine()
	ended := make(chan string, 16)
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.RequestEnded = func(id string) { ended <- id } })
	paths := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		paths[n] = writeAdapter(t, "m", 8)
	}
	run := func(id, name string, want ...string) {
		t.Helper()
		chunks := generate(sys, pid, id, name, paths[name])
		for _, w := range want {
			if ev := nextEvent(t, eng); ev != w {
				t.Fatalf("%s: engine call %q, want %q", id, ev, w)
			}
		}
		eng.release <- struct{}{}
		finishRequest(t, chunks)
		if ev := nextEvent(t, eng); ev != "end "+name {
			t.Fatalf("%s: engine call %q", id, ev)
		}
		// The worker releases the adapter once it handles the request's end, which may
		// come after the engine's: the next request must find it released.
		select {
		case got := <-ended:
			if got != id {
				t.Fatalf("request %s ended, want %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the worker never handled the request's end", id)
		}
	}
	run("r1", "a", "load a", "generate a")
	run("r2", "b", "load b", "generate b")
	run("r3", "a", "generate a")
	run("r4", "c", "unload b", "load c", "generate c") // b: least recently used
	// a and c pinned (c in use): no slot for d.
	for _, n := range []string{"a", "c"} {
		if r := ask(t, sys, pid, load(n, paths[n])); r.Failure != messages.LoraFailure_LORA_OK {
			t.Fatal(r)
		}
	}
	busy := generate(sys, pid, "r5", "c", paths["c"])
	if ev := nextEvent(t, eng); ev != "generate c" {
		t.Fatal(ev)
	}
	c := next(t, generate(sys, pid, "r6", "d", paths["d"]))
	if c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `no slot for adapter "d"`) {
		t.Errorf("chunk %v, want a migratable no-slot error", c)
	}
	noEvent(t, eng)
	eng.release <- struct{}{}
	finishRequest(t, busy)
}

// TestLoraOnDemandFailures: a request whose adapter cannot be had fails with a clear
// error, FAULT_INVALID_REQUEST when the adapter itself is bad (never re-sent), else
// FAULT_ENGINE_ERROR (another worker may serve it).
func TestLoraOnDemandFailures(t *testing.T) {
	refused := &engines.InvalidRequestError{Status: 400, Message: "bad adapter weights"}
	for _, tc := range []struct {
		name     string
		path     func(t *testing.T) string
		loadErr  error
		gate     bool // the engine's load never ends
		fault    messages.Fault
		contains string
		engine   string
	}{
		{"no path", func(*testing.T) string { return "" }, nil, false, messages.Fault_FAULT_ENGINE_ERROR,
			`does not hold adapter "a" (and the request names no lora_path to load it from)`, ""},
		{"no such folder", func(t *testing.T) string { return filepath.Join(t.TempDir(), "x") }, nil, false,
			messages.Fault_FAULT_INVALID_REQUEST, "does not exist", ""},
		{"another base model", func(t *testing.T) string { return writeAdapter(t, "other/model", 8) }, nil, false,
			messages.Fault_FAULT_INVALID_REQUEST, `adapts "other/model"`, ""},
		{"refused by the engine", func(t *testing.T) string { return writeAdapter(t, "m", 8) }, refused, false,
			messages.Fault_FAULT_INVALID_REQUEST, "bad adapter weights", "load a"},
		{"the engine fails", func(t *testing.T) string { return writeAdapter(t, "m", 8) }, errors.New("connection reset"), false,
			messages.Fault_FAULT_ENGINE_ERROR, "connection reset", "load a"},
		{"the load takes too long", func(t *testing.T) string { return writeAdapter(t, "m", 8) }, nil, true,
			messages.Fault_FAULT_ENGINE_ERROR, `adapter "a" did not load within 50ms`, "load a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newLoraEngine()
			if tc.loadErr != nil {
				eng.loadErr["a"] = tc.loadErr
			}
			if tc.gate {
				eng.loadGate = make(chan struct{})
			}
			sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.LoraWaitTimeout = 50 * time.Millisecond })
			c := next(t, generate(sys, pid, "r", "a", tc.path(t)))
			if c.FinishReason != "error" || c.Fault != tc.fault || !strings.Contains(c.Error, tc.contains) {
				t.Errorf("chunk %v, want %s %q", c, tc.fault, tc.contains)
			}
			if tc.engine != "" {
				if ev := nextEvent(t, eng); ev != tc.engine {
					t.Errorf("engine call %q, want %q", ev, tc.engine)
				}
			}
			noEvent(t, eng)
		})
	}
}

// TestUnloadLora: an unload of an adapter the worker does not hold is LORA_NOT_FOUND;
// otherwise the adapter takes no new request at once, the engine unloads it once its
// running request ended, and the router learns of it before the caller.
func TestUnloadLora(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, rt, _ := startLoraWorker(t, eng, 2, nil)
	path := writeAdapter(t, "m", 8)
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_NOT_FOUND ||
		r.Error != `adapter "a" is not loaded` {
		t.Errorf("unload of nothing: %v", r)
	}
	if r := ask(t, sys, pid, load("a", path)); r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatal(r)
	}
	running := generate(sys, pid, "r1", "a", "")
	for _, want := range []string{"load a", "generate a"} {
		if ev := nextEvent(t, eng); ev != want {
			t.Fatalf("engine call %q, want %q", ev, want)
		}
	}
	unload := sys.Root.RequestFuture(pid, &messages.UnloadLora{Name: "a"}, 10*time.Second) // queued before r2
	c := next(t, generate(sys, pid, "r2", "a", path))
	if c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `adapter "a" is being unloaded`) {
		t.Errorf("a request during the unload: %v", c)
	}
	noEvent(t, eng)
	eng.release <- struct{}{}
	finishRequest(t, running)
	for _, want := range []string{"end a", "unload a"} {
		if ev := nextEvent(t, eng); ev != want {
			t.Fatalf("engine call %q, want %q", ev, want)
		}
	}
	res, err := unload.Result()
	if r, ok := res.(*messages.LoraReply); err != nil || !ok || r.Failure != messages.LoraFailure_LORA_OK || len(r.Adapters) != 0 {
		t.Fatalf("unload reply %v %v", res, err)
	}
	// Registered without the adapter before the reply: the last registration lists none.
	var last *messages.WorkerInfo
	for len(rt.infos) > 0 {
		last = <-rt.infos
	}
	if last == nil || len(last.Adapters) != 0 {
		t.Errorf("the last registration before the reply: %v", last)
	}
	c = next(t, generate(sys, pid, "r3", "a", ""))
	if c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `does not hold adapter "a"`) {
		t.Errorf("a request after the unload: %v", c)
	}
}

// TestUnloadLoraRegistersBeforeReplying: the Router grain learns that the engine
// unloaded an adapter before the caller of UnloadLora does.
func TestUnloadLoraRegistersBeforeReplying(t *testing.T) {
	eng := newLoraEngine()
	eng.unloadGate = make(chan struct{})
	var armed atomic.Bool // the registrations from now on follow the engine's unload
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 1024), entered: make(chan *messages.WorkerInfo, 1),
		gate: make(chan struct{}), hold: func(*messages.WorkerInfo) bool { return armed.Load() }}
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.Router = rt })
	if r := ask(t, sys, pid, load("a", writeAdapter(t, "m", 8))); r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatal(r)
	}
	replied := make(chan *messages.LoraReply, 1)
	fut := sys.Root.RequestFuture(pid, &messages.UnloadLora{Name: "a"}, 10*time.Second)
	go func() {
		res, _ := fut.Result()
		r, _ := res.(*messages.LoraReply)
		replied <- r
	}()
	// The unload's first registration (the adapter takes no new request), then the
	// engine's unload.
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return len(i.Adapters) == 0 })
	if ev := nextEvent(t, eng); ev != "load a" {
		t.Fatal(ev)
	}
	if ev := nextEvent(t, eng); ev != "unload a" {
		t.Fatal(ev)
	}
	armed.Store(true)
	close(eng.unloadGate)
	select {
	case info := <-rt.entered:
		if len(info.Adapters) != 0 {
			t.Errorf("registration after the unload lists %q", names(info.Adapters))
		}
		noReplyWhileHeld(t, replied)
	case r := <-replied:
		t.Fatalf("UnloadLora answered (%v) before the router got the registration of the unload", r)
	case <-time.After(10 * time.Second):
		t.Fatal("no registration within 10 s")
	}
	close(rt.gate)
	if r := <-replied; r == nil || r.Failure != messages.LoraFailure_LORA_OK || len(r.Adapters) != 0 {
		t.Fatalf("reply %v", r)
	}
}

// TestUnloadLoraGraceOver: requests still using an adapter when its unload's grace is
// over are handed back for migration (a FAULT_ENGINE_ERROR chunk), then the engine
// unloads it.
func TestUnloadLoraGraceOver(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.LoraUnloadGrace = 50 * time.Millisecond })
	if r := ask(t, sys, pid, load("a", writeAdapter(t, "m", 8))); r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatal(r)
	}
	chunks := generate(sys, pid, "r1", "a", "")
	if c := next(t, chunks); c.Error != "" {
		t.Fatal(c)
	}
	r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"})
	if r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatal(r)
	}
	c := next(t, chunks)
	if c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || c.Error != errAdapterUnloaded.Error() {
		t.Errorf("chunk %v, want the migratable unload error", c)
	}
	for _, want := range []string{"load a", "generate a", "cancelled a", "unload a"} {
		if ev := nextEvent(t, eng); ev != want {
			t.Fatalf("engine call %q, want %q", ev, want)
		}
	}
}

// TestPinnedLorasLoadedBeforeReady: the configured adapters (--lora) are loaded into the
// engine before the worker first registers ready, and again into a restarted engine
// before it is ready again; a restarted engine loses what was loaded on demand.
func TestPinnedLorasLoadedBeforeReady(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	pinned := writeAdapter(t, "m", 8)
	series := func(kind string) string {
		return metricLoraLoads + `{model="m",worker="w-lora-` + t.Name() + `",kind="` + kind + `"}`
	}
	before := metricValues(t)
	sys, pid, rt, info := startLoraWorker(t, eng, 2, func(c *Config) {
		c.Loras = []*messages.LoraAdapter{{Name: "p", Path: pinned}}
		c.Logger = zerolog.New(logs)
	})
	if names(info.Adapters) != "p*" || info.Adapters[0].Rank != 8 || info.Adapters[0].Parent != "m" {
		t.Fatalf("first ready registration: %v", info.Adapters)
	}
	if ev := nextEvent(t, eng); ev != "load p" {
		t.Fatalf("engine call %q", ev)
	}
	if now := metricValues(t); now[series("pinned")]-before[series("pinned")] != 1 || now[series("restore")] != before[series("restore")] {
		t.Errorf("the first load of a configured adapter counts as pinned, not restore")
	}
	close(eng.release)
	finishRequest(t, generate(sys, pid, "r1", "a", writeAdapter(t, "m", 8)))
	for _, want := range []string{"load a", "generate a", "end a"} {
		if ev := nextEvent(t, eng); ev != want {
			t.Fatalf("engine call %q, want %q", ev, want)
		}
	}
	var started struct{ Pid int }
	if err := json.Unmarshal([]byte(waitLog(t, logs, "engine started")), &started); err != nil || started.Pid == 0 {
		t.Fatalf("engine pid from the log: %v", err)
	}
	eng.forget()
	if err := syscall.Kill(started.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "engine exited")
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return !i.Ready })
	info = waitReady(t, rt.infos)
	if names(info.Adapters) != "p*" {
		t.Errorf("ready again with %q, want the pinned adapter only", names(info.Adapters))
	}
	if ev := nextEvent(t, eng); ev != "load p" {
		t.Fatalf("engine call %q, want the pinned adapter loaded again", ev)
	}
	if now := metricValues(t); now[series("restore")]-before[series("restore")] != 1 {
		t.Errorf("the load into the restarted engine is not counted as restore")
	}
}

// TestPropsChecksLoras: the configured adapters are checked before the worker exists.
func TestPropsChecksLoras(t *testing.T) {
	good := writeAdapter(t, "m", 8)
	base := Config{WorkerID: "w", Card: &messages.ModelCard{Model: "m"}, Launcher: shellLauncher{}, Router: nopRouter{}, MaxLoras: 2}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{"good", func(c *Config) { c.Loras = []*messages.LoraAdapter{{Name: "a", Path: good}} }, ""},
		{"too many", func(c *Config) {
			c.MaxLoras = 1
			c.Loras = []*messages.LoraAdapter{{Name: "a", Path: good}, {Name: "b", Path: good}}
		}, "2 pinned LoRA adapters, but the worker holds at most 1"},
		{"twice", func(c *Config) { c.Loras = []*messages.LoraAdapter{{Name: "a", Path: good}, {Name: "a", Path: good}} }, `"a" given twice`},
		{"base model's name", func(c *Config) { c.Loras = []*messages.LoraAdapter{{Name: "m", Path: good}} }, "is the base model's served name"},
		{"no folder", func(c *Config) { c.Loras = []*messages.LoraAdapter{{Name: "a", Path: "/nonexistent/a"}} }, `LoRA adapter "a": model: adapter folder /nonexistent/a does not exist`},
		{"rank", func(c *Config) {
			c.MaxLoraRank = 4
			c.Loras = []*messages.LoraAdapter{{Name: "a", Path: good}}
		}, "above the engine's max_lora_rank 4"},
		{"other base", func(c *Config) {
			c.Loras = []*messages.LoraAdapter{{Name: "a", Path: writeAdapter(t, "x/y", 8)}}
		}, `adapts "x/y"`},
		{"negative", func(c *Config) { c.MaxLoras = -1 }, "max LoRA adapters -1 < 0"},
	} {
		cfg := base
		tc.mod(&cfg)
		_, err := Props(cfg)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

// TestLoraMetrics: loads (by kind), evictions, unloads, failures (by reason) and load
// seconds are counted on the worker's series, which exist from the start.
func TestLoraMetrics(t *testing.T) {
	eng := newLoraEngine()
	close(eng.release)
	id := "w-lora-" + t.Name()
	series := func(family, extra string) string {
		return family + `{model="m",worker="` + id + `"` + extra + `}`
	}
	want := map[string]float64{
		series(metricLoraLoads, `,kind="pinned"`):           1,
		series(metricLoraLoads, `,kind="on_demand"`):        2,
		series(metricLoraLoads, `,kind="restore"`):          0,
		series(metricLoraUnloads, ""):                       1,
		series(metricLoraEvictions, ""):                     1,
		series(metricLoraLoadFailures, `,reason="invalid"`): 1,
		series(metricLoraLoadFailures, `,reason="no_slot"`): 0,
		series(metricLoraLoadFailures, `,reason="engine"`):  0,
		series(metricLoraLoadSeconds+"_count", ""):          3,
	}
	sys, pid, _, _ := startLoraWorker(t, eng, 1, nil)
	before := metricValues(t)
	for s := range want {
		if _, ok := before[s]; !ok {
			t.Errorf("no series %s at the start", s)
		}
	}
	ask(t, sys, pid, load("a", writeAdapter(t, "m", 8)))
	ask(t, sys, pid, &messages.UnloadLora{Name: "a"})
	finishRequest(t, generate(sys, pid, "r1", "b", writeAdapter(t, "m", 8)))
	finishRequest(t, generate(sys, pid, "r2", "c", writeAdapter(t, "m", 8)))
	ask(t, sys, pid, load("d", writeAdapter(t, "x/y", 8)))
	after := metricValues(t)
	for s, n := range want {
		if got := after[s] - before[s]; got != n {
			t.Errorf("%s rose by %g, want %g", s, got, n)
		}
	}
}

// metricValues reads metrics' default set: series to value.
func metricValues(t *testing.T) map[string]float64 {
	t.Helper()
	var out bytes.Buffer
	metrics.WritePrometheus(&out, false)
	values := map[string]float64{}
	for line := range strings.Lines(out.String()) {
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		values[line[:i]] = v
	}
	return values
}

// TestRelayKeepsAdapterChanges: a heartbeat made before an adapter change and delivered
// after its registration registers the change's adapters, not the ones it saw, so that
// the router never goes back to a list the worker no longer holds; a heartbeat made after
// the change registers its own; the relay sends registrations with the latest load.
func TestRelayKeepsAdapterChanges(t *testing.T) {
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 16)}
	r := newRelay("w", rt, zerolog.Nop())
	info := func(adapters ...string) *messages.WorkerInfo {
		i := &messages.WorkerInfo{WorkerId: "w", Ready: true, MaxLoras: 2}
		for _, a := range adapters {
			i.Adapters = append(i.Adapters, &messages.LoraAdapter{Name: a, Pinned: true})
		}
		return i
	}
	stale := info()
	for _, tc := range []struct {
		item any
		want string
	}{
		{relayHeartbeat{info: info(), load: &messages.WorkerLoad{}, seq: 0}, ""},
		{relayRegister{info: info("a"), seq: 1, done: make(chan struct{})}, "a"},
		{relayHeartbeat{info: stale, load: &messages.WorkerLoad{}, seq: 0}, "a"},
		{relayHeartbeat{info: info("a", "b"), load: &messages.WorkerLoad{}, seq: 1}, "a,b"},
		{relayRegister{info: info(), seq: 2, done: make(chan struct{})}, ""},
		{relayHeartbeat{info: info("a"), load: &messages.WorkerLoad{}, seq: 1}, ""},
	} {
		r.handle(tc.item)
		if reg, ok := tc.item.(relayRegister); ok {
			waitClosed(t, reg.done, "registration done")
		}
		got := <-rt.infos
		var list []string
		for _, a := range got.Adapters {
			list = append(list, a.Name)
		}
		if strings.Join(list, ",") != tc.want {
			t.Errorf("after %T %+v: registered %v, want %q", tc.item, tc.item, list, tc.want)
		}
	}
	if len(stale.Adapters) != 0 {
		t.Errorf("the relay changed the heartbeat's own info: %v", stale.Adapters)
	}
}

// heldLoadLoraEngine is a loraEngine whose first load scrape waits for gate (after
// telling entered): the heartbeat that makes it stays in flight.
type heldLoadLoraEngine struct {
	*loraEngine
	entered, gate chan struct{}
	first         atomic.Bool
}

func (e *heldLoadLoraEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	if e.first.CompareAndSwap(false, true) {
		close(e.entered)
		<-e.gate // held past the scrape's own timeout on purpose
	}
	return e.loraEngine.Load(ctx)
}

// TestAdapterChangeDuringHeartbeat: a heartbeat made before an adapter change announces
// the adapters it saw to the Catalog; another follows it at once with the change, rather
// than at the next tick (an hour here).
func TestAdapterChangeDuringHeartbeat(t *testing.T) {
	eng := &heldLoadLoraEngine{loraEngine: newLoraEngine(), entered: make(chan struct{}), gate: make(chan struct{})}
	cat := loraCatalog{announced: make(chan *messages.AnnounceModel, 64)}
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 1024)}
	props, err := Props(Config{WorkerID: "w-lora-hb", Card: &messages.ModelCard{Model: "m"}, MaxLoras: 2,
		Launcher:  engineLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: eng},
		Heartbeat: time.Hour, StopGrace: time.Second, Router: rt, Catalog: cat, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	waitClosed(t, eng.entered, "the ready engine's first heartbeat")
	if r := ask(t, sys, pid, load("a", writeAdapter(t, "m", 8))); r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatal(r)
	}
	close(eng.gate)
	staleSeen := false
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-cat.announced:
			switch {
			case len(m.Adapters) == 0:
				staleSeen = true
			case staleSeen && names(m.Adapters) == "a*":
				return
			}
		case <-deadline:
			t.Fatalf("no announcement of the adapter after the stale heartbeat's (stale seen: %v)", staleSeen)
		}
	}
}
