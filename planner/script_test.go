package planner

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scripts/*.txt")

// Scripted tests of the Planner core on a virtual clock: the script delivers every
// observation, fleet state and worker load, and the expected decision is written beside
// it. Each file under testdata/scripts is a sequence of cases:
//
//	command key=value ...
//	optional input lines
//	----
//	expected output
//	(blank line)
//
// Commands:
//
//	config [mode=sla|load] [disagg=true] [interval=30s] [load-interval=5s] [ttft=500] [itl=50]
//	  [budget=8] [min=1] [predictor=constant (not the default)] [stabilization=90s] [step-timeout=10m]
//	  [profile=profile-small.json|none] [tp-aggregated=1] [tp-prefill=1] [tp-decode=1]
//	  [kv-target=0.8] [down-ratio=0.8] [prefill-rate=40000] [window=4] [alpha=0.5] [beta=0.3]
//	  [order=2] [fit-window=12] [level-noise=0.5] [trend-noise=0.05]
//	    a new Planner (profile under testdata/, loaded unless none); prints ok or the error
//	observe requests=N [isl=] [osl=] [ttft-p90=] [itl-p90=] [queue-p90=] [frontends=1] [duration=30s]
//	fleet [POOL=N] [starting-POOL=N] [stopping-POOL=N]   the fleet as the connector sees it
//	loads   input: one worker a line: ID POOL [kv=0.5] [prefill=0] [running=0] [waiting=0]
//	        [ready=false]; none clears
//	decide [at=60s] [terms=all|none|a,b]   at: since the script's start (default: the
//	    previous decision + the mode's period); prints the decision
//	apply [pending=true]   the fleet becomes the last target (pending: the difference is
//	    starting or stopping); settle: starting and stopping workers finish
//	set-targets [ttft=] [itl=] [budget=]
//	predict name=holt [options as config] series=1,2,3   each one-step-ahead forecast,
//	    printed before the sample it forecasts is added
//
// Run with -rewrite to regenerate the expected output.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scripts", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata/scripts (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type scriptCase struct {
	line     int
	comments []string
	cmd      string
	input    []string
	expected string
}

func parseScript(t *testing.T, path string) []scriptCase {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cases []scriptCase
	var comments []string
	header := true
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			if header {
				comments = nil
			}
			header = false
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		header = false
		c := scriptCase{line: i + 1, cmd: l, comments: comments}
		comments = nil
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "----"; i++ {
			if in := strings.TrimSpace(lines[i]); in != "" {
				c.input = append(c.input, in)
			}
		}
		if i >= len(lines) {
			t.Fatalf("%s:%d: %q has no ---- separator", path, c.line, c.cmd)
		}
		var out []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runScript(t *testing.T, path string) {
	cases := parseScript(t, path)
	h := &harness{fleet: emptyFleet()}
	var rewritten strings.Builder
	for _, c := range cases {
		got := strings.TrimRight(h.run(t, path, c), "\n")
		if *rewrite {
			for _, cm := range c.comments {
				rewritten.WriteString(cm + "\n")
			}
			rewritten.WriteString(c.cmd + "\n")
			for _, in := range c.input {
				rewritten.WriteString(in + "\n")
			}
			rewritten.WriteString("----\n" + got + "\n\n")
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\n want:\n%s", path, c.line, c.cmd, got, c.expected)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(leadingComments(t, path)+rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// leadingComments keeps a script's header comment across rewrites.
func leadingComments(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		sb.WriteString(l + "\n")
	}
	if sb.Len() > 0 {
		sb.WriteString("\n")
	}
	return sb.String()
}

// scriptStart is the scripts' (and the unit tests') clock origin.
var scriptStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	p       *Planner
	fleet   Fleet
	loads   []WorkerLoad
	now     time.Time
	decided bool
}

func emptyFleet() Fleet {
	return Fleet{Ready: map[Pool]int{}, Starting: map[Pool]int{}, Stopping: map[Pool]int{}}
}

type scriptArgs map[string]string

func parseScriptArgs(fields []string) scriptArgs {
	a := scriptArgs{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		a[k] = v
	}
	return a
}

func (a scriptArgs) str(k, def string) string {
	if v, ok := a[k]; ok {
		return v
	}
	return def
}

func (a scriptArgs) int(t *testing.T, k string, def int) int {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

func (a scriptArgs) float(t *testing.T, k string, def float64) float64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return f
}

func (a scriptArgs) dur(t *testing.T, k string, def time.Duration) time.Duration {
	v, ok := a[k]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return d
}

func (a scriptArgs) predictorOptions(t *testing.T) PredictorOptions {
	return PredictorOptions{
		Window: a.int(t, "window", 0), Alpha: a.float(t, "alpha", 0), Beta: a.float(t, "beta", 0),
		Order: a.int(t, "order", 0), FitWindow: a.int(t, "fit-window", 0),
		LevelNoise: a.float(t, "level-noise", 0), TrendNoise: a.float(t, "trend-noise", 0),
	}
}

// fig formats a figure compactly and stably: 4 significant digits, whole numbers from 1,000.
func fig(v float64) string {
	if a := math.Abs(v); a >= 1000 && a < 1e12 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func (h *harness) run(t *testing.T, path string, c scriptCase) string {
	fields := strings.Fields(c.cmd)
	a := parseScriptArgs(fields[1:])
	switch fields[0] {
	case "config":
		return h.config(t, a)
	case "observe":
		h.planner(t, c).Observe(Observation{
			Start: h.now, Duration: a.dur(t, "duration", 30*time.Second), Frontends: a.int(t, "frontends", 1),
			Requests: a.int(t, "requests", 0), ISLMean: a.float(t, "isl", 0), OSLMean: a.float(t, "osl", 0),
			TTFTP90Ms: a.float(t, "ttft-p90", 0), ITLP90Ms: a.float(t, "itl-p90", 0), QueueP90Ms: a.float(t, "queue-p90", 0),
		})
		return "ok"
	case "fleet":
		h.fleet = emptyFleet()
		for k := range a {
			state, name, ok := strings.Cut(k, "-")
			if !ok {
				state, name = "ready", k
			}
			pool, err := ParsePool(name)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, c.line, err)
			}
			n := a.int(t, k, 0)
			switch state {
			case "ready":
				h.fleet.Ready[pool] = n
			case "starting":
				h.fleet.Starting[pool] = n
			case "stopping":
				h.fleet.Stopping[pool] = n
			default:
				t.Fatalf("%s:%d: fleet key %q", path, c.line, k)
			}
		}
		return h.fleetString()
	case "loads":
		h.loads = nil
		for _, l := range c.input {
			f := strings.Fields(l)
			if len(f) < 2 {
				t.Fatalf("%s:%d: load line %q: want ID POOL [kv=] [prefill=] [running=] [waiting=] [ready=]", path, c.line, l)
			}
			pool, err := ParsePool(f[1])
			if err != nil {
				t.Fatalf("%s:%d: %v", path, c.line, err)
			}
			la := parseScriptArgs(f[2:])
			h.loads = append(h.loads, WorkerLoad{WorkerID: f[0], Pool: pool, Ready: la.str("ready", "true") == "true",
				KVUsage: la.float(t, "kv", 0), ActivePrefillTokens: la.int(t, "prefill", 0),
				Running: la.int(t, "running", 0), Waiting: la.int(t, "waiting", 0)})
		}
		return fmt.Sprintf("ok: %d workers", len(h.loads))
	case "decide":
		p := h.planner(t, c)
		switch {
		case a["at"] != "":
			h.now = scriptStart.Add(a.dur(t, "at", 0))
		case h.decided:
			h.now = h.now.Add(p.cfg.period())
		default:
			h.now = scriptStart
		}
		h.decided = true
		return formatDecision(p.Decide(h.now, h.fleet, h.loads), a.str("terms", "all"))
	case "apply":
		last := h.planner(t, c).Last()
		for pool, n := range last.Target {
			ready := h.fleet.Ready[pool]
			if a.str("pending", "false") == "true" {
				h.fleet.Starting[pool] = max(0, n-ready)
				h.fleet.Stopping[pool] = max(0, ready-n)
				h.fleet.Ready[pool] = min(ready, n)
			} else {
				h.fleet.Ready[pool] = n
			}
		}
		return h.fleetString()
	case "settle":
		for pool, n := range h.fleet.Starting {
			h.fleet.Ready[pool] += n
		}
		h.fleet.Starting, h.fleet.Stopping = map[Pool]int{}, map[Pool]int{}
		return h.fleetString()
	case "set-targets":
		if err := h.planner(t, c).SetTargets(a.float(t, "ttft", 0), a.float(t, "itl", 0), a.int(t, "budget", 0)); err != nil {
			return "error: " + err.Error()
		}
		cfg := h.p.Config()
		return fmt.Sprintf("ttft=%g itl=%g budget=%d", cfg.TTFTTargetMs, cfg.ITLTargetMs, cfg.GPUBudget)
	case "predict":
		pr, err := DefaultPredictors().New(a.str("name", ""), a.predictorOptions(t))
		if err != nil {
			return "error: " + err.Error()
		}
		var out []string
		for _, s := range strings.Split(a.str("series", ""), ",") {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("%s:%d: series value %q: %v", path, c.line, s, err)
			}
			out = append(out, fig(pr.Predict()))
			pr.Add(v)
		}
		return "forecasts " + strings.Join(out, " ") + "\nnext " + fig(pr.Predict())
	}
	t.Fatalf("%s:%d: unknown command %q", path, c.line, fields[0])
	return ""
}

func (h *harness) planner(t *testing.T, c scriptCase) *Planner {
	if h.p == nil {
		t.Fatalf("line %d: %q before config", c.line, c.cmd)
	}
	return h.p
}

func (h *harness) config(t *testing.T, a scriptArgs) string {
	cfg := Config{
		Interval: a.dur(t, "interval", 0), LoadInterval: a.dur(t, "load-interval", 0),
		TTFTTargetMs: a.float(t, "ttft", 0), ITLTargetMs: a.float(t, "itl", 0),
		GPUBudget: a.int(t, "budget", 0), MinWorkers: a.int(t, "min", 0),
		Disaggregated: a.str("disagg", "false") == "true",
		// The scripts that name no predictor were written for the last value, so that a
		// decision reads the interval just observed.
		Predictor: a.str("predictor", PredictorConstant), PredictorOptions: a.predictorOptions(t),
		Stabilization: a.dur(t, "stabilization", 0), StepTimeout: a.dur(t, "step-timeout", 0),
		KVUsageTarget: a.float(t, "kv-target", 0), ScaleDownRatio: a.float(t, "down-ratio", 0),
		PrefillTokensPerSec: a.float(t, "prefill-rate", 0),
		GPUsPerEngine:       map[Pool]int{},
	}
	if m := a.str("mode", ""); m != "" {
		mode, err := ParseMode(m)
		if err != nil {
			return "error: " + err.Error()
		}
		cfg.Mode = mode
	}
	for _, pool := range Pools {
		if n := a.int(t, "tp-"+pool.String(), 0); n != 0 {
			cfg.GPUsPerEngine[pool] = n
		}
	}
	if f := a.str("profile", "profile-small.json"); f != "none" {
		prof, err := LoadProfile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Profile = prof
	}
	p, err := New(cfg)
	if err != nil {
		return "error: " + err.Error()
	}
	h.p, h.fleet, h.loads, h.now, h.decided = p, emptyFleet(), nil, scriptStart, false
	c := p.Config()
	return fmt.Sprintf("ok: mode=%v pools=%v interval=%v stabilization=%v budget=%d min=%d predictor=%s",
		c.Mode, c.PoolsInUse(), c.period(), c.Stabilization, c.GPUBudget, c.MinWorkers, c.Predictor)
}

func (h *harness) fleetString() string {
	var parts []string
	for _, pool := range Pools {
		r, s, x := h.fleet.Ready[pool], h.fleet.Starting[pool], h.fleet.Stopping[pool]
		if r+s+x == 0 {
			continue
		}
		part := fmt.Sprintf("%v=%d", pool, r)
		if s > 0 {
			part += fmt.Sprintf(" (+%d starting)", s)
		}
		if x > 0 {
			part += fmt.Sprintf(" (-%d stopping)", x)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "fleet: empty"
	}
	return "fleet: " + strings.Join(parts, ", ")
}

// poolCounts prints m's pools in the order of Pools.
func poolCounts(m map[Pool]int) string {
	var parts []string
	for _, pool := range Pools {
		if n, ok := m[pool]; ok {
			parts = append(parts, fmt.Sprintf("%v=%d", pool, n))
		}
	}
	return strings.Join(parts, " ")
}

// formatDecision prints a decision for a script: which terms is "all", "none" or a
// comma-separated list of term names.
func formatDecision(d Decision, which string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "target %s (wanted %s)\n", poolCounts(d.Target), poolCounts(d.Wanted))
	if d.Mode == ModeSLA {
		fmt.Fprintf(&b, "predicted requests=%s isl=%s osl=%s; correction prefill=%s decode=%s\n",
			fig(d.PredictedRequests), fig(d.PredictedISL), fig(d.PredictedOSL), fig(d.CorrectionPrefill), fig(d.CorrectionDecode))
	}
	names := map[string]bool{}
	for _, n := range strings.Split(which, ",") {
		names[n] = true
	}
	for _, tm := range d.Terms {
		if which == "all" || names[tm.Name] {
			fmt.Fprintf(&b, "  %s = %s %s\n", tm.Name, fig(tm.Value), tm.Unit)
		}
	}
	for _, c := range d.Clamps {
		fmt.Fprintf(&b, "clamp: %s\n", c)
	}
	b.WriteString(d.Reason) // "held: …" when Held
	if d.Held != strings.HasPrefix(d.Reason, "held: ") {
		b.WriteString(" (Held and Reason disagree)")
	}
	return b.String()
}
