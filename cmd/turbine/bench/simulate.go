package bench

import (
	"context"
	"fmt"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
	"io"
	"sort"
	"strings"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/flow"
	"github.com/turbine-llm/turbine/kv"
)

// simConfig is the simulated fleet of o.Fleet under routing policy mode.
func (o *Options) simConfig(mode string) sim.Config {
	f := o.Fleet
	eng := mocker.DefaultConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.MaxNumSeqs = f.BlockSize, f.NumGPUBlocks, f.MaxNumSeqs
	eng.MaxNumBatchedTokens, eng.MaxModelLen, eng.SpeedupRatio = f.MaxNumBatchedTokens, f.MaxModelLen, f.SpeedupRatio
	eng.MaxLoras, eng.LoraLoadMillis = f.MaxLoras, f.LoraLoadMs
	eng.TensorParallelSize, eng.Timing = f.TensorParallelSize, f.mocker.timing // the profile's, or nil: the reference
	rc := kv.DefaultConfig(f.BlockSize)
	policy, ignoreAdapters := splitMode(mode)
	rc.Policy, rc.OverlapWeight, rc.Temperature = policy, f.OverlapWeight, f.RouterTemperature
	rc.IgnoreAdapters, rc.LoraLoadMs = ignoreAdapters, f.RouterLoraLoadMs
	rc.Disagg = *f.Disagg.Config()
	// The router's prediction of active prompts as cached, as serve's default.
	rc.PredictActive = options.DefaultRouter().RouterPredictActive
	cfg := sim.Config{Workers: f.Workers, PrefillWorkers: f.PrefillWorkers, Engine: eng, Router: rc,
		BlockTokens: o.BlockTokens, Seed: o.Seed,
		KVBytesPerToken: f.KVBytesPerToken, TransferBandwidth: f.KVTransferBandwidth}
	f.Host.Apply(&cfg)
	cfg.Faults, cfg.RequestTimeout = f.Kills, o.Timeout
	cfg.Flow = flow.DefaultConfig()
	cfg.Flow.MigrationLimit, cfg.Flow.AcceptTimeout = f.Migration.MigrationLimit, f.Migration.AcceptTimeout
	f.applyQueue(&cfg)
	cfg.Kvbm, _ = f.Kvbm.config(&f) // checked by validate
	return cfg
}

// fleetName describes a simulated fleet (the URL field of its summary).
func (o *Options) fleetName(mode string) string {
	return fmt.Sprintf("simulated: %s, router %s", o.Fleet.workers(), mode)
}

// simulate replays reqs on the simulated fleet under routing policy mode (package
// bench/sim, virtual time) and summarizes the outcome as a real run's.
func (o *Options) simulate(ctx context.Context, reqs []bench.Request, workload, mode, label string, stderr io.Writer) (bench.Summary, []bench.Result, error) {
	label = runLabel(label, workload)
	cfg := o.simConfig(mode)
	if o.Plan.Planner.Enabled() {
		as, err := o.autoscaler()
		if err != nil {
			return bench.Summary{}, nil, err
		}
		cfg.Autoscaler = as
	}
	fmt.Fprintf(stderr, "bench: simulating %d requests (%s) on %s, router %s\n", len(reqs), workload, o.Fleet.workers(), mode)
	if o.Fleet.Host != (sim.Host{}) {
		fmt.Fprintf(stderr, "bench: host model: %s\n", describeHost(o.Fleet.Host))
	}
	p := newProgress(stderr, o.ProgressInterval, len(reqs), barTitle(label, workload), isTerminal(stderr))
	cfg.Progress = p.simulated()
	out, st, err := sim.Run(ctx, cfg, reqs)
	p.finish()
	if err != nil {
		return bench.Summary{}, nil, fmt.Errorf("simulate router %s: %w", mode, err)
	}
	fmt.Fprintf(stderr, "bench: simulated %.1f s of serving in %.1f s (%d engine steps)\n", st.SimulatedTime.Seconds(), st.WallTime.Seconds(), st.Steps)
	if cfg.QueueDepth > 0 {
		fmt.Fprintf(stderr, "bench: busy queue: %d requests waited, %d of them past --queue-timeout; %d found it full\n",
			st.Queued, st.QueueTimeouts, st.QueueFull)
	}
	s := bench.Summarize(out)
	if s.Lora != nil && cfg.Engine.MaxLoras > 0 {
		s.Lora.Engines = loraEngines(st)
	}
	if o.Fleet.PrefillWorkers > 0 {
		s.DisaggDecisions = decisionLabels(st.Decisions)
		fmt.Fprintf(stderr, "bench: disaggregation decisions: %s\n", decisions(s.DisaggDecisions))
	}
	if len(o.Fleet.Kills) > 0 {
		for _, line := range killLines(st.Faults, st.Migrations, st.PrefillRetries) {
			fmt.Fprintf(stderr, "bench: %s\n", line)
		}
	}
	s.Kills, s.Migrations, s.PrefillRetries = summaryKills(st.Faults), faultLabels(st.Migrations), faultLabels(st.PrefillRetries)
	s.Workload, s.URL, s.Model, s.Label = workload, o.fleetName(mode), o.Model, label
	o.simulatedFleet(&s, st, stderr)
	tierHitRates(&s, st, stderr)
	o.setCeiling(&s, reqs)
	return s, out.Results, nil
}

// decisions lists decision counts as "remote 120, local_short_prefill 30", largest first.
func decisions(m map[string]int) string {
	type kc struct {
		k string
		c int
	}
	var list []kc
	for k, c := range m {
		if c > 0 {
			list = append(list, kc{k, c})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].c > list[j].c || (list[i].c == list[j].c && list[i].k < list[j].k) })
	parts := make([]string, len(list))
	for i, x := range list {
		parts[i] = fmt.Sprintf("%s %d", x.k, x.c)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
