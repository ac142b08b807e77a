package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// zmtpPub returns the bytes a ZeroMQ PUB peer sends a SUB that dialled it (ZMTP 3.0: the
// greeting with the NULL mechanism, a READY command naming the socket type) followed by
// msgs, each a multipart message of short frames.
func zmtpPub(msgs ...[][]byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0})
	b.Write(append([]byte("NULL"), make([]byte, 16)...))
	b.WriteByte(0) // as-server
	b.Write(make([]byte, 31))
	var ready bytes.Buffer
	ready.WriteByte(5)
	ready.WriteString("READY")
	ready.WriteByte(byte(len("Socket-Type")))
	ready.WriteString("Socket-Type")
	_ = binary.Write(&ready, binary.BigEndian, uint32(3))
	ready.WriteString("PUB")
	b.WriteByte(0x04)
	b.WriteByte(byte(ready.Len()))
	b.Write(ready.Bytes())
	for _, m := range msgs {
		for i, f := range m {
			flags := byte(0)
			if i < len(m)-1 {
				flags |= 0x01
			}
			if len(f) > 255 {
				b.WriteByte(flags | 0x02)
				_ = binary.Write(&b, binary.BigEndian, uint64(len(f)))
			} else {
				b.WriteByte(flags)
				b.WriteByte(byte(len(f)))
			}
			b.Write(f)
		}
	}
	return b.Bytes()
}

// FuzzSubscriberWire plays an engine's publisher that sends any bytes on the wire to a
// subscriber (ZMTP greeting, handshake and frames, then the three-frame event messages)
// and then hangs up. The subscriber must not panic, must hand its callback only batches
// that decoded, and must notice the connection's end (OnError) instead of hanging. The
// connection is an ipc:// (Unix socket) one: the same ZMTP bytes as over TCP, without a
// TCP connection's 60 s TIME_WAIT per input, which runs out of local ports at about 400
// inputs a second and stalls the fuzzer.
func FuzzSubscriberWire(f *testing.F) {
	msg, err := EncodeMessage("kv", goldenBatch())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(zmtpPub(msg))
	f.Add(zmtpPub(msg, [][]byte{[]byte("kv"), {0, 0, 0, 0, 0, 0, 0, 9}, {0x93, 0xcb}}, [][]byte{[]byte("kv")}))
	f.Add(zmtpPub())
	f.Add(zmtpPub()[:20])
	f.Fuzz(func(t *testing.T, data []byte) {
		playPublisher(t, "unix", data, func(b kv.Batch) {
			for _, e := range b.Events {
				if e.Kind != kv.BlockStored && e.Kind != kv.BlockRemoved && e.Kind != kv.AllBlocksCleared {
					t.Errorf("callback got an event of kind %v", e.Kind)
				}
			}
		})
	})
}

// TestZMTPPubDelivers: the fuzzer's seed is a publisher's real wire form: the batch it
// carries reaches the callback, over TCP and over ipc://.
func TestZMTPPubDelivers(t *testing.T) {
	msg, err := EncodeMessage("kv", goldenBatch())
	if err != nil {
		t.Fatal(err)
	}
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			var got []kv.Batch
			playPublisher(t, network, zmtpPub(msg), func(b kv.Batch) { got = append(got, b) })
			if len(got) != 1 || got[0].Seq != 7 || len(got[0].Events) != len(goldenBatch().Events) {
				t.Fatalf("delivered %+v, want the golden batch", got)
			}
		})
	}
}

// playPublisher accepts one subscriber's connection on network ("tcp" or "unix"), sends
// it data, hangs up, and returns once the subscriber noticed (failing the test if it does
// not within 10 s).
func playPublisher(t *testing.T, network string, data []byte, fn func(kv.Batch)) {
	t.Helper()
	addr, endpoint := "127.0.0.1:0", "tcp://"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "kv")
		endpoint = "ipc://"
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ended := make(chan struct{}, 1)
	done := make(chan error, 1)
	cfg := SubscriberConfig{Endpoint: endpoint + ln.Addr().String(), RetryMin: time.Hour, RetryMax: time.Hour,
		OnError: func(error) {
			select {
			case ended <- struct{}{}:
			default:
			}
		}}
	go func() { done <- SubscribeWith(ctx, cfg, fn) }()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// Hang up by half-closing, reading what the subscriber sends until it closes too: a
	// full close with its bytes unread would reset the connection before it read ours.
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, conn); close(drained) }()
	_, _ = conn.Write(data)
	_ = conn.(interface{ CloseWrite() error }).CloseWrite()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the subscriber did not notice the publisher hang up")
	}
	_ = conn.Close()
	<-drained
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("SubscribeWith returned %v, want context.Canceled", err)
	}
}
