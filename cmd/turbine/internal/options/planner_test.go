package options

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/frontend"
	plannerkind "github.com/turbine-llm/turbine/actors/planner"
	core "github.com/turbine-llm/turbine/planner"
)

// writeProfile writes a small valid profile of tensor-parallel size 1 and returns its path.
func writeProfile(t *testing.T) string {
	t.Helper()
	p := &core.Profile{Version: core.ProfileVersion, Engine: "mocker", Model: "turbine-mock", BlockSize: 64,
		Parallel: []core.EngineProfile{{TensorParallelSize: 1, KVBlocks: 1000, MaxNumSeqs: 64,
			Prefill: []core.PrefillPoint{{ISL: 128, TTFTMs: 10, TokensPerSecPerGPU: 12800}, {ISL: 1024, TTFTMs: 40, TokensPerSecPerGPU: 25600}},
			Decode: []core.DecodePoint{{Context: 512, Batch: 1, KVUsage: 0.01, ITLMs: 8, TokensPerSecPerGPU: 125},
				{Context: 512, Batch: 32, KVUsage: 0.3, ITLMs: 20, TokensPerSecPerGPU: 1600}}}}}
	path := filepath.Join(t.TempDir(), "profile.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Encode(f); err != nil {
		t.Fatal(err)
	}
	return path
}

// parsePlanner registers the planner flags of command on a fresh flag set, parses args
// and validates.
func parsePlanner(command string, args ...string) (Planner, error) {
	o := DefaultPlanner()
	if command == "planner" {
		o.Mode = "load"
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	o.Flags(fs, command)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// Every bad planner flag is refused with an error naming the flag (and the core's own
// checks come back in flag names).
func TestPlannerFlags(t *testing.T) {
	profile := writeProfile(t)
	for _, tc := range []struct {
		name, command string
		args          []string
		err           string // "" valid
	}{
		{"serve, no planner", "serve", nil, ""},
		{"serve, load", "serve", []string{"--planner", "load"}, ""},
		{"serve, sla", "serve", []string{"--planner", "sla", "--planner-profile", profile}, ""},
		{"planner defaults", "planner", nil, ""},
		{"planner, no mode", "planner", []string{"--mode", ""}, "--mode: empty"},
		{"bad mode", "serve", []string{"--planner", "fast"}, `--planner "fast": want load or sla`},
		{"bad mode, planner", "planner", []string{"--mode", "fast"}, `--mode "fast"`},
		{"sla without profile", "serve", []string{"--planner", "sla"}, "--planner sla needs --planner-profile"},
		{"missing profile", "serve", []string{"--planner", "sla", "--planner-profile", "/nonexistent/p.json"}, "--planner-profile: "},
		{"ttft target 0", "serve", []string{"--planner", "load", "--ttft-target", "0"}, "--ttft-target 0"},
		{"itl target NaN", "serve", []string{"--planner", "load", "--itl-target", "NaN"}, "--itl-target NaN"},
		{"budget 0", "serve", []string{"--planner", "load", "--gpu-budget", "0"}, "--gpu-budget 0"},
		{"min workers 0", "serve", []string{"--planner", "load", "--min-workers", "0"}, "--min-workers 0"},
		{"budget below the minimum", "planner", []string{"--disaggregated", "--gpu-budget", "3", "--min-workers", "2"}, "--gpu-budget 3 holds fewer than --min-workers 2"},
		{"interval too short", "serve", []string{"--planner", "load", "--planner-interval", "1ms"}, "--planner-interval 1ms"},
		{"unknown predictor", "serve", []string{"--planner", "load", "--planner-predictor", "oracle"}, `--planner-predictor "oracle"`},
		{"tp not profiled", "planner", []string{"--mode", "sla", "--planner-profile", profile, "--tensor-parallel-size", "2"}, "--planner-profile " + profile + " has no entry for --tensor-parallel-size 2"},
		{"tp not profiled, load mode", "planner", []string{"--mode", "load", "--planner-profile", profile, "--tensor-parallel-size", "2"}, ""},
		{"bad connector", "serve", []string{"--planner", "load", "--connector", "ssh"}, `--connector "ssh"`},
		{"kubernetes on serve", "serve", []string{"--planner", "load", "--connector", "kubernetes"}, "--connector kubernetes: turbine serve runs its own workers"},
		{"kubernetes without namespace", "planner", []string{"--connector", "kubernetes", "--kube-aggregated", "deployment/w"}, "--kube-namespace"},
		{"kubernetes without workload", "planner", []string{"--connector", "kubernetes", "--kube-namespace", "llm"}, "needs --kube-aggregated"},
		{"kubernetes, bad workload", "planner", []string{"--connector", "kubernetes", "--kube-namespace", "llm", "--kube-aggregated", "pod/w"}, "--kube-aggregated: "},
		{"kubernetes, pool not planned", "planner", []string{"--connector", "kubernetes", "--kube-namespace", "llm", "--kube-prefill", "deployment/p"}, "--kube-prefill"},
		{"kubernetes, half a disaggregated layout", "planner", []string{"--connector", "kubernetes", "--kube-namespace", "llm", "--disaggregated", "--kube-prefill", "deployment/p"}, "both --kube-prefill and --kube-decode"},
		{"kubernetes, valid", "planner", []string{"--connector", "kubernetes", "--kube-namespace", "llm", "--disaggregated", "--kube-prefill", "deployment/p", "--kube-decode", "sts/d"}, ""},
		{"virtual without output", "serve", []string{"--planner", "load", "--connector", "virtual"}, "exactly one of --virtual-file and --virtual-webhook"},
		{"virtual with both", "serve", []string{"--planner", "load", "--connector", "virtual", "--virtual-file", "d.jsonl", "--virtual-webhook", "http://x/"}, "exactly one"},
		{"virtual, valid", "serve", []string{"--planner", "load", "--connector", "virtual", "--virtual-file", "d.jsonl"}, ""},
		{"negative drain", "serve", []string{"--planner", "load", "--planner-drain-timeout", "-1s"}, "--planner-drain-timeout -1s"},
		{"node cap 0", "serve", []string{"--planner", "load", "--max-workers-per-node", "0"}, "--max-workers-per-node 0"},
		{"tp 0", "planner", []string{"--tensor-parallel-size", "0"}, "--tensor-parallel-size 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePlanner(tc.command, tc.args...)
			if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
			}
		})
	}
}

// The flags become the planner core's configuration: the interval goes to the mode's
// period, the tensor-parallel size to every pool, the profile is loaded.
func TestPlannerCoreConfig(t *testing.T) {
	o, err := parsePlanner("planner", "--mode", "sla", "--planner-profile", writeProfile(t), "--ttft-target", "300",
		"--itl-target", "20", "--gpu-budget", "6", "--min-workers", "2", "--planner-interval", "10s",
		"--planner-predictor", "holt", "--disaggregated")
	if err != nil {
		t.Fatal(err)
	}
	c := o.Core(o.Disaggregated)
	if c.Mode != core.ModeSLA || c.TTFTTargetMs != 300 || c.ITLTargetMs != 20 || c.GPUBudget != 6 || c.MinWorkers != 2 ||
		c.Interval != 10*time.Second || c.LoadInterval != core.DefaultLoadInterval || c.Predictor != "holt" ||
		!c.Disaggregated || c.Profile == nil || c.GPUsPerEngine[core.PoolDecode] != 1 {
		t.Errorf("core config %+v", c)
	}
	if o.Period() != 10*time.Second {
		t.Errorf("period %v", o.Period())
	}
	o, err = parsePlanner("serve", "--planner", "load", "--planner-interval", "500ms")
	if err != nil {
		t.Fatal(err)
	}
	if c := o.Core(false); c.LoadInterval != 500*time.Millisecond || c.Interval != core.DefaultInterval || o.Period() != 500*time.Millisecond {
		t.Errorf("load mode's period: %+v", c)
	}
	d := DefaultPlanner()
	if d.DrainTimeout != plannerkind.DefaultDrainGrace || d.MaxWorkersPerNode != plannerkind.DefaultMaxWorkersPerNode ||
		d.GPUBudget != core.DefaultGPUBudget || d.Predictor != core.DefaultPredictor || d.Mode != "" {
		t.Errorf("defaults %+v", d)
	}
}

// The virtual connector's member needs no cluster; its kind is built at once.
func TestPlannerMemberVirtual(t *testing.T) {
	file := filepath.Join(t.TempDir(), "decisions.jsonl")
	o, err := parsePlanner("serve", "--planner", "load", "--connector", "virtual", "--virtual-file", file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := o.Member(false, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Kind == nil || m.Connector != "virtual" {
		t.Errorf("member %+v", m)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the decisions' file was not opened: %v", err)
	}
}

// Before its member joins, the local connector says so instead of failing obscurely.
func TestMemberLocalBeforeBind(t *testing.T) {
	var m memberLocal
	if _, err := m.Fleet(t.Context(), "m"); err != errNoMember {
		t.Errorf("Fleet before Bind: %v", err)
	}
	if err := m.Scale(t.Context(), "m", map[core.Pool]int{core.PoolAggregated: 2}); err != errNoMember {
		t.Errorf("Scale before Bind: %v", err)
	}
}

func TestPlannerReportsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want frontend.PlannerReports
		err  string
	}{
		{nil, frontend.PlannerReportsAuto, ""},
		{[]string{"--planner-reports", "on"}, frontend.PlannerReportsOn, ""},
		{[]string{"--planner-reports", "off"}, frontend.PlannerReportsOff, ""},
		{[]string{"--planner-reports", "yes"}, 0, `--planner-reports "yes"`},
		{[]string{"--planner-report-interval", "1ms"}, 0, "--planner-report-interval 1ms"},
	} {
		o := DefaultPlannerReports()
		fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
		o.Flags(fs, true)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.err)
			continue
		}
		if err == nil && o.Mode() != tc.want {
			t.Errorf("%v: %v, want %v", tc.args, o.Mode(), tc.want)
		}
	}
}

// After Stop (shutdown), the local connector refuses every step, so that no worker
// starts while the process drains.
func TestMemberLocalStopRefusesSteps(t *testing.T) {
	o, err := parsePlanner("serve", "--planner", "load")
	if err != nil {
		t.Fatal(err)
	}
	pm, err := o.Member(false, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	pm.Stop()
	var m memberLocal
	m.stop()
	if err := m.Scale(t.Context(), "m", map[core.Pool]int{core.PoolAggregated: 2}); !errors.Is(err, errPlannerStopped) {
		t.Errorf("Scale after stop: %v", err)
	}
}
