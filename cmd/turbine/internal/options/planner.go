package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/actors/frontend"
	plannerkind "github.com/turbine-llm/turbine/actors/planner"
	"github.com/turbine-llm/turbine/messages"
	core "github.com/turbine-llm/turbine/planner"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The planner's flags (docs/reference.md §27.7), shared by `turbine serve --planner` and
// `turbine planner`: the mode, the targets, the GPU budget, the minimum per pool, the
// period, the predictor, the profile, and the connector with its own flags. Defaults are
// the planner core's (planner.DefaultConfig) and the connectors' (actors/planner).

// The connectors' names (--connector).
const (
	ConnectorLocal      = "local"
	ConnectorKubernetes = "kubernetes"
	ConnectorVirtual    = "virtual"
)

// Planner are the planner's flags.
type Planner struct {
	// Mode is "load" or "sla"; "" (serve's default) runs no planner.
	Mode string
	// TTFTTargetMs and ITLTargetMs: the p90 targets in milliseconds.
	TTFTTargetMs, ITLTargetMs float64
	// GPUBudget: the GPUs of every pool of a model together; MinWorkers: the least each
	// pool keeps.
	GPUBudget, MinWorkers int
	// Interval: the mode's decision period; 0 takes the mode's default
	// (planner.DefaultInterval in SLA mode, DefaultLoadInterval in load mode).
	Interval time.Duration
	// Predictor names the load predictor (planner.PredictorNames).
	Predictor string
	// ProfilePath is the engine profile (`turbine profile`'s file): required in SLA mode.
	ProfilePath string
	// Disaggregated: the pools are prefill and decode (`turbine planner --disaggregated`;
	// serve derives it from its layout).
	Disaggregated bool
	// TensorParallelSize: GPUs per worker of every pool (`turbine planner
	// --tensor-parallel-size`; serve sets it from --mocker-tensor-parallel-size, the GPUs
	// each mock worker plays, 1 when not given). In SLA mode the profile must have an
	// entry of this size.
	TensorParallelSize int
	// Connector is local, kubernetes or virtual.
	Connector string
	// Local connector: how long a removed worker's requests run before the rest move, and
	// the workers one node agent runs at most.
	DrainTimeout      time.Duration
	MaxWorkersPerNode int
	// Kubernetes connector: the namespace, each pool's workload ("deployment/NAME" or
	// "statefulset/NAME"), the kubeconfig file ("" in a pod: the pod's service account).
	KubeNamespace, KubeAggregated, KubePrefill, KubeDecode, Kubeconfig string
	// Virtual connector: the decisions' file or webhook.
	VirtualFile, VirtualWebhook string
	// VirtualInitial: the workers per pool the virtual connector reports before its first
	// decision (serve sets it to its boot layout; nil: none).
	VirtualInitial map[core.Pool]int

	// command is the command the flags were registered for ("serve" or "planner"): the
	// mode's flag is --planner on serve, --mode on turbine planner.
	command string
	// profile is ProfilePath loaded by Validate.
	profile *core.Profile
}

// DefaultPlanner returns the planner's defaults: no planner (serve's --planner empty),
// the core's targets, budget, minimum, periods and predictor, the local connector.
func DefaultPlanner() Planner {
	d := core.DefaultConfig()
	return Planner{TTFTTargetMs: d.TTFTTargetMs, ITLTargetMs: d.ITLTargetMs, GPUBudget: d.GPUBudget,
		MinWorkers: d.MinWorkers, Predictor: d.Predictor, TensorParallelSize: 1, Connector: ConnectorLocal,
		DrainTimeout: plannerkind.DefaultDrainGrace, MaxWorkersPerNode: plannerkind.DefaultMaxWorkersPerNode}
}

// modeFlag is the mode's flag name on the command.
func (o *Planner) modeFlag() string {
	if o.command == "planner" {
		return "--mode"
	}
	return "--planner"
}

// tpFlag names the flag TensorParallelSize comes from on the command.
func (o *Planner) tpFlag() string {
	if o.command == "planner" {
		return "--tensor-parallel-size"
	}
	return "--mocker-tensor-parallel-size"
}

// Flags registers the planner's flags of command ("serve" or "planner") on fs.
func (o *Planner) Flags(fs *flag.FlagSet, command string) {
	o.command = command
	d := core.DefaultConfig()
	if command == "planner" {
		fs.StringVar(&o.Mode, "mode", o.Mode, "how the planner decides: load (from the workers' KV usage and queued prefill tokens, no profile) or sla (from the frontends' TTFT and ITL against the targets, with --planner-profile)")
		fs.BoolVar(&o.Disaggregated, "disaggregated", o.Disaggregated, "plan a prefill and a decode pool (disaggregated serving) instead of one aggregated pool")
		fs.IntVar(&o.TensorParallelSize, "tensor-parallel-size", o.TensorParallelSize, "GPUs of each worker of every pool (the profile must have this size in SLA mode)")
		fs.StringVar(&o.KubeNamespace, "kube-namespace", o.KubeNamespace, "--connector kubernetes: the namespace of the workloads")
		fs.StringVar(&o.KubeAggregated, "kube-aggregated", o.KubeAggregated, "--connector kubernetes: the workload of the aggregated pool, deployment/NAME or statefulset/NAME")
		fs.StringVar(&o.KubePrefill, "kube-prefill", o.KubePrefill, "--connector kubernetes: the workload of the prefill pool (with --disaggregated)")
		fs.StringVar(&o.KubeDecode, "kube-decode", o.KubeDecode, "--connector kubernetes: the workload of the decode pool (with --disaggregated)")
		fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "--connector kubernetes: a kubeconfig `file` (default: $KUBECONFIG, else the pod's service account)")
	} else {
		fs.StringVar(&o.Mode, "planner", o.Mode, "run the planner, which starts and drains workers to fit the load: load (from the workers' load) or sla (TTFT and ITL targets, with --planner-profile); empty: off")
	}
	fs.Float64Var(&o.TTFTTargetMs, "ttft-target", o.TTFTTargetMs, "planner: p90 time to first token target in `ms`")
	fs.Float64Var(&o.ITLTargetMs, "itl-target", o.ITLTargetMs, "planner: p90 inter-token latency target in `ms`")
	fs.IntVar(&o.GPUBudget, "gpu-budget", o.GPUBudget, "planner: GPUs every pool of a model may use together (a mock worker without a GPU counts 1)")
	fs.IntVar(&o.MinWorkers, "min-workers", o.MinWorkers, "planner: the least workers each pool keeps")
	fs.DurationVar(&o.Interval, "planner-interval", o.Interval,
		fmt.Sprintf("planner: how often it decides (0: %v in sla mode, %v in load mode)", d.Interval, d.LoadInterval))
	fs.StringVar(&o.Predictor, "planner-predictor", o.Predictor, "planner: the load predictor of sla mode: "+strings.Join(core.PredictorNames(), ", "))
	fs.StringVar(&o.ProfilePath, "planner-profile", o.ProfilePath, "planner: the engine profile `file` (turbine profile) sla mode sizes the pools with")
	connectors := ConnectorLocal + " (node agents start and drain workers) or " + ConnectorVirtual + " (decisions written to --virtual-file or --virtual-webhook)"
	if command == "planner" {
		connectors = ConnectorLocal + " (node agents start and drain workers), " + ConnectorKubernetes + " (scales the --kube-* workloads) or " + ConnectorVirtual + " (decisions written to --virtual-file or --virtual-webhook)"
	}
	fs.StringVar(&o.Connector, "connector", o.Connector, "planner: how decisions change the fleet: "+connectors)
	fs.DurationVar(&o.DrainTimeout, "planner-drain-timeout", o.DrainTimeout, "planner, --connector local: how long the requests of a worker being removed may run before the rest move to other workers")
	fs.IntVar(&o.MaxWorkersPerNode, "max-workers-per-node", o.MaxWorkersPerNode, "planner, --connector local: the workers one node runs at most (mock workers on a machine without GPUs)")
	fs.StringVar(&o.VirtualFile, "virtual-file", o.VirtualFile, "planner, --connector virtual: append each decision to this `file` as a JSON line")
	fs.StringVar(&o.VirtualWebhook, "virtual-webhook", o.VirtualWebhook, "planner, --connector virtual: POST each decision to this `URL` as JSON")
}

// Enabled reports whether a planner runs (a mode is given).
func (o *Planner) Enabled() bool { return o.Mode != "" }

// Validate checks the planner's flags (none when no planner runs on serve), loads the
// profile, and checks the whole planner configuration as the core will; errors name the
// flag.
func (o *Planner) Validate() error {
	if !o.Enabled() {
		if o.command == "planner" {
			return errors.New("--mode: empty, want load or sla")
		}
		return nil
	}
	mode, err := core.ParseMode(o.Mode)
	if err != nil {
		return fmt.Errorf("%s %q: want load or sla", o.modeFlag(), o.Mode)
	}
	target := func(name string, v float64) error {
		if !(v > 0) || v > 3600e3 || math.IsInf(v, 0) {
			return fmt.Errorf("%s %v: want a number of milliseconds above 0, at most 3600000", name, v)
		}
		return nil
	}
	if err := target("--ttft-target", o.TTFTTargetMs); err != nil {
		return err
	}
	if err := target("--itl-target", o.ITLTargetMs); err != nil {
		return err
	}
	switch {
	case o.GPUBudget < 1 || o.GPUBudget > 1<<16:
		return fmt.Errorf("--gpu-budget %d: want 1..65536", o.GPUBudget)
	case o.MinWorkers < 1 || o.MinWorkers > 256:
		return fmt.Errorf("--min-workers %d: want 1..256", o.MinWorkers)
	case o.Interval < 0 || o.Interval > 0 && o.Interval < 100*time.Millisecond:
		return fmt.Errorf("--planner-interval %v: want 0 (the mode's default) or at least 100ms", o.Interval)
	case !slices.Contains(core.PredictorNames(), o.Predictor):
		return fmt.Errorf("--planner-predictor %q: want one of %s", o.Predictor, strings.Join(core.PredictorNames(), ", "))
	case o.TensorParallelSize < 1 || o.TensorParallelSize > 64:
		return fmt.Errorf("%s %d: want 1..64", o.tpFlag(), o.TensorParallelSize)
	case mode == core.ModeSLA && o.ProfilePath == "":
		return fmt.Errorf("%s sla needs --planner-profile (a file written by turbine profile)", o.modeFlag())
	case o.DrainTimeout < 0:
		return fmt.Errorf("--planner-drain-timeout %v: must be ≥ 0", o.DrainTimeout)
	case o.MaxWorkersPerNode < 1 || o.MaxWorkersPerNode > 256:
		return fmt.Errorf("--max-workers-per-node %d: want 1..256", o.MaxWorkersPerNode)
	}
	if err := o.validateConnector(); err != nil {
		return err
	}
	o.profile = nil
	if o.ProfilePath != "" {
		p, err := core.LoadProfile(o.ProfilePath)
		if err != nil {
			return fmt.Errorf("--planner-profile: %w", err)
		}
		if _, err := p.ForTP(o.TensorParallelSize); err != nil && mode == core.ModeSLA {
			return fmt.Errorf("--planner-profile %s has no entry for %s %d (it has tensor-parallel sizes %v): "+
				"profile the engines at that size (turbine profile --tensor-parallel-sizes %d; with --url, --tensor-parallel-size %d) or use a size the profile has",
				o.ProfilePath, o.tpFlag(), o.TensorParallelSize, p.TensorParallelSizes(), o.TensorParallelSize, o.TensorParallelSize)
		}
		o.profile = p
	}
	if _, err := core.New(o.Core(o.Disaggregated)); err != nil {
		return o.flagError(err)
	}
	return nil
}

// validateConnector checks --connector and the flags of the one chosen.
func (o *Planner) validateConnector() error {
	switch o.Connector {
	case ConnectorLocal:
	case ConnectorVirtual:
		if (o.VirtualFile == "") == (o.VirtualWebhook == "") {
			return errors.New("--connector virtual: give exactly one of --virtual-file and --virtual-webhook")
		}
	case ConnectorKubernetes:
		if o.command != "planner" {
			return fmt.Errorf("--connector kubernetes: turbine %s runs its own workers; use turbine planner in the cluster", o.command)
		}
		if o.KubeNamespace == "" {
			return errors.New("--connector kubernetes needs --kube-namespace")
		}
		pools, err := o.kubePools()
		if err != nil {
			return err
		}
		if len(pools) == 0 {
			if o.Disaggregated {
				return errors.New("--connector kubernetes --disaggregated needs --kube-prefill and --kube-decode")
			}
			return errors.New("--connector kubernetes needs --kube-aggregated")
		}
	default:
		return fmt.Errorf("--connector %q: want local, kubernetes or virtual", o.Connector)
	}
	return nil
}

// kubePools maps the pools in use to their workloads (--kube-*). Errors name the flag of
// a workload that does not parse, or one given for a pool not in use.
func (o *Planner) kubePools() (map[core.Pool]plannerkind.Workload, error) {
	pools := map[core.Pool]plannerkind.Workload{}
	for _, f := range []struct {
		flag, value string
		pool        core.Pool
		inUse       bool
	}{{"--kube-aggregated", o.KubeAggregated, core.PoolAggregated, !o.Disaggregated},
		{"--kube-prefill", o.KubePrefill, core.PoolPrefill, o.Disaggregated},
		{"--kube-decode", o.KubeDecode, core.PoolDecode, o.Disaggregated}} {
		if f.value == "" {
			continue
		}
		if !f.inUse {
			return nil, fmt.Errorf("%s %q: that pool is not planned (--disaggregated %v)", f.flag, f.value, o.Disaggregated)
		}
		w, err := plannerkind.ParseWorkload(f.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
		pools[f.pool] = w
	}
	if o.Disaggregated && len(pools) == 1 {
		return nil, errors.New("--connector kubernetes --disaggregated needs both --kube-prefill and --kube-decode")
	}
	return pools, nil
}

// plannerFlags names the flag of each planner.Config field, for the core's errors
// (GPUsPerEngine: the command's tpFlag).
var plannerFlags = [][2]string{
	{"TTFTTargetMs", "--ttft-target"}, {"ITLTargetMs", "--itl-target"}, {"GPUBudget", "--gpu-budget"},
	{"MinWorkers", "--min-workers"}, {"LoadInterval", "--planner-interval"}, {"Interval", "--planner-interval"},
	{"Predictor", "--planner-predictor"}, {"Profile", "--planner-profile"},
}

// flagError rewrites the core's field names in err into flag names.
func (o *Planner) flagError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "planner: ")
	for _, f := range append(plannerFlags, [2]string{"GPUsPerEngine", o.tpFlag()}) {
		msg = strings.ReplaceAll(msg, f[0], f[1])
	}
	return errors.New(msg)
}

// CheckStartWorkers checks that workers started at boot (serve's layout, named by the
// flags that set it, e.g. "--workers 4") fit --gpu-budget at TensorParallelSize GPUs
// each: a planner given more would drain the surplus at once. nil without a planner.
func (o *Planner) CheckStartWorkers(workers int, flags string) error {
	if !o.Enabled() {
		return nil
	}
	tp := max(o.TensorParallelSize, 1)
	if gpus := workers * tp; gpus > o.GPUBudget {
		each := "1 GPU each"
		if tp > 1 {
			each = fmt.Sprintf("%d GPUs each (%s %d)", tp, o.tpFlag(), tp)
		}
		return fmt.Errorf("%s: %d workers × %s = %d GPUs, over --gpu-budget %d: "+
			"start at most %d workers (the planner adds more as the load needs them) or raise --gpu-budget",
			flags, workers, each, gpus, o.GPUBudget, o.GPUBudget/tp)
	}
	return nil
}

// Core returns the planner core's configuration of these flags, planning disaggregated
// (prefill and decode) or aggregated pools. Call it after Validate (it carries the loaded
// profile).
func (o *Planner) Core(disaggregated bool) core.Config {
	mode, _ := core.ParseMode(o.Mode)
	c := core.DefaultConfig()
	c.Mode, c.TTFTTargetMs, c.ITLTargetMs = mode, o.TTFTTargetMs, o.ITLTargetMs
	c.GPUBudget, c.MinWorkers, c.Predictor = o.GPUBudget, o.MinWorkers, o.Predictor
	c.Disaggregated, c.Profile = disaggregated, o.profile
	if o.Interval > 0 {
		if mode == core.ModeSLA {
			c.Interval = o.Interval
		} else {
			c.LoadInterval = o.Interval
		}
	}
	for _, p := range core.Pools {
		c.GPUsPerEngine[p] = o.TensorParallelSize
	}
	return c
}

// Period is the planner's decision period.
func (o *Planner) Period() time.Duration {
	c := o.Core(o.Disaggregated)
	if c.Mode == core.ModeSLA {
		return c.Interval
	}
	return c.LoadInterval
}

// PlannerMember is what a cluster member needs to host the planner: its kind, and Bind,
// to call with the cluster of every member started (the first and each one that replaces
// a lost member) before the member serves; Close releases the connector's file; Stop
// (at shutdown, before the workers drain) makes the local connector refuse every later
// step, and returns once a step in progress has been asked for, so that no worker starts
// while the process drains (the other connectors start no worker of this process).
type PlannerMember struct {
	Kind      *pcluster.Kind
	Connector string
	Bind      func(c *pcluster.Cluster)
	Close     func() error
	Stop      func()
}

// Member builds the Planner kind of these flags, planning disaggregated or aggregated
// pools, with its connector: local (node agents on the member's cluster; it needs Bind),
// kubernetes (the kubeconfig's or the pod's cluster) or virtual. Errors: the connector's.
func (o *Planner) Member(disaggregated bool, log zerolog.Logger) (*PlannerMember, error) {
	var cur atomic.Pointer[pcluster.Cluster]
	router := func(model string) *messages.RouterGrainClient {
		c := cur.Load()
		if c == nil {
			return nil
		}
		return messages.GetRouterGrainClient(c, model)
	}
	m := &PlannerMember{Connector: o.Connector, Bind: func(c *pcluster.Cluster) { cur.Store(c) }, Close: func() error { return nil }, Stop: func() {}}
	var conn plannerkind.Connector
	switch o.Connector {
	case ConnectorLocal:
		gpe := map[core.Pool]int{}
		for _, p := range core.Pools {
			gpe[p] = o.TensorParallelSize
		}
		lc := plannerkind.LocalConfig{Router: router, GPUsPerEngine: gpe, MaxWorkersPerNode: o.MaxWorkersPerNode,
			DrainGrace: o.DrainTimeout, Logger: log}
		local := &memberLocal{}
		m.Stop = local.stop
		m.Bind = func(c *pcluster.Cluster) {
			cur.Store(c)
			l, err := plannerkind.NewLocal(c, lc)
			if err != nil { // LocalConfig was checked by Validate: only a nil cluster fails
				log.Error().Err(err).Msg("planner: local connector")
				return
			}
			local.cur.Store(l)
		}
		conn = local
	case ConnectorKubernetes:
		cs, err := o.kubeClient()
		if err != nil {
			return nil, err
		}
		pools, err := o.kubePools()
		if err != nil {
			return nil, err
		}
		if conn, err = plannerkind.NewKubernetes(cs, plannerkind.KubeConfig{Namespace: o.KubeNamespace, Pools: pools}); err != nil {
			return nil, err
		}
	case ConnectorVirtual:
		v, err := plannerkind.NewVirtual(plannerkind.VirtualConfig{File: o.VirtualFile, WebhookURL: o.VirtualWebhook, Initial: o.VirtualInitial})
		if err != nil {
			return nil, fmt.Errorf("--connector virtual: %w", err)
		}
		conn, m.Close = v, v.Close
	default:
		return nil, fmt.Errorf("--connector %q: want local, kubernetes or virtual", o.Connector)
	}
	m.Kind = plannerkind.Kind(plannerkind.Config{Planner: o.Core(disaggregated), Connector: conn, Router: router, Logger: log})
	return m, nil
}

// kubeClient connects to the Kubernetes API: --kubeconfig, else $KUBECONFIG or
// ~/.kube/config when present, else the pod's service account.
func (o *Planner) kubeClient() (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil && o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--connector kubernetes: no Kubernetes API (--kubeconfig, $KUBECONFIG, ~/.kube/config or the pod's service account): %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--connector kubernetes: %w", err)
	}
	return cs, nil
}

// memberLocal is the local connector of the member now serving (it reaches the node
// agents through its member's cluster, which a lost member's replacement changes).
// After stop it refuses every Scale (errPlannerStopped).
type memberLocal struct {
	cur atomic.Pointer[plannerkind.Local]
	// mu: Scale holds it shared while it asks for steps; stop holds it alone.
	mu      sync.RWMutex
	stopped bool
}

var (
	errNoMember       = errors.New("planner: local connector: the member has not joined the cluster yet")
	errPlannerStopped = errors.New("planner: local connector: stopped (the process is shutting down): no worker is started or stopped")
)

// stop makes every later Scale fail with errPlannerStopped; it returns once a Scale in
// progress has asked for its steps, so no worker is asked for after it returns.
func (m *memberLocal) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
}

func (m *memberLocal) Name() string { return ConnectorLocal }

func (m *memberLocal) Fleet(ctx context.Context, model string) (core.Fleet, error) {
	l := m.cur.Load()
	if l == nil {
		return core.Fleet{}, errNoMember
	}
	return l.Fleet(ctx, model)
}

func (m *memberLocal) Scale(ctx context.Context, model string, target map[core.Pool]int) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.stopped {
		return errPlannerStopped
	}
	l := m.cur.Load()
	if l == nil {
		return errNoMember
	}
	return l.Scale(ctx, model, target)
}

// PlannerReports are the frontend's planner report flags (serve, frontend).
type PlannerReports struct {
	// Reports: "auto" (while a member hosts the planner), "on" or "off" (turbine
	// frontend's --planner-reports; serve reports when it runs the planner).
	Reports string
	// Interval is the reports' period.
	Interval time.Duration
}

// DefaultPlannerReports returns auto, every frontend.DefaultPlannerReportInterval.
func DefaultPlannerReports() PlannerReports {
	return PlannerReports{Reports: frontend.PlannerReportsAuto.String(), Interval: frontend.DefaultPlannerReportInterval}
}

// Flags registers --planner-report-interval, and --planner-reports when withMode (turbine
// frontend).
func (o *PlannerReports) Flags(fs *flag.FlagSet, withMode bool) {
	if withMode {
		fs.StringVar(&o.Reports, "planner-reports", o.Reports, "report this frontend's TTFT, ITL, queue and token counts to the planner: auto (while a planner runs in the cluster), on or off")
	}
	fs.DurationVar(&o.Interval, "planner-report-interval", o.Interval, "how often this frontend reports its measurements to the planner")
}

// Validate checks the report flags; errors name the flag.
func (o *PlannerReports) Validate() error {
	if _, err := frontend.ParsePlannerReports(o.Reports); err != nil {
		return fmt.Errorf("--planner-reports %q: want auto, on or off", o.Reports)
	}
	if o.Interval < 10*time.Millisecond || o.Interval > time.Hour {
		return fmt.Errorf("--planner-report-interval %v: want 10ms..1h", o.Interval)
	}
	return nil
}

// Mode is --planner-reports as the frontend's setting.
func (o *PlannerReports) Mode() frontend.PlannerReports {
	r, _ := frontend.ParsePlannerReports(o.Reports)
	return r
}
