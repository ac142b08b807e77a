package bench

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/messages"
)

// faultFlags registers the faults of `turbine bench --simulate` (a real run refuses
// them).
func (f *Fleet) faultFlags(fs *flag.FlagSet) {
	fs.Func("kill-worker", "--simulate: kill a worker for good at a time after the first arrival, as WORKER@TIME "+
		"(e.g. worker-1@30s; decode-N and prefill-N with --prefill-workers); repeat the flag, or separate them with commas",
		func(v string) error {
			for _, part := range strings.Split(v, ",") {
				k, err := sim.ParseFault(strings.TrimSpace(part))
				if err != nil {
					return err
				}
				f.Kills = append(f.Kills, k)
			}
			return nil
		})
}

// validateFaults checks that every --kill-worker names a worker of the fleet.
func (f *Fleet) validateFaults() error {
	names := sim.WorkerNames(f.Workers, f.PrefillWorkers)
	for _, k := range f.Kills {
		if !slices.Contains(names, k.Worker) {
			return fmt.Errorf("--kill-worker %s@%v: no worker %q in this fleet (its workers: %s)",
				k.Worker, k.At, k.Worker, sim.DescribeWorkers(f.Workers, f.PrefillWorkers))
		}
	}
	return nil
}

// faultCounts lists counts by fault as "worker_terminated 12, kv_transfer 1", largest
// first; "none" when empty.
func faultCounts(m map[messages.Fault]int) string {
	labels := make(map[string]int, len(m))
	for k, c := range m {
		labels[k.Label()] = c
	}
	return decisions(labels)
}

// decisionLabels are decision counts by their label (Summary.DisaggDecisions).
func decisionLabels(m map[messages.DisaggDecision]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, c := range m {
		out[k.Label()] = c
	}
	return out
}

// sortedKills lists the kills by time, for the log line.
func sortedKills(kills []sim.Fault) string {
	k := slices.Clone(kills)
	sort.SliceStable(k, func(i, j int) bool { return k[i].At < k[j].At })
	parts := make([]string, len(k))
	for i, x := range k {
		parts[i] = fmt.Sprintf("%s at %v", x.Worker, x.At)
	}
	return strings.Join(parts, ", ")
}
