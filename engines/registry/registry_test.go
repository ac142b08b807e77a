package registry

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

const testBlock = 16

func TestDefault(t *testing.T) {
	if got, want := Default.Names(), []string{"mocker", "vllm", "sglang", "trtllm"}; !slices.Equal(got, want) {
		t.Fatalf("engines %q, want %q", got, want)
	}
	for name, real := range map[string]bool{"mocker": false, "vllm": true, "sglang": true, "trtllm": true, "llama.cpp": false} {
		if Real(name) != real {
			t.Errorf("Real(%q) = %v", name, !real)
		}
	}
	_, err := Default.Launcher("llama.cpp", Config{})
	if err == nil || !strings.Contains(err.Error(), `unknown engine "llama.cpp" (want mocker, vllm, sglang, trtllm)`) {
		t.Fatalf("unknown engine: %v", err)
	}
	if l, err := Default.Launcher("vllm", Config{}); err == nil || l != nil {
		t.Fatalf("an invalid spec: %v, %v; want an error and no launcher", l, err)
	}
}

func TestNewRefusesDuplicates(t *testing.T) {
	mk := func(c Config) (engines.Launcher, error) { return nil, nil }
	if _, err := New(Engine{Name: "a", New: mk}, Engine{Name: "a", New: mk}); err == nil {
		t.Fatal("a name registered twice was accepted")
	}
	if _, err := New(Engine{Name: "a"}); err == nil {
		t.Fatal("an engine without a constructor was accepted")
	}
}

// mockEngine runs the mock engine in process speaking dialect, publishing KV events to
// kvEndpoint (ZMQ, connecting) or keeping them for POST /kv_cache_events (trtllm).
func mockEngine(t *testing.T, dialect server.DialectName, kvEndpoint string) (host string, port int) {
	t.Helper()
	cfg := mocker.DefaultConfig()
	cfg.BlockSize, cfg.SpeedupRatio, cfg.MeanOutputTokens = testBlock, 1000, 100000
	opts := server.Options{Params: server.Params{Engine: cfg, Dialect: dialect}, ServedModelName: "m", Model: enginetest.Model(t)}
	if dialect == server.DialectTRTLLM {
		opts.EventBufferMaxSize = 1000
		opts.PollWait = 50 * time.Millisecond
	} else {
		opts.KVEvents = kvevents.Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: kvEndpoint, Topic: launcher.KVEventsTopic,
			HWM: kvevents.DefaultHWM}
	}
	s, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	u, _ := url.Parse(hs.URL)
	h, p, _ := net.SplitHostPort(u.Host)
	port, _ = strconv.Atoi(p)
	return h, port
}

// launched is a registered engine's launcher and the dialect of the mock engine that
// stands in for the engine.
type launched struct {
	name    string
	dialect server.DialectName
	l       engines.Launcher
}

// launchers are every registered engine's, the mock engine's in each of its dialects.
func launchers(t *testing.T) []launched {
	build := func(name string, dialect server.DialectName) engines.Launcher {
		s := enginetest.MinimalSpec(name)
		s.ServedModelName, s.BlockSize, s.TempDir = "m", testBlock, t.TempDir()
		p := server.DefaultParams()
		p.Engine.BlockSize, p.Dialect = testBlock, dialect
		l, err := Default.Launcher(name, Config{Spec: s, Mock: launch.Config{Model: "m", Tokenizer: "builtin:cl100k_base", Params: p}})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := l.(io.Closer); ok {
			t.Cleanup(func() { _ = c.Close() })
		}
		return l
	}
	var out []launched
	for _, name := range Default.Names() {
		if Real(name) {
			out = append(out, launched{name, server.DialectName(name), build(name, "")})
			continue
		}
		for _, d := range server.Dialects {
			out = append(out, launched{name + "-" + string(d), d, build(name, d)})
		}
	}
	return out
}

// TestRoundTrips drives each launcher's client and KV event subscription against the mock
// engine speaking that engine's dialect: health, a generation, the load scrape, and the
// prompt's blocks arriving as KV events.
func TestRoundTrips(t *testing.T) {
	for _, tc := range launchers(t) {
		t.Run(tc.name, func(t *testing.T) {
			kvPort, err := supervise.FreePort("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			ep := fmt.Sprintf("tcp://127.0.0.1:%d", kvPort)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			batches := make(chan kv.Batch, 64)
			var wg sync.WaitGroup
			wg.Add(1)
			subCtx, stopSub := context.WithCancel(ctx)
			defer func() { stopSub(); wg.Wait() }()

			var host string
			var port int
			if tc.dialect == server.DialectTRTLLM {
				host, port = mockEngine(t, tc.dialect, "")
				tc.l.Command(host, port, ep) // names the engine for SubscribeKVEvents
			}
			go func() {
				defer wg.Done()
				if err := tc.l.SubscribeKVEvents(subCtx, ep, func(b kv.Batch) { batches <- b }); err != nil && subCtx.Err() == nil {
					t.Errorf("SubscribeKVEvents: %v", err)
				}
			}()
			if tc.dialect != server.DialectTRTLLM {
				host, port = mockEngine(t, tc.dialect, ep)
			}
			e := tc.l.Connect(fmt.Sprintf("http://%s:%d", host, port))
			if c, ok := e.(io.Closer); ok {
				defer c.Close()
			}
			roundTrip(ctx, t, e, batches)
		})
	}
}

func roundTrip(ctx context.Context, t *testing.T, e engines.Engine, batches <-chan kv.Batch) {
	t.Helper()
	if err := e.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	// A ZMQ publisher drops what it sends before the subscriber's connection is up (the
	// engine connects to the listening subscriber as it starts): warm up until events flow,
	// so that the prompt below is checked on a connected stream.
	for i := 0; ; i++ {
		warm := make([]uint32, testBlock)
		for j := range warm {
			warm[j] = uint32(50_000 + i*testBlock + j)
		}
		if err := e.Generate(ctx, fmt.Sprintf("warm%d", i), warm, &messages.SamplingParams{MaxTokens: 1},
			func(engines.Chunk) error { return nil }); err != nil {
			t.Fatalf("warm-up Generate: %v", err)
		}
		select {
		case <-batches:
		case <-time.After(200 * time.Millisecond):
			if i < 50 {
				continue
			}
			t.Fatal("no KV event arrived for 50 warm-up requests")
		case <-ctx.Done():
			t.Fatal("no KV event arrived before the deadline")
		}
		break
	}
	for len(batches) > 0 {
		<-batches
	}
	prompt := make([]uint32, 5*testBlock)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	var got []uint32
	finish := ""
	err := e.Generate(ctx, "r1", prompt, &messages.SamplingParams{MaxTokens: 4}, func(c engines.Chunk) error {
		got = append(got, c.TokenIDs...)
		if c.FinishReason != "" {
			finish = c.FinishReason
		}
		return nil
	})
	if err != nil || len(got) != 4 || finish != "length" {
		t.Fatalf("Generate: %d tokens, finish %q, err %v; want 4 tokens ending on length", len(got), finish, err)
	}
	stored := 0
	for stored < 5 {
		select {
		case b := <-batches:
			for _, ev := range b.Events {
				// Only the prompt's blocks count (a late warm-up event must not).
				if ev.Kind == kv.BlockStored && len(ev.TokenIDs) > 0 && ev.TokenIDs[0] < 50_000 {
					stored += len(ev.EngineHashes)
				}
			}
		case <-ctx.Done():
			t.Fatalf("%d prompt blocks stored in KV events, want ≥ 5", stored)
		}
	}
	l, err := e.Load(ctx)
	if err != nil || l.TotalBlocks <= 0 {
		t.Fatalf("Load = %v, %v; want the engine's block count", l, err)
	}
}

// TestStructuredOutputReachesTheEngine sends a request constrained to a list of choices
// through each real engine's adapter (vLLM's, SGLang's, trtllm-serve's) to the mock
// engine speaking its dialect, which answers with an instance of the constraint it read:
// the answer is one of the choices exactly (then the end of sequence).
func TestStructuredOutputReachesTheEngine(t *testing.T) {
	model := enginetest.Model(t)
	tok := model.Tokenizer
	choices := []string{"alpha beta", "gamma"}
	for _, tc := range launchers(t) {
		if !Real(tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			ep := ""
			if tc.dialect != server.DialectTRTLLM {
				kvPort, err := supervise.FreePort("127.0.0.1")
				if err != nil {
					t.Fatal(err)
				}
				ep = fmt.Sprintf("tcp://127.0.0.1:%d", kvPort)
			}
			host, port := mockEngine(t, tc.dialect, ep)
			tc.l.Command(host, port, ep)
			e := tc.l.Connect(fmt.Sprintf("http://%s:%d", host, port))
			if c, ok := e.(io.Closer); ok {
				defer c.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var ids []uint32
			finish := ""
			err := e.Generate(ctx, "structured-1", tok.Encode("Pick one."), &messages.SamplingParams{MaxTokens: 32,
				Structured: &messages.StructuredOutput{Choice: choices}}, func(ch engines.Chunk) error {
				ids = append(ids, ch.TokenIDs...)
				finish = ch.FinishReason
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			ids = slices.DeleteFunc(ids, func(id uint32) bool { return slices.Contains(model.EOSTokenIDs, id) })
			if text := tok.Decode(ids); !slices.Contains(choices, text) || finish != "stop" {
				t.Errorf("answer %q (finish %q), want one of %q, then a stop", text, finish, choices)
			}
		})
	}
}
