package chaos

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var testTopo = Topology{Consul: "consul", Frontends: []string{"fe-1", "fe-2"}, Nodes: []string{"n-1", "n-2", "n-3", "n-4"},
	Disks: []string{"n-1", "n-2"}}

// The same config gives the same schedule, byte for byte (testdata/plan-seed*.txt).
func TestPlanGolden(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		events, err := Plan(PlanConfig{Seed: seed, Duration: 3 * time.Minute, Quiet: 30 * time.Second, MeanGap: 6 * time.Second}, testTopo)
		if err != nil {
			t.Fatal(err)
		}
		got := FormatPlan(events)
		path := filepath.Join("testdata", "plan-seed"+string(rune('0'+seed))+".txt")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("seed %d: plan differs from %s:\n%s", seed, path, got)
		}
	}
}

// Every schedule, whatever the seed: events in order, ended before the quiet tail, on
// real targets, at most one process event per process at a time, one disk event per
// disk at a time (on a node with a disk tier), every kind drawn.
func TestPlanInvariants(t *testing.T) {
	seen := map[Kind]int{}
	hosts := testTopo.Hosts()
	for seed := uint64(0); seed < 200; seed++ {
		cfg := PlanConfig{Seed: seed, Duration: 5 * time.Minute, Quiet: 20 * time.Second, MeanGap: 3 * time.Second}
		events, err := Plan(cfg, testTopo)
		if err != nil {
			t.Fatal(err)
		}
		busy := map[string]time.Duration{}
		for i, e := range events {
			seen[e.Kind]++
			if i > 0 && e.At < events[i-1].At {
				t.Fatalf("seed %d: event %d at %v before %v", seed, i, e.At, events[i-1].At)
			}
			if e.End() > cfg.Duration-cfg.Quiet || e.For < 0 {
				t.Fatalf("seed %d: %s ends at %v, past %v", seed, e, e.End(), cfg.Duration-cfg.Quiet)
			}
			if e.Kind != Split && e.Kind != SplitKeepConsul && !slices.Contains(hosts, e.Target) {
				t.Fatalf("seed %d: %s: no such host", seed, e)
			}
			if e.Kind == DropOneWay && (e.Peer == e.Target || !slices.Contains(hosts, e.Peer)) {
				t.Fatalf("seed %d: %s: bad peer", seed, e)
			}
			if e.Kind == DiskFull && !slices.Contains(testTopo.Disks, e.Target) {
				t.Fatalf("seed %d: %s: a node without a block-manager disk", seed, e)
			}
			if !e.Kind.Network() {
				held := e.Target
				if e.Kind == DiskFull {
					held = DiskOf(e.Target)
				}
				if busy[held] > e.At {
					t.Fatalf("seed %d: %s overlaps another event on %s (busy until %v)", seed, e, held, busy[held])
				}
				busy[held] = max(e.End(), e.At+time.Millisecond)
			}
		}
	}
	for k := range numKinds {
		if seen[k] == 0 {
			t.Errorf("kind %s never drawn in 200 schedules", k)
		}
	}
}

// Without a disk tier in the topology the disk kind is never drawn, whatever its weight.
func TestPlanNoDisks(t *testing.T) {
	topo := testTopo
	topo.Disks = nil
	w := slices.Clone(DefaultWeights)
	w[DiskFull] = 100
	events, err := Plan(PlanConfig{Seed: 3, Duration: 5 * time.Minute, Quiet: 20 * time.Second, MeanGap: 3 * time.Second, Weights: w}, topo)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	for _, e := range events {
		if e.Kind == DiskFull {
			t.Fatalf("%s drawn in a topology without disks", e)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	ok := PlanConfig{Seed: 1, Duration: time.Minute, Quiet: 10 * time.Second, MeanGap: time.Second}
	for name, c := range map[string]struct {
		cfg  PlanConfig
		topo Topology
	}{
		"one frontend":   {ok, Topology{Consul: "c", Frontends: []string{"f"}, Nodes: []string{"a", "b"}}},
		"no consul":      {ok, Topology{Frontends: []string{"f", "g"}, Nodes: []string{"a", "b"}}},
		"quiet too long": {PlanConfig{Duration: time.Minute, Quiet: time.Minute, MeanGap: time.Second}, testTopo},
		"no gap":         {PlanConfig{Duration: time.Minute}, testTopo},
		"weights":        {PlanConfig{Duration: time.Minute, MeanGap: time.Second, Weights: []float64{1}}, testTopo},
		"zero weights":   {PlanConfig{Duration: time.Minute, MeanGap: time.Second, Weights: make([]float64, numKinds)}, testTopo},
		"weights past float64": {PlanConfig{Duration: time.Minute, MeanGap: time.Second, Weights: func() []float64 {
			w := slices.Clone(DefaultWeights)
			w[Split], w[Lossy] = 1e308, 1e308
			return w
		}()}, testTopo},
	} {
		if _, err := Plan(c.cfg, c.topo); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestKindNames(t *testing.T) {
	for k := range numKinds {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if _, err := ParseKind("reboot"); err == nil {
		t.Error("ParseKind(reboot): no error")
	}
}

// --weights: named kinds replace their default weight, the rest keep theirs; a bad
// name, form or number is an error naming it.
func TestParseWeights(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[Kind]float64 // kinds that differ from DefaultWeights
		wantErr string
	}{
		{in: "", want: nil},
		{in: "split-keep-consul=5", want: map[Kind]float64{SplitKeepConsul: 5}},
		{in: " kill-engine = 0 , split=2.5", want: map[Kind]float64{KillEngine: 0, Split: 2.5}},
		{in: "split", wantErr: "want kind=weight"},
		{in: "bridge=1", wantErr: `unknown nemesis kind "bridge"`},
		{in: "split=-1", wantErr: "want a number ≥ 0"},
		{in: "split=NaN", wantErr: "want a number ≥ 0"},
		{in: "split=1,", wantErr: "want kind=weight"},
		{in: "split=1,split=2", wantErr: "split given twice"},
	} {
		got, err := ParseWeights(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		for k := range numKinds {
			want, ok := tc.want[k]
			if !ok {
				want = DefaultWeights[k]
			}
			if got[k] != want {
				t.Errorf("%q: weight of %s %v, want %v", tc.in, k, got[k], want)
			}
		}
	}
	if DefaultWeights[Split] != 1 {
		t.Error("ParseWeights changed DefaultWeights")
	}
}
