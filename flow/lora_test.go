package flow

import (
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// loraRun steps a flow and keeps its routes and the Generates it sends.
type loraRun struct {
	t      *testing.T
	f      *Flow
	now    time.Time
	routes []*messages.RouteRequest
	sends  []Send
}

func (r *loraRun) step(ev Event) {
	r.t.Helper()
	for _, e := range r.f.Step(ev, r.now) {
		switch e := e.(type) {
		case Route:
			r.routes = append(r.routes, e.Request)
		case Send:
			r.sends = append(r.sends, e)
		}
	}
}

func loraWorker(id string) *messages.ActorRef { return &messages.ActorRef{Address: "a", Id: id} }

// TestLoraRoutes: a request naming a LoRA adapter (SamplingParams.lora_name) names it on
// every route (RouteRequest.lora_name; lora_on_demand only with Config.LoraOnDemand), and
// each leg a route starts carries the adapter, with the route's lora_path (the worker
// loads the adapter from there when it lacks it) or none: a migration's new route
// decides afresh, and a disaggregated request's prefill leg carries it too.
func TestLoraRoutes(t *testing.T) {
	for _, onDemand := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.LoraOnDemand = onDemand
		sp := &messages.SamplingParams{MaxTokens: 4, LoraName: "sql"}
		r := &loraRun{t: t, f: New(Request{ID: "r", Model: "m", Tokens: []uint32{1, 2, 3}, Sampling: sp}, cfg),
			now: time.Unix(0, 0)}
		r.step(Start{})
		// The first route: remote (prefill on p0, decode on w0), w0 lacks the adapter.
		r.step(Routed{Response: &messages.RouteResponse{WorkerId: "w0", Worker: loraWorker("w0"),
			DisaggDecision: messages.DisaggDecision_DISAGG_REMOTE, PrefillWorkerId: "p0", PrefillWorker: loraWorker("p0"),
			PrefillRequestId: "r/p", LoraPath: "/adapters/sql"}})
		if len(r.sends) != 1 || r.sends[0].Worker.ID != "p0" {
			t.Fatalf("on demand %v: sends %v, want the prefill leg on p0", onDemand, r.sends)
		}
		pre := r.sends[0]
		r.step(Chunk{Leg: pre.Leg, Chunk: &messages.TokenChunk{Index: 0, TokenIds: []uint32{9}, FinishReason: "length",
			KvTransferParams: `{"remote_block_ids":[1]}`}})
		if len(r.sends) != 2 || r.sends[1].Worker.ID != "w0" {
			t.Fatalf("on demand %v: sends %v, want the decode leg on w0", onDemand, r.sends)
		}
		// The decode leg's engine fails: the request migrates to w1, which holds it.
		r.step(Chunk{Leg: r.sends[1].Leg, Chunk: &messages.TokenChunk{Index: 0, FinishReason: "error",
			Error: "engine died", Fault: messages.Fault_FAULT_ENGINE_ERROR}})
		r.step(Routed{Response: &messages.RouteResponse{WorkerId: "w1", Worker: loraWorker("w1")}})
		if len(r.routes) != 2 || len(r.sends) != 3 || r.sends[2].Worker.ID != "w1" {
			t.Fatalf("on demand %v: routes %v sends %v, want a migration to w1", onDemand, r.routes, r.sends)
		}
		for i, rr := range r.routes {
			if rr.GetLoraName() != "sql" || rr.GetLoraOnDemand() != onDemand {
				t.Errorf("on demand %v: route %d has lora_name %q lora_on_demand %v", onDemand, i, rr.GetLoraName(),
					rr.GetLoraOnDemand())
			}
		}
		for i, want := range []string{"/adapters/sql", "/adapters/sql", ""} {
			g := r.sends[i].Generate
			if g.Sampling.GetLoraName() != "sql" || g.Sampling.GetLoraPath() != want {
				t.Errorf("on demand %v: leg %d on %s has adapter %q from %q, want sql from %q", onDemand, i,
					r.sends[i].Worker.ID, g.Sampling.GetLoraName(), g.Sampling.GetLoraPath(), want)
			}
		}
		if sp.LoraPath != "" {
			t.Errorf("the request's own sampling was changed: lora_path %q", sp.LoraPath)
		}
	}
}

// TestBaseRouteHasNoLora: a request for the base model names no adapter and never asks
// for one on demand.
func TestBaseRouteHasNoLora(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LoraOnDemand = true
	r := &loraRun{t: t, f: New(Request{ID: "r", Model: "m", Tokens: []uint32{1, 2, 3},
		Sampling: &messages.SamplingParams{MaxTokens: 4}}, cfg), now: time.Unix(0, 0)}
	r.step(Start{})
	if len(r.routes) != 1 || r.routes[0].GetLoraName() != "" || r.routes[0].GetLoraOnDemand() {
		t.Fatalf("routes %v, want one without an adapter", r.routes)
	}
}

// TestLoraRoutePath: the request's adapter folder (the catalogue's, SamplingParams.lora_path)
// reaches the route only when loads on demand are allowed, so that the router can have a
// worker load an adapter that no live worker reports.
func TestLoraRoutePath(t *testing.T) {
	for _, onDemand := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.LoraOnDemand = onDemand
		sp := &messages.SamplingParams{MaxTokens: 4, LoraName: "sql", LoraPath: "/registry/sql"}
		r := &loraRun{t: t, f: New(Request{ID: "r", Model: "m", Tokens: []uint32{1, 2, 3}, Sampling: sp}, cfg),
			now: time.Unix(0, 0)}
		r.step(Start{})
		want := ""
		if onDemand {
			want = "/registry/sql"
		}
		if len(r.routes) != 1 || r.routes[0].LoraPath != want {
			t.Fatalf("on demand %v: routes %v, want one with lora_path %q", onDemand, r.routes, want)
		}
	}
}
