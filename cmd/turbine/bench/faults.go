package bench

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/bench/sim"
	"github.com/turbine-llm/turbine/messages"
)

// faultFlagNames are the flags of a simulation's faults and its flows' answer to them
// (a real run refuses them); benchFaultFlagNames are those of them that serve has not
// (--migration-limit is serve's too).
var (
	faultFlagNames      = []string{"kill-worker", "migration-limit"}
	benchFaultFlagNames = []string{"kill-worker"}
)

// killFlag is --kill-worker: it keeps every value given (Fleet.KillSpecs) as given, and
// says them back in messages; validateFaults parses them, so that a bad one is an error
// naming it, as a bad figure of another flag is, not a parse failure and the whole -h.
type killFlag struct{ specs *[]string }

func (k killFlag) String() string {
	if k.specs == nil {
		return ""
	}
	return strings.Join(*k.specs, ",")
}

func (k killFlag) Set(v string) error {
	*k.specs = append(*k.specs, v)
	return nil
}

// faultFlags registers the faults of `turbine bench --simulate` (a real run refuses
// them).
func (f *Fleet) faultFlags(fs *flag.FlagSet) {
	fs.Var(killFlag{&f.KillSpecs}, "kill-worker", "--simulate: kill a worker for good at a time after the first arrival, as WORKER@TIME "+
		"(e.g. worker-1@30s; decode-N and prefill-N with --prefill-workers); repeat the flag, or separate them with commas")
}

// parseKills parses KillSpecs into Kills; errors name --kill-worker and the value.
func (f *Fleet) parseKills() error {
	f.Kills = nil
	for _, spec := range f.KillSpecs {
		for _, part := range strings.Split(spec, ",") {
			k, err := sim.ParseFault(strings.TrimSpace(part))
			if err != nil {
				return fmt.Errorf("--kill-worker %s: %v", spec, err)
			}
			f.Kills = append(f.Kills, k)
		}
	}
	return nil
}

// validateFaults parses --kill-worker (parseKills) and checks that every kill names a
// worker of the fleet, and each worker once (a worker dies once).
func (f *Fleet) validateFaults() error {
	if err := f.parseKills(); err != nil {
		return err
	}
	names := sim.WorkerNames(f.Workers, f.PrefillWorkers)
	for i, k := range f.Kills {
		if !slices.Contains(names, k.Worker) {
			return fmt.Errorf("--kill-worker %s@%v: no worker %q in this fleet (its workers: %s)",
				k.Worker, k.At, k.Worker, sim.DescribeWorkers(f.Workers, f.PrefillWorkers))
		}
		for _, earlier := range f.Kills[:i] {
			if earlier.Worker == k.Worker {
				return fmt.Errorf("--kill-worker %s@%v: %s is named twice (also %s@%v): kill each worker once",
					k.Worker, k.At, k.Worker, earlier.Worker, earlier.At)
			}
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

// killLines says what became of the kills a simulation was given (sim.Stats.Faults):
// the kills done, by time, with the migrations and prefill retries, then the kills the
// run ended before, if any.
func killLines(faults []sim.FaultReport, migrations, retries map[messages.Fault]int) []string {
	f := slices.Clone(faults)
	sort.SliceStable(f, func(i, j int) bool { return f[i].At < f[j].At })
	var done, notDone []string
	for _, x := range f {
		if x.Struck {
			done = append(done, fmt.Sprintf("%s at %v", x.Worker, x.At))
		} else {
			notDone = append(notDone, fmt.Sprintf("%s@%v", x.Worker, x.At))
		}
	}
	killed := "no worker"
	if len(done) > 0 {
		killed = strings.Join(done, ", ")
	}
	lines := []string{fmt.Sprintf("killed %s; migrations: %s; prefill retries: %s", killed, faultCounts(migrations), faultCounts(retries))}
	if len(notDone) > 0 {
		lines = append(lines, fmt.Sprintf("not killed: %s: the run ended first", strings.Join(notDone, ", ")))
	}
	return lines
}

// summaryKills are the kills of a simulation for its summary, in the order given.
func summaryKills(faults []sim.FaultReport) []bench.Kill {
	if len(faults) == 0 {
		return nil
	}
	out := make([]bench.Kill, len(faults))
	for i, x := range faults {
		out[i] = bench.Kill{Worker: x.Worker, AtS: x.At.Seconds(), Killed: x.Struck}
	}
	return out
}

// faultLabels are counts by fault under their labels, for a summary; nil when none.
func faultLabels(m map[messages.Fault]int) map[string]int {
	var out map[string]int
	for k, c := range m {
		if c > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[k.Label()] += c
		}
	}
	return out
}
