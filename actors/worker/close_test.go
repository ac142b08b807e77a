package worker

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// closingLauncher is a shellLauncher whose engine clients and itself report Close.
type closingLauncher struct {
	shellLauncher
	engineClosed, launcherClosed chan struct{}
}

func (l closingLauncher) Connect(string) engines.Engine { return closingEngine{closed: l.engineClosed} }
func (l closingLauncher) Close() error {
	l.launcherClosed <- struct{}{}
	return nil
}

type closingEngine struct {
	deadEngine
	closed chan struct{}
}

func (e closingEngine) Close() error {
	e.closed <- struct{}{}
	return nil
}

// TestClosesEngineAndLauncher: the engine client of a process that exited is closed (a
// trtllm client's stats collector stops), and the launcher when the worker stops (a
// trtllm launcher's options file goes).
func TestClosesEngineAndLauncher(t *testing.T) {
	l := closingLauncher{shellLauncher: shellLauncher{script: "exit 3"},
		engineClosed: make(chan struct{}, 16), launcherClosed: make(chan struct{}, 16)}
	sys := actor.NewActorSystem()
	props, err := Props(Config{WorkerID: "w-close", Card: &messages.ModelCard{Model: "m"}, Launcher: l,
		StopGrace: time.Second, Router: nopRouter{}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(props)
	select {
	case <-l.engineClosed:
	case <-time.After(10 * time.Second):
		t.Fatal("the client of an engine that exited was not closed within 10 s")
	}
	select {
	case <-l.launcherClosed:
		t.Fatal("launcher closed while the worker still runs")
	default:
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.launcherClosed:
	case <-time.After(10 * time.Second):
		t.Fatal("launcher not closed when the worker stopped")
	}
}
