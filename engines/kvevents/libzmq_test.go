package kvevents

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// Interoperability with libzmq, the ZeroMQ library vLLM uses, through Debian's python3-zmq
// and python3-msgpack (an independent implementation of both the transport and the
// encoding). The tests skip when they are not installed.

const debianPython = "/usr/bin/python3"

func libzmqPython(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("libzmq interop tests skipped in -short mode")
	}
	if _, err := os.Stat(debianPython); err != nil {
		t.Skipf("%s not present (apt-get install python3-zmq python3-msgpack to run libzmq interop tests)", debianPython)
	}
	if out, err := exec.Command(debianPython, "-c", "import zmq, msgpack").CombinedOutput(); err != nil {
		t.Skipf("python3-zmq or python3-msgpack missing (%s); apt-get install python3-zmq python3-msgpack", strings.TrimSpace(string(out)))
	}
	return debianPython
}

func startPython(t *testing.T, script string, args ...string) *bufio.Scanner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, libzmqPython(t), append([]string{"-c", script}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	return bufio.NewScanner(out)
}

// A libzmq PUB socket sending vLLM-shaped batches (array form with signed hashes, map
// form events, unknown trailing fields) to Subscribe.
const pyPublisher = `
import sys, time, zmq, msgpack
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
if sys.argv[2] == "bind":
    pub.bind(sys.argv[1])
else:
    pub.connect(sys.argv[1])
print("ready", flush=True)
seq = 0
deadline = time.time() + 30
while time.time() < deadline:
    events = [
        ["BlockStored", [-7, 2**64 - 1], None, [1, 2, 3, 4], 2, None, "GPU", None, [None, None], 0],
        {"type": "BlockRemoved", "block_hashes": [-7], "medium": "GPU", "group_idx": 0},
        ["AllBlocksCleared"],
    ]
    payload = msgpack.packb([time.time(), events, 0])
    pub.send_multipart([b"kv-events", seq.to_bytes(8, "big"), payload])
    seq += 1
    time.sleep(0.02)
`

func TestLibzmqPublisher(t *testing.T) {
	ep := "tcp://127.0.0.1:" + freePort(t)
	sc := startPython(t, pyPublisher, ep, "bind")
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("python publisher did not start: %v", sc.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan kv.Batch, 1)
	go func() {
		_ = Subscribe(ctx, ep, "kv-events", func(b kv.Batch) {
			select {
			case got <- b:
			default:
			}
		})
	}()
	select {
	case b := <-got:
		want := []kv.Event{
			{Kind: kv.BlockStored, EngineHashes: []uint64{^uint64(6), ^uint64(0)}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"},
			{Kind: kv.BlockRemoved, EngineHashes: []uint64{^uint64(6)}, Medium: "GPU"},
			{Kind: kv.AllBlocksCleared},
		}
		if b.DataParallelRank != 0 || b.Timestamp < 1.7e9 || len(b.Events) != 3 {
			t.Fatalf("batch %+v", b)
		}
		for i := range want {
			g, w := b.Events[i], want[i]
			if g.Kind != w.Kind || !equalU64(g.EngineHashes, w.EngineHashes) || g.BlockSize != w.BlockSize || g.Medium != w.Medium || len(g.TokenIDs) != len(w.TokenIDs) {
				t.Fatalf("event %d: %+v, want %+v", i, g, w)
			}
		}
	case <-ctx.Done():
		t.Fatal("nothing received from the libzmq publisher")
	}
}

// TestLibzmqPublisherReconnects: vLLM's case for an endpoint without "*": the engine's
// libzmq PUB socket connects to a listening consumer and reconnects on its own when the
// consumer restarts. Each restarted subscription must receive again. (libzmq waits
// reconnect_ivl, 100 ms, before it reconnects, so it seldom reaches a subscription while
// that closes; TestPublisherRedialsRestartedConsumer, whose publisher re-dials at once,
// covers that.)
func TestLibzmqPublisherReconnects(t *testing.T) {
	ep := "tcp://127.0.0.1:" + freePort(t)
	sc := startPython(t, pyPublisher, ep, "connect")
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("python publisher did not start: %v", sc.Err())
	}
	for round := range restartRounds {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		got := make(chan kv.Batch, 1)
		go func() {
			defer close(done)
			_ = SubscribeWith(ctx, SubscriberConfig{Endpoint: ep, Topic: "kv-events", Listen: true}, func(b kv.Batch) {
				select {
				case got <- b:
				default:
				}
			})
		}()
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: nothing received from the reconnecting libzmq publisher within 20 s", round)
		}
		cancel()
		<-done
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A libzmq SUB socket that prints the first message it receives as JSON.
const pySubscriber = `
import sys, json, zmq, msgpack
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
if sys.argv[2] == "bind":
    sub.bind(sys.argv[1])
else:
    sub.connect(sys.argv[1])
sub.setsockopt(zmq.SUBSCRIBE, b"kv")
print("ready", flush=True)
topic, seq, payload = sub.recv_multipart()
print(json.dumps({"topic": topic.decode(), "seqlen": len(seq), "seq": int.from_bytes(seq, "big"),
                  "payload": msgpack.unpackb(payload)}), flush=True)
`

func TestLibzmqSubscriber(t *testing.T) {
	for _, mode := range []string{"engine binds", "engine connects"} {
		t.Run(mode, func(t *testing.T) {
			var p *Publisher
			var sc *bufio.Scanner
			var err error
			if mode == "engine binds" {
				p, err = NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: "tcp://*:0", Topic: "kv-events"}, 0)
				if err != nil {
					t.Fatal(err)
				}
				ep, _ := ConsumerEndpoint(p.Endpoint())
				sc = startPython(t, pySubscriber, ep, "connect")
			} else {
				ep := "tcp://127.0.0.1:" + freePort(t)
				sc = startPython(t, pySubscriber, ep, "bind")
				if !sc.Scan() {
					t.Fatal("python subscriber did not start")
				}
				p, err = NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: ep, Topic: "kv-events"}, 0)
				if err != nil {
					t.Fatal(err)
				}
			}
			defer p.Close()
			lines := make(chan string, 4)
			go func() {
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			stored := kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{bigHash}, HasParent: true, ParentHash: 5,
				TokenIDs: []uint32{9, 8}, BlockSize: 2, Medium: "GPU", LoraName: "a"}
			deadline := time.After(30 * time.Second)
			for {
				if err := p.Publish(time.Unix(1700000000, 500_000_000), []kv.Event{stored}); err != nil {
					t.Fatal(err)
				}
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatal("python subscriber exited")
					}
					if line == "ready" {
						continue
					}
					var m struct {
						Topic   string
						Seqlen  int
						Payload []any
					}
					dec := json.NewDecoder(strings.NewReader(line))
					dec.UseNumber() // keep 64-bit hashes exact
					if err := dec.Decode(&m); err != nil {
						t.Fatalf("%v: %s", err, line)
					}
					want := `[1700000000.5,[["BlockStored",[18364758544493064720],5,[9,8],2,null,"GPU","a"]],0]`
					if b, _ := json.Marshal(m.Payload); m.Topic != "kv-events" || m.Seqlen != 8 || string(b) != want {
						t.Fatalf("libzmq subscriber got topic %q seq length %d payload %s, want %s", m.Topic, m.Seqlen, b, want)
					}
					return
				case <-deadline:
					t.Fatal("libzmq subscriber received nothing")
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
}
