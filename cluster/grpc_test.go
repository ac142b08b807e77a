package cluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestScreenBatch(t *testing.T) {
	known := func(name string) bool { return name == "turbine.Ack" }
	b := &remote.MessageBatch{
		TypeNames: []string{"turbine.Ack", "elsewhere.Unknown"},
		Targets:   []*actor.PID{actor.NewPID("127.0.0.1:1", "echo")},
		Senders:   []*actor.PID{actor.NewPID("127.0.0.1:2", "caller")},
		Envelopes: []*remote.MessageEnvelope{
			{TypeId: 0, Target: 0, Sender: 1},                 // kept
			{TypeId: 1, Target: 0},                            // unlinked protobuf type
			{TypeId: 1, Target: 0, SerializerId: 1},           // JSON: protoactor copes with unknown names
			{TypeId: 2, Target: 0},                            // type index out of range
			{TypeId: 0, Target: 1},                            // target index out of range
			{TypeId: 0, Target: 0, Sender: 2},                 // sender index out of range
			{TypeId: 0, Target: 0, SerializerId: -1},          // no such serializer
			{TypeId: 0, Target: 0, MessageData: []byte("ok")}, // kept
		},
	}
	dropped := screenBatch(b, known)
	if len(b.Envelopes) != 3 || b.Envelopes[1].SerializerId != 1 || string(b.Envelopes[2].MessageData) != "ok" {
		t.Fatalf("kept %d envelopes: %v", len(b.Envelopes), b.Envelopes)
	}
	wantReasons := []string{"not linked", "type index 2", "target index 1", "sender index 2", "serializer id -1"}
	if len(dropped) != len(wantReasons) {
		t.Fatalf("dropped %v, want %d", dropped, len(wantReasons))
	}
	for i, d := range dropped {
		if !strings.Contains(d.reason, wantReasons[i]) {
			t.Errorf("drop %d: reason %q, want %q", i, d.reason, wantReasons[i])
		}
	}
	if dropped[0].typeName != "elsewhere.Unknown" || !strings.Contains(dropped[0].target, "echo") {
		t.Errorf("drop 0 = %+v, want the type name and the target", dropped[0])
	}
}

func TestLinkedType(t *testing.T) {
	if !linkedType("actor.PID") || linkedType("no.such.Type") {
		t.Fatal("linkedType does not follow the protobuf registry")
	}
}

func TestRateLimit(t *testing.T) {
	r := newRateLimit(10 * time.Second)
	t0 := time.Unix(0, 0)
	var allowed int
	for i := range 100 { // one a second for 100 s
		if ok, _ := r.allow("k", t0.Add(time.Duration(i)*time.Second)); ok {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("100 events over 100 s, one key: %d allowed, want 10", allowed)
	}
	if ok, suppressed := r.allow("k", t0.Add(200*time.Second)); !ok || suppressed != 9 {
		t.Fatalf("after a pause: allowed %v with %d suppressed, want true, 9", ok, suppressed)
	}
	if ok, _ := r.allow("other", t0.Add(200*time.Second)); !ok {
		t.Fatal("keys share one limit")
	}
}

// fakeClientStream answers RecvMsg with one prepared RemoteMessage.
type fakeClientStream struct {
	grpc.ClientStream
	reply *remote.RemoteMessage
}

func (f *fakeClientStream) RecvMsg(m any) error {
	m.(*remote.RemoteMessage).MessageType = f.reply.MessageType
	return nil
}

func TestWatchClientStreamReportsBlockedPeers(t *testing.T) {
	for _, tc := range []struct {
		reply *remote.RemoteMessage
		want  string
	}{
		{&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectResponse{
			ConnectResponse: &remote.ConnectResponse{Blocked: true, MemberId: "peer-1"}}}, "peer-1"},
		{&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectResponse{
			ConnectResponse: &remote.ConnectResponse{Blocked: false, MemberId: "peer-2"}}}, ""},
		{&remote.RemoteMessage{MessageType: &remote.RemoteMessage_DisconnectRequest{}}, ""},
	} {
		var got string
		g := newGRPCGuard(zerolog.Nop(), func(peer string) { got = peer })
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeClientStream{reply: tc.reply}, nil
		}
		cs, err := g.watchClientStream(context.Background(), &grpc.StreamDesc{}, nil, "/remote.Remoting/Receive", streamer)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(&remote.RemoteMessage{}); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("reply %v: blocked by %q, want %q", tc.reply, got, tc.want)
		}
	}
}

func TestRecoverStreamTurnsPanicsIntoErrors(t *testing.T) {
	var buf bytes.Buffer
	g := newGRPCGuard(zerolog.New(&buf), nil)
	info := &grpc.StreamServerInfo{FullMethod: "/remote.Remoting/Receive"}
	for range 3 {
		err := g.recoverStream(nil, nil, info, func(any, grpc.ServerStream) error {
			var m map[string]int
			m["x"] = 1 // nil map write: a runtime panic like protoactor's nil dereference
			return nil
		})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("recoverStream = %v, want an Internal error", err)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("three panics logged %d lines, want 1 (rate-limited):\n%s", n, buf.String())
	}
	if _, err := g.recoverUnary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x"},
		func(context.Context, any) (any, error) { panic("boom") }); status.Code(err) != codes.Internal {
		t.Fatalf("recoverUnary = %v, want an Internal error", err)
	}
}
