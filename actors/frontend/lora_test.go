package frontend

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// TestStreamLoraKeepsAdapter: a request naming a LoRA adapter names it on every route
// (with lora_on_demand when the frontend allows loads on demand), and every leg — the
// prefill leg of a disaggregated request, the decode leg, the legs of a migration —
// carries the adapter and the route's lora_path.
func TestStreamLoraKeepsAdapter(t *testing.T) {
	for _, c := range []struct {
		name     string
		onDemand bool
		prefill  []*scriptedWorker
	}{
		{"aggregated, migrated", true, nil},
		{"disaggregated, migrated", false, []*scriptedWorker{{failAfter: -1}, {failAfter: -1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, second := &scriptedWorker{failAfter: 3, fault: "error"}, &scriptedWorker{failAfter: -1}
			h := buildHarness(t, harnessOpts{limit: 3, lora: "sql", loraPath: "/adapters/sql", onDemand: c.onDemand, prefill: c.prefill},
				first, second)
			if h.startErr != nil {
				t.Fatal(h.startErr)
			}
			var got []uint32
			for _, ch := range h.drain(t) {
				got = append(got, ch.TokenIds...)
			}
			if !slices.Equal(got, wantTokens) {
				t.Fatalf("tokens %v, want %v", got, wantTokens)
			}
			h.router.mu.Lock()
			routes := slices.Clone(h.router.routes)
			h.router.mu.Unlock()
			if len(routes) != 2 {
				t.Fatalf("%d routes, want 2 (a migration)", len(routes))
			}
			for i, rr := range routes {
				if rr.LoraName != "sql" || rr.LoraOnDemand != c.onDemand {
					t.Errorf("route %d: lora_name %q lora_on_demand %v", i, rr.LoraName, rr.LoraOnDemand)
				}
			}
			legs := 0
			for _, w := range append(append([]*scriptedWorker{}, c.prefill...), first, second) {
				gens, _ := w.calls()
				for _, g := range gens {
					legs++
					if g.Sampling.GetLoraName() != "sql" || g.Sampling.GetLoraPath() != "/adapters/sql" {
						t.Errorf("leg %s (%v): adapter %q from %q", g.RequestId, g.Sampling.GetDisagg().GetLeg(),
							g.Sampling.GetLoraName(), g.Sampling.GetLoraPath())
					}
				}
			}
			if want := 2 + len(c.prefill); legs != want {
				t.Errorf("%d legs, want %d", legs, want)
			}
		})
	}
}

// TestStreamNoAdapter: a route answered ROUTE_NO_ADAPTER (no worker holds the adapter)
// is the 404 of an unknown model, naming the adapter.
func TestStreamNoAdapter(t *testing.T) {
	h := buildHarness(t, harnessOpts{lora: "sql", refuse: messages.RouteOutcome_ROUTE_NO_ADAPTER}, &scriptedWorker{failAfter: -1})
	var aerr *gateway.APIError
	if !errors.As(h.startErr, &aerr) || aerr.Status() != 404 || !strings.Contains(aerr.Message, "`sql`") {
		t.Fatalf("start error %v, want a 404 naming sql", h.startErr)
	}
}

// loraWorkerActor answers LoadLora and UnloadLora with its failure (never, when silent)
// and records what it got.
type loraWorkerActor struct {
	id      string
	failure messages.LoraFailure
	silent  bool

	mu  sync.Mutex
	got []proto.Message
}

func (w *loraWorkerActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *messages.LoadLora, *messages.UnloadLora:
		w.mu.Lock()
		w.got = append(w.got, m.(proto.Message))
		w.mu.Unlock()
		reply := &messages.LoraReply{WorkerId: w.id, Failure: w.failure}
		if w.failure != messages.LoraFailure_LORA_OK {
			reply.Error = "refused"
		}
		if !w.silent {
			c.Respond(reply)
		}
	}
}

func (w *loraWorkerActor) messages() []proto.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// loraCluster spawns the workers and returns their stats as a Router grain reports them
// (each holding adapters as given) and an asker with timeout.
func loraCluster(t *testing.T, timeout time.Duration, workers []*loraWorkerActor, held map[string][]*messages.LoraAdapter) (*messages.RouterStats, workerAsker) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	st := &messages.RouterStats{}
	for _, w := range workers {
		pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
		st.Workers = append(st.Workers, &messages.WorkerStats{WorkerId: w.id, Ready: true, MaxLoras: 2, Adapters: held[w.id],
			Actor: &messages.ActorRef{Address: pid.Address, Id: pid.Id}})
	}
	return st, func(ctx context.Context, pid *actor.PID, msg proto.Message) (*messages.LoraReply, error) {
		return askWorker(ctx, sys.Root, pid, msg, timeout)
	}
}

// TestLoadOn: a load sends LoadLora (the adapter pinned, its parent the base model) to
// the workers placement chose and to the full ones it is short of, at once, and reports
// each one's answer (a worker that does not answer in time as LORA_ENGINE); workers
// holding it pinned already are sent nothing.
func TestLoadOn(t *testing.T) {
	ws := []*loraWorkerActor{{id: "w0"}, {id: "w1", failure: messages.LoraFailure_LORA_INVALID}, {id: "w2", silent: true},
		{id: "w3", failure: messages.LoraFailure_LORA_NO_SLOT}, {id: "w4"}}
	pinned := func(name string) *messages.LoraAdapter {
		return &messages.LoraAdapter{Name: name, Path: "/" + name, Pinned: true}
	}
	st, ask := loraCluster(t, 200*time.Millisecond, ws, map[string][]*messages.LoraAdapter{
		"w3": {pinned("a"), pinned("b")},               // full
		"w4": {pinned("sql"), {Name: "c", Path: "/c"}}, // holds it pinned already
	})
	res, err := loadOn(context.Background(), ask, st, gateway.LoraLoad{Model: "m", Name: "sql", Path: "/sql"})
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		id      string
		held    bool
		failure messages.LoraFailure
	}
	var got []line
	for _, w := range res.Workers {
		got = append(got, line{w.WorkerID, w.Held, w.Failure})
	}
	want := []line{{"w4", true, messages.LoraFailure_LORA_OK}, {"w0", false, messages.LoraFailure_LORA_OK},
		{"w1", false, messages.LoraFailure_LORA_INVALID}, {"w2", false, messages.LoraFailure_LORA_ENGINE},
		{"w3", false, messages.LoraFailure_LORA_NO_SLOT}}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	if !strings.Contains(res.Workers[3].Error, "no answer") {
		t.Errorf("silent worker's line: %q", res.Workers[3].Error)
	}
	for _, w := range ws {
		msgs := w.messages()
		switch w.id {
		case "w4":
			if len(msgs) != 0 {
				t.Errorf("%s got %v, want nothing", w.id, msgs)
			}
		default:
			l, ok := msgs[0].(*messages.LoadLora)
			if len(msgs) != 1 || !ok || !proto.Equal(l.Adapter, &messages.LoraAdapter{Name: "sql", Path: "/sql", Parent: "m", Pinned: true}) {
				t.Errorf("%s got %v", w.id, msgs)
			}
		}
	}
	if _, err := loadOn(context.Background(), ask, st, gateway.LoraLoad{Model: "m", Name: "sql", Path: "/other"}); !errors.Is(err, gateway.ErrLoraConflict) {
		t.Errorf("another path: %v, want a conflict", err)
	}
}

// TestUnloadOn: an unload asks every worker that holds the adapter, ready or not, and
// no other.
func TestUnloadOn(t *testing.T) {
	ws := []*loraWorkerActor{{id: "w0"}, {id: "w1"}, {id: "w2", failure: messages.LoraFailure_LORA_NOT_FOUND}}
	a := &messages.LoraAdapter{Name: "sql", Path: "/sql"}
	st, ask := loraCluster(t, time.Minute, ws, map[string][]*messages.LoraAdapter{"w0": {a}, "w2": {a}})
	st.Workers[2].Ready = false
	res := unloadOn(context.Background(), ask, st, gateway.LoraUnload{Model: "m", Name: "sql"})
	if len(res.Workers) != 2 || res.Workers[0].WorkerID != "w0" || res.Workers[0].Failure != messages.LoraFailure_LORA_OK ||
		res.Workers[1].WorkerID != "w2" || res.Workers[1].Failure != messages.LoraFailure_LORA_NOT_FOUND {
		t.Fatalf("lines %+v", res.Workers)
	}
	if m := ws[0].messages(); len(m) != 1 || m[0].(*messages.UnloadLora).GetName() != "sql" || len(ws[1].messages()) != 0 {
		t.Errorf("w0 got %v, w1 %v", m, ws[1].messages())
	}
	if res := unloadOn(context.Background(), ask, st, gateway.LoraUnload{Model: "m", Name: "nope"}); len(res.Workers) != 0 {
		t.Errorf("an adapter nobody holds: %+v", res.Workers)
	}
}

// TestLoraNotes: the frontend lists an adapter it loaded before the catalog does, and
// stops listing one it unloaded everywhere while the catalog still does, until the
// catalog agrees or the note expires; an unloaded adapter is never "recent" (404, not
// 503).
func TestLoraNotes(t *testing.T) {
	base := &messages.ModelCard{Model: "m", Tokenizer: "/models/m", KvBlockSize: 16}
	old := &messages.ModelCard{Model: "old", Tokenizer: "/models/m", Lora: &messages.LoraAdapter{Name: "old", Parent: "m", Path: "/old"}}
	b := &Backend{cfg: Config{ModelMemory: time.Hour}, seen: map[string]time.Time{}}
	b.listed([]*messages.ModelCard{base, old}, time.Now())
	if !b.Recent("m") || b.Recent("old") {
		t.Errorf("recent: m %v, old %v; want the base model only", b.Recent("m"), b.Recent("old"))
	}
	names := func(list []*messages.ModelCard) []string {
		var out []string
		for _, c := range list {
			out = append(out, c.Model)
		}
		return out
	}
	b.noteLora("m", &messages.LoraAdapter{Name: "new", Path: "/new", Parent: "m", Pinned: true}, true)
	b.noteLora("m", &messages.LoraAdapter{Name: "old", Parent: "m"}, false)
	now := time.Now()
	got := b.withLoraNotes(b.models, now)
	if !slices.Equal(names(got), []string{"m", "new"}) || got[1].GetLora().GetPath() != "/new" || got[1].GetTokenizer() != "/models/m" {
		t.Fatalf("listed %v (%v), want m and new", names(got), got)
	}
	if !b.modelsAt.IsZero() {
		t.Error("the cached list was kept")
	}
	// The catalog caught up with both: the notes go.
	caught := []*messages.ModelCard{base, got[1]}
	if got := b.withLoraNotes(caught, now); !slices.Equal(names(got), []string{"m", "new"}) || len(b.loraNotes) != 0 {
		t.Errorf("listed %v with notes %v", names(got), b.loraNotes)
	}
	// A note expires.
	b.noteLora("m", &messages.LoraAdapter{Name: "old", Parent: "m"}, false)
	if got := b.withLoraNotes(b.models, now.Add(loraOverlayTTL+time.Second)); !slices.Equal(names(got), []string{"m", "old"}) {
		t.Errorf("after expiry listed %v", names(got))
	}
}

// TestLoadOnUnpinned: an unpinned load ("pinned": false) sends LoadLora unpinned to every
// ready worker that neither holds nor knows the adapter — one whose slots all hold
// unpinned adapters included (it evicts one, which it keeps known) — and sends nothing
// to those that hold it, pinned or not, or know it: they count as holding it.
func TestLoadOnUnpinned(t *testing.T) {
	ws := []*loraWorkerActor{{id: "w0"}, {id: "w1"}, {id: "w2"}, {id: "w3"}, {id: "w4"}}
	un := func(name string) *messages.LoraAdapter { return &messages.LoraAdapter{Name: name, Path: "/" + name} }
	st, ask := loraCluster(t, time.Minute, ws, map[string][]*messages.LoraAdapter{
		"w0": {un("a"), un("b")},                          // full, unpinned
		"w1": {un("a")},                                   // knows sql (below)
		"w2": {un("sql"), un("c")},                        // holds it unpinned
		"w3": {{Name: "sql", Path: "/sql", Pinned: true}}, // holds it pinned
		"w4": {un("c"), un("d")},                          // full, unpinned
	})
	st.Workers[1].KnownAdapters = []*messages.LoraAdapter{un("b"), un("sql")}
	res, err := loadOn(context.Background(), ask, st, gateway.LoraLoad{Model: "m", Name: "sql", Path: "/sql", Unpinned: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range res.Workers {
		line := w.WorkerID + ":" + w.Failure.String()
		if w.Held {
			line += " held"
		}
		got = append(got, line)
	}
	want := []string{"w1:LORA_OK held", "w2:LORA_OK held", "w3:LORA_OK held", "w0:LORA_OK", "w4:LORA_OK"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %v, want %v", got, want)
	}
	for _, w := range ws {
		msgs := w.messages()
		switch w.id {
		case "w0", "w4":
			l, ok := msgs[0].(*messages.LoadLora)
			if len(msgs) != 1 || !ok || !proto.Equal(l.Adapter, &messages.LoraAdapter{Name: "sql", Path: "/sql", Parent: "m"}) {
				t.Errorf("%s got %v, want an unpinned LoadLora", w.id, msgs)
			}
		default:
			if len(msgs) != 0 {
				t.Errorf("%s got %v, want nothing", w.id, msgs)
			}
		}
	}
	// A pinned load of the same adapter pins it where it is held unpinned, and loads it
	// where it is only known.
	res, err = loadOn(context.Background(), ask, st, gateway.LoraLoad{Model: "m", Name: "sql", Path: "/sql"})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Workers {
		if w.Held != (w.WorkerID == "w3") {
			t.Errorf("pinned load: line %+v", w)
		}
	}
	if m := ws[1].messages(); len(m) != 1 || !m[0].(*messages.LoadLora).GetAdapter().GetPinned() {
		t.Errorf("w1, which only knows it, got %v, want a pinned LoadLora", m)
	}
}

// TestUnloadOnKnown: an unload reaches the workers that only know the adapter
// (WorkerStats.known_adapters) as well as those holding it.
func TestUnloadOnKnown(t *testing.T) {
	ws := []*loraWorkerActor{{id: "w0"}, {id: "w1"}, {id: "w2"}}
	a := &messages.LoraAdapter{Name: "sql", Path: "/sql"}
	st, ask := loraCluster(t, time.Minute, ws, map[string][]*messages.LoraAdapter{"w0": {a}})
	st.Workers[1].KnownAdapters = []*messages.LoraAdapter{a}
	st.Workers[2].KnownAdapters = []*messages.LoraAdapter{{Name: "other", Path: "/other"}}
	res := unloadOn(context.Background(), ask, st, gateway.LoraUnload{Model: "m", Name: "sql"})
	if len(res.Workers) != 2 || res.Workers[0].WorkerID != "w0" || res.Workers[1].WorkerID != "w1" ||
		res.Workers[1].Failure != messages.LoraFailure_LORA_OK {
		t.Fatalf("lines %+v, want w0 and w1", res.Workers)
	}
	if m := ws[1].messages(); len(m) != 1 || m[0].(*messages.UnloadLora).GetName() != "sql" || len(ws[2].messages()) != 0 {
		t.Errorf("w1 got %v, w2 %v", m, ws[2].messages())
	}
}

// TestLoraWorkersKnownFromStats: placement reads the adapters a worker knows from the
// Router grain's stats; one it holds wins over a stale known entry of that name.
func TestLoraWorkersKnownFromStats(t *testing.T) {
	st := &messages.RouterStats{Workers: []*messages.WorkerStats{
		{WorkerId: "w0", MaxLoras: 2, KnownAdapters: []*messages.LoraAdapter{{Name: "sql", Path: "/s"}}},
		{WorkerId: "w1", MaxLoras: 2, Adapters: []*messages.LoraAdapter{{Name: "sql", Path: "/s", Pinned: true}},
			KnownAdapters: []*messages.LoraAdapter{{Name: "sql", Path: "/old"}}},
	}}
	got := loraWorkers(st, "sql")
	if len(got) != 2 || got[0].Has == nil || *got[0].Has != (loraHeld{Path: "/s", Known: true}) || got[0].Held != 0 ||
		got[1].Has == nil || *got[1].Has != (loraHeld{Path: "/s", Pinned: true}) {
		t.Fatalf("got %+v", got)
	}
}

// TestLoadOnLoraOff: when no ready worker of the model has adapter slots (started without
// --max-loras), a load is refused at once with gateway.ErrLoraOff (a 400 naming the flag,
// as vLLM's "LoRA is not enabled") and no worker is asked.
func TestLoadOnLoraOff(t *testing.T) {
	ws := []*loraWorkerActor{{id: "w0"}, {id: "w1"}}
	st, ask := loraCluster(t, 200*time.Millisecond, ws, nil)
	for _, w := range st.Workers {
		w.MaxLoras = 0
	}
	_, err := loadOn(context.Background(), ask, st, gateway.LoraLoad{Model: "m", Name: "sql", Path: "/sql", Unpinned: true})
	if !errors.Is(err, gateway.ErrLoraOff) {
		t.Fatalf("err %v, want ErrLoraOff", err)
	}
	for _, w := range ws {
		if msgs := w.messages(); len(msgs) != 0 {
			t.Errorf("%s was asked %v", w.id, msgs)
		}
	}
}

// RecentCard: a base model the catalog listed within CatalogGrace and does not list now
// keeps its card (a Catalog grain that moved lists only the workers registered since);
// an adapter never does; past the grace, or with the grace off, none.
func TestRecentCard(t *testing.T) {
	base := &messages.ModelCard{Model: "m", Tokenizer: "/models/m", KvBlockSize: 16}
	adapter := &messages.ModelCard{Model: "a", Lora: &messages.LoraAdapter{Name: "a", Parent: "m"}}
	b := &Backend{cfg: Config{ModelMemory: time.Hour, CatalogGrace: 10 * time.Second}, seen: map[string]time.Time{}}
	b.listed([]*messages.ModelCard{base, adapter}, time.Now())
	b.listed(nil, time.Now()) // the catalog moved: it lists nothing yet
	if c := b.RecentCard("m"); c != base {
		t.Errorf("RecentCard(m) = %v, want the card listed a moment ago", c)
	}
	if c := b.RecentCard("a"); c != nil {
		t.Errorf("an adapter's card: %v", c)
	}
	b.seen["m"] = time.Now().Add(-11 * time.Second)
	if c := b.RecentCard("m"); c != nil || !b.Recent("m") {
		t.Errorf("past the grace: card %v, recent %v; want none, and still recent (503)", c, b.Recent("m"))
	}
	b.seen["m"], b.cfg.CatalogGrace = time.Now(), -1
	if c := b.RecentCard("m"); c != nil {
		t.Errorf("grace off: %v", c)
	}
}
