package frontend

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// overlapRouter is a fakeRouter whose answers carry a prefix hit (overlap blocks for the
// chosen worker, prefillOverlap for a remote decision's prefill worker) and, when asked
// to explain, candidates.
type overlapRouter struct {
	*fakeRouter
	overlap, prefillOverlap int32
}

func (r *overlapRouter) Route(rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	resp, err := r.fakeRouter.Route(rr)
	if err != nil || resp.Outcome != messages.RouteOutcome_ROUTE_OK {
		return resp, err
	}
	resp.OverlapBlocks = r.overlap
	if resp.PrefillWorkerId != "" {
		resp.PrefillOverlapBlocks = r.prefillOverlap
	}
	if rr.Explain {
		for _, id := range r.ids {
			resp.Candidates = append(resp.Candidates, &messages.RouteCandidate{WorkerId: id, Cost: 1.5, Chosen: id == resp.WorkerId,
				Terms: []*messages.CostTerm{{Name: "decode_blocks", Value: 1.5}}})
		}
	}
	return resp, nil
}

// hitsRecorder records cachedTokens calls as "worker predicted/delivered"; the other
// events are dropped.
type hitsRecorder struct {
	mu   sync.Mutex
	hits []string
}

func (r *hitsRecorder) cachedTokens(model, worker string, predicted, delivered int) {
	r.mu.Lock()
	r.hits = append(r.hits, fmt.Sprintf("%s %s %d/%d", model, worker, predicted, delivered))
	r.mu.Unlock()
}
func (*hitsRecorder) migrated(string, messages.Fault)            {}
func (*hitsRecorder) decided(string, messages.DisaggDecision)    {}
func (*hitsRecorder) prefillRetried(string, messages.Fault)      {}
func (*hitsRecorder) released(string)                            {}
func (*hitsRecorder) prefillLeg(string, time.Duration)           {}
func (*hitsRecorder) transferWait(model string, d time.Duration) {}
func (r *hitsRecorder) list() []string                           { r.mu.Lock(); defer r.mu.Unlock(); return slices.Clone(r.hits) }

func TestStreamPredictedAgainstDeliveredHits(t *testing.T) {
	prompt9 := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9} // two full blocks of 4, and a token
	prompt8 := prompt9[:8]                         // two full blocks: the engine computes the last token
	for _, c := range []struct {
		name      string
		prompt    []uint32
		blockSize int
		overlap   int32
		workers   []*scriptedWorker
		prefill   []*scriptedWorker
		explain   bool
		want      []string
		predicted int // the explanation's predicted_overlap_tokens (explain only)
	}{
		{name: "delivered as predicted", prompt: prompt9, blockSize: 4, overlap: 2,
			workers: []*scriptedWorker{{failAfter: -1, cached: 8}}, explain: true,
			want: []string{"m w0 8/8"}, predicted: 8},
		{name: "a shortfall", prompt: prompt9, blockSize: 4, overlap: 2,
			workers: []*scriptedWorker{{failAfter: -1, cached: 4}},
			want:    []string{"m w0 8/4"}},
		{name: "capped before the prompt's last token", prompt: prompt8, blockSize: 4, overlap: 2,
			workers: []*scriptedWorker{{failAfter: -1, cached: 4}}, explain: true,
			want: []string{"m w0 4/4"}, predicted: 4},
		{name: "a migrated request: each leg with its own route's prediction", prompt: prompt9, blockSize: 4, overlap: 1,
			workers: []*scriptedWorker{{failAfter: 2, fault: "error"}, {failAfter: -1, cached: 2}}, explain: true,
			// The second route's prompt is the first's with the 2 tokens produced: 11 tokens.
			want: []string{"m w1 4/2"}, predicted: 4},
		{name: "remote: the prefill leg's", prompt: prompt9, blockSize: 4, overlap: 0,
			workers: []*scriptedWorker{{failAfter: -1, cached: 9}}, prefill: []*scriptedWorker{{failAfter: -1, cached: 4}},
			explain: true, want: []string{"m p0 4/4"}, predicted: 4},
		{name: "block size unknown: nothing", prompt: prompt9, blockSize: 0, overlap: 2,
			workers: []*scriptedWorker{{failAfter: -1, cached: 8}}},
		{name: "no prefix hit predicted, some delivered", prompt: prompt9, blockSize: 4, overlap: 0,
			workers: []*scriptedWorker{{failAfter: -1, cached: 4}},
			want:    []string{"m w0 0/4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := actor.NewActorSystem()
			t.Cleanup(sys.Shutdown)
			r := &overlapRouter{fakeRouter: &fakeRouter{pids: map[string]*actor.PID{}}, overlap: c.overlap, prefillOverlap: 1}
			for i, w := range c.workers {
				id := fmt.Sprintf("w%d", i)
				r.ids = append(r.ids, id)
				r.pids[id] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
			}
			if c.prefill != nil {
				r.prefillIDs = []string{}
			}
			for i, w := range c.prefill {
				id := fmt.Sprintf("p%d", i)
				r.prefillIDs = append(r.prefillIDs, id)
				r.pids[id] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
			}
			rec := &hitsRecorder{}
			req := &gateway.GenerateRequest{Model: "m", RequestID: "req", TokenIDs: c.prompt, ExplainRoute: c.explain,
				Sampling: &messages.SamplingParams{MaxTokens: 4, IgnoreEos: true, Seed: proto.Int64(7)}}
			seq := 0
			s := newStream(sys.Root, r, Config{Credits: 4, MigrationLimit: 3, PrefillReleaseWait: time.Second, clock: newFakeClock()},
				req, func(c string) string { seq++; return fmt.Sprintf("%s#%d", c, seq) }, rec)
			s.blockSize = c.blockSize
			if err := s.start(req.TokenIDs, req.Sampling); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			h := &harness{stream: s}
			chunks := h.drain(t)
			if last := chunks[len(chunks)-1]; last.FinishReason != "length" {
				t.Fatalf("last chunk %+v", last)
			}
			if got := rec.list(); !slices.Equal(got, c.want) {
				t.Errorf("hits %q, want %q", got, c.want)
			}
			ex := s.RouteExplanation()
			if !c.explain {
				if ex != nil {
					t.Errorf("explanation %+v, not asked", ex)
				}
				return
			}
			if ex == nil || ex.PredictedOverlapTokens != c.predicted || len(ex.Candidates) != len(c.workers) {
				t.Fatalf("explanation %+v, want predicted %d and %d candidates", ex, c.predicted, len(c.workers))
			}
			chosen := ex.Candidates[len(c.workers)-1] // the latest route's worker: the last one here
			if !chosen.Chosen || chosen.Cost != 1.5 || chosen.Terms["decode_blocks"] != 1.5 {
				t.Errorf("candidates %+v", ex.Candidates)
			}
		})
	}
}

// TestRecorderHitGap: the recorder counts predicted and delivered tokens per worker,
// and a sustained shortfall sets the gap gauge and logs one warning naming the worker,
// however many requests fall short after it; the gap closes when deliveries recover.
func TestRecorderHitGap(t *testing.T) {
	var logs bytes.Buffer
	r := &setRecorder{set: metrics.NewSet(), log: zerolog.New(&logs)}
	r.gaps = newHitGapDetector(hitGapConfig{Window: 4, MinPredicted: 1000, MinRequests: 1, MaxAge: time.Hour})
	scrape := func() string {
		var b bytes.Buffer
		r.set.WritePrometheus(&b)
		return b.String()
	}
	for range 6 {
		r.cachedTokens("m", "w0", 640, 0)   // events lost: nothing delivered
		r.cachedTokens("m", "w1", 640, 640) // healthy
	}
	got := scrape()
	for _, line := range []string{
		`turbine_frontend_predicted_cached_tokens_total{model="m",worker="w0"} 3840`,
		`turbine_frontend_delivered_cached_tokens_total{model="m",worker="w0"} 0`,
		`turbine_frontend_predicted_cached_tokens_total{model="m",worker="w1"} 3840`,
		`turbine_frontend_delivered_cached_tokens_total{model="m",worker="w1"} 3840`,
		`turbine_frontend_cache_hit_gap{model="m",worker="w0"} 1`,
		`turbine_frontend_cache_hit_gap{model="m",worker="w1"} 0`,
		`turbine_frontend_cached_tokens_shortfall_count{model="m"} 12`,
		`turbine_frontend_cached_tokens_shortfall_bucket{model="m",le="0"} 6`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no line %q in:\n%s", line, got)
		}
	}
	warn := logs.String()
	if n := strings.Count(warn, `"level":"warn"`); n != 1 || !strings.Contains(warn, `"worker":"w0"`) ||
		!strings.Contains(warn, `"model":"m"`) || !strings.Contains(warn, "lost KV events") {
		t.Fatalf("%d warnings, want one naming w0 and the causes:\n%s", n, warn)
	}
	logs.Reset()
	for range 4 {
		r.cachedTokens("m", "w0", 640, 640)
	}
	if got := scrape(); !strings.Contains(got, `turbine_frontend_cache_hit_gap{model="m",worker="w0"} 0`+"\n") {
		t.Errorf("the gap did not close:\n%s", got)
	}
	if s := logs.String(); strings.Count(s, `"level":"info"`) != 1 || strings.Contains(s, `"level":"warn"`) {
		t.Errorf("recovery logs:\n%s", s)
	}
}
