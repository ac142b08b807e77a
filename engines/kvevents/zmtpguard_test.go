package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestZMTPGuard(t *testing.T) {
	msg, err := EncodeMessage("kv", goldenBatch())
	if err != nil {
		t.Fatal(err)
	}
	long := func(size uint64) []byte {
		b := []byte{0x02}
		return binary.BigEndian.AppendUint64(b, size)
	}
	greeting := zmtpPub()[:zmtpGreetingLen]
	// ready is a greeting and a READY command with the given raw properties.
	ready := func(props ...string) []byte {
		body := append([]byte{5}, "READY"...)
		for _, p := range props {
			body = append(body, p...)
		}
		return append(append(append([]byte{}, greeting...), 0x04, byte(len(body))), body...)
	}
	prop := func(k, v string) string {
		b := append([]byte{byte(len(k))}, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		return string(append(b, v...))
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		fails  bool
	}{
		{"a publisher's handshake and messages", zmtpPub(msg, msg), false},
		{"a frame of exactly the limit", append(append([]byte{}, greeting...), long(maxZMTPFrame)...), false},
		{"one byte over the limit", append(append([]byte{}, greeting...), long(maxZMTPFrame+1)...), true},
		{"2^62 bytes, as the fuzzer found", append(append([]byte{}, greeting...), long(1<<62)...), true},
		{"a command frame over the limit", append(append([]byte{}, greeting...), 0x06, 0xff, 0, 0, 0, 0, 0, 0, 0), true},
		{"a long size field cut short", append(append([]byte{}, greeting...), 0x02, 0xff), false},
		{"the greeting's 0xff bytes are not frame sizes", bytes.Repeat([]byte{0xff}, zmtpGreetingLen), false},
		{"READY of a SUB with an identity", ready(prop("Socket-Type", "SUB"), prop("Identity", "x")), false},
		{"READY whose property name zmq4 title-cases", ready(prop("socket-type", "PUB")), false},
		{"READY naming an unknown socket type, as the fuzzer found", ready(prop("Socket-Type", "UB")), true},
		{"READY without a socket type", ready(prop("Identity", "x")), true},
		{"READY whose name zmq4 does not title-case to Socket-Type", ready(prop("SOCKET-TYPE", "PUB")), true},
		{"READY whose last socket type is unknown", ready(prop("Socket-Type", "PUB"), prop("Socket-Type", "NOPE")), true},
		{"READY whose property value runs past its end", ready(prop("Socket-Type", "PUB")[:10]), true},
		{"READY whose property name runs past its end", ready("\x20Sock"), true},
		{"a command that is not READY", append(append([]byte{}, greeting...), 0x04, 5, 4, 'P', 'I', 'N', 'G'), false},
		{"a command frame over its limit", append(append([]byte{}, greeting...), long(maxZMTPCommand + 1)[0]|0x04, 0, 0, 0, 0, 0, 1, 0, 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, then in every split into two reads, then a byte at a time.
			splits := [][][]byte{{tc.stream}}
			for i := 1; i < len(tc.stream) && i < 200; i++ {
				splits = append(splits, [][]byte{tc.stream[:i], tc.stream[i:]})
			}
			var bytewise [][]byte
			for i := range tc.stream {
				bytewise = append(bytewise, tc.stream[i:i+1])
			}
			splits = append(splits, bytewise)
			for _, reads := range splits {
				g := newZMTPGuard()
				var err error
				for _, r := range reads {
					if err = g.scan(r); err != nil {
						break
					}
				}
				if (err != nil) != tc.fails {
					t.Fatalf("reads of %d parts: error %v, want failure %v", len(reads), err, tc.fails)
				}
				if err != nil && !strings.HasPrefix(err.Error(), "kvevents: peer ") {
					t.Fatalf("error %v", err)
				}
			}
		})
	}
}

// TestPublisherSurvivesBadPeers: clients that connect to an engine's KV-event port and
// send what would make zmq4 panic (a frame announcing 2⁶² bytes, a READY naming an
// unknown socket type) lose their own connection; the publisher lives on and a real
// subscriber still receives its batches.
func TestPublisherSurvivesBadPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := NewPublisher(Config{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: "tcp://*:0", Topic: "kv"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ep, listen := ConsumerEndpoint(p.Endpoint())
	greeting := zmtpPub()[:zmtpGreetingLen]
	bad := [][]byte{
		append(append([]byte{}, greeting...), binary.BigEndian.AppendUint64([]byte{0x02}, 1<<62)...),
		append(append([]byte{}, greeting...), 0x04, 24, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 2, 'U', 'B'),
	}
	for i, b := range bad {
		c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatalf("bad peer %d: %v", i, err)
		}
		// The publisher ends the connection: the read sees EOF or a reset, not a timeout.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("bad peer %d: the publisher kept its connection open", i)
		}
		c.Close()
	}
	ch := collect(t, ctx, SubscriberConfig{Endpoint: ep, Topic: "kv", Listen: listen})
	publishUntilReceived(t, p, ch, 1)
}
