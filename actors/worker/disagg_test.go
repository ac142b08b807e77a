package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

func TestPropsRoleAndBootstrap(t *testing.T) {
	base := Config{WorkerID: "w", Card: &messages.ModelCard{Model: "m"}, Launcher: shellLauncher{}, Router: nopRouter{}}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{"default", func(*Config) {}, ""},
		{"prefill", func(c *Config) { c.Role, c.BootstrapHost, c.BootstrapPort = "prefill", "10.0.0.1", 8998 }, ""},
		{"decode", func(c *Config) { c.Role = "decode" }, ""},
		{"unknown role", func(c *Config) { c.Role = "both" }, `worker: role: kv: invalid worker role: "both"`},
		{"port", func(c *Config) { c.BootstrapPort = 65536 }, "bootstrap port 65536 out of range"},
	} {
		cfg := base
		tc.mod(&cfg)
		_, err := Props(cfg)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
		if tc.name == "unknown role" && !errors.Is(err, kv.ErrInvalidRole) {
			t.Errorf("unknown role: %v is not kv.ErrInvalidRole", err)
		}
	}
}

// disaggEngine is healthy. Generate records the sampling parameters, sends one token,
// then waits for release (or its context) and finishes with transfer parameters.
// ReleaseKV reports its calls and returns releaseErr.
type disaggEngine struct {
	sampling   chan *messages.SamplingParams
	cancelled  chan string
	release    chan struct{}
	released   chan [2]string
	releaseErr error
	// finishing receives (when there is room) once Generate took release and is about to
	// hand over its last chunk.
	finishing chan struct{}
	// loads receives (when there is room) at each Load: a heartbeat of the worker.
	loads chan struct{}
}

func newDisaggEngine() *disaggEngine {
	return &disaggEngine{sampling: make(chan *messages.SamplingParams, 8), cancelled: make(chan string, 8),
		release: make(chan struct{}), released: make(chan [2]string, 8), finishing: make(chan struct{}, 8),
		loads: make(chan struct{}, 1)}
}

func (*disaggEngine) Health(context.Context) error { return nil }
func (e *disaggEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	select {
	case e.loads <- struct{}{}:
	default:
	}
	return &messages.WorkerLoad{TotalBlocks: 16}, nil
}
func (e *disaggEngine) Generate(ctx context.Context, id string, _ []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	e.sampling <- s
	if err := fn(engines.Chunk{TokenIDs: []uint32{1}}); err != nil {
		return err
	}
	select {
	case <-e.release:
	case <-ctx.Done():
		e.cancelled <- id
		return ctx.Err()
	}
	select {
	case e.finishing <- struct{}{}:
	default:
	}
	return fn(engines.Chunk{TokenIDs: []uint32{2}, FinishReason: "length", CompletionTokens: 2,
		KVTransferParams: `{"do_remote_prefill":true,"remote_block_ids":[1,2]}`})
}
func (e *disaggEngine) ReleaseKV(_ context.Context, id, params string) error {
	e.released <- [2]string{id, params}
	return e.releaseErr
}

// plainEngine hides disaggEngine's ReleaseKV.
type plainEngine struct{ e *disaggEngine }

func (p plainEngine) Health(ctx context.Context) error { return p.e.Health(ctx) }
func (p plainEngine) Load(ctx context.Context) (*messages.WorkerLoad, error) {
	return p.e.Load(ctx)
}
func (p plainEngine) Generate(ctx context.Context, id string, tokens []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	return p.e.Generate(ctx, id, tokens, s, fn)
}

type engineLauncher struct {
	shellLauncher
	engine engines.Engine
}

func (l engineLauncher) Connect(string) engines.Engine { return l.engine }

// infoRouter passes on the WorkerInfo of every registration.
type infoRouter struct {
	nopRouter
	infos chan *messages.WorkerInfo
}

func (r infoRouter) Register(m *messages.RegisterWorker) (*messages.RegisterAck, error) {
	select {
	case r.infos <- m.Worker:
	default:
	}
	return &messages.RegisterAck{Accepted: true}, nil
}

// logLines is a zerolog writer passing on each log line.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// startWorker starts a worker over engine with cfg's role fields and waits for its first
// ready registration, which it returns.
func startWorker(t *testing.T, engine engines.Engine, mod func(*Config), log zerolog.Logger) (*actor.ActorSystem, *actor.PID, *messages.WorkerInfo) {
	t.Helper()
	rt := infoRouter{infos: make(chan *messages.WorkerInfo, 64)}
	cfg := Config{WorkerID: "w-disagg", Card: &messages.ModelCard{Model: "m"},
		Launcher:  engineLauncher{shellLauncher: shellLauncher{script: "exec sleep 60"}, engine: engine},
		Heartbeat: 20 * time.Millisecond, StopGrace: time.Second, Router: rt, Logger: log}
	if mod != nil {
		mod(&cfg)
	}
	props, err := Props(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	deadline := time.After(10 * time.Second)
	for {
		select {
		case info := <-rt.infos:
			if info.Ready {
				return sys, pid, info
			}
		case <-deadline:
			t.Fatal("worker not registered ready within 10 s")
		}
	}
}

func TestRegistrationCarriesRole(t *testing.T) {
	for _, tc := range []struct {
		name, role, host string
		port             int
		want             messages.Role
	}{
		{"default", "", "", 0, messages.Role_ROLE_AGGREGATED},
		{"prefill", "prefill", "10.0.0.1", 8998, messages.Role_ROLE_PREFILL},
		{"decode", "decode", "", 0, messages.Role_ROLE_DECODE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, info := startWorker(t, newDisaggEngine(), func(c *Config) {
				c.Role, c.BootstrapHost, c.BootstrapPort = tc.role, tc.host, tc.port
			}, zerolog.Nop())
			if info.Role != tc.want || info.BootstrapHost != tc.host || info.BootstrapPort != int32(tc.port) {
				t.Fatalf("registered role %v bootstrap %s:%d; want %v %s:%d", info.Role, info.BootstrapHost,
					info.BootstrapPort, tc.want, tc.host, tc.port)
			}
		})
	}
}

// TestPrefillLeg: the leg's DisaggParams reach the engine unchanged, and the last chunk
// carries the engine's transfer parameters.
func TestPrefillLeg(t *testing.T) {
	eng := newDisaggEngine()
	sys, pid, _ := startWorker(t, eng, func(c *Config) { c.Role = "prefill" }, zerolog.Nop())
	ref, chunks := chunkSink(sys)
	sampling := &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL,
		BootstrapHost: "10.0.0.1", BootstrapPort: 8998, BootstrapRoom: 1<<62 + 5}}
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1#prefill", TokenIds: []uint32{5}, Sampling: sampling, ReplyTo: ref})
	if got := <-eng.sampling; !proto.Equal(got, sampling) {
		t.Fatalf("engine got sampling %v, want %v", got, sampling)
	}
	if c := next(t, chunks); c.FinishReason != "" || c.KvTransferParams != "" {
		t.Fatalf("first chunk %v", c)
	}
	close(eng.release)
	c := next(t, chunks)
	if c.FinishReason != "length" || c.KvTransferParams != `{"do_remote_prefill":true,"remote_block_ids":[1,2]}` {
		t.Fatalf("last chunk %v", c)
	}
}

// TestPrefillLegCancel: a Cancel aborts a prefill leg in its engine like any request.
func TestPrefillLegCancel(t *testing.T) {
	eng := newDisaggEngine()
	sys, pid, _ := startWorker(t, eng, func(c *Config) { c.Role = "prefill" }, zerolog.Nop())
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r1#prefill", TokenIds: []uint32{5}, ReplyTo: ref,
		Sampling: &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}})
	next(t, chunks)
	sys.Root.Send(pid, &messages.Cancel{RequestId: "r1#prefill"})
	select {
	case id := <-eng.cancelled:
		if id != "r1#prefill" {
			t.Fatalf("cancelled %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("prefill leg not cancelled in the engine within 10 s")
	}
}

func TestReleaseKv(t *testing.T) {
	const params = `{"remote_block_ids":[3],"remote_host":"10.0.0.1","remote_port":5600}`
	t.Run("engine releases", func(t *testing.T) {
		eng := newDisaggEngine()
		sys, pid, _ := startWorker(t, eng, nil, zerolog.Nop())
		sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "r1#prefill", KvTransferParams: params})
		select {
		case got := <-eng.released:
			if got != [2]string{"r1#prefill", params} {
				t.Fatalf("ReleaseKV(%q, %q)", got[0], got[1])
			}
		case <-time.After(10 * time.Second):
			t.Fatal("ReleaseKV not called within 10 s")
		}
	})
	t.Run("engine fails", func(t *testing.T) {
		eng := newDisaggEngine()
		eng.releaseErr = errors.New("transfer port refused")
		lines := make(logLines, 256)
		sys, pid, _ := startWorker(t, eng, nil, zerolog.New(lines).Level(zerolog.WarnLevel))
		sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "r2#prefill", KvTransferParams: params})
		waitLine(t, lines, "transfer port refused")
	})
	t.Run("engine without release", func(t *testing.T) {
		lines := make(logLines, 256)
		sys, pid, _ := startWorker(t, plainEngine{newDisaggEngine()}, nil, zerolog.New(lines).Level(zerolog.DebugLevel))
		sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "r3#prefill", KvTransferParams: params})
		waitLine(t, lines, "frees pinned blocks on its own timeout")
	})
}

// waitLine waits for a log line containing s.
func waitLine(t *testing.T, lines logLines, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no log line with %q within 10 s", s)
		}
	}
}

// lateParams are the transfer parameters lateEngine answers with.
const lateParams = `{"do_remote_prefill":true,"remote_block_ids":[7,8],"remote_request_id":"late"}`

// lateEngine answers a prefill leg only once its context ended: the engine pinned the
// prompt's blocks and its answer arrived after the worker cancelled the leg
// (engines.FinishPrefill). It sends one token first.
type lateEngine struct{ *disaggEngine }

func (e lateEngine) Generate(ctx context.Context, id string, _ []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	e.sampling <- s
	if err := fn(engines.Chunk{TokenIDs: []uint32{1}}); err != nil {
		return err
	}
	<-ctx.Done()
	e.cancelled <- id
	if err := fn(engines.Chunk{TokenIDs: []uint32{2}, FinishReason: "length", KVTransferParams: lateParams}); err != nil {
		return err
	}
	return ctx.Err()
}

// TestCancelledPrefillLegReleasesKV: the transfer parameters of a prefill leg that the
// worker could not send, because the leg was cancelled before its last chunk went out,
// are released by the worker itself (engines.KVReleaser): nobody else learns them.
func TestCancelledPrefillLegReleasesKV(t *testing.T) {
	prefill := &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}
	for _, tc := range []struct {
		name   string
		engine func(*disaggEngine) engines.Engine
		// credits: the leg's initial credits; end lets its engine finish (after the
		// first chunk, before the Cancel); want: the parameters ReleaseKV must get.
		credits int32
		end     func(eng *disaggEngine)
		want    string
	}{
		{name: "answered after the cancel", engine: func(e *disaggEngine) engines.Engine { return lateEngine{e} },
			end: func(*disaggEngine) {}, want: lateParams},
		{name: "last chunk waiting for credits", engine: func(e *disaggEngine) engines.Engine { return e }, credits: 1,
			end: func(e *disaggEngine) { close(e.release) }, want: `{"do_remote_prefill":true,"remote_block_ids":[1,2]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newDisaggEngine()
			sys, pid, _ := startWorker(t, tc.engine(eng), func(c *Config) { c.Role = "prefill" }, zerolog.Nop())
			ref, chunks := chunkSink(sys)
			sys.Root.Send(pid, &messages.Generate{RequestId: "r#prefill", TokenIds: []uint32{5}, Sampling: prefill,
				ReplyTo: ref, InitialCredits: tc.credits})
			<-eng.sampling
			if c := next(t, chunks); c.FinishReason != "" {
				t.Fatalf("first chunk %v", c)
			}
			tc.end(eng)
			sys.Root.Send(pid, &messages.Cancel{RequestId: "r#prefill"})
			select {
			case got := <-eng.released:
				if got != [2]string{"r#prefill", tc.want} {
					t.Fatalf("ReleaseKV(%q, %q), want the leg's own parameters %q", got[0], got[1], tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the cancelled leg's parameters were not released within 10 s")
			}
			select {
			case c := <-chunks:
				t.Fatalf("a chunk was sent after the cancel: %v", c)
			default:
			}
		})
	}
}

// TestDeliveredPrefillLegNotReleased: parameters that reached the leg's receiver are
// its to use (the decode leg reads the blocks): a Cancel after the last chunk releases
// nothing.
func TestDeliveredPrefillLegNotReleased(t *testing.T) {
	eng := newDisaggEngine()
	sys, pid, _ := startWorker(t, eng, func(c *Config) { c.Role = "prefill" }, zerolog.Nop())
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r#prefill", TokenIds: []uint32{5}, ReplyTo: ref,
		Sampling: &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}})
	next(t, chunks)
	close(eng.release)
	if c := next(t, chunks); c.KvTransferParams == "" {
		t.Fatalf("last chunk %v without parameters", c)
	}
	sys.Root.Send(pid, &messages.Cancel{RequestId: "r#prefill"})
	// The actor handles messages in order: a ReleaseKv sent after the Cancel is released
	// after anything the Cancel could have caused.
	sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "marker"})
	select {
	case got := <-eng.released:
		if got[0] != "marker" {
			t.Fatalf("ReleaseKV(%q, %q) of a leg whose parameters were delivered", got[0], got[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReleaseKv not handled within 10 s")
	}
}

// TestCancelledPrefillLegEngineWithoutRelease: an engine that cannot release on request
// keeps the blocks until its own timeout; the worker says so.
func TestCancelledPrefillLegEngineWithoutRelease(t *testing.T) {
	eng := newDisaggEngine()
	lines := make(logLines, 256)
	sys, pid, _ := startWorker(t, plainEngine{eng}, func(c *Config) { c.Role = "prefill" }, zerolog.New(lines).Level(zerolog.DebugLevel))
	ref, chunks := chunkSink(sys)
	sys.Root.Send(pid, &messages.Generate{RequestId: "r#prefill", TokenIds: []uint32{5}, ReplyTo: ref, InitialCredits: 1,
		Sampling: &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}})
	next(t, chunks)
	close(eng.release)
	// The cancel must find the engine handing over its last chunk (it waits for a credit),
	// not still choosing between release and the cancel.
	<-eng.finishing
	sys.Root.Send(pid, &messages.Cancel{RequestId: "r#prefill"})
	waitLine(t, lines, "cancelled prefill leg: the engine cannot release KV blocks on request")
}

// TestRegistrationCarriesLauncherBootstrap: a prefill worker whose launcher names a
// bootstrap address (engines.Bootstrapper: here the mock engine in SGLang's dialect,
// which picks its bootstrap port at each Command) registers the address of its running
// engine, also after the engine restarted on another port; a fixed Config address wins.
func TestRegistrationCarriesLauncherBootstrap(t *testing.T) {
	dir := t.TempDir()
	argvFile := filepath.Join(dir, "argv")
	// The stub engine records its arguments; its first start exits at once, so that the
	// worker starts it again (with a new bootstrap port), and the second one stays up.
	stub := filepath.Join(dir, "turbine")
	script := "#!/bin/sh\necho \"$@\" >> " + argvFile + "\n" +
		"[ \"$(wc -l < " + argvFile + ")\" -ge 2 ] || exit 1\nexec sleep 60\n"
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		host     string
		port     int
		wantPort func(argv []string) int
	}{
		{name: "launcher's", wantPort: func(argv []string) int { return flagInt(t, argv, "--kv-transfer-port") }},
		{name: "fixed", host: "10.0.0.1", port: 8998, wantPort: func([]string) int { return 8998 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(argvFile)
			rt := infoRouter{infos: make(chan *messages.WorkerInfo, 256)}
			p := server.DefaultParams()
			p.Engine.BlockSize, p.Engine.NumGPUBlocks, p.Engine.MaxNumSeqs, p.Engine.MaxNumBatchedTokens = 16, 64, 4, 64
			p.Engine.MaxModelLen, p.Engine.SpeedupRatio, p.Dialect, p.Role = 256, 1, server.DialectSGLang, server.RolePrefill
			l, err := launch.New(launch.Config{Executable: stub, Model: "m", Tokenizer: "builtin:cl100k_base", Params: p})
			if err != nil {
				t.Fatal(err)
			}
			props, err := Props(Config{WorkerID: "w-boot", Card: &messages.ModelCard{Model: "m"}, Launcher: l,
				Role: "prefill", BootstrapHost: tc.host, BootstrapPort: tc.port, Heartbeat: 10 * time.Millisecond,
				StopGrace: time.Second, Backoff: supervise.Backoff{Initial: 10 * time.Millisecond}, Router: rt,
				Logger: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			sys := actor.NewActorSystem()
			pid := sys.Root.Spawn(props)
			t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
			deadline := time.After(10 * time.Second)
			for {
				var info *messages.WorkerInfo
				select {
				case info = <-rt.infos:
				case <-deadline:
					t.Fatal("no registration with the second engine's bootstrap address within 10 s")
				}
				b, _ := os.ReadFile(argvFile)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) < 2 {
					continue // still the first engine's
				}
				want := tc.wantPort(strings.Fields(lines[1]))
				wantHost := tc.host
				if wantHost == "" {
					wantHost = "127.0.0.1"
				}
				if info.BootstrapHost == wantHost && info.BootstrapPort == int32(want) {
					if h, p, ok := l.Bootstrap(); tc.host == "" && (!ok || h != wantHost || p != want) {
						t.Fatalf("launcher's bootstrap %s:%d %v, registered %s:%d", h, p, ok, info.BootstrapHost, info.BootstrapPort)
					}
					return
				}
			}
		})
	}
}

// flagInt is the integer value of flag name in argv.
func flagInt(t *testing.T, argv []string, name string) int {
	t.Helper()
	for i, a := range argv[:len(argv)-1] {
		if a == name {
			n, err := strconv.Atoi(argv[i+1])
			if err != nil {
				t.Fatalf("%s %q: %v", name, argv[i+1], err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", name, argv)
	return 0
}

// TestUnreachableReceiverReleasesPinned: a finished prefill leg whose receiver's address
// terminated (a partition, a gateway gone) has its engine's pinned blocks released by
// the worker after Config.PinnedReleaseGrace, whichever of the receiver's end and the
// leg's end the worker hears of first; the receiver's stop within the grace cancels it.
// A gateway's ReleaseKv without parameters (it never got the leg's last chunk) releases
// with the worker's copy, also when the receiver's stop overtook it. A receiver that
// stopped, or another receiver, releases nothing on its own.
func TestUnreachableReceiverReleasesPinned(t *testing.T) {
	const params = `{"do_remote_prefill":true,"remote_block_ids":[1,2]}`
	prefill := &messages.SamplingParams{MaxTokens: 1, Disagg: &messages.DisaggParams{Leg: messages.Leg_LEG_PREFILL}}
	unreachable := func() *actor.Terminated { return &actor.Terminated{Why: actor.TerminatedReason_AddressTerminated} }
	stopped := func() *actor.Terminated { return &actor.Terminated{Why: actor.TerminatedReason_Stopped} }
	for _, tc := range []struct {
		name string
		// ends are the Terminated notices sent after the leg's last chunk (nil Who: the
		// leg's receiver); early sends the first before the worker recorded the leg's
		// end. release, when set, is the gateway's ReleaseKv sent after them.
		ends    []*actor.Terminated
		early   bool
		release *messages.ReleaseKv
		// wait: how far the worker's clock moves after them (the grace is 1 s).
		wait time.Duration
		owed bool // the leg's blocks must be released, with its parameters
	}{
		{name: "receiver unreachable", ends: []*actor.Terminated{unreachable()}, wait: 2 * time.Second, owed: true},
		{name: "receiver unreachable, within the grace", ends: []*actor.Terminated{unreachable()}, wait: 900 * time.Millisecond},
		{name: "receiver unreachable, heard of first", early: true, ends: []*actor.Terminated{unreachable()},
			wait: 2 * time.Second, owed: true},
		{name: "receiver unreachable, then stopped within the grace", ends: []*actor.Terminated{unreachable(), stopped()},
			wait: 2 * time.Second},
		{name: "receiver stopped, then its address terminated", ends: []*actor.Terminated{stopped(), unreachable()},
			wait: 2 * time.Second},
		{name: "another receiver unreachable", wait: 2 * time.Second,
			ends: []*actor.Terminated{{Who: actor.NewPID("10.0.0.9:1", "other"), Why: actor.TerminatedReason_AddressTerminated}}},
		{name: "gateway's release without parameters", release: &messages.ReleaseKv{RequestId: "r#prefill"}, owed: true},
		{name: "receiver stopped, then the gateway's release without parameters", ends: []*actor.Terminated{stopped()},
			release: &messages.ReleaseKv{RequestId: "r#prefill"}, owed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newDisaggEngine()
			var engine engines.Engine = eng
			hold := make(chan struct{})
			if tc.early {
				engine = lingerEngine{eng, hold}
			}
			lines := make(logLines, 256)
			var clock atomic.Int64 // the worker's Config.Now, in ns from start
			start := time.Now()
			sys, pid, _ := startWorker(t, engine, func(c *Config) {
				c.Role, c.PinnedReleaseGrace = "prefill", time.Second
				c.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
			}, zerolog.New(lines).Level(zerolog.DebugLevel))
			ref, chunks := chunkSink(sys)
			sys.Root.Send(pid, &messages.Generate{RequestId: "r#prefill", TokenIds: []uint32{5}, Sampling: prefill, ReplyTo: ref})
			next(t, chunks)
			close(eng.release)
			if c := next(t, chunks); c.FinishReason != "length" {
				t.Fatalf("last chunk %v", c)
			}
			for _, end := range tc.ends {
				if end.Who == nil {
					end.Who = actor.NewPID(ref.Address, ref.Id)
				}
			}
			if tc.early {
				// The worker hears of the receiver's end after the last chunk went out but
				// before the leg's end (its engine call has not returned).
				sys.Root.Send(pid, tc.ends[0])
				sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "sync"})
				if got := <-eng.released; got[0] != "sync" {
					t.Fatalf("released %q before the leg ended", got[0])
				}
				tc.ends = tc.ends[1:]
				close(hold)
			}
			waitLine(t, lines, "prefill leg finished: its blocks pinned")
			for _, end := range tc.ends {
				sys.Root.Send(pid, end)
			}
			if tc.release != nil {
				sys.Root.Send(pid, tc.release)
			}
			// The actor handles messages in order: the clock moves once it took them.
			sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "sync"})
			for got := <-eng.released; got[0] != "sync"; got = <-eng.released {
				if !tc.owed || got != [2]string{"r#prefill", params} {
					t.Fatalf("ReleaseKV(%q, %q) before the clock moved", got[0], got[1])
				}
				return
			}
			clock.Add(int64(tc.wait))
			// The engine sees the leg's release within 10 s when it is owed; when it is
			// not, only markers, each sent after the worker's heartbeat (20 ms here, each
			// beginning with a sweep) scraped the engine again.
			if !tc.owed {
				for range 5 {
					<-eng.loads
					<-eng.loads
					sys.Root.Send(pid, &messages.ReleaseKv{RequestId: "marker"})
					if got := <-eng.released; got[0] != "marker" {
						t.Fatalf("released the leg's blocks (%q): none owed", got[1])
					}
				}
				return
			}
			select {
			case got := <-eng.released:
				if got != [2]string{"r#prefill", params} {
					t.Fatalf("ReleaseKV(%q, %q), want the leg's own parameters %q", got[0], got[1], params)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no release of the leg within 10 s")
			}
		})
	}
}

// lingerEngine returns from Generate only once hold is closed, whatever its context:
// a leg whose last chunk went out but whose engine call has not yet returned.
type lingerEngine struct {
	*disaggEngine
	hold chan struct{}
}

func (e lingerEngine) Generate(ctx context.Context, id string, ids []uint32, s *messages.SamplingParams, fn func(engines.Chunk) error) error {
	err := e.disaggEngine.Generate(ctx, id, ids, s, fn)
	<-e.hold
	return err
}
