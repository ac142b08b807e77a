package configure

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/planner"
)

// searchResult is a finished search.
type searchResult struct {
	ranked  []planner.RankedLayout // evaluated layouts ranked, then those not evaluated
	windows []window               // what each layout's prediction simulated
	layouts int                    // layouts enumerated
	wall    time.Duration
}

// best is the winner.
func (r *searchResult) best() planner.RankedLayout { return r.ranked[0] }

// simConfig is the simulated fleet of layout l: the profile's engines of its sizes at
// speedup, serve's default router (routing policy --router-mode), conditional
// disaggregation and migration.
func (o *Options) simConfig(s *setup, l planner.Layout, speedup float64) (sim.Config, error) {
	eng, err := s.engineConfig(l.TP, speedup)
	if err != nil {
		return sim.Config{}, fmt.Errorf("TP%d engines: %s", l.TP, strings.TrimPrefix(err.Error(), "mocker: "))
	}
	cfg := sim.Config{Workers: l.Workers, Engine: eng, BlockTokens: o.BlockTokens, Seed: o.Seed,
		KVBytesPerToken: s.kvBytes, TransferBandwidth: o.KVTransferBandwidth}
	if l.Disaggregated() {
		pre, err := s.engineConfig(l.PrefillTP, speedup)
		if err != nil {
			return sim.Config{}, fmt.Errorf("TP%d prefill engines: %s", l.PrefillTP, strings.TrimPrefix(err.Error(), "mocker: "))
		}
		cfg.PrefillWorkers, cfg.PrefillEngine = l.PrefillWorkers, pre
	}
	rc := kv.DefaultConfig(eng.BlockSize)
	rc.Policy = o.RouterMode
	rc.PredictActive = options.DefaultRouter().RouterPredictActive
	disagg := options.DefaultDisagg()
	rc.Disagg = *disagg.Config()
	cfg.Router = rc
	cfg.Flow = flow.DefaultConfig()
	cfg.Flow.MigrationLimit = options.DefaultMigration().MigrationLimit
	blocks := func(n int, tp int) int64 {
		e, _ := s.profile.ForTP(tp)
		return sim.MemoryEstimate(n, e.KVBlocks, eng.BlockSize)
	}
	est := blocks(l.Workers, l.TP)
	if l.Disaggregated() {
		est += blocks(l.PrefillWorkers, l.PrefillTP)
	}
	if est > sim.DefaultMemoryLimit {
		return sim.Config{}, fmt.Errorf("its simulation would take about %s once the KV caches fill, above the %s a simulation may take",
			sim.Bytes(est), sim.Bytes(sim.DefaultMemoryLimit))
	}
	return cfg, nil
}

// search enumerates the layouts, sets the infeasible ones aside and evaluates the rest
// in waves of one GPU count (planner.LayoutSearch), each wave's simulations --jobs at a
// time; then ranks them.
func (o *Options) search(ctx context.Context, s *setup, stderr io.Writer) (*searchResult, error) {
	start := time.Now()
	kinds, _ := o.kinds()
	layouts, err := planner.EnumerateLayouts(s.sizes, o.GPUs, kinds)
	if err != nil {
		return nil, fmt.Errorf("--gpus %d, --tensor-parallel-sizes %v: %s", o.GPUs, s.sizes, strings.TrimPrefix(err.Error(), "planner: "))
	}
	if only, _ := o.only(); only != nil {
		for _, l := range only {
			if !slices.Contains(layouts, l) {
				return nil, fmt.Errorf("--layout %s: not a layout of at most --gpus %d with --tensor-parallel-sizes %v and --layouts %s", l, o.GPUs, s.sizes, o.Layouts)
			}
		}
		layouts = slices.DeleteFunc(layouts, func(l planner.Layout) bool { return !slices.Contains(only, l) })
	}
	if len(layouts) == 0 {
		return nil, fmt.Errorf("--gpus %d: no layout fits: the smallest tensor-parallel size searched is %d (%s)", o.GPUs, s.sizes[0], o.Layouts)
	}
	var feasible []planner.Layout
	var infeasible []planner.NotEvaluated
	for _, l := range layouts {
		if _, err := o.simConfig(s, l, 1); err != nil {
			infeasible = append(infeasible, planner.NotEvaluated{Layout: l, Verdict: planner.VerdictInfeasible, Reason: err.Error()})
			continue
		}
		feasible = append(feasible, l)
	}
	res := &searchResult{windows: sampleWindows(s.reqs, o.Sample, o.SampleWindows), layouts: len(layouts)}
	sample := "the whole workload"
	if !whole(res.windows, len(s.reqs)) {
		sample = fmt.Sprintf("%d windows of %d requests (after %d warm-up requests each) of %d", len(res.windows),
			len(res.windows[0].reqs)-res.windows[0].warm, res.windows[0].warm, len(s.reqs))
	}
	fmt.Fprintf(stderr, "configure: %d layouts of at most %s (%d infeasible), TP %v; each simulated on %s: %s\n",
		len(layouts), gpuCount(o.GPUs), len(infeasible), s.sizes, sample, s.workload)
	targets := o.targets()
	bound := func(gpus int) float64 { return planner.GoodputBound(len(s.reqs), s.span, gpus) }
	search := planner.NewLayoutSearch(feasible, o.Top, bound, targets)
	for wave := search.Next(); wave != nil; wave = search.Next() {
		t0 := time.Now()
		scores, err := o.evaluate(ctx, s, wave, res.windows, 1, sim.Host{}, len(s.reqs), s.span)
		if err != nil {
			return nil, err
		}
		for _, sc := range scores {
			search.Record(sc)
		}
		fmt.Fprintf(stderr, "configure: %s: %d layouts simulated in %.1f s\n", gpuCount(wave[0].GPUs()), len(wave), time.Since(t0).Seconds())
	}
	if n := len(search.Pruned()); n > 0 {
		fmt.Fprintf(stderr, "configure: %d layouts of %d or more GPUs pruned: their goodput bound is below the best %d found\n",
			n, search.Pruned()[0].Layout.GPUs(), o.Top)
	}
	if len(search.Scores()) == 0 {
		return nil, fmt.Errorf("no layout of at most %s can serve the workload: %s", gpuCount(o.GPUs), infeasible[0].Reason)
	}
	res.ranked = planner.RankLayouts(search.Scores(), targets, append(search.Pruned(), infeasible...))
	res.wall = time.Since(start)
	return res, nil
}

// evaluate simulates each layout on every window, --jobs simulations at a time, and
// scores it for a workload of workloadRequests requests arriving over span: its windows'
// scored requests, the workload's duration predicted from span and the windows' tails
// (planner.PredictDuration). Engines run at speedup on host (what a real machine adds
// to their steps; zero: nothing); results are scaled back to the timing model's time
// (span is in it).
func (o *Options) evaluate(ctx context.Context, s *setup, layouts []planner.Layout, ws []window, speedup float64, host sim.Host,
	workloadRequests int, span time.Duration) ([]planner.LayoutScore, error) {
	type run struct {
		outcomes []planner.RequestOutcome
		tail     time.Duration
	}
	runs := make([][]run, len(layouts))
	for i := range runs {
		runs[i] = make([]run, len(ws))
	}
	type task struct{ l, w int }
	tasks := make(chan task)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range min(o.Jobs, len(layouts)*len(ws)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				l, w := layouts[t.l], ws[t.w]
				cfg, err := o.simConfig(s, l, speedup)
				if err != nil {
					cancel(fmt.Errorf("layout %s: %v", l, err))
					continue
				}
				host.Apply(&cfg)
				out, _, err := sim.Run(ctx, cfg, w.reqs)
				if err != nil {
					cancel(fmt.Errorf("simulating layout %s: %w", l, err))
					continue
				}
				runs[t.l][t.w] = run{outcomes: outcomes(out.Results[w.warm:], speedup), tail: scaleDuration(tail(w, out.Results), speedup)}
			}
		}()
	}
feed:
	for li := range layouts {
		for wi := range ws {
			select {
			case tasks <- task{li, wi}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	scores := make([]planner.LayoutScore, len(layouts))
	for i, l := range layouts {
		var all []planner.RequestOutcome
		var tails []time.Duration
		for _, r := range runs[i] {
			all = append(all, r.outcomes...)
			tails = append(tails, r.tail)
		}
		scores[i] = planner.ScoreLayout(l, all, workloadRequests, planner.PredictDuration(span, tails), o.targets())
	}
	return scores, nil
}

// outcomes converts results into request outcomes, their times multiplied by scale
// (a run at a speedup, brought back to the timing model's time).
func outcomes(results []bench.Result, scale float64) []planner.RequestOutcome {
	out := make([]planner.RequestOutcome, len(results))
	for i, r := range results {
		if r.Error != "" {
			out[i] = planner.RequestOutcome{Failed: true}
			continue
		}
		o := planner.RequestOutcome{TTFTMs: ms(r.TTFT) * scale}
		if len(r.ITL) > 0 {
			var sum time.Duration
			for _, g := range r.ITL {
				sum += g
			}
			o.HasITL, o.MeanITLMs = true, ms(sum)/float64(len(r.ITL))*scale
		}
		out[i] = o
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func scaleDuration(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) * scale)
}
