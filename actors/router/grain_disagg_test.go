package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
)

// registerRole registers worker id (block size 4) with a role and, for prefill workers,
// a bootstrap address.
func registerRole(t *testing.T, g *Grain, id string, role messages.Role, ready bool) *messages.RegisterAck {
	t.Helper()
	info := &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "10.0.0.1:7000", Id: "node/worker/" + id},
		Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: ready, EngineEpoch: 1, Role: role}
	if role == messages.Role_ROLE_PREFILL {
		info.BootstrapHost, info.BootstrapPort = "10.0.0.1", 8998
	}
	ack, err := g.Register(&messages.RegisterWorker{Worker: info, Load: &messages.WorkerLoad{TotalBlocks: 100}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func newDisaggGrain(t *testing.T, d *kv.DisaggConfig) *Grain {
	t.Helper()
	g := New(Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1, Now: (&fakeClock{t: time.Unix(1000, 0)}).now, Seed: 1, Disagg: d})
	g.model = "m"
	return g
}

func tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i + 1)
	}
	return out
}

func TestGrainDisaggDecisions(t *testing.T) {
	local := &kv.DisaggConfig{MaxLocalPrefillTokens: 8, MaxPrefillQueueTokens: 1000}
	type want struct {
		code            messages.RouteOutcome
		decision        messages.DisaggDecision
		decode, prefill string
		uncached        int64
	}
	for _, tc := range []struct {
		name  string
		cfg   *kv.DisaggConfig
		fleet [][3]string // id, role, "down" when not ready
		req   *messages.RouteRequest
		want  want
	}{
		{"aggregated fleet", local, [][3]string{{"a0", "", ""}},
			&messages.RouteRequest{TokenIds: tokens(40)}, want{decision: kv.DisaggAggregated, decode: "a0", uncached: 40}},
		{"remote", local, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(40)}, want{decision: kv.DisaggRemote, decode: "d0", prefill: "p0", uncached: 40}},
		{"short prompt", local, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(8)}, want{decision: kv.DisaggLocalShortPrefill, decode: "d0", uncached: 8}},
		{"default local limit of 1000 tokens", nil, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(1000)}, want{decision: kv.DisaggLocalShortPrefill, decode: "d0", uncached: 1000}},
		{"default local limit exceeded", nil, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(1001)}, want{decision: kv.DisaggRemote, decode: "d0", prefill: "p0", uncached: 1001}},
		{"local requested", local, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(40), LocalPrefill: true}, want{decision: kv.DisaggLocalRequested, decode: "d0", uncached: 40}},
		{"prefill worker excluded", local, [][3]string{{"d0", "decode", ""}, {"p0", "prefill", ""}},
			&messages.RouteRequest{TokenIds: tokens(40), ExcludePrefillWorkers: []string{"p0"}},
			want{decision: kv.DisaggLocalNoPrefillWorkers, decode: "d0", uncached: 40}},
		{"enforced without a prefill worker", &kv.DisaggConfig{MaxLocalPrefillTokens: 8, Enforce: true},
			[][3]string{{"d0", "decode", ""}, {"p0", "prefill", "down"}},
			&messages.RouteRequest{TokenIds: tokens(40)}, want{code: messages.RouteOutcome_ROUTE_NO_PREFILL_WORKERS}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newDisaggGrain(t, tc.cfg)
			for _, w := range tc.fleet {
				role, ok := messages.ParseRole(w[1])
				if !ok {
					t.Fatalf("role %q", w[1])
				}
				if ack := registerRole(t, g, w[0], role, w[2] != "down"); !ack.Accepted {
					t.Fatalf("register %s: %+v", w[0], ack)
				}
			}
			tc.req.RequestId = "r1"
			resp, err := g.Route(tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Outcome != tc.want.code {
				t.Fatalf("outcome %v (%s), want %v", resp.Outcome, resp.Error, tc.want.code)
			}
			if tc.want.code != messages.RouteOutcome_ROUTE_OK {
				return
			}
			if resp.DisaggDecision != tc.want.decision || resp.WorkerId != tc.want.decode ||
				resp.Worker.GetId() != "node/worker/"+tc.want.decode || resp.PrefillWorkerId != tc.want.prefill ||
				resp.UncachedPrefillTokens != tc.want.uncached {
				t.Fatalf("response %v, want %+v", resp, tc.want)
			}
			if tc.want.prefill == "" {
				if resp.PrefillWorker != nil || resp.PrefillRequestId != "" || resp.PrefillBootstrapHost != "" {
					t.Fatalf("prefill fields set on a %s decision: %v", resp.DisaggDecision, resp)
				}
				return
			}
			if resp.PrefillWorker.GetId() != "node/worker/"+tc.want.prefill || resp.PrefillRequestId != "r1#prefill" ||
				resp.PrefillBootstrapHost != "10.0.0.1" || resp.PrefillBootstrapPort != 8998 {
				t.Fatalf("prefill leg %v", resp)
			}
		})
	}
}

// TestGrainDisaggLoadAndStats: both legs are tracked and freed; stats carry roles.
func TestGrainDisaggLoadAndStats(t *testing.T) {
	g := newDisaggGrain(t, &kv.DisaggConfig{MaxLocalPrefillTokens: 8})
	registerRole(t, g, "d0", messages.Role_ROLE_DECODE, true)
	registerRole(t, g, "p0", messages.Role_ROLE_PREFILL, true)
	resp, _ := g.Route(&messages.RouteRequest{RequestId: "r1", TokenIds: tokens(40)}, nil)
	if resp.DisaggDecision != kv.DisaggRemote {
		t.Fatalf("route %v", resp)
	}
	active := func() string {
		st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
		var s []string
		for _, w := range st.Workers {
			s = append(s, fmt.Sprintf("%s:%s=%d", w.WorkerId, w.Role.Label(), w.ActiveRequests))
		}
		return strings.Join(s, " ")
	}
	if got := active(); got != "d0:decode=1 p0:prefill=1" {
		t.Fatalf("after route: %s", got)
	}
	g.Free(&messages.RequestRef{RequestId: resp.PrefillRequestId}, nil)
	if got := active(); got != "d0:decode=1 p0:prefill=0" {
		t.Fatalf("after the prefill leg's free: %s", got)
	}
	g.Free(&messages.RequestRef{RequestId: "r1"}, nil)
	if got := active(); got != "d0:decode=0 p0:prefill=0" {
		t.Fatalf("after the request's free: %s", got)
	}
}

// TestGrainFreesBothLegsOfAGatewayThatLeft: a gateway that leaves takes the load of
// both legs of its requests with it.
func TestGrainFreesBothLegsOfAGatewayThatLeft(t *testing.T) {
	g := newDisaggGrain(t, &kv.DisaggConfig{MaxLocalPrefillTokens: 8})
	registerRole(t, g, "d0", messages.Role_ROLE_DECODE, true)
	registerRole(t, g, "p0", messages.Role_ROLE_PREFILL, true)
	resp, _ := g.Route(&messages.RouteRequest{RequestId: "r1", TokenIds: tokens(40)}, nil)
	if resp.DisaggDecision != kv.DisaggRemote {
		t.Fatalf("route %v", resp)
	}
	// Route was called locally (no sender): record the owner as a remote call would.
	g.track("10.0.0.9:9000", "r1")
	g.track("10.0.0.9:9000", resp.PrefillRequestId)
	// The gateway freed the prefill leg itself, then left.
	g.Free(&messages.RequestRef{RequestId: resp.PrefillRequestId}, nil)
	if _, ok := g.owner[resp.PrefillRequestId]; ok {
		t.Fatal("freed prefill leg still owned")
	}
	resp2, _ := g.Route(&messages.RouteRequest{RequestId: "r2", TokenIds: tokens(40)}, nil)
	g.track("10.0.0.9:9000", "r2")
	g.track("10.0.0.9:9000", resp2.PrefillRequestId)
	g.gatewayLeft("10.0.0.9:9000")
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	for _, w := range st.Workers {
		if w.ActiveRequests != 0 || w.ActiveBlocks != 0 {
			t.Fatalf("load left after the gateway left: %v", w)
		}
	}
	if len(g.owners) != 0 || len(g.owner) != 0 {
		t.Fatalf("owners %v, owner %v", g.owners, g.owner)
	}
}

func TestGrainRoleRegistration(t *testing.T) {
	g := newDisaggGrain(t, nil)
	ack := registerRole(t, g, "w0", messages.Role(3), true)
	if ack.Accepted || !strings.Contains(ack.Error, "Role(3)") || !strings.Contains(ack.Error, "w0") {
		t.Fatalf("role 3: %+v, want a refusal naming the worker and the role", ack)
	}
	registerRole(t, g, "w0", messages.Role_ROLE_PREFILL, true)
	registerRole(t, g, "w1", messages.Role_ROLE_AGGREGATED, true)
	// w0 turns aggregated: routing is aggregated again.
	registerRole(t, g, "w0", messages.Role_ROLE_AGGREGATED, true)
	resp, _ := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: tokens(4000)}, nil)
	if resp.DisaggDecision != kv.DisaggAggregated {
		t.Fatalf("after the role change: %v", resp)
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	if st.Workers[0].Role != messages.Role_ROLE_AGGREGATED || st.Workers[1].Role != messages.Role_ROLE_AGGREGATED {
		t.Fatalf("roles %v", st.Workers)
	}
	bad := &messages.RegisterWorker{Worker: &messages.WorkerInfo{WorkerId: "p9", Actor: &messages.ActorRef{Address: "a", Id: "x"},
		Card: &messages.ModelCard{Model: "m", KvBlockSize: 4}, Role: messages.Role_ROLE_PREFILL, BootstrapPort: 70000}}
	if ack, _ := g.Register(bad, nil); ack.Accepted || !strings.Contains(ack.Error, "70000") {
		t.Fatalf("bootstrap port 70000: %+v", ack)
	}
}

func TestGrainDisaggConfigRefused(t *testing.T) {
	g := newDisaggGrain(t, &kv.DisaggConfig{MaxLocalPrefillTokens: -1})
	ack := registerRole(t, g, "w0", messages.Role_ROLE_AGGREGATED, true)
	if ack.Accepted || !strings.Contains(ack.Error, "MaxLocalPrefillTokens") {
		t.Fatalf("ack %+v, want the configuration refused naming MaxLocalPrefillTokens", ack)
	}
}

// TestGrainPassesAcknowledgement: a route says whether its decode and prefill workers
// acknowledge each Generate, as each last registered (WorkerInfo.acknowledges_generate).
func TestGrainPassesAcknowledgement(t *testing.T) {
	g := newDisaggGrain(t, &kv.DisaggConfig{MaxLocalPrefillTokens: 8})
	register := func(id string, role messages.Role, acks bool) {
		info := &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "node", Id: "worker/" + id},
			Card: &messages.ModelCard{Model: "m", KvBlockSize: 4}, Ready: true, Role: role, AcknowledgesGenerate: acks}
		if ack, err := g.Register(&messages.RegisterWorker{Worker: info, Load: &messages.WorkerLoad{TotalBlocks: 100}}, nil); err != nil || !ack.Accepted {
			t.Fatalf("register %s: %v %v", id, ack, err)
		}
	}
	for i, acks := range [][2]bool{{true, false}, {false, true}} {
		register("d0", messages.Role_ROLE_DECODE, acks[0])
		register("p0", messages.Role_ROLE_PREFILL, acks[1])
		id := fmt.Sprint("r", i)
		resp, err := g.Route(&messages.RouteRequest{RequestId: id, TokenIds: tokens(40)}, nil)
		if err != nil || resp.DisaggDecision != kv.DisaggRemote {
			t.Fatalf("route %v %v", resp, err)
		}
		if resp.WorkerAcknowledges != acks[0] || resp.PrefillWorkerAcknowledges != acks[1] {
			t.Errorf("decode worker acknowledges %v, prefill worker %v; want %v", resp.WorkerAcknowledges, resp.PrefillWorkerAcknowledges, acks)
		}
		g.Free(&messages.RequestRef{RequestId: id}, nil)
	}
}
