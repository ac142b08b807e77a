package worker

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
)

// Waiting for a slot (docs/reference.md §26.2): a request whose adapter must be loaded
// while every slot holds an adapter that running requests use waits until one of them
// is free, then has it evicted; the tests run one slot, held by a running request.

// startWaitWorker starts a worker with one adapter slot over eng, its log on logs, and
// mod's settings (nil: none); gen sends it a request (generate).
func startWaitWorker(t *testing.T, eng *loraEngine, logs logLines, mod func(*Config)) (sys *actor.ActorSystem, pid *actor.PID, gen func(id, name, path string) chan *messages.TokenChunk) {
	t.Helper()
	sys, pid, _, _ = startLoraWorker(t, eng, 1, func(c *Config) {
		c.Logger = zerolog.New(logs)
		if mod != nil {
			mod(c)
		}
	})
	return sys, pid, func(id, name, path string) chan *messages.TokenChunk { return generate(sys, pid, id, name, path) }
}

// waitsForSlot waits for the worker's log line saying that adapter name's load waits for
// a slot; a chunk of the request (chunks) before it, its refusal, fails the test.
func waitsForSlot(t *testing.T, logs logLines, name string, chunks chan *messages.TokenChunk) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-logs:
			if strings.Contains(l, "waits for a slot") && strings.Contains(l, `"adapter":"`+name+`"`) {
				return
			}
		case c := <-chunks:
			t.Fatalf("adapter %s: the request answered %v instead of waiting for a slot", name, c)
		case <-deadline:
			t.Fatalf("adapter %s: no wait for a slot within 10 s", name)
		}
	}
}

// events checks that the engine's next calls are want, in order.
func events(t *testing.T, eng *loraEngine, want ...string) {
	t.Helper()
	for _, w := range want {
		if ev := nextEvent(t, eng); ev != w {
			t.Fatalf("engine call %q, want %q", ev, w)
		}
	}
}

// running starts request id of adapter name (loaded from path into the free slot) and
// waits for its first token: it then runs until the engine is released.
func running(t *testing.T, eng *loraEngine, gen func(id, name, path string) chan *messages.TokenChunk, id, name, path string) chan *messages.TokenChunk {
	t.Helper()
	chunks := gen(id, name, path)
	events(t, eng, "load "+name, "generate "+name)
	if c := next(t, chunks); c.Error != "" || c.FinishReason != "" {
		t.Fatalf("%s: first chunk %v", id, c)
	}
	return chunks
}

// noChunk checks that the request got no chunk (yet).
func noChunk(t *testing.T, id string, chunks chan *messages.TokenChunk) {
	t.Helper()
	select {
	case c := <-chunks:
		t.Errorf("%s: unexpected chunk %v", id, c)
	default:
	}
}

// TestLoraRequestWaitsForSlot: with the one slot's adapter in use, a request of another
// adapter waits (a second request of it shares its one load), and a third adapter's
// waits behind it; when the running request ends, the first waiting adapter evicts its
// adapter and is served; the next one is served when both of its requests ended. No
// request fails; the waits are counted.
func TestLoraRequestWaitsForSlot(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	_, _, gen := startWaitWorker(t, eng, logs, nil)
	series := func(family string) string {
		return family + `{model="m",worker="w-lora-` + t.Name() + `"}`
	}
	before := metricValues(t)
	pa, pb, pc := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	r1 := running(t, eng, gen, "r1", "a", pa)
	r2 := gen("r2", "b", pb)
	waitsForSlot(t, logs, "b", r2)
	r3 := gen("r3", "b", pb) // taken before r4: it joins b's waiting load
	r4 := gen("r4", "c", pc)
	waitsForSlot(t, logs, "c", r4)
	noEvent(t, eng)

	eng.release <- struct{}{} // r1, the only request in the engine
	events(t, eng, "end a", "unload a", "load b", "generate b", "generate b")
	finishRequest(t, r1)
	eng.release <- struct{}{} // one of b's requests: c waits for the other
	events(t, eng, "end b")
	eng.release <- struct{}{}
	events(t, eng, "end b", "unload b", "load c", "generate c")
	eng.release <- struct{}{}
	events(t, eng, "end c")
	for _, r := range []chan *messages.TokenChunk{r2, r3, r4} {
		finishRequest(t, r)
	}
	noEvent(t, eng)
	after := metricValues(t)
	for _, s := range []string{series(metricLoraSlotWaits), series(metricLoraSlotWaitSeconds + "_count")} {
		if got := after[s] - before[s]; got != 2 {
			t.Errorf("%s rose by %g, want 2 (b's wait and c's)", s, got)
		}
	}
}

// TestLoraSlotWaitCancelled: a request cancelled while its adapter waits for a slot
// leaves the queue: its adapter is not loaded when the slot is freed, the next waiting
// one is, and the cancelled request gets nothing more.
func TestLoraSlotWaitCancelled(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	sys, pid, gen := startWaitWorker(t, eng, logs, nil)
	r1 := running(t, eng, gen, "r1", "a", writeAdapter(t, "m", 8))
	r2 := gen("r2", "b", writeAdapter(t, "m", 8))
	waitsForSlot(t, logs, "b", r2)
	sys.Root.Send(pid, &messages.Cancel{RequestId: "r2"})
	waitLog(t, logs, "the requests that waited for one ended first")
	r3 := gen("r3", "c", writeAdapter(t, "m", 8))
	waitsForSlot(t, logs, "c", r3)
	eng.release <- struct{}{}
	events(t, eng, "end a", "unload a", "load c", "generate c")
	eng.release <- struct{}{}
	events(t, eng, "end c")
	finishRequest(t, r1)
	finishRequest(t, r3)
	noChunk(t, "r2", r2)
	noEvent(t, eng)
}

// TestLoraSlotWaitBound: a request whose adapter waits for a slot longer than the load
// wait (Config.LoraWaitTimeout) fails as one another worker may serve, and its adapter's
// load is given up: the slot, once free, goes to the next adapter.
func TestLoraSlotWaitBound(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	_, _, gen := startWaitWorker(t, eng, logs, func(c *Config) { c.LoraWaitTimeout = 50 * time.Millisecond })
	r1 := running(t, eng, gen, "r1", "a", writeAdapter(t, "m", 8))
	c := next(t, gen("r2", "b", writeAdapter(t, "m", 8)))
	if c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `adapter "b" did not load within 50ms`) {
		t.Fatalf("chunk %v, want the migratable end of the wait", c)
	}
	// b's load ends without a slot: given up while it waited, or refused when the
	// request's wait ended before its folder check did.
	waitLog(t, logs, `"adapter":"b","reason":"no_slot"`)
	eng.release <- struct{}{}
	events(t, eng, "end a")
	finishRequest(t, r1)
	r3 := gen("r3", "c", writeAdapter(t, "m", 8))
	events(t, eng, "unload a", "load c", "generate c")
	eng.release <- struct{}{}
	events(t, eng, "end c")
	finishRequest(t, r3)
	noEvent(t, eng)
}

// TestLoraUnloadWhileWaitingForSlot: an unload of an adapter whose load waits for a
// slot forgets it at once (the engine never had it), and its waiting request fails as
// one another worker may serve.
func TestLoraUnloadWhileWaitingForSlot(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	sys, pid, gen := startWaitWorker(t, eng, logs, nil)
	r1 := running(t, eng, gen, "r1", "a", writeAdapter(t, "m", 8))
	r2 := gen("r2", "b", writeAdapter(t, "m", 8))
	waitsForSlot(t, logs, "b", r2)
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "b"}); r.Failure != messages.LoraFailure_LORA_OK || names(r.Adapters) != "a" || len(r.Error) > 0 {
		t.Errorf("unload reply %v", r)
	}
	c := next(t, r2)
	if c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `adapter "b" was unloaded while it waited for a slot`) {
		t.Errorf("chunk %v, want the migratable end of the wait", c)
	}
	eng.release <- struct{}{}
	events(t, eng, "end a")
	finishRequest(t, r1)
	// Forgotten, not known: a request without a folder is not served.
	if c := next(t, gen("r3", "b", "")); c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `does not hold adapter "b"`) {
		t.Errorf("a request after the unload: %v", c)
	}
	noEvent(t, eng)
}

// TestLoraSlotWaitEngineExit: an engine that exits ends the waits for its slots: the
// waiting request fails as one another worker may serve.
func TestLoraSlotWaitEngineExit(t *testing.T) {
	eng := newLoraEngine()
	logs := make(logLines, 1024)
	_, _, gen := startWaitWorker(t, eng, logs, nil)
	var started struct{ Pid int }
	if err := json.Unmarshal([]byte(waitLog(t, logs, "engine started")), &started); err != nil || started.Pid == 0 {
		t.Fatalf("engine pid from the log: %v", err)
	}
	running(t, eng, gen, "r1", "a", writeAdapter(t, "m", 8))
	r2 := gen("r2", "b", writeAdapter(t, "m", 8))
	waitsForSlot(t, logs, "b", r2)
	if err := syscall.Kill(started.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c := next(t, r2)
	if c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, "the engine exited during the load") {
		t.Errorf("chunk %v, want the migratable end of the wait", c)
	}
}
