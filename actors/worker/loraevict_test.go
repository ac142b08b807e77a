package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// Requests during an eviction (docs/reference.md §26.2): a request naming an adapter
// that the worker is evicting for another load waits for the eviction, then has the
// adapter loaded again; an operator's unload is no eviction: its requests fail.

// waitsForEviction waits for the worker's log line saying that a request of adapter
// name waits for the adapter's eviction to end; a chunk of the request (chunks) before
// it, its refusal, fails the test.
func waitsForEviction(t *testing.T, logs logLines, name string, chunks chan *messages.TokenChunk) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-logs:
			if strings.Contains(l, "waits for its eviction") && strings.Contains(l, `"adapter":"`+name+`"`) {
				return
			}
		case c := <-chunks:
			t.Fatalf("adapter %s: the request answered %v instead of waiting for the eviction", name, c)
		case <-deadline:
			t.Fatalf("adapter %s: no wait for the eviction within 10 s", name)
		}
	}
}

// TestLoraRequestDuringEviction: with one slot, the engine holds a's eviction for b's
// request; requests of a that come meanwhile (with its folder, and without: the worker
// has its own) wait; once b's request ended, a is loaded again and serves them. No
// request fails.
func TestLoraRequestDuringEviction(t *testing.T) {
	eng := newLoraEngine()
	eng.unloadGate = make(chan struct{})
	logs := make(logLines, 1024)
	_, _, gen := startWaitWorker(t, eng, logs, nil)
	pa, pb := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	r1 := running(t, eng, gen, "r1", "a", pa)
	eng.release <- struct{}{}
	events(t, eng, "end a")
	finishRequest(t, r1)
	r2 := gen("r2", "b", pb)
	events(t, eng, "unload a") // held in the engine until the gate opens
	r3 := gen("r3", "a", pa)
	waitsForEviction(t, logs, "a", r3)
	r4 := gen("r4", "a", "")
	waitsForEviction(t, logs, "a", r4)
	noEvent(t, eng)

	close(eng.unloadGate)
	events(t, eng, "load b", "generate b")
	eng.release <- struct{}{} // r2: a then has b's slot
	events(t, eng, "end b", "unload b", "load a", "generate a", "generate a")
	finishRequest(t, r2)
	eng.release <- struct{}{}
	eng.release <- struct{}{}
	events(t, eng, "end a", "end a")
	finishRequest(t, r3)
	finishRequest(t, r4)
	noEvent(t, eng)
	if from := eng.heldFrom("a"); from != pa {
		t.Errorf("a loaded again from %q, want %q", from, pa)
	}
}

// TestLoraRequestDuringOperatorUnload: an operator's unload is no eviction: a request
// of the adapter while the engine unloads it fails as one another worker may serve,
// and the adapter is not loaded again.
func TestLoraRequestDuringOperatorUnload(t *testing.T) {
	eng := newLoraEngine()
	eng.unloadGate = make(chan struct{})
	sys, pid, _, _ := startLoraWorker(t, eng, 1, nil)
	pa := writeAdapter(t, "m", 8)
	runAdapter(t, eng, generate(sys, pid, "r1", "a", pa), "a", "load a")
	unload := sys.Root.RequestFuture(pid, &messages.UnloadLora{Name: "a"}, 10*time.Second)
	events(t, eng, "unload a") // held in the engine until the gate opens
	c := next(t, generate(sys, pid, "r2", "a", pa))
	if c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `adapter "a" is being unloaded`) {
		t.Errorf("a request during the unload: %v, want its migratable refusal", c)
	}
	close(eng.unloadGate)
	res, err := unload.Result()
	if r, ok := res.(*messages.LoraReply); err != nil || !ok || r.Failure != messages.LoraFailure_LORA_OK || len(r.Adapters) != 0 {
		t.Fatalf("unload reply %v %v", res, err)
	}
	noEvent(t, eng)
	if c := next(t, generate(sys, pid, "r3", "a", "")); c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, `does not hold adapter "a"`) {
		t.Errorf("a request after the unload: %v", c)
	}
}
