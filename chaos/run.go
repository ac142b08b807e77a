package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/flow"
)

// Config is one run of the rig. DefaultConfig holds the defaults.
type Config struct {
	Bin    string // the turbine executable the hosts run
	Consul string // the Consul executable
	Seed   uint64 // the nemesis's schedule and the client's disconnects
	// Duration is the load's length; the nemesis stops Quiet before its end, and the
	// cluster then has Settle to let go of every request.
	Duration, Quiet, Settle time.Duration
	MeanGap                 time.Duration // mean time between nemesis events
	Weights                 []float64     // per Kind (nil: DefaultWeights)
	Trace                   string        // a Mooncake .jsonl trace (or Azure .csv)
	Rate                    float64       // requests/s the trace is scaled to
	MaxPrompt               int           // prompts are cut to this many tokens
	MaxTokens               int           // output tokens asked, at most (the trace's, capped)
	Disconnect              float64       // share of requests the client cuts on purpose
	SpeedupRatio            float64       // the mock engines' speed-up
	RequestLimit            time.Duration // a request's whole time at most
	MigrationLimit          int           // the frontends' --migration-limit, which the checker holds them to
	Out                     string        // folder of the records, plan, verdict, plot and logs
	Prefix                  string        // network namespaces' prefix (≤ 5 bytes)
	Log                     io.Writer     // progress lines
}

// DefaultConfig is the 30-minute soak's configuration (task chaos); the short one
// (task chaos:short) changes Duration to 3 minutes.
func DefaultConfig() Config {
	return Config{Seed: 1, Duration: 30 * time.Minute, Quiet: 30 * time.Second, Settle: 60 * time.Second,
		MeanGap: 6 * time.Second, Rate: 2, MaxPrompt: 4096, MaxTokens: 48, Disconnect: 0.05,
		SpeedupRatio: 10, RequestLimit: 90 * time.Second, MigrationLimit: flow.DefaultMigrationLimit, Prefix: "tch", Log: os.Stderr}
}

// Models the rig serves: an aggregated pool on two nodes and a 1P2D pool on two more.
const (
	ModelAgg = "chaos-agg"
	ModelPD  = "chaos-pd"
)

// The rig's topology and each host's role.
var (
	topology = Topology{Consul: "consul", Frontends: []string{"fe-1", "fe-2"}, Nodes: []string{"n-1", "n-2", "n-3", "n-4"}, Disks: kvbmNodes}
	nodeArgs = map[string][]string{
		"n-1": {"--workers", "2", "--served-model-name", ModelAgg},
		"n-2": {"--workers", "2", "--served-model-name", ModelAgg},
		"n-3": {"--workers", "1", "--served-model-name", ModelPD, "--worker-role", "prefill"},
		"n-4": {"--workers", "2", "--served-model-name", ModelPD, "--worker-role", "decode"},
	}
	wantReady = map[string]int{ModelAgg: 4, ModelPD: 3}
)

const (
	frontendPort = "8000"
	nodeHTTPPort = "9090"
	consulPort   = "8500"
)

// rig is a running cluster.
type rig struct {
	cfg   Config
	net   *Net
	procs map[string]*Proc
	logf  func(format string, args ...any)
	hc    *http.Client

	mu        sync.Mutex
	rigErrors []string // what the rig failed to do (rigError)

	disks *disks // the block managers' file systems
	// kvbmBase is each block manager's /metrics when the nemesis ended (written by
	// nemesis before it returns).
	kvbmBase map[string]map[string]*dto.MetricFamily
}

// Run builds the cluster, runs the load and the nemesis, settles, checks and writes
// Out/{records.jsonl,plan.txt,verdict.txt,timeline.svg,timeline.png,logs/}. The error is for a rig
// that could not run; a run that ran returns its verdict (Pass says whether it held).
func Run(ctx context.Context, cfg Config) (Verdict, error) {
	r := &rig{cfg: cfg, procs: map[string]*Proc{}, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	r.logf = func(format string, args ...any) { fmt.Fprintf(cfg.Log, "chaos: "+format+"\n", args...) }
	if err := os.MkdirAll(filepath.Join(cfg.Out, "logs"), 0o755); err != nil {
		return Verdict{}, err
	}
	plan, err := Plan(PlanConfig{Seed: cfg.Seed, Duration: cfg.Duration, Quiet: cfg.Quiet, MeanGap: cfg.MeanGap, Weights: cfg.Weights}, topology)
	if err != nil {
		return Verdict{}, err
	}
	if err := os.WriteFile(filepath.Join(cfg.Out, "plan.txt"), []byte(FormatPlan(plan)), 0o644); err != nil {
		return Verdict{}, err
	}
	load, err := r.workload()
	if err != nil {
		return Verdict{}, err
	}
	r.logf("seed %d: %d requests over %v, %d nemesis events; output in %s", cfg.Seed, len(load), cfg.Duration, len(plan), cfg.Out)
	if r.net, err = NewNet(ctx, cfg.Prefix, topology.Hosts()); err != nil {
		return Verdict{}, err
	}
	defer r.net.Close()
	if r.disks, err = mountDisks(cfg.Prefix, cfg.Out, kvbmNodes); err != nil {
		return Verdict{}, err
	}
	defer r.disks.Close() // once every process has stopped
	defer r.stopAll()
	ref, err := r.startReference()
	if err != nil {
		return Verdict{}, err
	}
	defer ref.stop()
	if err := r.start(ctx); err != nil {
		return Verdict{}, err
	}
	before := r.resources(ctx)

	origin := time.Now()
	r.logf("load started at %s (the records' times count from it)", origin.UTC().Format(time.RFC3339Nano))
	tl := newTimeline()
	executed := make(chan []Event, 1)
	go func() { executed <- r.nemesis(ctx, origin, plan, tl) }()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go r.sample(sampleCtx, origin, tl)
	recs := r.drive(ctx, origin, load, tl)
	events := <-executed
	if err := ctx.Err(); err != nil {
		stopSampling()
		return Verdict{}, fmt.Errorf("chaos: stopped after %.0f s of load: %w", time.Since(origin).Seconds(), err)
	}
	r.logf("load done: %d requests in %.0f s; settling", len(recs), time.Since(origin).Seconds())
	filled := map[string]bool{}
	for _, e := range events {
		if e.Kind == DiskFull {
			filled[e.Target] = true
		}
	}
	after := r.settle(ctx, before, filled)
	stopSampling()
	for _, p := range r.procs {
		for _, c := range p.Crashes() {
			after.Crashes = append(after.Crashes, c)
		}
	}
	r.mu.Lock()
	after.Rig = slices.Clone(r.rigErrors)
	r.mu.Unlock()
	if err := os.WriteFile(filepath.Join(cfg.Out, "events.txt"), []byte(FormatPlan(events)), 0o644); err != nil {
		return Verdict{}, err
	}
	if err := r.countMigrations(recs); err != nil {
		return Verdict{}, err
	}
	if err := r.writeRecords(recs); err != nil {
		return Verdict{}, err
	}
	refs, err := r.references(ctx, ref, load, recs)
	if err != nil {
		return Verdict{}, err
	}
	v := Check(recs, refs, events, DefaultWindows, cfg.MigrationLimit, after, GrowthBound)
	if err := r.write(v, tl); err != nil {
		return v, err
	}
	return v, nil
}

// GrowthBound: a process may end with 200 more goroutines or open files than it began
// with, or 1.5 times as many, whichever is larger.
var GrowthBound = Bound{Slack: 200, Factor: 1.5}

// workload reads the trace, cuts prompts and outputs, scales it to Rate and keeps the
// requests arriving within Duration, the model and the disconnects drawn by Seed.
func (r *rig) workload() ([]Request, error) {
	reqs, err := bench.ReadTraceFile(r.cfg.Trace, bench.DefaultBlockTokens, 0)
	if err != nil {
		return nil, err
	}
	if len(reqs) < 2 {
		return nil, fmt.Errorf("chaos: trace %s has %d requests", r.cfg.Trace, len(reqs))
	}
	span := reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	if err := bench.Scale(reqs, float64(len(reqs))/span.Seconds()/r.cfg.Rate); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x636c69656e74)) // "client"
	var out []Request
	// The trace is replayed again from its start when the load outlasts it, a mean gap
	// after its last request.
	span = reqs[len(reqs)-1].Arrival - reqs[0].Arrival
	cycle := span + span/time.Duration(len(reqs)-1)
	for i := 0; ; i++ {
		b := reqs[i%len(reqs)]
		at := b.Arrival - reqs[0].Arrival + time.Duration(i/len(reqs))*cycle
		if at >= r.cfg.Duration {
			break
		}
		toks, err := bench.Tokens(b, bench.DefaultBlockTokens)
		if err != nil {
			return nil, err
		}
		if len(toks) > r.cfg.MaxPrompt {
			toks = toks[:r.cfg.MaxPrompt]
		}
		q := Request{ID: i, At: at, Model: ModelAgg, Prompt: toks, MaxTokens: max(1, min(b.OutputLength, r.cfg.MaxTokens))}
		if rng.IntN(3) == 2 {
			q.Model = ModelPD
		}
		if rng.Float64() < r.cfg.Disconnect {
			q.DisconnectAfter = time.Duration(rng.Float64() * float64(time.Second))
		}
		out = append(out, q)
	}
	return out, nil
}

func (r *rig) url(host, port string) string { return "http://" + r.net.Addr(host) + ":" + port }

// start runs Consul, the frontends and the nodes and waits until both models have all
// their workers ready.
func (r *rig) start(ctx context.Context) error {
	logs := filepath.Join(r.cfg.Out, "logs")
	c := topology.Consul
	cip := r.net.Addr(c)
	r.procs[c] = NewProc(r.net, c, c, filepath.Join(logs, c+".log"), r.cfg.Consul, "agent", "-dev",
		"-node", "chaos-consul", "-bind", cip, "-client", cip, "-advertise", cip, "-http-port", consulPort,
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1", "-log-level", "warn")
	cluster := func(host string) []string {
		ip := r.net.Addr(host)
		return []string{"--discovery", "consul://" + cip + ":" + consulPort, "--member-host", ip,
			"--consul-ttl", "3s", "--consul-ttl-refresh", "500ms", "--log-format", "json"}
	}
	for _, f := range topology.Frontends {
		args := append([]string{"frontend", "--host", r.net.Addr(f), "--port", frontendPort,
			"--migration-limit", strconv.Itoa(r.cfg.MigrationLimit)}, cluster(f)...)
		r.procs[f] = NewProc(r.net, f, f, filepath.Join(logs, f+".log"), r.cfg.Bin, args...)
	}
	for _, n := range topology.Nodes {
		ip := r.net.Addr(n)
		args := append([]string{"node", "--node-id", n, "--engine-host", ip, "--http-host", ip, "--http-port", nodeHTTPPort,
			"--speedup-ratio", strconv.FormatFloat(r.cfg.SpeedupRatio, 'g', -1, 64), "--heartbeat", "500ms"}, cluster(n)...)
		args = append(args, nodeArgs[n]...)
		if slices.Contains(kvbmNodes, n) {
			args = append(append(args, kvbmNodeArgs...), "--kvbm-disk-dir", r.disks.blockDir(n))
		}
		r.procs[n] = NewProc(r.net, n, n, filepath.Join(logs, n+".log"), r.cfg.Bin, args...)
	}
	if err := r.procs[c].Start(); err != nil {
		return err
	}
	if err := r.waitFor(ctx, 30*time.Second, "Consul's leader", func() bool {
		b, err := r.get(ctx, r.url(c, consulPort)+"/v1/status/leader")
		return err == nil && len(strings.Trim(strings.TrimSpace(string(b)), `"`)) > 0
	}); err != nil {
		return err
	}
	for _, h := range append(append([]string{}, topology.Frontends...), topology.Nodes...) {
		if err := r.procs[h].Start(); err != nil {
			return err
		}
	}
	return r.waitFor(ctx, 120*time.Second, "every worker ready on every frontend", func() bool {
		for _, f := range topology.Frontends {
			ready := r.readyWorkers(ctx, f)
			for m, n := range wantReady {
				if ready[m] != n {
					return false
				}
			}
		}
		return true
	})
}

func (r *rig) waitFor(ctx context.Context, limit time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: no %s within %v (logs in %s)", what, limit, filepath.Join(r.cfg.Out, "logs"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func (r *rig) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return b, err
}

// metrics reads a host's /metrics into families (nil when it does not answer).
func (r *rig) metrics(ctx context.Context, url string) map[string]*dto.MetricFamily {
	b, err := r.get(ctx, url+"/metrics")
	if err != nil {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return nil
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// readyWorkers counts, per model, the workers a frontend's router lists as ready.
func (r *rig) readyWorkers(ctx context.Context, fe string) map[string]int {
	out := map[string]int{}
	fams := r.metrics(ctx, r.url(fe, frontendPort))
	if f := fams["turbine_router_worker_ready"]; f != nil {
		for _, m := range f.GetMetric() {
			if value(m) == 1 {
				out[label(m, "model")]++
			}
		}
	}
	return out
}

// resources reads every Turbine member's goroutines and open files, the client's idle
// connections closed first (a frontend would count their goroutines and descriptors).
func (r *rig) resources(ctx context.Context) map[string]float64 {
	r.hc.CloseIdleConnections()
	time.Sleep(500 * time.Millisecond)
	out := map[string]float64{}
	read := func(name, url string) {
		fams := r.metrics(ctx, url)
		for _, fam := range []string{"go_goroutines", "process_open_fds"} {
			if f := fams[fam]; f != nil && len(f.GetMetric()) > 0 {
				out[name+" "+fam] = value(f.GetMetric()[0])
			}
		}
	}
	for _, f := range topology.Frontends {
		read(f, r.url(f, frontendPort))
	}
	for _, n := range topology.Nodes {
		read(n, r.url(n, nodeHTTPPort))
	}
	return out
}

// drive sends the load: each request at its time to the frontends in turn, every
// request's record returned once all have ended.
func (r *rig) drive(ctx context.Context, origin time.Time, load []Request, tl *timeline) []Record {
	out := make([]Record, len(load))
	var wg sync.WaitGroup
	for i, q := range load {
		if d := time.Until(origin.Add(q.At)); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			wg.Wait()
			return out[:i]
		}
		fe := topology.Frontends[i%len(topology.Frontends)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := Send(ctx, r.hc, r.url(fe, frontendPort), fe, origin, q, r.cfg.RequestLimit)
			out[i] = rec
			tl.request(rec)
		}()
		if (i+1)%500 == 0 {
			r.logf("%d requests sent, %.0f s", i+1, time.Since(origin).Seconds())
		}
	}
	wg.Wait()
	return out
}

// nemesis carries out the plan and returns the events as carried out: each with the
// time it began and, for a kill, the time its process was started again (an event it
// could not carry out, such as an engine kill on a node whose engines are all
// restarting, is left out). Every event has ended when it returns, the network is whole
// and every process runs again. What the rig itself failed to do is in r.rigErrors.
func (r *rig) nemesis(ctx context.Context, origin time.Time, plan []Event, tl *timeline) []Event {
	var mu sync.Mutex  // held from the copy of active to the rules applied, so that they agree
	var active []Event // network events in force
	apply := func(change func()) {
		mu.Lock()
		defer mu.Unlock()
		change()
		if err := r.net.Apply(ctx, active, topology); err != nil {
			r.rigError("%v", err)
		}
	}
	var doneMu sync.Mutex
	var done []Event
	var wg sync.WaitGroup
	for _, e := range plan {
		if d := time.Until(origin.Add(e.At)); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		r.logf("nemesis %s", e)
		began := time.Since(origin)
		if e.Kind.Network() {
			apply(func() { active = append(active, e) })
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := r.act(ctx, e)
			if e.Kind.Network() {
				apply(func() { active = slices.DeleteFunc(active, func(x Event) bool { return x == e }) })
			}
			if !ok {
				return
			}
			x := e
			x.At, x.For = began, max(time.Since(origin)-began, e.For)
			tl.event(x)
			doneMu.Lock()
			done = append(done, x)
			doneMu.Unlock()
		}()
	}
	wg.Wait()
	apply(func() { active = nil })
	for _, h := range topology.Hosts() {
		if r.procs[h].Pid() == 0 && ctx.Err() == nil {
			r.rigError("%s was not running once the nemesis ended", h)
			if err := r.procs[h].Start(); err != nil {
				r.rigError("start %s again: %v", h, err)
			}
		}
	}
	slices.SortFunc(done, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	r.kvbmBase = map[string]map[string]*dto.MetricFamily{}
	for _, n := range kvbmNodes {
		for i := 0; i < 20 && ctx.Err() == nil; i++ { // a node just restarted may take a moment
			if fams := r.metrics(ctx, r.url(n, nodeHTTPPort)); fams != nil {
				r.kvbmBase[n] = fams
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return done
}

// act does event e (and waits out its For); false when there was nothing to act on.
func (r *rig) act(ctx context.Context, e Event) bool {
	p := r.procs[e.Target]
	wait := func() {
		select {
		case <-ctx.Done():
		case <-time.After(e.For):
		}
	}
	switch e.Kind {
	case KillEngine, SlowEngine:
		pids := p.Engines()
		if len(pids) == 0 {
			r.logf("nemesis: %s has no engine running: %s left out", e.Target, e.Kind)
			return false
		}
		pid := pids[e.Index%len(pids)]
		if e.Kind == KillEngine {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return true
		}
		end := time.Now().Add(e.For)
		for time.Now().Before(end) && ctx.Err() == nil {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			time.Sleep(100 * time.Millisecond)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			time.Sleep(100 * time.Millisecond)
		}
	case KillNode, KillFrontend, KillConsul:
		p.Kill()
		wait()
		if ctx.Err() != nil {
			return true
		}
		if err := p.Start(); err != nil {
			r.rigError("restart %s: %v", e.Target, err)
		}
	case Pause:
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			r.logf("nemesis: %v: pause left out", err)
			return false
		}
		wait()
		_ = p.Signal(syscall.SIGCONT)
	case DiskFull:
		errsBefore := make(chan string, 1)
		go func() { errsBefore <- r.kvbmErrors(ctx, e.Target) }()
		size, err := r.disks.fill(ctx, e.Target, time.Now().Add(e.For))
		if err != nil {
			r.rigError("%v", err)
		}
		errsAfter := r.kvbmErrors(ctx, e.Target)
		if err := r.disks.removeFiller(e.Target); err != nil {
			r.rigError("free %s's disk: %v", e.Target, err)
		}
		r.logf("nemesis: %s's block-manager disk was full (a filler of %d bytes at most); its block manager's errors %s before, %s after",
			e.Target, size, <-errsBefore, errsAfter)
	default:
		wait()
	}
	return true
}

// rigError records something the rig failed to do (it fails the run: the schedule was
// not carried out as planned).
func (r *rig) rigError(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.logf("rig: %s", msg)
	r.mu.Lock()
	r.rigErrors = append(r.rigErrors, msg)
	r.mu.Unlock()
}

// sample records the frontends' migrations each second for the timeline.
func (r *rig) sample(ctx context.Context, origin time.Time, tl *timeline) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := map[string]float64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, f := range topology.Frontends {
			fams := r.metrics(ctx, r.url(f, frontendPort))
			fam := fams["turbine_frontend_migrations_total"]
			if fam == nil {
				continue
			}
			var sum float64
			for _, m := range fam.GetMetric() {
				sum += value(m)
			}
			d := sum - last[f]
			if sum < last[f] { // a restarted frontend counts from 0 again
				d = sum
			}
			if d > 0 {
				tl.migrations(time.Since(origin), d)
			}
			last[f] = sum
		}
	}
}

// settle waits (Settle at most) until no request is held anywhere, every worker is
// ready again and the index agrees with the engines, then reads the resources. Each
// round reads every member's /metrics once and judges all three from that read.
func (r *rig) settle(ctx context.Context, before map[string]float64, filled map[string]bool) After {
	var a After
	deadline := time.Now().Add(r.cfg.Settle)
	var sc scrape
	for {
		sc = r.scrapeAll(ctx)
		a = After{Held: sc.held(), Members: sc.members(), Index: sc.index(), Kvbm: r.kvbmProblems(sc, filled), Growth: map[string][2]float64{}}
		clean := len(a.Members) == 0 && len(a.Index) == 0 && len(a.Kvbm) == 0
		for _, n := range a.Held {
			clean = clean && n == 0
		}
		if clean || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var lines []string
	for _, n := range kvbmNodes {
		lines = append(lines, KvbmSummary(n, sc.nodes[n], r.kvbmBase[n]))
		r.logf("block manager %s", lines[len(lines)-1])
	}
	if err := writeLines(filepath.Join(r.cfg.Out, "kvbm.txt"), lines); err != nil {
		r.rigError("write kvbm.txt: %v", err)
	}
	now := r.resources(ctx)
	for k, b := range before {
		if n, ok := now[k]; ok {
			a.Growth[k] = [2]float64{b, n}
		} else {
			a.Members = append(a.Members, fmt.Sprintf("%s not read after the run", k))
		}
	}
	return a
}

// kvbmProblems checks every block manager against sc, its disk directory and its
// figures when the nemesis ended (KvbmCheck).
func (r *rig) kvbmProblems(sc scrape, filled map[string]bool) []string {
	var out []string
	for _, n := range kvbmNodes {
		c := KvbmCheck{Node: n, After: sc.nodes[n], Base: r.kvbmBase[n], Filled: filled[n], HostCap: kvbmHostBytes, DiskCap: kvbmDiskBytes}
		c.Dir, c.DirErr = listDir(r.disks.blockDir(n))
		out = append(out, c.Problems()...)
	}
	return out
}

// kvbmErrors is node's turbine_kvbm_errors_total now, as text ("?" when it does not
// answer within a second), for the progress log.
func (r *rig) kvbmErrors(ctx context.Context, node string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, m := range r.metrics(ctx, r.url(node, nodeHTTPPort))["turbine_kvbm_errors_total"].GetMetric() {
		return strconv.FormatFloat(value(m), 'f', -1, 64)
	}
	return "?"
}

// scrape is one read of every member's /metrics (nil families: it did not answer).
type scrape struct {
	frontends, nodes map[string]map[string]*dto.MetricFamily
}

func (r *rig) scrapeAll(ctx context.Context) scrape {
	sc := scrape{frontends: map[string]map[string]*dto.MetricFamily{}, nodes: map[string]map[string]*dto.MetricFamily{}}
	for _, f := range topology.Frontends {
		sc.frontends[f] = r.metrics(ctx, r.url(f, frontendPort))
	}
	for _, n := range topology.Nodes {
		sc.nodes[n] = r.metrics(ctx, r.url(n, nodeHTTPPort))
	}
	return sc
}

// workers are a node's expected worker ids (node-id and index, as the node names them).
func workers(node string) []string {
	n := 0
	for i, a := range nodeArgs[node] {
		if a == "--workers" {
			n, _ = strconv.Atoi(nodeArgs[node][i+1])
		}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", node, i)
	}
	return out
}

// members lists, per frontend and model, a router that does not list every worker as
// ready.
func (sc scrape) members() []string {
	var out []string
	for _, f := range topology.Frontends {
		ready := map[string]int{}
		if fam := sc.frontends[f]["turbine_router_worker_ready"]; fam != nil {
			for _, m := range fam.GetMetric() {
				if value(m) == 1 {
					ready[label(m, "model")]++
				}
			}
		}
		for _, m := range slices.Sorted(maps.Keys(wantReady)) {
			if ready[m] != wantReady[m] {
				out = append(out, fmt.Sprintf("%s lists %d ready workers of %s, want %d", f, ready[m], m, wantReady[m]))
			}
		}
	}
	return out
}

// held is the requests and blocks still held: the frontends' in-flight requests and
// their routers' per-worker active requests, blocks and tokens, the engines' running
// requests and pinned and active blocks. A member that did not answer, or an engine its
// node did not scrape, counts 1 (nothing read is not nothing held).
func (sc scrape) held() map[string]float64 {
	out := map[string]float64{}
	add := func(host string, fams map[string]*dto.MetricFamily, name string) {
		for _, m := range fams[name].GetMetric() {
			key := host + " " + name
			if w := label(m, "worker"); w != "" {
				key += " " + w
			}
			out[key] += value(m)
		}
	}
	for _, f := range topology.Frontends {
		fams := sc.frontends[f]
		if fams == nil {
			out[f+" /metrics unanswered"] = 1
			continue
		}
		for _, name := range []string{"turbine_frontend_inflight_requests", "turbine_router_worker_active_requests",
			"turbine_router_worker_active_decode_blocks", "turbine_router_worker_active_prefill_tokens", "turbine_router_worker_engine_running"} {
			add(f, fams, name)
		}
	}
	for _, n := range topology.Nodes {
		fams := sc.nodes[n]
		if fams == nil {
			out[n+" /metrics unanswered"] = 1
			continue
		}
		up := map[string]bool{}
		for _, m := range fams["turbine_node_engine_up"].GetMetric() {
			up[label(m, "worker")] = value(m) == 1
		}
		for _, w := range workers(n) {
			if !up[w] {
				out[n+" engine of "+w+" not scraped"] = 1
			}
		}
		for _, name := range []string{"vllm:num_requests_running", "turbine_mocker_kv_pinned_blocks", "turbine_mocker_kv_active_blocks", "turbine_kvbm_pinned_blocks"} {
			add(n, fams, name)
		}
	}
	return out
}

// index compares, per expected worker, the blocks each frontend's router index holds
// for it with the blocks its engine holds once no request runs
// (turbine_mocker_kv_cached_blocks plus _active_blocks): a difference is a KV event
// lost, applied twice or never cleared. A worker missing on either side is a
// difference too. One description per difference.
func (sc scrape) index() []string {
	engine := map[string]float64{}
	seen := map[string]bool{}
	for _, n := range topology.Nodes {
		for _, name := range []string{"turbine_mocker_kv_cached_blocks", "turbine_mocker_kv_active_blocks"} {
			for _, m := range sc.nodes[n][name].GetMetric() {
				engine[label(m, "worker")] += value(m)
				seen[label(m, "worker")] = true
			}
		}
	}
	var out []string
	for _, f := range topology.Frontends {
		router := map[string]float64{}
		listed := map[string]bool{}
		for _, m := range sc.frontends[f]["turbine_router_worker_indexed_blocks"].GetMetric() {
			router[label(m, "worker")] = value(m)
			listed[label(m, "worker")] = true
		}
		for _, n := range topology.Nodes {
			for _, w := range workers(n) {
				switch {
				case !seen[w]:
					out = append(out, fmt.Sprintf("the engine of worker %s reported no blocks", w))
				case !listed[w]:
					out = append(out, fmt.Sprintf("%s's router lists no blocks of worker %s, whose engine holds %g", f, w, engine[w]))
				case router[w] != engine[w]:
					out = append(out, fmt.Sprintf("%s's router holds %g blocks of worker %s, whose engine holds %g", f, router[w], w, engine[w]))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// reference is an undisturbed `turbine serve` on loopback with the nodes' engine
// settings: the mock engine's output is a function of the prompt alone
// (docs/reference.md §7), so what it answers is what each request is owed.
type reference struct {
	base, model string
	stop        func()
}

// startReference starts the reference server (before the load, so that a reference
// that cannot start fails the run at once).
func (r *rig) startReference() (*reference, error) {
	f, err := os.Create(filepath.Join(r.cfg.Out, "logs", "reference.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.cfg.Bin, "serve", "--port", "0", "--workers", "2", "--log-format", "json",
		"--speedup-ratio", "1000")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = io.MultiWriter(f, pw), io.MultiWriter(f, pw)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		pw.Close()
		f.Close()
	}
	found := make(chan reference, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			var l struct {
				Message, URL, Model string
			}
			if !sent && json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "turbine serving" {
				found <- reference{base: l.URL, model: l.Model}
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr) // a line too long for the scanner must not block the server
	}()
	select {
	case ref := <-found:
		ref.stop = stop
		return &ref, nil
	case <-time.After(60 * time.Second):
		stop()
		return nil, errors.New("chaos: the reference server did not start in 60 s (logs/reference.log)")
	}
}

// references asks the reference server for the tokens of every request that has
// tokens to compare (nil for the others).
func (r *rig) references(ctx context.Context, ref *reference, load []Request, recs []Record) (map[int][]uint32, error) {
	refs := map[int][]uint32{}
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var firstErr error
	for _, rec := range recs {
		q := load[rec.ID]
		if len(rec.Tokens) == 0 && !(rec.Status == 200 && rec.Done) {
			mu.Lock()
			refs[rec.ID] = nil // nothing to compare
			mu.Unlock()
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			q.Model, q.DisconnectAfter = ref.model, 0
			var got Record
			for range 3 { // the reference is undisturbed: a failure here is the rig's
				got = Send(ctx, r.hc, ref.base, "reference", time.Now(), q, 5*time.Minute)
				if got.Status == 200 && got.Done && got.ErrCode == "" && got.Transport == "" && len(got.Tokens) == q.MaxTokens {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if got.Status != 200 || !got.Done || got.ErrCode != "" || got.Transport != "" || len(got.Tokens) != q.MaxTokens {
				if firstErr == nil {
					firstErr = fmt.Errorf("chaos: the reference server answered request %d with %+v", rec.ID, got)
				}
				return
			}
			refs[rec.ID] = got.Tokens
		}()
	}
	wg.Wait()
	return refs, firstErr
}

// stopAll ends every process (SIGTERM, then SIGKILL).
func (r *rig) stopAll() {
	var wg sync.WaitGroup
	for _, p := range r.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(10 * time.Second) }()
	}
	wg.Wait()
}

// countMigrations fills in each record's migrations from the frontends' logs (every
// life of each, appended to one file).
func (r *rig) countMigrations(recs []Record) error {
	var logs []io.Reader
	for _, f := range topology.Frontends {
		lf, err := os.Open(filepath.Join(r.cfg.Out, "logs", f+".log"))
		if err != nil {
			return err
		}
		defer lf.Close()
		logs = append(logs, lf)
	}
	n, err := Migrations(logs...)
	if err != nil {
		return err
	}
	for i := range recs {
		recs[i].Migrations = n[RequestID(recs[i].ID)]
	}
	return nil
}

// writeRecords stores the client's records, one JSON object per line.
func (r *rig) writeRecords(recs []Record) error {
	f, err := os.Create(filepath.Join(r.cfg.Out, "records.jsonl"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, rec := range recs {
		if err := enc.Encode(rec); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// write stores the verdict and the timeline plot.
func (r *rig) write(v Verdict, tl *timeline) error {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, duration %v\n%s\n%s\n", r.cfg.Seed, r.cfg.Duration, v.Line(), v.Detail())
	for _, p := range v.Problems {
		b.WriteString(p + "\n")
	}
	if err := os.WriteFile(filepath.Join(r.cfg.Out, "verdict.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for _, format := range []string{"svg", "png"} {
		pf, err := os.Create(filepath.Join(r.cfg.Out, "timeline."+format))
		if err != nil {
			return err
		}
		if err := tl.plot(pf, r.cfg.Duration+r.cfg.Settle, format); err != nil {
			pf.Close()
			return err
		}
		if err := pf.Close(); err != nil {
			return err
		}
	}
	return nil
}
