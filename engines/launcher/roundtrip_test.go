package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/engines/supervise"
	"github.com/turbine-llm/turbine/gateway/preprocess"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

const testBlock = 16

// mockEngine runs the mock engine in process speaking dialect, publishing KV events to
// kvEndpoint (ZMQ, connecting) or keeping them for POST /kv_cache_events (trtllm).
func mockEngine(t *testing.T, dialect server.Dialect, kvEndpoint string) (host string, port int) {
	t.Helper()
	model, err := preprocess.LoadModel("builtin:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	cfg := mocker.DefaultConfig()
	cfg.BlockSize, cfg.SpeedupRatio, cfg.MeanOutputTokens = testBlock, 1000, 100000
	opts := server.Options{Engine: cfg, ServedModelName: "m", Model: model, Dialect: dialect}
	if dialect == server.DialectTRTLLM {
		opts.EventBufferMaxSize = 1000
		opts.PollWait = 50 * time.Millisecond
	} else {
		opts.KVEvents = kvevents.Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: kvEndpoint, Topic: KVEventsTopic, HWM: kvevents.DefaultHWM}
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

// TestRoundTrips drives each launcher's client and KV event subscription against the mock
// engine speaking that engine's dialect: health, a generation, the load scrape, and the
// prompt's blocks arriving as KV events.
func TestRoundTrips(t *testing.T) {
	spec := func(engine string) Spec {
		s := minimal(engine)
		s.ServedModelName, s.BlockSize, s.TempDir = "m", testBlock, t.TempDir()
		return s
	}
	mock := func(dialect string) engines.Launcher {
		return &Mocker{Model: "m", Tokenizer: "builtin:cl100k_base", BlockSize: testBlock, Dialect: dialect}
	}
	build := func(s Spec) engines.Launcher {
		l, err := New(s)
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := l.(io.Closer); ok {
			t.Cleanup(func() { _ = c.Close() })
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		dialect server.Dialect
		l       engines.Launcher
	}{
		{"vllm", server.DialectVLLM, build(spec(EngineVLLM))},
		{"sglang", server.DialectSGLang, build(spec(EngineSGLang))},
		{"trtllm", server.DialectTRTLLM, build(spec(EngineTRTLLM))},
		{"mocker", server.DialectVLLM, mock("")},
		{"mocker-sglang", server.DialectSGLang, mock(EngineSGLang)},
		{"mocker-trtllm", server.DialectTRTLLM, mock(EngineTRTLLM)},
	} {
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

// TestSubscribeUnknownEndpoint: the trtllm pollers refuse an endpoint no Command named.
func TestSubscribeUnknownEndpoint(t *testing.T) {
	s := minimal(EngineTRTLLM)
	s.TempDir = t.TempDir()
	l, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.(io.Closer).Close()
	m := &Mocker{Dialect: EngineTRTLLM, BlockSize: testBlock}
	for _, sub := range []engines.Launcher{l, m} {
		err := sub.SubscribeKVEvents(context.Background(), "tcp://127.0.0.1:1", func(kv.Batch) {})
		if err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("%T.SubscribeKVEvents of an unknown endpoint: %v", sub, err)
		}
	}
}
