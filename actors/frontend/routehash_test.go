package frontend

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/catalog"
	"github.com/turbine-llm/turbine/actors/router"
	"github.com/turbine-llm/turbine/cluster"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kv/kvpb"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

func TestHashPrompt(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	cases := []struct {
		name      string
		rr        *messages.RouteRequest
		blockSize int
		want      []uint64 // nil: rr left as it was
	}{
		{"block size 4", &messages.RouteRequest{TokenIds: toks}, 4, kv.SequenceHashes(toks, 4, "")},
		{"block size 2", &messages.RouteRequest{TokenIds: toks}, 2, kv.SequenceHashes(toks, 2, "")},
		{"cache salt", &messages.RouteRequest{TokenIds: toks, CacheSalt: "s"}, 4,
			kv.AppendSaltedSequenceHashes(nil, toks, 4, "", "s")},
		{"adapter", &messages.RouteRequest{TokenIds: toks, LoraName: "l"}, 4, kv.SequenceHashes(toks, 4, "l")},
		{"shorter than a block", &messages.RouteRequest{TokenIds: toks}, 16, []uint64{}},
		{"block size unknown", &messages.RouteRequest{TokenIds: toks}, 0, nil},
		{"no tokens", &messages.RouteRequest{}, 4, nil},
		{"hashes already there", &messages.RouteRequest{TokenIds: toks, BlockHashes: []uint64{1}}, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := proto.Clone(c.rr)
			got, ok := hashPrompt(c.rr, c.blockSize)
			if c.want == nil {
				if ok || !proto.Equal(before, c.rr) {
					t.Fatalf("hashPrompt changed %v into %v (ok %v)", before, c.rr, ok)
				}
				return
			}
			if !ok || !slices.Equal(got, toks) || len(c.rr.TokenIds) != 0 || c.rr.GetPromptTokens() != int32(len(toks)) ||
				!slices.Equal(c.rr.BlockHashes, c.want) {
				t.Fatalf("hashPrompt: %v, %v; request %v; want hashes %x", got, ok, c.rr, c.want)
			}
		})
	}
}

// recordingRouter is a Router grain that records the prompt of every Route it gets.
type recordingRouter struct {
	*router.Grain
	mu     sync.Mutex
	routes []string // "tokens=N hashes=M prompt_tokens=P"
}

func (r *recordingRouter) Route(req *messages.RouteRequest, ctx pcluster.GrainContext) (*messages.RouteResponse, error) {
	r.mu.Lock()
	r.routes = append(r.routes, fmt.Sprintf("tokens=%d hashes=%d prompt_tokens=%d", len(req.TokenIds), len(req.BlockHashes), req.GetPromptTokens()))
	r.mu.Unlock()
	return r.Grain.Route(req, ctx)
}

func (r *recordingRouter) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.routes
	r.routes = nil
	return out
}

// TestGrainRoutingSendsBlockHashes runs a Router grain (block size 4) in a one-process
// cluster: with the model's block size known, grainRouting sends the prompt's block
// hashes and length, not its tokens, and gets the answer the tokens would get (the
// cached worker, its overlap); a block size the grain does not use (a card that
// disagrees) is refused and the route asked again with the tokens; without a block size
// the tokens go as before. The request keeps its token ids.
func TestGrainRoutingSendsBlockHashes(t *testing.T) {
	rec := &recordingRouter{Grain: router.New(router.Config{BlockSize: 4, Mode: "kv", OverlapWeight: 1,
		WorkerTTL: time.Hour, Seed: 1, Logger: zerolog.Nop()})}
	member := routerMember(t, "route-hashes", rec)
	root := member.System.Root
	client := messages.GetRouterGrainClient(member.Cluster, "m")
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, id := range []string{"w0", "w1"} {
		worker := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &scriptedWorker{failAfter: -1} }))
		ack, err := client.Register(&messages.RegisterWorker{Worker: &messages.WorkerInfo{WorkerId: id,
			Actor: &messages.ActorRef{Address: worker.Address, Id: worker.Id},
			Card:  &messages.ModelCard{Model: "m", KvBlockSize: 4, TotalKvBlocks: 100}, Ready: true, EngineEpoch: 1}},
			pcluster.WithTimeout(10*time.Second))
		if err != nil || !ack.Accepted {
			t.Fatalf("register %s: %+v %v", id, ack, err)
		}
	}
	ev := kvpb.ToProto(kv.Event{Kind: kv.BlockStored, EngineHashes: []uint64{11, 12}, TokenIDs: prompt[:8], BlockSize: 4})
	if ack, err := client.PublishEvents(&messages.KvEventBatch{WorkerId: "w1", EngineEpoch: 1, Seq: 1,
		Events: []*messages.KvEvent{ev}}, pcluster.WithTimeout(10*time.Second)); err != nil || ack.NeedDump {
		t.Fatalf("publish: %+v %v", ack, err)
	}
	cases := []struct {
		blockSize int
		want      []string
	}{
		{4, []string{"tokens=0 hashes=2 prompt_tokens=9"}},
		{2, []string{"tokens=0 hashes=4 prompt_tokens=9", "tokens=9 hashes=0 prompt_tokens=0"}},
		{0, []string{"tokens=9 hashes=0 prompt_tokens=0"}},
	}
	for i, c := range cases {
		g := &grainRouting{c: client, root: root, timeout: 10 * time.Second, log: zerolog.Nop(), blockSize: c.blockSize}
		rr := &messages.RouteRequest{RequestId: fmt.Sprint("r", i), TokenIds: prompt}
		resp, err := g.Route(rr)
		if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK || resp.WorkerId != "w1" || resp.OverlapBlocks != 2 || resp.PromptBlocks != 2 {
			t.Fatalf("block size %d: %+v %v; want w1 with 2 of 2 blocks cached", c.blockSize, resp, err)
		}
		if got := rec.take(); !slices.Equal(got, c.want) {
			t.Fatalf("block size %d: the grain got %q, want %q", c.blockSize, got, c.want)
		}
		if !slices.Equal(rr.TokenIds, prompt) {
			t.Fatalf("block size %d: the request's token ids are %v after the route", c.blockSize, rr.TokenIds)
		}
		g.Free(rr.RequestId)
	}
}

// routerMember starts a one-process cluster member hosting grain as every model's Router
// grain (and the Catalog grain), stopped when the test ends.
func routerMember(t *testing.T, name string, grain messages.Router) *cluster.Member {
	t.Helper()
	kind := messages.NewRouterKind(func() messages.Router { return grain }, 0)
	member, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("%s-%d", name, time.Now().UnixNano()),
		Discovery: "local", Logger: zerolog.Nop(), Kinds: []*pcluster.Kind{kind, catalog.Kind()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(member.Stop)
	return member
}

// startingRouter answers its first `starting` Route calls as a grain within its
// registration window does (ROUTE_NO_WORKERS, retry_ms 250), then as retry says.
type startingRouter struct {
	*router.Grain
	mu       sync.Mutex
	calls    int
	starting int
	retry    int32 // retry_ms of the answers after the first `starting`
}

func (r *startingRouter) Route(req *messages.RouteRequest, ctx pcluster.GrainContext) (*messages.RouteResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls <= r.starting {
		return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS, RetryMs: 250, Error: "starting"}, nil
	}
	return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS, RetryMs: r.retry, Error: "no worker"}, nil
}

// TestGrainRoutingWaitsForRegistrations: a Route answered with retry_ms (a grain activated
// moments ago, before its workers registered again) is asked again after that pause
// while the route timeout leaves time for it; an answer without retry_ms stands.
func TestGrainRoutingWaitsForRegistrations(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		starting int
		retry    int32
		overrun  time.Duration // a pause lasts this much longer than asked
		calls    int
		pauses   int
		err      string
	}{
		{"no retry asked", 10 * time.Second, 0, 0, 0, 1, 0, "no worker"},
		{"two retries, then an answer", 10 * time.Second, 2, 0, 0, 3, 2, "no worker"},
		{"retries until the timeout", time.Second, 100, 0, 0, 4, 3, "starting"},
		{"a pause past the timeout: the answer stands", time.Second, 100, 0, time.Second, 1, 1, "starting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &startingRouter{Grain: router.New(router.Config{BlockSize: 4, Logger: zerolog.Nop()}), starting: tc.starting, retry: tc.retry}
			member := routerMember(t, "route-starting", rec)
			now := time.Unix(1000, 0)
			var paused []time.Duration
			clock := router.Clock{Now: func() time.Time { return now },
				Sleep: func(_ context.Context, d time.Duration) { paused = append(paused, d); now = now.Add(d + tc.overrun) }}
			g := &grainRouting{c: messages.GetRouterGrainClient(member.Cluster, "m"), root: member.System.Root,
				timeout: tc.timeout, log: zerolog.Nop(), clock: clock}
			resp, err := g.Route(&messages.RouteRequest{RequestId: "r", TokenIds: []uint32{1, 2, 3, 4}})
			if err != nil || resp.Error != tc.err {
				t.Fatalf("answer %+v, %v; want the error %q", resp, err, tc.err)
			}
			if rec.calls != tc.calls || len(paused) != tc.pauses {
				t.Fatalf("%d calls, %d pauses (%v); want %d and %d", rec.calls, len(paused), paused, tc.calls, tc.pauses)
			}
			for _, d := range paused {
				if d != 250*time.Millisecond {
					t.Fatalf("paused %v, want the grain's 250ms", paused)
				}
			}
		})
	}
}
