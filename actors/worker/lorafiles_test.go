package worker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// fifoConfig replaces the adapter_config.json of adapter folder dir by a FIFO; a check
// blocked opening it is released when the test ends.
func fifoConfig(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "adapter_config.json")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
}

// TestLoadLoraSpecialConfig: a load whose adapter_config.json is a FIFO is refused at
// once as a bad adapter (the check never waits for a writer), and leaves nothing behind:
// an unload of the name finds nothing, and the name loads from a good folder.
func TestLoadLoraSpecialConfig(t *testing.T) {
	eng := newLoraEngine()
	sys, pid, _, _ := startLoraWorker(t, eng, 2, nil)
	bad, good := writeAdapter(t, "m", 8), writeAdapter(t, "m", 8)
	fifoConfig(t, bad)
	steps := []struct {
		name    string
		msg     any
		failure messages.LoraFailure
		err     string
		engine  string // the engine's call, if one is made
	}{
		{"a FIFO config", load("a", bad), messages.LoraFailure_LORA_INVALID, "adapter_config.json is not a regular file (a named pipe)", ""},
		{"an unload of the name", &messages.UnloadLora{Name: "a"}, messages.LoraFailure_LORA_NOT_FOUND, `adapter "a" is not loaded`, ""},
		{"the name from a good folder", load("a", good), messages.LoraFailure_LORA_OK, "", "load a"},
	}
	for _, st := range steps {
		r := ask(t, sys, pid, st.msg)
		if r.Failure != st.failure || !strings.Contains(r.Error, st.err) || (st.err == "") != (r.Error == "") {
			t.Fatalf("%s: %s %q, want %s %q", st.name, r.Failure, r.Error, st.failure, st.err)
		}
		if st.engine != "" {
			if ev := nextEvent(t, eng); ev != st.engine {
				t.Fatalf("%s: engine call %q, want %q", st.name, ev, st.engine)
			}
		}
		noEvent(t, eng)
	}
	// A request naming such a folder fails as a bad request, at once.
	other := writeAdapter(t, "m", 8)
	fifoConfig(t, other)
	c := next(t, generate(sys, pid, "r", "b", other))
	if c.Fault != messages.Fault_FAULT_INVALID_REQUEST || !strings.Contains(c.Error, "not a regular file") {
		t.Errorf("chunk %v, want a bad-request error naming the file", c)
	}
}

// blockingCheck is a folder check (Config.checkAdapter) that blocks on its calls while
// block says so, until release is closed (then it checks as CheckAdapter does); entered
// gets each blocked call's path.
type blockingCheck struct {
	block   func(path string) bool
	entered chan string
	release chan struct{}
}

func newBlockingCheck(block func(string) bool) *blockingCheck {
	return &blockingCheck{block: block, entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blockingCheck) check(path string, base model.BaseModel, maxRank int) (model.Adapter, error) {
	if b.block(path) {
		b.entered <- path
		<-b.release
	}
	return CheckAdapter(path, base, maxRank)
}

// TestUnloadLoraDuringCheck: an unload of an adapter whose folder is being checked is
// LORA_ENGINE (still loading: unload it once it is loaded) and leaves the load alone,
// which then completes.
func TestUnloadLoraDuringCheck(t *testing.T) {
	eng := newLoraEngine()
	bc := newBlockingCheck(func(string) bool { return true })
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) { c.checkAdapter = bc.check })
	loading := sys.Root.RequestFuture(pid, load("a", writeAdapter(t, "m", 8)), 10*time.Second)
	<-bc.entered
	r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"})
	if r.Failure != messages.LoraFailure_LORA_ENGINE || !strings.Contains(r.Error, `adapter "a" is still loading; unload it once it is loaded`) {
		t.Fatalf("unload during the check: %s %q", r.Failure, r.Error)
	}
	close(bc.release)
	res, err := loading.Result()
	if lr, ok := res.(*messages.LoraReply); err != nil || !ok || lr.Failure != messages.LoraFailure_LORA_OK || names(lr.Adapters) != "a*" {
		t.Fatalf("the load: %v %v", res, err)
	}
	if ev := nextEvent(t, eng); ev != "load a" {
		t.Fatalf("engine call %q", ev)
	}
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_OK {
		t.Fatalf("unload once loaded: %v", r)
	}
}

// TestLoraCheckDeadline: a folder check that does not end within Config.LoraCheckTimeout
// (a file system that does not answer) fails the load as LORA_ENGINE and frees the name:
// an unload finds nothing, a load of the name from another folder works, and the hung
// check's late outcome changes nothing. A request whose check hangs fails as one another
// worker may serve.
func TestLoraCheckDeadline(t *testing.T) {
	eng := newLoraEngine()
	hung := writeAdapter(t, "m", 8)
	bc := newBlockingCheck(func(path string) bool { return path == hung })
	sys, pid, _, _ := startLoraWorker(t, eng, 2, func(c *Config) {
		c.checkAdapter, c.LoraCheckTimeout = bc.check, 50*time.Millisecond
	})
	r := ask(t, sys, pid, load("a", hung))
	if r.Failure != messages.LoraFailure_LORA_ENGINE || !strings.Contains(r.Error, "did not finish within 50ms") || !strings.Contains(r.Error, hung) {
		t.Fatalf("load with a hung check: %s %q", r.Failure, r.Error)
	}
	<-bc.entered
	if r := ask(t, sys, pid, &messages.UnloadLora{Name: "a"}); r.Failure != messages.LoraFailure_LORA_NOT_FOUND {
		t.Fatalf("unload after the deadline: %v", r)
	}
	good := writeAdapter(t, "m", 8)
	if r := ask(t, sys, pid, load("a", good)); r.Failure != messages.LoraFailure_LORA_OK || names(r.Adapters) != "a*" {
		t.Fatalf("load from a good folder: %v", r)
	}
	if ev := nextEvent(t, eng); ev != "load a" {
		t.Fatalf("engine call %q", ev)
	}
	c := next(t, generate(sys, pid, "r", "b", hung))
	if c.Fault != messages.Fault_FAULT_ENGINE_ERROR || !strings.Contains(c.Error, "did not finish within 50ms") {
		t.Errorf("chunk %v, want a migratable error naming the deadline", c)
	}
	<-bc.entered
	close(bc.release) // the hung checks end now: their outcomes are stale
	if r := ask(t, sys, pid, load("a", good)); r.Failure != messages.LoraFailure_LORA_OK || names(r.Adapters) != "a*" || r.Adapters[0].Path != good {
		t.Fatalf("after the late outcomes: %v", r)
	}
	noEvent(t, eng)
}
