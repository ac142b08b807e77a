package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const unlinkedTypeName = "turbinetest.unlinked.Mystery"

var unlinked = sync.OnceValues(buildUnlinkedType)

// unlinkedMessage is a message of a type no package links, built from a descriptor made in
// code; its type is registered in this process only (a peer built from other sources).
func unlinkedMessage() (proto.Message, error) {
	mt, err := unlinked()
	if err != nil {
		return nil, err
	}
	msg := mt.New()
	msg.Set(mt.Descriptor().Fields().ByName("note"), protoreflect.ValueOfString("the receiver does not know this type"))
	return msg.Interface(), nil
}

func buildUnlinkedType() (protoreflect.MessageType, error) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("turbinetest/unlinked.proto"),
		Package: proto.String("turbinetest.unlinked"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Mystery"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("note"), JsonName: proto.String("note"), Number: proto.Int32(1),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		return nil, err
	}
	mt := dynamicpb.NewMessageType(fd.Messages().Get(0))
	if err := protoregistry.GlobalTypes.RegisterMessage(mt); err != nil {
		return nil, err
	}
	return mt, nil
}

// sendUnknown (child side) sends an unlinked message to ADDRESS/echo, then a normal request.
func sendUnknown(m *Member, address string) string {
	msg, err := unlinkedMessage()
	if err != nil {
		return "reply error " + err.Error()
	}
	pid := actor.NewPID(address, "echo")
	m.System.Root.Send(pid, msg)
	res, err := m.System.Root.RequestFuture(pid, wrapperspb.String("still there?"), 10*time.Second).Result()
	if err != nil {
		return "reply error " + err.Error()
	}
	if s, ok := res.(*wrapperspb.StringValue); !ok || s.Value != "still there?" {
		return fmt.Sprintf("reply error unexpected answer %T %v", res, res)
	}
	return "reply ok"
}

// largeDump is a BlockDump of n stored events of one 16-token block each.
func largeDump(n int) *messages.BlockDump {
	d := &messages.BlockDump{WorkerId: "w-large", EngineEpoch: 1, LastSeq: 7, Last: true}
	for i := range n {
		tokens := make([]uint32, 16)
		for j := range tokens {
			tokens[j] = uint32(100_000 + i + j)
		}
		d.Events = append(d.Events, &messages.KvEvent{Event: &messages.KvEvent_Stored{Stored: &messages.KvBlockStored{
			BlockHashes: []uint64{uint64(i)<<32 | 0xdeadbeef}, TokenIds: tokens, BlockSize: 16}}})
	}
	return d
}

// sendLarge (child side) sends a request with a large dump to ADDRESS/echo; the answer is
// the same dump, so both directions carry it.
func sendLarge(m *Member, address, events string) string {
	n, err := strconv.Atoi(events)
	if err != nil {
		return "large error " + err.Error()
	}
	d := largeDump(n)
	res, err := m.System.Root.RequestFuture(actor.NewPID(address, "echo"), d, 30*time.Second).Result()
	if err != nil {
		return "large error " + err.Error()
	}
	back, ok := res.(*messages.BlockDump)
	if !ok || !proto.Equal(back, d) {
		return fmt.Sprintf("large error the answer is not the dump sent (%T)", res)
	}
	return fmt.Sprintf("large ok %d", proto.Size(d))
}

// startLocalEcho starts a member in this process, with an echo actor, logging to a buffer.
func startLocalEcho(t *testing.T) (*Member, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	m, err := Start(Config{Name: "remote-test", Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	if _, err := m.System.Root.SpawnNamed(echoProps(), "echo"); err != nil {
		t.Fatal(err)
	}
	return m, logs
}

// A message of a protobuf type the receiver does not link is dropped and logged instead
// of crashing the receiving process (docs/actor-library.md §4), and the receiver keeps
// answering.
func TestUnknownProtobufTypeIsDroppedNotFatal(t *testing.T) {
	skipIfPeerLeavesUnderRace(t) // the same library race at member shutdown as below
	if inFreshProcess(t) {
		return
	}
	if _, err := protoregistry.GlobalTypes.FindMessageByName(unlinkedTypeName); err == nil {
		t.Fatalf("%s is linked into the receiver; the test needs a type it does not know", unlinkedTypeName)
	}
	m, logs := startLocalEcho(t)
	defer m.Stop() // before the child ends: no peer leaves this member
	sender := startChild(t, "member", childDiscoveryEnv+"=local", childNameEnv+"=remote-test")
	sender.send("send-unknown " + m.Address())
	if got := sender.waitLine("reply ", 20*time.Second); got != "reply ok" {
		t.Fatalf("the request after the unknown message: %s", got)
	}
	if l := logs.String(); !strings.Contains(l, "remote message dropped") || !strings.Contains(l, unlinkedTypeName) {
		t.Fatalf("no log line about the dropped %s message:\n%s", unlinkedTypeName, l)
	}
	// And the receiver still answers requests of its own peers' normal traffic.
	sender.send("send-unknown " + m.Address())
	if got := sender.waitLine("reply ", 20*time.Second); got != "reply ok" {
		t.Fatalf("second round: %s", got)
	}
}

// A message above gRPC's 4 MiB default crosses between two members both ways.
func TestLargeMessageCrossesMembers(t *testing.T) {
	// Stopping a member while a peer is in its topology races inside protoactor (block
	// list against the gossiper; docs/actor-library.md §13), seen intermittently under -race.
	skipIfPeerLeavesUnderRace(t)
	if inFreshProcess(t) {
		return
	}
	m, _ := startLocalEcho(t)
	defer m.Stop() // before the child ends: no peer leaves this member
	sender := startChild(t, "member", childDiscoveryEnv+"=local", childNameEnv+"=remote-test")
	sender.send("send-large " + m.Address() + " 80000")
	got := sender.waitLine("large ", 60*time.Second)
	f := strings.Fields(got)
	if len(f) != 3 || f[1] != "ok" {
		t.Fatalf("large request: %s", got)
	}
	if n, _ := strconv.Atoi(f[2]); n <= 4<<20 {
		t.Fatalf("the dump was %d bytes, not above 4 MiB: the test proves nothing", n)
	}
}

// The watchdog closes Lost, once, when the member finds its own id in its block list.
func TestWatchdogNoticesSelfBlock(t *testing.T) {
	if raceEnabled {
		// Stopping the member makes it leave its own topology, and protoactor then races
		// with itself (BlockList.Block against the gossip loop's IsBlocked), as when a peer
		// leaves: run without -race (the test command does).
		t.Skip("the member leaves its own topology on Stop: protoactor's own data races (docs/reference.md §13); run without -race")
	}
	logs := &syncBuffer{}
	m, err := Start(Config{Name: "watchdog-test", Logger: zerolog.New(logs), WatchdogInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	select {
	case <-m.Lost():
		t.Fatalf("a fresh member is lost: %s", m.LostReason())
	case <-time.After(200 * time.Millisecond): // ten watchdog checks
	}
	if m.LostReason() != "" {
		t.Fatalf("LostReason before Lost = %q", m.LostReason())
	}
	m.Cluster.Remote.BlockList().Block(m.ID())
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the member blocked itself")
	}
	if !strings.Contains(m.LostReason(), "own id") {
		t.Fatalf("LostReason = %q", m.LostReason())
	}
	if n := strings.Count(logs.String(), "cluster member lost"); n != 1 {
		t.Fatalf("%d log lines say the member is lost, want 1", n)
	}
	// A lost member leaves without the graceful leave's fixed 2 s: its replacement waits
	// on this.
	start := time.Now()
	m.Stop()
	if d := time.Since(start); d >= time.Second {
		t.Errorf("a lost member took %s to stop, want under 1s", d.Round(time.Millisecond))
	}
	if !strings.Contains(logs.String(), "cluster member stopped") {
		t.Error("no log line says the lost member stopped")
	}
}

func echoPID(address string) *actor.PID { return actor.NewPID(address, "echo") }

func wrapString(s string) *wrapperspb.StringValue { return wrapperspb.String(s) }
