package router

import (
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

func registerLoras(t *testing.T, g *Grain, id string, maxLoras int32, adapters ...*messages.LoraAdapter) *messages.RegisterAck {
	t.Helper()
	ack, err := g.Register(&messages.RegisterWorker{
		Worker: &messages.WorkerInfo{WorkerId: id, Actor: &messages.ActorRef{Address: "a", Id: "worker/" + id},
			Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1,
			MaxLoras: maxLoras, Adapters: adapters},
		Load: &messages.WorkerLoad{TotalBlocks: 100},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// Adapter requests go to the workers holding the adapter; with lora_on_demand also to one
// with a free slot, which is told where to load it from; an adapter nobody holds is
// ROUTE_NO_ADAPTER; Stats carries each worker's actor, adapters and slots.
func TestGrainRoutesAdapterRequests(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	g := newGrain(t, clock)
	sql := &messages.LoraAdapter{Name: "sql", Path: "/adapters/sql", Parent: "m", Pinned: true}
	if ack := registerLoras(t, g, "w0", 2, sql); !ack.Accepted {
		t.Fatalf("register w0: %+v", ack)
	}
	if ack := registerLoras(t, g, "w1", 2); !ack.Accepted {
		t.Fatalf("register w1: %+v", ack)
	}
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for i := 0; i < 3; i++ {
		resp, err := g.Route(&messages.RouteRequest{RequestId: "r" + string(rune('a'+i)), TokenIds: prompt, LoraName: "sql"}, nil)
		if err != nil || resp.WorkerId != "w0" || resp.LoraPath != "" {
			t.Fatalf("route %d: %+v %v, want w0 (the only holder) without a load", i, resp, err)
		}
	}
	// Without w0 (a migration away from it, say), w1 loads sql on demand; the next request
	// finds it placed there.
	resp, err := g.Route(&messages.RouteRequest{RequestId: "od", TokenIds: prompt, LoraName: "sql", LoraOnDemand: true,
		ExcludeWorkers: []string{"w0"}}, nil)
	if err != nil || resp.WorkerId != "w1" || resp.LoraPath != "/adapters/sql" {
		t.Fatalf("on demand: %+v %v, want w1 loading /adapters/sql", resp, err)
	}
	resp, err = g.Route(&messages.RouteRequest{RequestId: "od2", TokenIds: prompt, LoraName: "sql", LoraOnDemand: true,
		ExcludeWorkers: []string{"w0"}}, nil)
	if err != nil || resp.WorkerId != "w1" || resp.LoraPath != "" {
		t.Fatalf("second on demand: %+v %v, want w1, already placed", resp, err)
	}
	resp, _ = g.Route(&messages.RouteRequest{RequestId: "x", TokenIds: prompt, LoraName: "nope"}, nil)
	if resp.Outcome != messages.RouteOutcome_ROUTE_NO_ADAPTER || !strings.Contains(resp.Error, `"nope"`) {
		t.Fatalf("unknown adapter: %+v, want ROUTE_NO_ADAPTER naming it", resp)
	}
	st, _ := g.Stats(&messages.RouterStatsRequest{}, nil)
	w0 := st.Workers[0]
	if w0.WorkerId != "w0" || w0.Actor.GetId() != "worker/w0" || w0.MaxLoras != 2 || len(w0.Adapters) != 1 || w0.Adapters[0].Name != "sql" {
		t.Fatalf("stats of w0: %+v", w0)
	}
}

// A registration whose adapters are malformed is refused, naming the problem.
func TestGrainRefusesMalformedAdapterRegistrations(t *testing.T) {
	a := func(name string) *messages.LoraAdapter { return &messages.LoraAdapter{Name: name, Path: "/p/" + name} }
	for _, tc := range []struct {
		name     string
		maxLoras int32
		adapters []*messages.LoraAdapter
		want     string
	}{
		{"more than max_loras", 1, []*messages.LoraAdapter{a("x"), a("y")}, "more than its max_loras"},
		{"negative max_loras", -1, nil, "max_loras -1"},
		{"empty name", 2, []*messages.LoraAdapter{a("")}, "empty or listed twice"},
		{"listed twice", 2, []*messages.LoraAdapter{a("x"), a("x")}, "empty or listed twice"},
		{"held and known", 2, []*messages.LoraAdapter{a("x")}, "empty or listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGrain(t, &fakeClock{t: time.Unix(1000, 0)})
			var known []*messages.LoraAdapter
			if tc.name == "held and known" {
				known = []*messages.LoraAdapter{a("x")}
			}
			ack, err := g.Register(&messages.RegisterWorker{
				Worker: &messages.WorkerInfo{WorkerId: "w0", Actor: &messages.ActorRef{Address: "a", Id: "worker/w0"},
					Card: &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1,
					MaxLoras: tc.maxLoras, Adapters: tc.adapters, KnownAdapters: known},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ack.Accepted || !strings.Contains(ack.Error, tc.want) {
				t.Fatalf("ack %+v, want refused with %q", ack, tc.want)
			}
		})
	}
}
