package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// heldLoadEngine is healthy; its first Load call reports on inLoad and waits for release
// to close, later calls answer at once.
type heldLoadEngine struct {
	inLoad  chan struct{}
	release chan struct{}
	calls   chan struct{} // one token: the first call takes it
}

func newHeldLoadEngine() *heldLoadEngine {
	e := &heldLoadEngine{inLoad: make(chan struct{}), release: make(chan struct{}), calls: make(chan struct{}, 1)}
	e.calls <- struct{}{}
	return e
}

func (*heldLoadEngine) Health(context.Context) error { return nil }
func (e *heldLoadEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	select {
	case <-e.calls:
		close(e.inLoad)
		<-e.release // held past the scrape's own timeout on purpose: the heartbeat stays in flight
	default:
	}
	return &messages.WorkerLoad{TotalBlocks: 16}, nil
}
func (*heldLoadEngine) Generate(context.Context, string, []uint32, *messages.SamplingParams, func(engines.Chunk) error) error {
	return nil
}

// TestEngineExitDuringHeartbeatReachesRouterAtOnce: the engine dies while a heartbeat is
// in flight (its load scrape hangs). That heartbeat still carries "ready"; the next one,
// saying "not ready", must follow as soon as it ends — not at the next tick (an hour
// here), and not only once the restarted engine is ready again.
func TestEngineExitDuringHeartbeatReachesRouterAtOnce(t *testing.T) {
	engine := newHeldLoadEngine()
	logs := make(logLines, 1024)
	rt := infoRouter{infos: make(chan *messages.WorkerInfo, 64)}
	props, err := Props(Config{WorkerID: "w-hb", Card: &messages.ModelCard{Model: "m"},
		Launcher:  engineLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: engine},
		Heartbeat: time.Hour, StopGrace: time.Second, Router: rt, Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	select {
	case <-engine.inLoad: // the engine is ready and the heartbeat announcing it is in flight
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat scraped the engine within 10 s")
	}
	var started struct{ Pid int }
	if err := json.Unmarshal([]byte(waitLog(t, logs, "engine started")), &started); err != nil || started.Pid == 0 {
		t.Fatalf("engine pid from the log: %v", err)
	}
	if err := syscall.Kill(started.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "engine exited")
	close(engine.release)

	deadline := time.After(10 * time.Second)
	var seen []string
	var first uint64 // the epoch of the engine that died (the stale heartbeat's)
	for {
		select {
		case info := <-rt.infos:
			seen = append(seen, "ready="+strconv.FormatBool(info.Ready)+" epoch="+strconv.FormatUint(info.EngineEpoch, 10))
			if first == 0 {
				first = info.EngineEpoch
			}
			switch {
			case !info.Ready:
				return
			case info.EngineEpoch > first+1: // the exit's epoch is first+1, the restart's first+2
				t.Fatalf("the restarted engine registered before any not-ready heartbeat: %v", seen)
			}
		case <-deadline:
			t.Fatalf("no not-ready heartbeat within 10 s of the engine's exit: %v", seen)
		}
	}
}

// waitLog waits up to 10 s for a log line containing msg and returns it.
func waitLog(t *testing.T, logs logLines, msg string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-logs:
			if strings.Contains(l, msg) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q log line within 10 s", msg)
		}
	}
}

// movedRouter counts registrations and dumps; once moved is set it answers every
// registration need_dump, as a Router grain activated afresh does.
type movedRouter struct {
	nopRouter
	registered chan bool // Ready of each registration
	dumped     chan *messages.BlockDump
	moved      *atomic.Bool
}

func (r movedRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	r.registered <- m.Worker.Ready
	return &messages.RegisterAck{Accepted: true, NeedDump: r.moved.Load()}, nil
}

func (r movedRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	r.dumped <- m
	return &messages.Ack{}, nil
}

// startMovable starts a worker over engine with an hour's heartbeat, registering with a
// movedRouter, and waits for its first ready registration.
func startMovable(t *testing.T, engine engines.Engine) (*actor.ActorSystem, movedRouter) {
	t.Helper()
	rt := movedRouter{registered: make(chan bool, 64), dumped: make(chan *messages.BlockDump, 64), moved: &atomic.Bool{}}
	sys := actor.NewActorSystem()
	props, err := Props(Config{WorkerID: "w-moved", Card: &messages.ModelCard{Model: "m"},
		Launcher:  engineLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: engine},
		Heartbeat: time.Hour, StopGrace: time.Second, Router: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	waitRegisteredReady(t, rt.registered)
	return sys, rt
}

// TestWorkerRegistersWhenMembersChange: a member leaving the cluster may have taken the
// Router grain with it, so the worker registers at once (not at its next heartbeat, an
// hour here) and sends its block list when the new activation asks.
func TestWorkerRegistersWhenMembersChange(t *testing.T) {
	sys, rt := startMovable(t, heldEngine{release: make(chan struct{})})
	rt.moved.Store(true)
	// A topology without a member joining or leaving changes nothing; the next one does.
	sys.EventStream.Publish(&pcluster.ClusterTopology{TopologyHash: 1})
	sys.EventStream.Publish(&pcluster.ClusterTopology{TopologyHash: 2, Left: []*pcluster.Member{{Id: "frontend-a", Host: "10.0.0.1", Port: 7000}}})
	select {
	case ready := <-rt.registered:
		if !ready {
			t.Fatal("registered not ready after the membership change")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no registration within 10 s of a member leaving (the heartbeat is an hour)")
	}
	select {
	case d := <-rt.dumped:
		if d.WorkerId != "w-moved" || !d.Last {
			t.Fatalf("dump %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no block list sent within 10 s of a need_dump answer")
	}
}

// flakyEngine answers load scrapes until failing is set, then fails them at once.
type flakyEngine struct {
	heldEngine
	failing *atomic.Bool
}

func (e flakyEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	if e.failing.Load() {
		return nil, errors.New("scrape refused")
	}
	return e.heldEngine.Load(ctx)
}

// A membership change registers the worker again without scraping its engine: failed
// scrapes count towards taking it out of routing, so three changes while the engine
// refuses scrapes for a moment must not do what three heartbeats (3 h here) would.
func TestMembershipChurnDoesNotScrape(t *testing.T) {
	failing := &atomic.Bool{}
	sys, rt := startMovable(t, flakyEngine{heldEngine: heldEngine{release: make(chan struct{})}, failing: failing})
	failing.Store(true)
	for i := range 3 {
		sys.EventStream.Publish(&pcluster.ClusterTopology{TopologyHash: uint64(10 + i),
			Joined: []*pcluster.Member{{Id: fmt.Sprint("fe-", i), Host: "10.0.0.1", Port: int32(7000 + i)}}})
		select {
		case ready := <-rt.registered:
			if !ready {
				t.Fatalf("registered not ready after %d topology changes (heartbeat 1 h)", i+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no registration")
		}
	}
}
