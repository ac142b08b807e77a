package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is what one nemesis event does.
type Kind int

// The nemesis's kinds. A process event (kill, pause, slow) acts on one process; a
// network event changes the rules of one or more hosts and is undone when it ends; a
// disk event fills one node's block-manager file system and frees it when it ends.
const (
	KillEngine      Kind = iota // kill -9 one engine of a node; its supervisor restarts it
	SlowEngine                  // an engine stopped and continued (SIGSTOP/SIGCONT) every 100 ms for For: a slow engine
	KillNode                    // kill -9 a node agent (its engines die with it); restarted after For
	KillFrontend                // kill -9 a frontend; restarted after For
	KillConsul                  // kill -9 the Consul agent; restarted after For (a dev agent restarts empty)
	Pause                       // SIGSTOP a node agent or a frontend, SIGCONT after For
	IsolateNode                 // a node cannot reach the frontends, nor they it, for For
	IsolateConsul               // a frontend cannot reach Consul, nor Consul it, for For
	Split                       // the cluster split in halves for For (Consul and the first frontend on one side)
	SplitKeepConsul             // the cluster split in halves for For, Consul reachable from both (each half still passes its checks)
	DropOneWay                  // packets from Target to Peer dropped (the other way passes) for For
	Lossy                       // Target's link loses 5 % of its packets and is capped at LossyRate for For
	DiskFull                    // the file system of Target's block-manager disk tier filled for For, then freed
	numKinds
)

var kindNames = [numKinds]string{
	"kill-engine", "slow-engine", "kill-node", "kill-frontend", "kill-consul", "pause",
	"isolate-node", "isolate-consul", "split", "split-keep-consul", "drop-one-way", "lossy", "disk-full",
}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("kind(%d)", int(k))
	}
	return kindNames[k]
}

// MarshalText writes k's name (JSON fixtures and files name kinds, not numbers).
func (k Kind) MarshalText() ([]byte, error) {
	if k < 0 || k >= numKinds {
		return nil, fmt.Errorf("chaos: no nemesis kind %d", int(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a name MarshalText wrote.
func (k *Kind) UnmarshalText(b []byte) error {
	x, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = x
	return nil
}

// ParseWeights reads "kind=weight,…" (Kind.String names, weights ≥ 0) over DefaultWeights:
// the kinds it does not name keep their default weight. "" gives DefaultWeights.
func ParseWeights(s string) ([]float64, error) {
	w := slices.Clone(DefaultWeights)
	if strings.TrimSpace(s) == "" {
		return w, nil
	}
	named := map[Kind]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("chaos: weight %q: want kind=weight", part)
		}
		k, err := ParseKind(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		if named[k] {
			return nil, fmt.Errorf("chaos: weight of %s given twice", k)
		}
		named[k] = true
		x, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("chaos: weight of %s: %q, want a number ≥ 0", k, val)
		}
		w[k] = x
	}
	return w, nil
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	if i := slices.Index(kindNames[:], s); i >= 0 {
		return Kind(i), nil
	}
	return 0, fmt.Errorf("chaos: unknown nemesis kind %q (one of %s)", s, strings.Join(kindNames[:], ", "))
}

// Network reports whether k changes network rules rather than a process.
func (k Kind) Network() bool { return k >= IsolateNode && k <= Lossy }

// Event is one thing the nemesis does: from At (since the start of the load) for For.
// Target is a host (a node, a frontend, "consul"); Peer is DropOneWay's other end;
// Index picks one of a node's engines (modulo how many it has) for the engine kinds.
type Event struct {
	At, For time.Duration
	Kind    Kind
	Target  string
	Peer    string
	Index   int
}

// End is when the event is undone (a killed process restarted, a rule removed).
func (e Event) End() time.Duration { return e.At + e.For }

func (e Event) String() string {
	s := fmt.Sprintf("%8.3fs %-14s %s", e.At.Seconds(), e.Kind, e.Target)
	if e.Peer != "" {
		s += " -> " + e.Peer
	}
	if e.Kind == KillEngine || e.Kind == SlowEngine {
		s += fmt.Sprintf(" engine %d", e.Index)
	}
	if e.For > 0 {
		s += fmt.Sprintf(" for %.3fs", e.For.Seconds())
	}
	return s
}

// Topology names the hosts of a cluster.
type Topology struct {
	Consul    string   // the Consul agent's host
	Frontends []string // frontends' hosts (two or more for the splits and failover)
	Nodes     []string // node agents' hosts
	// Disks are the nodes whose KV block manager has a disk tier on a file system of its
	// own, which DiskFull fills (none: DiskFull is never drawn).
	Disks []string
}

// Hosts is every host: Consul, the frontends, the nodes.
func (t Topology) Hosts() []string {
	return append(append([]string{t.Consul}, t.Frontends...), t.Nodes...)
}

// Halves is Split's two sides: Consul, the first half of the frontends (at least one)
// and the first half of the nodes on one side; the rest on the other. SplitKeepConsul
// cuts the same sides apart but leaves Consul reachable from both.
func (t Topology) Halves() (a, b []string) {
	nf := max(1, len(t.Frontends)/2)
	nn := len(t.Nodes) / 2
	a = append(append([]string{t.Consul}, t.Frontends[:nf]...), t.Nodes[:nn]...)
	b = append(append([]string{}, t.Frontends[nf:]...), t.Nodes[nn:]...)
	return a, b
}

// PlanConfig shapes a schedule.
type PlanConfig struct {
	Seed     uint64
	Duration time.Duration // the load's length; every event ends by Duration - Quiet
	Quiet    time.Duration // the tail with no nemesis, for the cluster to settle while the load runs
	MeanGap  time.Duration // mean time between event starts (exponential gaps)
	// Weights of each kind (nil: DefaultWeights). A zero weight leaves the kind out.
	Weights []float64
}

// DefaultWeights: kills and partitions about as often as each other, Consul and the
// frontends less often than engines and nodes.
var DefaultWeights = []float64{
	KillEngine: 3, SlowEngine: 2, KillNode: 2, KillFrontend: 1, KillConsul: 1, Pause: 2,
	IsolateNode: 2, IsolateConsul: 1, Split: 1, SplitKeepConsul: 1, DropOneWay: 2, Lossy: 2, DiskFull: 2,
}

// forRange is how long each kind lasts (uniform in [lo, hi]); kill-engine is instant.
var forRange = [numKinds][2]time.Duration{
	KillEngine:      {0, 0},
	SlowEngine:      {2 * time.Second, 8 * time.Second},
	KillNode:        {2 * time.Second, 10 * time.Second},
	KillFrontend:    {2 * time.Second, 8 * time.Second},
	KillConsul:      {3 * time.Second, 12 * time.Second},
	Pause:           {time.Second, 6 * time.Second},
	IsolateNode:     {2 * time.Second, 10 * time.Second},
	IsolateConsul:   {2 * time.Second, 10 * time.Second},
	Split:           {3 * time.Second, 10 * time.Second},
	SplitKeepConsul: {3 * time.Second, 10 * time.Second},
	DropOneWay:      {2 * time.Second, 8 * time.Second},
	Lossy:           {3 * time.Second, 12 * time.Second},
	DiskFull:        {2 * time.Second, 10 * time.Second},
}

// Plan draws the nemesis's schedule: event starts at exponential gaps of mean MeanGap,
// each of a kind drawn by Weights on a target drawn uniformly, overlapping freely except
// that one process is the target of at most one process event at a time (a kind whose
// every target is busy is drawn again), that the engine kinds and Consul's kill never
// overlap a kill of their host, and that one disk is filled by one event at a time. Every event ends by Duration - Quiet. The same
// config gives the same schedule.
func Plan(cfg PlanConfig, topo Topology) ([]Event, error) {
	if len(topo.Frontends) < 2 || len(topo.Nodes) < 2 || topo.Consul == "" {
		return nil, fmt.Errorf("chaos: a plan needs Consul, two frontends and two nodes (have %d and %d)", len(topo.Frontends), len(topo.Nodes))
	}
	if cfg.MeanGap <= 0 || cfg.Duration <= cfg.Quiet {
		return nil, fmt.Errorf("chaos: plan needs MeanGap > 0 and Duration > Quiet (got %v, %v, %v)", cfg.MeanGap, cfg.Duration, cfg.Quiet)
	}
	w := cfg.Weights
	if w == nil {
		w = DefaultWeights
	}
	if len(w) != int(numKinds) {
		return nil, fmt.Errorf("chaos: %d weights for %d kinds", len(w), numKinds)
	}
	var total float64
	for _, x := range w {
		if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("chaos: weight %v", x)
		}
		total += x
	}
	if total == 0 || math.IsInf(total, 0) {
		return nil, fmt.Errorf("chaos: weights sum to %v", total)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973)) // "nemesis"
	end := cfg.Duration - cfg.Quiet
	busy := map[string]time.Duration{} // process -> when its process event ends
	var out []Event
	at := time.Duration(0)
	for {
		at += time.Duration(rng.ExpFloat64() * float64(cfg.MeanGap))
		if at >= end {
			break
		}
		for range 20 { // a kind whose targets are all busy is drawn again
			e, ok := drawEvent(rng, w, total, topo, at)
			if !ok {
				continue
			}
			if e.End() > end {
				e.For = max(end-e.At, 0)
			}
			procs := processes(e)
			if slices.ContainsFunc(procs, func(p string) bool { return busy[p] > at }) {
				continue
			}
			for _, p := range procs {
				busy[p] = max(e.End(), at+time.Millisecond)
			}
			out = append(out, e)
			break
		}
	}
	return out, nil
}

func drawEvent(rng *rand.Rand, w []float64, total float64, topo Topology, at time.Duration) (Event, bool) {
	x := rng.Float64() * total
	k := Kind(0)
	for ; k < numKinds-1; k++ {
		if x < w[k] {
			break
		}
		x -= w[k]
	}
	if w[k] == 0 {
		return Event{}, false
	}
	lo, hi := forRange[k][0], forRange[k][1]
	e := Event{At: at, Kind: k, For: lo + time.Duration(rng.Float64()*float64(hi-lo))}
	e.For = e.For.Round(time.Millisecond)
	e.At = e.At.Round(time.Millisecond)
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	members := append(append([]string{}, topo.Frontends...), topo.Nodes...)
	switch k {
	case KillEngine, SlowEngine:
		e.Target, e.Index = pick(topo.Nodes), rng.IntN(64)
	case KillNode, IsolateNode:
		e.Target = pick(topo.Nodes)
	case KillFrontend, IsolateConsul:
		e.Target = pick(topo.Frontends)
	case KillConsul:
		e.Target = topo.Consul
	case Pause:
		e.Target = pick(members)
	case Split, SplitKeepConsul:
		e.Target = "halves"
	case DropOneWay:
		hosts := topo.Hosts()
		i := rng.IntN(len(hosts))
		j := (i + 1 + rng.IntN(len(hosts)-1)) % len(hosts)
		e.Target, e.Peer = hosts[i], hosts[j]
	case Lossy:
		e.Target = pick(topo.Hosts())
	case DiskFull:
		if len(topo.Disks) == 0 {
			return Event{}, false
		}
		e.Target = pick(topo.Disks)
	}
	return e, true
}

// processes are the processes (and disks) event e holds, by name: a host's main
// process is its name; an engine's events hold its node (a node killed while its
// engine is stopped would leave nothing to continue), and a node's kill holds every
// engine of it by holding the node. A disk event holds the node's disk ("n-1 disk"),
// not its process: a node may be killed or paused while its disk is full.
func processes(e Event) []string {
	switch e.Kind {
	case KillEngine, SlowEngine:
		return []string{e.Target}
	case KillNode, KillFrontend, KillConsul, Pause:
		return []string{e.Target}
	case DiskFull:
		return []string{DiskOf(e.Target)}
	}
	return nil
}

// DiskOf names node's block-manager disk as the schedule holds it.
func DiskOf(node string) string { return node + " disk" }

// FormatPlan writes events one per line (Event.String).
func FormatPlan(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}
