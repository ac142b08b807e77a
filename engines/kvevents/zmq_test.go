package kvevents

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.Endpoint != "tcp://*:5557" || c.Topic != "kv-events" || c.HWM != DefaultHWM {
		t.Fatalf("config %+v", c)
	}
	c, err = ParseConfig(`{"enable_kv_cache_events":true}`)
	if err != nil || c.Publisher != "zmq" || c.Endpoint != DefaultEndpoint {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c, err := ParseConfig(""); err != nil || c.Enabled() {
		t.Fatalf("empty: %+v %v", c, err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"enable_kv_cache_events":true,"publisher":"kafka"}`, `publisher "kafka"`},
		{`{"enable_kv_cache_events":true,"endpoint":"127.0.0.1:5"}`, "no scheme"},
		{`{"enable_kv_cache_events":true,"endpoint":"tcp://host"}`, "no port"},
		{`{"enable_kv_cache_events":true,"endpoint":"udp://h:1"}`, `scheme "udp"`},
		{`{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5558"}`, "replay_endpoint"},
		{`{"enable_kv_cache_events":true,"bogus":1}`, `unknown field "bogus"`},
		{`{"hwm":-1}`, "hwm -1"},
		{`[1]`, "cannot unmarshal"},
		{`{} {}`, "trailing data"},
	} {
		if _, err := ParseConfig(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "kvevents: ") {
			t.Errorf("ParseConfig(%s) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestEndpointRules(t *testing.T) {
	for _, tc := range []struct {
		engine, consumer string
		binds            bool
	}{
		{"tcp://*:5557", "tcp://127.0.0.1:5557", true},
		{"tcp://[::]:5557", "tcp://[::]:5557", true},
		{"ipc:///tmp/kv", "ipc:///tmp/kv", true},
		{"tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557", false},
	} {
		if got := EngineBinds(tc.engine); got != tc.binds {
			t.Errorf("EngineBinds(%s) = %v", tc.engine, got)
		}
		ep, listen := ConsumerEndpoint(tc.engine)
		if ep != tc.consumer || listen == tc.binds {
			t.Errorf("ConsumerEndpoint(%s) = %s, %v", tc.engine, ep, listen)
		}
	}
}

func removed(h uint64) []kv.Event {
	return []kv.Event{{Kind: kv.BlockRemoved, EngineHashes: []uint64{h}, Medium: "GPU"}}
}

// collect subscribes and returns a channel of received batches.
func collect(t *testing.T, ctx context.Context, cfg SubscriberConfig) <-chan kv.Batch {
	t.Helper()
	ch := make(chan kv.Batch, 1024)
	go func() {
		_ = SubscribeWith(ctx, cfg, func(b kv.Batch) { ch <- b })
	}()
	return ch
}

// publishUntilReceived publishes batches removing block hash, one per 20 ms, until one
// carrying that hash arrives (a ZeroMQ subscriber misses what is sent before its
// subscription reaches the publisher), dropping other batches, and returns it with the
// number of batches published here.
//
// It gives up after 20 s and at least giveUpPublished publications: a broken connection
// lets the publisher go on at full pace, while on a starved machine the wall clock alone
// would say nothing about the connection.
func publishUntilReceived(t *testing.T, p *Publisher, ch <-chan kv.Batch, hash uint64) (kv.Batch, int) {
	t.Helper()
	const giveUpPublished = 250
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; {
		if err := p.Publish(time.Unix(1700000000, 0), removed(hash)); err != nil {
			t.Fatal(err)
		}
		n++
		if d := time.Since(start); n >= giveUpPublished && d > 20*time.Second {
			t.Fatalf("no batch with hash %d received: %d published over %v", hash, n, d.Round(time.Millisecond))
		}
	wait:
		for {
			select {
			case b := <-ch:
				if len(b.Events) == 1 && len(b.Events[0].EngineHashes) == 1 && b.Events[0].EngineHashes[0] == hash {
					return b, n
				}
			case <-tick.C:
				break wait
			}
		}
	}
}

func drainUntil(t *testing.T, ch <-chan kv.Batch, hash uint64) []kv.Batch {
	t.Helper()
	var got []kv.Batch
	timeout := time.After(20 * time.Second)
	for {
		select {
		case b := <-ch:
			got = append(got, b)
			if len(b.Events) == 1 && b.Events[0].EngineHashes[0] == hash {
				return got
			}
		case <-timeout:
			t.Fatalf("batch with hash %d not received; got %d batches", hash, len(got))
		}
	}
}

func TestPublishSubscribeBind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: "tcp://*:0", Topic: "kv-events"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !strings.HasPrefix(p.Endpoint(), "tcp://*:") || strings.HasSuffix(p.Endpoint(), ":0") {
		t.Fatalf("endpoint %s: want tcp://*:<resolved port>", p.Endpoint())
	}
	ep, listen := ConsumerEndpoint(p.Endpoint())
	ch := collect(t, ctx, SubscriberConfig{Endpoint: ep, Topic: "kv", Listen: listen})
	first, _ := publishUntilReceived(t, p, ch, 1)
	if first.DataParallelRank != 0 || first.Timestamp != 1700000000 {
		t.Fatalf("first batch %+v", first)
	}
	stored := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{bigHash}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: "GPU"}
	if err := p.Publish(time.Unix(1700000001, 0), []kv.Event{stored}); err != nil {
		t.Fatal(err)
	}
	for i := uint64(100); i < 110; i++ {
		if err := p.Publish(time.Unix(1700000002, 0), removed(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := drainUntil(t, ch, 109)
	// Sequence numbers increase by one from the first batch received.
	var sawStored bool
	for i, b := range got {
		if i > 0 && b.Seq != got[i-1].Seq+1 {
			t.Fatalf("seq %d after %d", b.Seq, got[i-1].Seq)
		}
		if b.Events[0].Kind == kv.BlockStored {
			sawStored = true
			if b.Events[0].EngineHashes[0] != bigHash || b.Events[0].BlockSize != 2 {
				t.Fatalf("stored event %+v", b.Events[0])
			}
		}
	}
	if !sawStored || got[0].Seq != first.Seq+1 {
		t.Fatalf("stored seen %v, first seq %d after %d", sawStored, got[0].Seq, first.Seq)
	}
}

// TestPublishSubscribeIPC: an ipc:// engine binds (vLLM's rule); a restarted engine
// binds the same path again, which needs the first to have removed its socket file.
func TestPublishSubscribeIPC(t *testing.T) {
	engineEP := "ipc://" + filepath.Join(t.TempDir(), "kv")
	ep, listen := ConsumerEndpoint(engineEP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := collect(t, ctx, SubscriberConfig{Endpoint: ep, Listen: listen})
	for round := range 2 {
		p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: engineEP}, 0)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if p.Endpoint() != engineEP {
			t.Fatalf("endpoint %s, want %s", p.Endpoint(), engineEP)
		}
		publishUntilReceived(t, p, ch, uint64(round+1))
		if err := p.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestPublisherConnectsAndRestart: an engine endpoint without "*" makes the engine
// connect to a listening consumer (vLLM's rule); a restarted engine starts at seq 0.
func TestPublisherConnectsAndRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engineEP := "tcp://127.0.0.1:" + freePort(t)
	ep, listen := ConsumerEndpoint(engineEP)
	if !listen {
		t.Fatal("consumer must listen for a connecting engine")
	}
	ch := collect(t, ctx, SubscriberConfig{Endpoint: ep, Topic: "", Listen: listen, OnError: func(e error) { t.Log(e) }})
	cfg := Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: engineEP}
	p1, err := NewPublisher(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := publishUntilReceived(t, p1, ch, 1)
	if b.DataParallelRank != 2 {
		t.Fatalf("rank %d", b.DataParallelRank)
	}
	p1.Close()
	if err := p1.Publish(time.Now(), removed(1)); err == nil {
		t.Fatal("publish after close succeeded")
	}
	p2, err := NewPublisher(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	// Batches p1 left in flight carry hash 1.
	b, n := publishUntilReceived(t, p2, ch, 2)
	if b.Seq >= uint64(n) {
		t.Fatalf("restarted publisher: seq %d after %d publications, want a count from 0", b.Seq, n)
	}
}

func TestSubscribeValidation(t *testing.T) {
	ctx := context.Background()
	if err := Subscribe(ctx, "nowhere", "", func(kv.Batch) {}); err == nil {
		t.Fatal("bad endpoint accepted")
	}
	if err := Subscribe(ctx, "tcp://127.0.0.1:1", "", nil); err == nil {
		t.Fatal("nil callback accepted")
	}
	// The first reported error ends the subscription; the timeout only bounds a run in
	// which none comes.
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	errs := make(chan error, 100)
	err := SubscribeWith(ctx2, SubscriberConfig{Endpoint: "tcp://127.0.0.1:" + freePort(t), OnError: func(e error) {
		select {
		case errs <- e:
		default:
		}
		cancel()
	}}, func(kv.Batch) {})
	if err != context.Canceled {
		t.Fatalf("Subscribe returned %v, want the context's error after the first reported error", err)
	}
	if e := <-errs; !strings.Contains(e.Error(), "kvevents: dial") {
		t.Fatalf("error %v", e)
	}
	if _, err := NewPublisher(Config{}, 0); err == nil {
		t.Fatal("disabled config accepted")
	}
}

// restartRounds is how many restarts the reconnection tests go through: a connection
// made while the other side closes is lost only in a narrow window, so one restart
// would rarely meet it.
const restartRounds = 8

// TestPublisherRedialsRestartedConsumer: a connecting engine must find a consumer that
// restarted on the same endpoint (a restarted worker), as libzmq's reconnect does. The
// engine re-dials as soon as the old consumer drops it, so it may reach the old
// consumer's socket while that closes; the test fails if such a connection is left
// open, as the engine would then never re-dial.
func TestPublisherRedialsRestartedConsumer(t *testing.T) {
	engineEP := "tcp://127.0.0.1:" + freePort(t)
	p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: engineEP}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round := range restartRounds {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		ch := make(chan kv.Batch, 1024)
		go func() {
			defer close(done)
			_ = SubscribeWith(ctx, SubscriberConfig{Endpoint: engineEP, Listen: true}, func(b kv.Batch) { ch <- b })
		}()
		publishUntilReceived(t, p, ch, uint64(round+1))
		cancel()
		<-done
	}
}

// TestSubscriberRedialsRestartedPublisher: the common deployment, an engine binding
// tcp://*:PORT and a consumer dialling it; each restarted engine (a new publisher on the
// same port, sequence numbers from 0) must be found again by the same subscription.
func TestSubscriberRedialsRestartedPublisher(t *testing.T) {
	engineEP := "tcp://*:" + freePort(t)
	ep, listen := ConsumerEndpoint(engineEP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := collect(t, ctx, SubscriberConfig{Endpoint: ep, Listen: listen})
	for round := range restartRounds {
		p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: engineEP}, 0)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		b, n := publishUntilReceived(t, p, ch, uint64(round+1))
		if b.Seq >= uint64(n) {
			t.Fatalf("round %d: seq %d after %d publications, want a count from 0", round, b.Seq, n)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
}
