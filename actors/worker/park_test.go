package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// parkLauncher starts a sleeping process per engine start, counts the starts, serves a
// healthy engine and delivers the KV batches sent on events to every subscription.
type parkLauncher struct {
	starts *atomic.Int32
	closed *atomic.Int32
	events chan kv.Batch
	engine engines.Engine
}

func newParkLauncher(e engines.Engine) parkLauncher {
	return parkLauncher{starts: new(atomic.Int32), closed: new(atomic.Int32), events: make(chan kv.Batch), engine: e}
}

func (l parkLauncher) Command(string, int, string) (argv, env []string) {
	l.starts.Add(1)
	return []string{"/bin/sh", "-c", "exec sleep 60"}, nil
}
func (l parkLauncher) Connect(string) engines.Engine { return l.engine }
func (l parkLauncher) SubscribeKVEvents(ctx context.Context, _ string, fn func(kv.Batch)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b := <-l.events:
			fn(b)
		}
	}
}
func (l parkLauncher) Close() error {
	l.closed.Add(1)
	return nil
}

// parkRouter records what a worker sends its Router grain.
type parkRouter struct {
	infos  chan *messages.WorkerInfo
	events chan *messages.KvEventBatch
	dumps  chan *messages.BlockDump
	leaves chan *messages.DeregisterWorker
}

func newParkRouter() parkRouter {
	return parkRouter{infos: make(chan *messages.WorkerInfo, 256), events: make(chan *messages.KvEventBatch, 64),
		dumps: make(chan *messages.BlockDump, 64), leaves: make(chan *messages.DeregisterWorker, 8)}
}

func (r parkRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	select {
	case r.infos <- m.Worker:
	default:
	}
	return &messages.RegisterAck{Accepted: true}, nil
}
func (r parkRouter) Deregister(m *messages.DeregisterWorker) (*messages.Ack, error) {
	r.leaves <- m
	return &messages.Ack{}, nil
}
func (r parkRouter) PublishEvents(m *messages.KvEventBatch) (*messages.EventAck, error) {
	r.events <- m
	return &messages.EventAck{}, nil
}
func (r parkRouter) PublishDump(m *messages.BlockDump) (*messages.Ack, error) {
	r.dumps <- m
	return &messages.Ack{}, nil
}

// ready waits for a ready registration and returns it.
func (r parkRouter) ready(t *testing.T) *messages.WorkerInfo {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case info := <-r.infos:
			if info.Ready {
				return info
			}
		case <-deadline:
			t.Fatal("no ready registration within 10 s")
		}
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10 s", what)
	}
	var zero T
	return zero
}

func storedBatch(seq uint64, parent uint64, hashes ...uint64) kv.Batch {
	ev := kv.Event{Kind: kv.BlockStored, EngineHashes: hashes, BlockSize: 1, TokenIDs: make([]uint32, len(hashes)),
		HasParent: parent != 0, ParentHash: parent}
	return kv.Batch{Seq: seq, DataParallelRank: -1, Events: []kv.Event{ev}}
}

func spawnParkWorker(t *testing.T, l parkLauncher, rt parkRouter, p *Parking, adopt *Parked) (*actor.ActorSystem, *actor.PID) {
	t.Helper()
	props, err := Props(Config{WorkerID: "w-park", Card: &messages.ModelCard{Model: "m"}, Launcher: l,
		Heartbeat: 20 * time.Millisecond, StopGrace: time.Second, Router: rt, Parking: p, Adopt: adopt,
		Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	return sys, sys.Root.Spawn(props)
}

// parkStop stops the worker at pid with parking open and takes what it parked.
func parkStop(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, p *Parking) *Parked {
	t.Helper()
	p.Open()
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if !p.Holds("w-park") {
		t.Fatal("the engine of a ready worker stopping while parking is open was not parked")
	}
	return p.Take("w-park")
}

// TestParkedEngineAdopted: a worker stopping while parking is open leaves its engine
// running; the next worker with its id serves it without starting one, under the same
// engine epoch, and its relay goes on: event numbering continues and a dump holds the
// blocks stored before the hand-over. The adopting worker, stopping with parking
// closed, stops the engine.
func TestParkedEngineAdopted(t *testing.T) {
	l, p := newParkLauncher(newDisaggEngine()), NewParking()
	rtA := newParkRouter()
	sysA, pidA := spawnParkWorker(t, l, rtA, p, nil)
	infoA := rtA.ready(t)
	l.events <- storedBatch(1, 0, 11, 12)
	if ev := recv(t, rtA.events, "first batch"); ev.Seq != 1 {
		t.Fatalf("first batch seq %d, want 1", ev.Seq)
	}

	e := parkStop(t, sysA, pidA, p)
	select {
	case <-e.proc.Done():
		t.Fatal("the parked engine's process was stopped")
	default:
	}
	// The parking worker left its router: the next one, at another address, registers
	// under the same id.
	select {
	case m := <-rtA.leaves:
		if m.Actor.GetId() != pidA.Id {
			t.Fatalf("deregistered %v, want the parking worker %v", m.Actor, pidA)
		}
	default:
		t.Fatal("the parking worker did not deregister from its router")
	}
	if n := l.closed.Load(); n != 0 {
		t.Fatalf("launcher closed %d times while its engine is parked, want 0", n)
	}

	rtB := newParkRouter()
	sysB, pidB := spawnParkWorker(t, l, rtB, p, e)
	infoB := rtB.ready(t)
	if n := l.starts.Load(); n != 1 {
		t.Fatalf("%d engine starts, want 1: the adopting worker started its own", n)
	}
	if infoB.EngineEpoch != infoA.EngineEpoch || infoB.EngineUrl != infoA.EngineUrl {
		t.Fatalf("adopted engine registered epoch %d url %q, want %d %q", infoB.EngineEpoch, infoB.EngineUrl,
			infoA.EngineEpoch, infoA.EngineUrl)
	}
	if infoB.Actor.GetId() != pidB.Id {
		t.Fatalf("registered actor %v, want the adopting worker %v", infoB.Actor, pidB)
	}
	if n := l.closed.Load(); n != 1 {
		t.Fatalf("the parked engine's launcher closed %d times at adoption, want 1", n)
	}
	l.events <- storedBatch(2, 12, 13)
	if ev := recv(t, rtB.events, "batch after adoption"); ev.Seq != 2 || ev.EngineEpoch != infoA.EngineEpoch {
		t.Fatalf("batch after adoption: seq %d epoch %d, want 2 %d", ev.Seq, ev.EngineEpoch, infoA.EngineEpoch)
	}
	sysB.Root.Send(pidB, &messages.DumpBlocksRequest{})
	d := recv(t, rtB.dumps, "dump")
	blocks := 0
	for _, ev := range d.Events {
		blocks += len(ev.GetStored().GetBlockHashes())
	}
	if blocks != 3 || d.LastSeq != 2 {
		t.Fatalf("dump after adoption: %d blocks, last seq %d; want 3 (2 before the hand-over, 1 after) and 2", blocks, d.LastSeq)
	}

	if err := sysB.Root.StopFuture(pidB).Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted engine was not stopped with its worker (parking closed)")
	}
}

// TestParkedEngineExitedStartsAnew: an adopted engine whose process exited while parked
// is replaced by a new one, under a later epoch.
func TestParkedEngineExitedStartsAnew(t *testing.T) {
	l, p := newParkLauncher(newDisaggEngine()), NewParking()
	rtA := newParkRouter()
	sysA, pidA := spawnParkWorker(t, l, rtA, p, nil)
	infoA := rtA.ready(t)
	e := parkStop(t, sysA, pidA, p)
	e.proc.Kill()
	<-e.proc.Done()
	rtB := newParkRouter()
	sysB, pidB := spawnParkWorker(t, l, rtB, p, e)
	t.Cleanup(func() { _ = sysB.Root.StopFuture(pidB).Wait() })
	infoB := rtB.ready(t)
	if n := l.starts.Load(); n != 2 {
		t.Fatalf("%d engine starts, want 2", n)
	}
	if infoB.EngineEpoch <= infoA.EngineEpoch {
		t.Fatalf("new engine's epoch %d, want above the parked one's %d", infoB.EngineEpoch, infoA.EngineEpoch)
	}
}

// muteEngine answers health checks but no load scrape.
type muteEngine struct{ *disaggEngine }

func (muteEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return nil, errors.New("no answer")
}

// TestNotParkedWhenClosedOrNotReady: with parking closed, an engine not yet ready, or
// one that stopped answering its load scrapes, a stopping worker stops its engine and
// parks nothing.
func TestNotParkedWhenClosedOrNotReady(t *testing.T) {
	for _, tc := range []struct {
		name    string
		healthy bool
		open    bool
		mute    bool // the engine stops answering load scrapes
	}{{"closed", true, false, false}, {"not ready", false, true, false}, {"not answering", true, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var eng engines.Engine = newDisaggEngine()
			switch {
			case !tc.healthy:
				eng = deadEngine{}
			case tc.mute:
				eng = muteEngine{newDisaggEngine()}
			}
			l, p := newParkLauncher(eng), NewParking()
			rt := newParkRouter()
			sys, pid := spawnParkWorker(t, l, rt, p, nil)
			if tc.healthy {
				rt.ready(t)
				for tc.mute && recv(t, rt.infos, "a registration out of routing").Ready {
				}
			} else {
				recv(t, rt.infos, "a registration")
			}
			if tc.open {
				p.Open()
			}
			if err := sys.Root.StopFuture(pid).Wait(); err != nil {
				t.Fatal(err)
			}
			if p.Holds("w-park") {
				t.Fatal("engine parked")
			}
			if n := l.closed.Load(); n != 1 {
				t.Fatalf("launcher closed %d times, want 1", n)
			}
		})
	}
}

// TestAdoptedRelayDropsTheOldWorkersInfo: once adopted, a relay registers only its new
// owner's info; a late heartbeat or adapter change of the worker that parked it would
// point the router at an actor that is gone.
func TestAdoptedRelayDropsTheOldWorkersInfo(t *testing.T) {
	rt := newParkRouter()
	r := newRelay("w", nopRouter{}, zerolog.Nop())
	old := &messages.ActorRef{Address: "old:1", Id: "worker/w"}
	owner := &messages.ActorRef{Address: "new:1", Id: "worker/w"}
	r.handle(relayHeartbeat{info: &messages.WorkerInfo{WorkerId: "w", Actor: old}})
	r.handle(relayAdopt{router: rt, owner: owner})
	done := make(chan struct{})
	r.handle(relayRegister{info: &messages.WorkerInfo{WorkerId: "w", Actor: old}, done: done})
	<-done
	r.handle(relayHeartbeat{info: &messages.WorkerInfo{WorkerId: "w", Actor: old}})
	r.handle(relayReregister{})
	select {
	case info := <-rt.infos:
		t.Fatalf("the old worker's info registered after adoption: %v", info.Actor)
	default:
	}
	r.handle(relayHeartbeat{info: &messages.WorkerInfo{WorkerId: "w", Actor: owner}})
	if info := recv(t, rt.infos, "the owner's registration"); info.Actor.GetAddress() != "new:1" {
		t.Fatalf("registered %v, want the owner", info.Actor)
	}
}

// TestParkedPrefillLegReleased: the blocks a parked engine pinned for a prefill leg are
// released: a leg in flight as its worker parked (cancelled; the engine answers after
// the cancel, engines.FinishPrefill) by its request's end, since its parameters reached
// no one; a leg that finished just before (its last chunk reached the receiver) by the
// adopting worker after the grace, its receiver being unreachable from there.
func TestParkedPrefillLegReleased(t *testing.T) {
	for _, finished := range []bool{false, true} {
		t.Run(map[bool]string{false: "in flight", true: "finished"}[finished], func(t *testing.T) {
			eng := newDisaggEngine()
			var served engines.Engine = lateEngine{eng} // answers a cancelled prefill leg
			if finished {
				served = eng
			}
			l, p := newParkLauncher(served), NewParking()
			mk := func(rt parkRouter, adopt *Parked) *actor.Props {
				props, err := Props(Config{WorkerID: "w-park", Role: "prefill", Card: &messages.ModelCard{Model: "m"}, Launcher: l,
					Heartbeat: 20 * time.Millisecond, StopGrace: time.Second, Router: rt, Parking: p, Adopt: adopt,
					PinnedReleaseGrace: 100 * time.Millisecond, Logger: zerolog.Nop()})
				if err != nil {
					t.Fatal(err)
				}
				return props
			}
			sys := actor.NewActorSystem()
			rtA := newParkRouter()
			pid := sys.Root.Spawn(mk(rtA, nil))
			rtA.ready(t)
			ref, chunks := chunkSink(sys)
			prefill := &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}
			sys.Root.Send(pid, &messages.Generate{RequestId: "r#prefill", TokenIds: []uint32{5}, Sampling: prefill, ReplyTo: ref})
			<-eng.sampling
			next(t, chunks)
			if finished {
				close(eng.release)
				if c := next(t, chunks); c.KvTransferParams == "" {
					t.Fatalf("last chunk %v, want transfer parameters", c)
				}
			}
			e := parkStop(t, sys, pid, p)
			rtB := newParkRouter()
			pidB := sys.Root.Spawn(mk(rtB, e))
			defer func() { _ = sys.Root.StopFuture(pidB).Wait() }()
			rtB.ready(t)
			select {
			case <-eng.released:
			case <-time.After(3 * time.Second):
				t.Fatal("the parked engine's blocks pinned for the prefill leg were never released")
			}
		})
	}
}
