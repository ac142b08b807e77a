package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newGrain(t *testing.T, clock *fakeClock) *Grain {
	t.Helper()
	g := New(Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1, WorkerTTL: 5 * time.Second, Now: clock.now, Seed: 1})
	g.model = "m"
	return g
}

func register(t *testing.T, g *Grain, id string, blockSize int32, epoch uint64) *messages.RegisterAck {
	t.Helper()
	ack, err := g.Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "a", Id: "worker/" + id},
			Card: &messages.ModelCard{Model: "m", KvBlockSize: blockSize, TotalKvBlocks: 100}, Ready: true, EngineEpoch: epoch},
		Load: &messages.WorkerLoad{TotalBlocks: 100},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func stored(hashes []uint64, tokens []uint32) *messages.KvEvent {
	return kvpb.ToProto(kv.Event{Kind: kv.BlockStored, EngineHashes: hashes, TokenIDs: tokens, BlockSize: 4})
}

func TestGrainRoutesToTheWorkerHoldingThePrefix(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	for _, id := range []string{"w0", "w1"} {
		if ack := register(t, g, id, 4, 1); !ack.Accepted || ack.NeedDump {
			t.Fatalf("register %s: %+v", id, ack)
		}
	}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	ack, err := g.PublishEvents(&messages.KvEventBatch{WorkerId: "w1", EngineEpoch: 1, Seq: 1,
		Events: []*messages.KvEvent{stored([]uint64{11, 12}, prompt[:8])}}, nil)
	if err != nil || ack.NeedDump {
		t.Fatalf("publish: %+v %v", ack, err)
	}
	resp, err := g.Route(&messages.RouteRequest{RequestId: "r1", TokenIds: prompt}, nil)
	if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK {
		t.Fatalf("route: %+v %v", resp, err)
	}
	if resp.WorkerId != "w1" || resp.Worker.GetId() != "worker/w1" || resp.OverlapBlocks != 2 || resp.PromptBlocks != 2 {
		t.Fatalf("route = %+v, want w1 with 2 of 2 blocks cached", resp)
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Routed != 1 || st.OverlapBlocks != 2 || st.Workers[1].ActiveRequests != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := g.Free(&messages.RequestRef{RequestId: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Workers[1].ActiveRequests != 0 || st.Workers[1].ActiveBlocks != 0 {
		t.Fatalf("after free: %+v", st.Workers[1])
	}
}

func TestGrainRefusesBlockSizeMismatch(t *testing.T) {
	g := newGrain(t, &fakeClock{t: time.Unix(0, 0)})
	ack := register(t, g, "w0", 16, 1)
	if ack.Accepted || !strings.Contains(ack.Error, "16") || !strings.Contains(ack.Error, "4") {
		t.Fatalf("ack %+v: want a refusal naming both block sizes", ack)
	}
	resp, _ := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1}}, nil)
	if resp.Outcome != messages.RouteOutcome_ROUTE_NO_WORKERS {
		t.Fatalf("route with no accepted worker: %+v", resp)
	}
}

func TestGrainSilentWorkerIsRemoved(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	register(t, g, "w0", 4, 1)
	register(t, g, "w1", 4, 1)
	clock.t = clock.t.Add(3 * time.Second)
	register(t, g, "w1", 4, 1) // w1 heartbeats, w0 does not
	clock.t = clock.t.Add(3 * time.Second)
	for i := 0; i < 5; i++ {
		resp, _ := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}}, nil)
		if resp.WorkerId != "w1" {
			t.Fatalf("route went to %q after w0 fell silent", resp.WorkerId)
		}
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if len(st.Workers) != 1 {
		t.Fatalf("workers %+v, want only w1", st.Workers)
	}
}

func TestGrainAsksUnknownWorkerForDump(t *testing.T) {
	g := newGrain(t, &fakeClock{t: time.Unix(0, 0)})
	ack, _ := g.PublishEvents(&messages.KvEventBatch{WorkerId: "ghost", EngineEpoch: 1, Seq: 3}, nil)
	if !ack.NeedDump {
		t.Fatal("a batch from an unknown worker must ask for a dump")
	}
	register(t, g, "w0", 4, 1)
	ack, _ = g.PublishEvents(&messages.KvEventBatch{WorkerId: "w0", EngineEpoch: 1, Seq: 2}, nil) // seq 1 lost
	if !ack.NeedDump {
		t.Fatal("a sequence gap must ask for a dump")
	}
}

func TestGrainEngineRestartDropsBlocks(t *testing.T) {
	g := newGrain(t, &fakeClock{t: time.Unix(0, 0)})
	register(t, g, "w0", 4, 1)
	g.PublishEvents(&messages.KvEventBatch{WorkerId: "w0", EngineEpoch: 1, Seq: 1,
		Events: []*messages.KvEvent{stored([]uint64{1}, []uint32{1, 2, 3, 4})}}, nil)
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Workers[0].IndexedBlocks != 1 {
		t.Fatalf("indexed %d, want 1", st.Workers[0].IndexedBlocks)
	}
	register(t, g, "w0", 4, 2)
	st, _ = g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Workers[0].IndexedBlocks != 0 {
		t.Fatalf("after an engine restart indexed %d, want 0", st.Workers[0].IndexedBlocks)
	}
}

func TestGrainDropsWorkersOfAMemberThatLeft(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	for _, w := range []struct{ id, addr string }{{"w0", "10.0.0.1:7000"}, {"w1", "10.0.0.2:7000"}, {"w2", "10.0.0.2:7000"}} {
		ack, err := g.Register(&messages.RegisterWorker{
			Worker: &messages.WorkerInfo{WorkerId: w.id, Actor: &messages.ActorRef{Address: w.addr, Id: "node/worker/" + w.id},
				Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1},
			Load: &messages.WorkerLoad{TotalBlocks: 100}}, nil)
		if err != nil || !ack.Accepted {
			t.Fatalf("register %s: %+v %v", w.id, ack, err)
		}
	}
	g.membersLeft("10.0.0.2:7000")
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if len(st.Workers) != 1 || st.Workers[0].WorkerId != "w0" {
		t.Fatalf("workers after member 10.0.0.2:7000 left = %v, want only w0", st.Workers)
	}
	for i := 0; i < 4; i++ {
		resp, _ := g.Route(&messages.RouteRequest{RequestId: fmt.Sprint("r", i), TokenIds: []uint32{1, 2, 3, 4}}, nil)
		if resp.WorkerId != "w0" {
			t.Fatalf("route %d went to %q, want w0", i, resp.WorkerId)
		}
	}
}

func TestGrainTakesTheBlockSizeFromTheFirstWorker(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := New(Config{Mode: "kv", OverlapWeight: 1, Now: clock.now, Seed: 1})
	g.model = "m"
	if resp, _ := g.Route(&messages.RouteRequest{RequestId: "r0", TokenIds: []uint32{1}}, nil); resp.Outcome != messages.RouteOutcome_ROUTE_NO_WORKERS {
		t.Fatalf("route before any worker = %+v, want no_workers", resp)
	}
	if ack := register(t, g, "w0", 16, 1); !ack.Accepted {
		t.Fatalf("first worker (block size 16) refused: %+v", ack)
	}
	ack := register(t, g, "w1", 32, 1)
	if ack.Accepted || !strings.Contains(ack.Error, "16") || !strings.Contains(ack.Error, "32") {
		t.Fatalf("second worker with block size 32: %+v, want a refusal naming 16 and 32", ack)
	}
	if resp, _ := g.Route(&messages.RouteRequest{RequestId: "r1", TokenIds: []uint32{1}}, nil); resp.WorkerId != "w0" {
		t.Fatalf("route = %+v, want w0", resp)
	}
}

func registerAt(t *testing.T, g *Grain, id, addr string) *messages.RegisterAck {
	t.Helper()
	ack, err := g.Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: addr, Id: "node/worker/" + id},
			Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1},
		Load: &messages.WorkerLoad{TotalBlocks: 100}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// TestGrainRefusesWorkersOfAMemberThatLeft: a member the cluster dropped may run on for a
// moment (a process resumed from a pause); its workers' heartbeats are refused, so the
// worker ids its node's new member takes over are free for it at once. A member that
// joins again at that address registers as any; the address is forgotten after
// leftMemory.
func TestGrainRefusesWorkersOfAMemberThatLeft(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	const old, next = "10.0.0.2:7000", "10.0.0.2:7001"
	member := func(addr string) *cluster.Member {
		host, port, _ := strings.Cut(addr, ":")
		p, _ := strconv.Atoi(port)
		return &cluster.Member{Host: host, Port: int32(p), Id: addr}
	}
	if ack := registerAt(t, g, "n2-0", old); !ack.Accepted {
		t.Fatalf("n2-0: %+v", ack)
	}
	g.receive(&cluster.ClusterTopology{Left: []*cluster.Member{member(old)}})
	clock.t = clock.t.Add(20 * time.Second) // the pause
	if ack := registerAt(t, g, "n2-0", old); ack.Accepted || !strings.Contains(ack.Error, "left the cluster") {
		t.Fatalf("a heartbeat from the member that left: %+v, want it refused", ack)
	}
	if ack := registerAt(t, g, "n2-0", next); !ack.Accepted {
		t.Fatalf("n2-0 from the node's new member: %+v", ack)
	}
	if st, _ := g.Stats(&messages.RouterStatsRequest{}, nil); len(st.Workers) != 1 || st.Workers[0].WorkerId != "n2-0" {
		t.Fatalf("workers %v, want n2-0 (the new member's)", st.Workers)
	}
	// A member joining at the old address again (a fixed --member-port) registers.
	g.receive(&cluster.ClusterTopology{Joined: []*cluster.Member{member(old)}})
	if ack := registerAt(t, g, "n3-0", old); !ack.Accepted {
		t.Fatalf("a worker of a member that joined at the old address: %+v", ack)
	}
	// An address left long ago is forgotten.
	g.receive(&cluster.ClusterTopology{Left: []*cluster.Member{member("10.0.0.9:7000")}})
	clock.t = clock.t.Add(leftMemory + time.Second)
	g.receive(&cluster.ClusterTopology{Left: []*cluster.Member{member("10.0.0.8:7000")}})
	if _, ok := g.left["10.0.0.9:7000"]; ok || len(g.left) != 1 {
		t.Fatalf("left addresses %v, want only 10.0.0.8:7000", g.left)
	}
}

func TestGrainRefusesADuplicateWorkerID(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	if ack := registerAt(t, g, "n1-0", "10.0.0.1:7000"); !ack.Accepted {
		t.Fatalf("first n1-0 refused: %+v", ack)
	}
	ack := registerAt(t, g, "n1-0", "10.0.0.2:7000")
	if ack.Accepted || !strings.Contains(ack.Error, "--node-id") || !strings.Contains(ack.Error, "10.0.0.1:7000") {
		t.Fatalf("second n1-0 from another member: %+v, want a refusal naming the first and --node-id", ack)
	}
	// The impostor's deregistration leaves the registered worker in place.
	_, _ = g.Deregister(&messages.DeregisterWorker{WorkerId: "n1-0", Reason: "stopping",
		Actor: &messages.ActorRef{Address: "10.0.0.2:7000", Id: "node/worker/n1-0"}}, nil)
	if st, _ := g.Stats(&messages.RouterStatsRequest{}, nil); len(st.Workers) != 1 {
		t.Fatalf("workers after the duplicate's deregistration: %v, want n1-0 kept", st.Workers)
	}
	// Once the first is silent past the TTL, the id is free again (a node restarted elsewhere).
	clock.t = clock.t.Add(6 * time.Second)
	if ack := registerAt(t, g, "n1-0", "10.0.0.2:7000"); !ack.Accepted {
		t.Fatalf("n1-0 from a new member after the old one went silent: %+v", ack)
	}
}

func TestGrainFreesTheRequestsOfAGatewayThatLeft(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	registerAt(t, g, "w0", "10.0.0.1:7000")
	for i, gw := range []string{"10.0.0.9:9000", "10.0.0.9:9000", "10.0.0.8:9000"} {
		id := fmt.Sprint("r", i)
		resp, _ := g.Route(&messages.RouteRequest{RequestId: id, TokenIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}, nil)
		if resp.WorkerId != "w0" {
			t.Fatalf("route %s: %+v", id, resp)
		}
		g.track(gw, id)
	}
	active := func() int32 {
		st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
		return st.Workers[0].ActiveRequests
	}
	if n := active(); n != 3 {
		t.Fatalf("active requests %d, want 3", n)
	}
	g.gatewayLeft("10.0.0.9:9000")
	if n := active(); n != 1 {
		t.Fatalf("active requests after gateway 10.0.0.9:9000 left: %d, want 1 (the other gateway's)", n)
	}
	_, _ = g.Free(&messages.RequestRef{RequestId: "r2"}, nil)
	if n := active(); n != 0 || len(g.owners) != 0 || len(g.owner) != 0 {
		t.Fatalf("after freeing r2: active %d, owners %v, owner %v; want all empty", n, g.owners, g.owner)
	}
}

// TestGrainExpiresUnacknowledgedRoutes: a route made with will_ack and never acknowledged
// (its caller's call timed out after the grain recorded it, and its free was lost) is
// expired at the first heartbeat past MaxUnackedAge, without any route traffic; an
// acknowledged one (RouteAck, a plain message) and one made without will_ack stay. The
// expiry is counted in Stats, and the gateway bookkeeping of requests the core no longer
// tracks is pruned.
func TestGrainExpiresUnacknowledgedRoutes(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := New(Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1, WorkerTTL: 5 * time.Second,
		MaxUnackedAge: 2 * time.Second, Now: clock.now, Seed: 1})
	g.model = "m"
	register(t, g, "w0", 4, 1)
	for _, r := range []struct {
		id      string
		willAck bool
	}{{"acked", true}, {"orphan", true}, {"plain", false}} {
		resp, err := g.Route(&messages.RouteRequest{RequestId: r.id, TokenIds: []uint32{1, 2, 3, 4}, WillAck: r.willAck}, nil)
		if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK {
			t.Fatalf("route %s: %+v %v", r.id, resp, err)
		}
	}
	g.receive(&messages.RouteAck{RequestId: "acked"})
	g.receive(&messages.RouteAck{RequestId: "unknown"})
	for i := 0; i < 2000; i++ { // gateways' requests freed with their worker, say
		g.track("10.0.0.9:9000", fmt.Sprint("gone", i))
	}
	clock.t = clock.t.Add(2 * time.Second)
	register(t, g, "w0", 4, 1)
	if st, _ := g.Stats(&messages.RouterStatsRequest{}, nil); st.Workers[0].ActiveRequests != 3 || st.ExpiredUnacked != 0 {
		t.Fatalf("at the bound: %d active, %d expired; want 3, 0", st.Workers[0].ActiveRequests, st.ExpiredUnacked)
	}
	clock.t = clock.t.Add(time.Second)
	register(t, g, "w0", 4, 1) // a heartbeat: no route, no stats call
	if n := g.core.ActiveRequests(); n != 2 {
		t.Fatalf("after the heartbeat past the bound: %d active, want 2 (acked and plain)", n)
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Workers[0].ActiveRequests != 2 || st.ExpiredUnacked != 1 || st.ExpiredStale != 0 {
		t.Fatalf("stats %+v: want 2 active, 1 expired unacknowledged", st)
	}
	if len(g.owner) != 0 || len(g.owners) != 0 {
		t.Fatalf("%d request owners left, want the untracked ones pruned", len(g.owner))
	}
	for _, id := range []string{"acked", "plain"} {
		if _, err := g.Free(&messages.RequestRef{RequestId: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := g.Stats(&messages.RouterStatsRequest{}, nil); st.Workers[0].ActiveRequests != 0 || st.Workers[0].ActiveBlocks != 0 {
		t.Fatalf("after freeing: %+v", st.Workers[0])
	}
}

// TestGrainRouteOutcomes: a request the router cannot route at all (no prompt, no id, an
// override out of range) is answered ROUTE_BAD_REQUEST, whatever the fleet; a valid one
// ROUTE_OK.
func TestGrainRouteOutcomes(t *testing.T) {
	neg, nan := -1.0, math.NaN()
	for _, tc := range []struct {
		name string
		req  *messages.RouteRequest
		want messages.RouteOutcome
	}{
		{"valid", &messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}}, messages.RouteOutcome_ROUTE_OK},
		{"empty prompt", &messages.RouteRequest{RequestId: "r", TokenIds: []uint32{}}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"no prompt", &messages.RouteRequest{RequestId: "r"}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"no request id", &messages.RouteRequest{TokenIds: []uint32{1}}, messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"negative overlap weight", &messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1}, OverlapWeight: &neg},
			messages.RouteOutcome_ROUTE_BAD_REQUEST},
		{"temperature not a number", &messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1}, Temperature: &nan},
			messages.RouteOutcome_ROUTE_BAD_REQUEST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGrain(t, &fakeClock{t: time.Unix(1000, 0)})
			if ack := register(t, g, "w0", 4, 1); !ack.Accepted {
				t.Fatalf("register: %+v", ack)
			}
			resp, err := g.Route(tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Outcome != tc.want {
				t.Fatalf("outcome %v (%q), want %v", resp.Outcome, resp.Error, tc.want)
			}
			if (resp.Error == "") != (tc.want == messages.RouteOutcome_ROUTE_OK) {
				t.Fatalf("error %q with outcome %v", resp.Error, resp.Outcome)
			}
			st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
			if tc.want != messages.RouteOutcome_ROUTE_OK && (st.Routed != 0 || st.Workers[0].ActiveRequests != 0) {
				t.Fatalf("a refused request was tracked: %+v", st)
			}
		})
	}
}

// TestGrainRegisterRefusesRoleOutsideTheEnum: a worker announcing a role the vocabulary
// does not have is refused, naming itself and the role, and is not routed to.
func TestGrainRegisterRefusesRoleOutsideTheEnum(t *testing.T) {
	for _, role := range []messages.Role{-1, 3, 1 << 20} {
		t.Run(role.Label(), func(t *testing.T) {
			g := newGrain(t, &fakeClock{t: time.Unix(1000, 0)})
			ack, err := g.Register(&messages.RegisterWorker{
				Worker: &messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "worker/w0"},
					Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1,
					Role: role},
				Load: &messages.WorkerLoad{TotalBlocks: 100},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ack.Accepted || !strings.Contains(ack.Error, "w0") || !strings.Contains(ack.Error, role.Label()) {
				t.Fatalf("ack %+v, want a refusal naming the worker and %s", ack, role.Label())
			}
			resp, _ := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}}, nil)
			if resp.Outcome != messages.RouteOutcome_ROUTE_NO_WORKERS {
				t.Fatalf("route after the refusal: %+v, want ROUTE_NO_WORKERS", resp)
			}
			st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
			if len(st.Workers) != 0 {
				t.Fatalf("refused worker listed: %v", st.Workers)
			}
		})
	}
}

// TestGrainSetBusyThresholds: a field the update leaves absent keeps its value; one it
// sets replaces it, and at most 0 turns the test off.
func TestGrainSetBusyThresholds(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name        string
		upd         *messages.BusyThresholds
		wantKV      float64
		wantPrefill int64
	}{
		{"nothing set", &messages.BusyThresholds{}, 0.8, 5000},
		{"kv usage only", &messages.BusyThresholds{KvUsage: f(0.5)}, 0.5, 5000},
		{"prefill tokens only", &messages.BusyThresholds{PrefillTokens: i(100)}, 0.8, 100},
		{"both off", &messages.BusyThresholds{KvUsage: f(-1), PrefillTokens: i(0)}, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1, WorkerTTL: 5 * time.Second,
				Now: (&fakeClock{t: time.Unix(1000, 0)}).now, Seed: 1,
				Busy: kv.BusyThresholds{KVUsage: 0.8, PrefillTokens: 5000}})
			g.model = "m"
			register(t, g, "w0", 4, 1)
			if _, err := g.SetBusyThresholds(tc.upd, nil); err != nil {
				t.Fatal(err)
			}
			if b := g.core.BusyThresholds(); b.KVUsage != tc.wantKV || b.PrefillTokens != tc.wantPrefill {
				t.Fatalf("thresholds %+v, want kv usage %v, prefill tokens %d", b, tc.wantKV, tc.wantPrefill)
			}
		})
	}
}

// The choices after the first of an n > 1 request name the first's worker (pin_worker):
// they go there though the policy would pick another worker, the stats count them, and
// a pin naming a worker the router does not know falls back to the policy.
func TestGrainRoutesPinnedRequestsToTheirWorker(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	for _, id := range []string{"w0", "w1"} {
		register(t, g, id, 4, 1)
	}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	first, err := g.Route(&messages.RouteRequest{RequestId: "c-0", TokenIds: prompt}, nil)
	if err != nil || first.Outcome != messages.RouteOutcome_ROUTE_OK {
		t.Fatalf("route: %+v %v", first, err)
	}
	for i := 1; i < 4; i++ {
		resp, err := g.Route(&messages.RouteRequest{RequestId: fmt.Sprintf("c-%d", i), TokenIds: prompt, PinWorker: first.WorkerId}, nil)
		if err != nil || resp.WorkerId != first.WorkerId || resp.Worker.GetId() != "worker/"+first.WorkerId {
			t.Fatalf("pinned choice %d: %+v %v, want %s", i, resp, err, first.WorkerId)
		}
	}
	resp, err := g.Route(&messages.RouteRequest{RequestId: "d", TokenIds: prompt, PinWorker: "gone"}, nil)
	if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK || resp.WorkerId == first.WorkerId {
		t.Fatalf("unknown pin: %+v %v, want the other, idle worker", resp, err)
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Routed != 5 || st.Pinned != 3 || st.PinFallbacks != 1 {
		t.Fatalf("stats routed=%d pinned=%d pin_fallbacks=%d, want 5, 3, 1", st.Routed, st.Pinned, st.PinFallbacks)
	}
}

// TestGrainRegistrationWindow: a grain activated moments ago that no worker has registered
// with yet answers ROUTE_NO_WORKERS with retry_ms (its workers come within a heartbeat
// and a call's timeout: the caller asks again); once one registers it routes; past the
// window, or after its workers were all lost, no worker is answered without a retry.
func TestGrainRegistrationWindow(t *testing.T) {
	route := func(g *Grain) *messages.RouteResponse {
		t.Helper()
		resp, err := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name     string
		after    time.Duration // since the activation
		register bool          // a worker registered at the activation
		retry    int32
		worker   string
	}{
		{"just activated", 0, false, 250, ""},
		{"2.9 s after", 2900 * time.Millisecond, false, 250, ""},
		{"3 s after: the window ended", 3 * time.Second, false, 0, ""},
		{"a worker registered", time.Second, true, 0, "w0"},
		{"its worker silent past the TTL", 6 * time.Second, true, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1000, 0)}
			g := newGrain(t, clock)
			g.activated = clock.t
			if tc.register {
				register(t, g, "w0", 4, 1)
			}
			clock.t = clock.t.Add(tc.after)
			resp := route(g)
			if resp.RetryMs != tc.retry || resp.WorkerId != tc.worker {
				t.Fatalf("answer %v, want retry_ms %d and worker %q", resp, tc.retry, tc.worker)
			}
			if tc.worker == "" && resp.Outcome != messages.RouteOutcome_ROUTE_NO_WORKERS {
				t.Fatalf("outcome %v, want no_workers", resp.Outcome)
			}
		})
	}
	// A grain never activated (New alone) has no window.
	g := newGrain(t, &fakeClock{t: time.Unix(1000, 0)})
	if resp := route(g); resp.RetryMs != 0 {
		t.Fatalf("a grain without activation answered retry_ms %d", resp.RetryMs)
	}
}

// TestGrainStartsOverWithTheNextBlockSize: a grain that took its KV block size from its
// first worker refuses a worker of another block size while one of the first's is live,
// and takes the new one's once none is left, whether they deregistered or went silent
// past their TTL (a fleet redeployed with another block size); a configured block size
// is kept.
func TestGrainStartsOverWithTheNextBlockSize(t *testing.T) {
	for _, gone := range []string{"deregistered", "silent"} {
		t.Run(gone, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(0, 0)}
			g := New(Config{Mode: "kv", OverlapWeight: 1, WorkerTTL: 5 * time.Second, Now: clock.now, Seed: 1})
			g.model = "m"
			if ack := register(t, g, "old", 64, 1); !ack.Accepted {
				t.Fatalf("first worker: %+v", ack)
			}
			if ack := register(t, g, "new", 16, 1); ack.Accepted {
				t.Fatal("a worker of another block size accepted while one of the router's is live")
			}
			if gone == "deregistered" {
				if _, err := g.Deregister(&messages.DeregisterWorker{WorkerId: "old"}, nil); err != nil {
					t.Fatal(err)
				}
			} else {
				clock.t = clock.t.Add(6 * time.Second)
			}
			if ack := register(t, g, "new", 16, 1); !ack.Accepted {
				t.Fatalf("no worker of the old block size left: %+v", ack)
			}
			resp, _ := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: make([]uint32, 40)}, nil)
			if resp.Outcome != messages.RouteOutcome_ROUTE_OK || resp.WorkerId != "new" || resp.PromptBlocks != 2 {
				t.Fatalf("route: %+v, want worker new and 2 full blocks of 16 tokens (none of 64)", resp)
			}
		})
	}
	// Configured: kept, even with no worker.
	g := newGrain(t, &fakeClock{t: time.Unix(0, 0)})
	if ack := register(t, g, "w", 16, 1); ack.Accepted {
		t.Fatal("a worker of another block size than the configured one accepted")
	}
}
