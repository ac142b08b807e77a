package worker

import (
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
)

// Known adapters (docs/reference.md §26.2): an adapter a worker evicted stays
// registered, and a request naming it has it loaded again from its folder.

// runAdapter runs one request of adapter name (path: its lora_path, "" none) to its
// end, checking that the engine's calls are want, then the request's own.
func runAdapter(t *testing.T, eng *loraEngine, chunks chan *messages.TokenChunk, name string, want ...string) {
	t.Helper()
	for _, w := range append(want, "generate "+name) {
		if ev := nextEvent(t, eng); ev != w {
			t.Fatalf("engine call %q, want %q", ev, w)
		}
	}
	eng.release <- struct{}{}
	finishRequest(t, chunks)
	if ev := nextEvent(t, eng); ev != "end "+name {
		t.Fatalf("engine call %q, want the end of %s", ev, name)
	}
}

// heldFrom is the folder the engine loaded adapter name from ("" when it holds none).
func (e *loraEngine) heldFrom(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.held[name]
}

// lastInfo drains the registrations made so far and returns the last (nil: none).
func lastInfo(rt *loraRouter) *messages.WorkerInfo {
	var last *messages.WorkerInfo
	for len(rt.infos) > 0 {
		last = <-rt.infos
	}
	return last
}

// TestLoraEvictedStaysKnown: an adapter evicted for another stays registered (known,
// with its folder) with the router and the catalog, and a request naming it without a
// folder has it loaded again from the one it was loaded from, evicting in turn.
func TestLoraEvictedStaysKnown(t *testing.T) {
	eng := newLoraEngine()
	cat := loraCatalog{announced: make(chan *messages.AnnounceModel, 1024)}
	sys, pid, rt, _ := startLoraWorker(t, eng, 1, func(c *Config) { c.Catalog = cat })
	pa, pb := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	runAdapter(t, eng, generate(sys, pid, "r1", "a", pa), "a", "load a")
	runAdapter(t, eng, generate(sys, pid, "r2", "b", pb), "b", "unload a", "load b")
	info := waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool {
		return names(i.Adapters) == "b" && names(i.KnownAdapters) == "a"
	})
	if k := info.KnownAdapters[0]; k.Path != pa || k.Parent != "m" || k.Rank != 8 || k.Pinned {
		t.Errorf("known adapter registered as %v, want a from %s, unpinned", k, pa)
	}
	deadline := time.After(10 * time.Second)
	for announced := false; !announced; {
		select {
		case m := <-cat.announced: // the registration above is announced after it
			announced = names(m.Adapters) == "b" && names(m.KnownAdapters) == "a"
		case <-deadline:
			t.Fatal("no announcement of b held and a known within 10 s")
		}
	}
	// No lora_path, and no --lora-on-demand needed: the worker registered it itself.
	runAdapter(t, eng, generate(sys, pid, "r3", "a", ""), "a", "unload b", "load a")
	if from := eng.heldFrom("a"); from != pa {
		t.Errorf("a loaded again from %q, want %q", from, pa)
	}
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool {
		return names(i.Adapters) == "a" && names(i.KnownAdapters) == "b"
	})
	// A request's lora_path never moves a known adapter to another folder.
	runAdapter(t, eng, generate(sys, pid, "r4", "b", pa), "b", "unload a", "load b")
	if from := eng.heldFrom("b"); from != pb {
		t.Errorf("b loaded again from %q, want its own folder %q", from, pb)
	}
}

// TestUnloadKnownLora: an unload forgets a known adapter at once, without an engine
// call, registered before the reply; then it is neither held nor known
// (LORA_NOT_FOUND) and a request naming it fails as one another worker may serve. A
// known adapter whose folder no longer checks is forgotten by the request that finds
// it so.
func TestUnloadKnownLora(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, rt, _ := startLoraWorker(t, eng, 1, nil)
	pa, pb, pc := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	runAdapter(t, eng, generate(sys, pid, "r1", "a", pa), "a", "load a")
	runAdapter(t, eng, generate(sys, pid, "r2", "b", pb), "b", "unload a", "load b")
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return names(i.KnownAdapters) == "a" })
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_OK || names(r.Adapters) != "b" {
		t.Fatalf("unload of a known adapter: %v", r)
	}
	if last := lastInfo(rt); last == nil || len(last.KnownAdapters) != 0 || names(last.Adapters) != "b" {
		t.Errorf("the last registration before the reply: %v", last)
	}
	noEvent(t, eng)
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_NOT_FOUND {
		t.Errorf("second unload: %v, want LORA_NOT_FOUND", r)
	}
	c := next(t, generate(sys, pid, "r3", "a", ""))
	if c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `does not hold adapter "a"`) {
		t.Errorf("a request after the unload: %v", c)
	}
	// c evicts b (known); b's folder goes: the request naming b is refused as bad, and b
	// is forgotten.
	runAdapter(t, eng, generate(sys, pid, "r4", "c", pc), "c", "unload b", "load c")
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return names(i.KnownAdapters) == "b" })
	if err := os.RemoveAll(pb); err != nil {
		t.Fatal(err)
	}
	c = next(t, generate(sys, pid, "r5", "b", ""))
	if c.Fault != messages.Fault_FAULT_INVALID_REQUEST || !strings.Contains(c.Error, "does not exist") {
		t.Errorf("a request of a known adapter whose folder went: %v", c)
	}
	waitInfo(t, rt.infos, func(i *messages.WorkerInfo) bool { return len(i.KnownAdapters) == 0 && names(i.Adapters) == "c" })
	noEvent(t, eng)
}

// unpinned is an operator's load of name from path, unpinned.
func unpinned(name, path string) *messages.LoadLora {
	return &messages.LoadLora{Adapter: &messages.LoraAdapter{Name: name, Path: path}}
}

// TestLoadLoraUnpinned: an operator's load with pinned false loads the adapter unpinned:
// past the slots it evicts the least recently used unpinned adapter, which stays known;
// only when every slot holds a pinned adapter is it LORA_NO_SLOT. An unpinned load never
// unpins an adapter.
func TestLoadLoraUnpinned(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, rt, _ := startLoraWorker(t, eng, 2, nil)
	path := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		path[n] = writeAdapter(t, "m", 8)
	}
	for _, tc := range []struct {
		msg     *messages.LoadLora
		failure messages.LoraFailure
		engine  []string
		held    string
		known   string
	}{
		{unpinned("a", path["a"]), messages.LoraFailure_LORA_OK, []string{"load a"}, "a", ""},
		{load("b", path["b"]), messages.LoraFailure_LORA_OK, []string{"load b"}, "a,b*", ""},
		{unpinned("b", path["b"]), messages.LoraFailure_LORA_OK, nil, "a,b*", ""},
		{unpinned("c", path["c"]), messages.LoraFailure_LORA_OK, []string{"unload a", "load c"}, "b*,c", "a"},
		{unpinned("d", path["d"]), messages.LoraFailure_LORA_OK, []string{"unload c", "load d"}, "b*,d", "a,c"},
		{load("e", path["e"]), messages.LoraFailure_LORA_OK, []string{"unload d", "load e"}, "b*,e*", "a,c,d"},
		{unpinned("f", path["f"]), messages.LoraFailure_LORA_NO_SLOT, nil, "b*,e*", "a,c,d"},
		{unpinned("a", path["a"]), messages.LoraFailure_LORA_NO_SLOT, nil, "b*,e*", "a,c,d"},
	} {
		r := ask(t, sys, pid, tc.msg)
		a := tc.msg.Adapter
		if r.Failure != tc.failure || names(r.Adapters) != tc.held {
			t.Fatalf("load of %s (pinned %v): %v, want %v holding %q", a.Name, a.Pinned, r, tc.failure, tc.held)
		}
		for _, w := range tc.engine {
			if ev := nextEvent(t, eng); ev != w {
				t.Fatalf("load of %s: engine call %q, want %q", a.Name, ev, w)
			}
		}
		noEvent(t, eng)
		if last := lastInfo(rt); last != nil && (names(last.Adapters) != tc.held || names(last.KnownAdapters) != tc.known) {
			t.Errorf("load of %s: registered %q known %q, want %q known %q", a.Name, names(last.Adapters),
				names(last.KnownAdapters), tc.held, tc.known)
		}
	}
}

// TestEngineRestartKeepsKnown: a restarted engine is given the pinned adapters again;
// the unpinned ones the old engine held are known, and a request loads one again.
func TestEngineRestartKeepsKnown(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	pinned, pa := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	sys, pid, rt, _ := startLoraWorker(t, eng, 2, func(c *Config) {
		c.Loras = []*messages.LoraAdapter{{Name: "p", Path: pinned}}
		c.Logger = zerolog.New(logs)
	})
	if ev := nextEvent(t, eng); ev != "load p" {
		t.Fatalf("engine call %q", ev)
	}
	runAdapter(t, eng, generate(sys, pid, "r1", "a", pa), "a", "load a")
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
	info := waitReady(t, rt.infos)
	if names(info.Adapters) != "p*" || names(info.KnownAdapters) != "a" || info.KnownAdapters[0].Path != pa {
		t.Errorf("ready again with %q known %v, want p* and a known", names(info.Adapters), info.KnownAdapters)
	}
	if ev := nextEvent(t, eng); ev != "load p" {
		t.Fatalf("engine call %q, want the pinned adapter loaded again", ev)
	}
	runAdapter(t, eng, generate(sys, pid, "r2", "a", ""), "a", "load a")
}

// TestRelayKeepsKnownAdapters: a heartbeat made before an adapter change registers the
// change's known adapters, not the ones it saw.
func TestRelayKeepsKnownAdapters(t *testing.T) {
	rt := &loraRouter{infos: make(chan *messages.WorkerInfo, 16)}
	r := newRelay("w", rt, zerolog.Nop())
	changed := &messages.WorkerInfo{WorkerId: "w", Ready: true, MaxLoras: 1,
		Adapters:      []*messages.LoraAdapter{{Name: "b", Path: "/b"}},
		KnownAdapters: []*messages.LoraAdapter{{Name: "a", Path: "/a"}}}
	reg := relayRegister{info: changed, seq: 1, done: make(chan struct{})}
	r.handle(reg)
	waitClosed(t, reg.done, "registration done")
	<-rt.infos
	r.handle(relayHeartbeat{info: &messages.WorkerInfo{WorkerId: "w", Ready: true, MaxLoras: 1,
		Adapters: []*messages.LoraAdapter{{Name: "a", Path: "/a"}}}, load: &messages.WorkerLoad{}, seq: 0})
	if got := <-rt.infos; names(got.Adapters) != "b" || names(got.KnownAdapters) != "a" {
		t.Errorf("stale heartbeat registered %q known %q, want b known a", names(got.Adapters), names(got.KnownAdapters))
	}
}
