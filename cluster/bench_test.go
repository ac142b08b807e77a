package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/internal/consultest"
)

// Round trips between two processes on one machine: this process asks, a child member
// answers. Reported in µs at the 50th and 99th percentiles.

func BenchmarkCrossProcessActorRequest(b *testing.B) {
	m, err := Start(Config{Name: "bench-actor", Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop()
	c := startChild(b, "member", childDiscoveryEnv+"=local", childNameEnv+"=bench-actor")
	pid := echoPID(c.Addr)
	msg := wrapString("ping")
	call := func() error {
		_, err := m.System.Root.RequestFuture(pid, msg, 5*time.Second).Result()
		return err
	}
	benchRoundTrips(b, call)
}

func BenchmarkCrossProcessGrainRequest(b *testing.B) {
	agent := consultest.Start(b)
	m, err := Start(Config{Name: "bench-grain", Discovery: "consul://" + agent.Addr(), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop()
	c := startChild(b, "member", childDiscoveryEnv+"=consul://"+agent.Addr(), childNameEnv+"=bench-grain",
		childKindEnv+"=Echo")
	tl := followTopology(m, nil)
	if _, ok := tl.waitFor(seeTimeout, has(m.ID(), c.ID)); !ok {
		b.Fatal("the members do not see each other")
	}
	msg := wrapString("ping")
	call := func() error {
		_, err := m.Cluster.Request("bench", "Echo", msg)
		return err
	}
	benchRoundTrips(b, call)
}

func benchRoundTrips(b *testing.B, call func() error) {
	for range 100 { // connections and activations
		if err := call(); err != nil {
			b.Fatalf("warm-up request: %v", err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Microsecond) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
