package sim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// mooncakeTrace is the Mooncake trace beside the repository (../shared/data).
const mooncakeTrace = "mooncake_fast25_conversation_trace.jsonl"

// benchRequests is how many trace requests a benchmark run simulates.
const benchRequests = 2000

// readTrace reads the first n requests of a trace in ../shared/data beside the
// repository root, skipping the test or benchmark when it is not there.
func readTrace(tb testing.TB, name string, n int) []bench.Request {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("no go.mod above the package directory")
		}
		dir = parent
	}
	path := filepath.Join(dir, "..", "shared", "data", name)
	f, err := os.Open(path)
	if err != nil {
		tb.Skipf("trace not available: %v", err)
	}
	defer f.Close()
	reqs, err := bench.ReadMooncake(f, path, bench.DefaultBlockTokens, n)
	if err != nil {
		tb.Fatal(err)
	}
	return reqs
}

// BenchmarkSimulateMooncake64 and BenchmarkSimulateMooncake256 simulate the first 2,000
// requests of the Mooncake trace on 64 and 256 workers with the reference engine (kv
// routing, reference timing, a context length that fits the trace's longest prompts)
// and report simulated requests per wall second (req/s) and simulated seconds per wall
// second (x-realtime).
func BenchmarkSimulateMooncake64(b *testing.B)  { benchmarkMooncake(b, 64) }
func BenchmarkSimulateMooncake256(b *testing.B) { benchmarkMooncake(b, 256) }

func benchmarkMooncake(b *testing.B, workers int) {
	reqs := readTrace(b, mooncakeTrace, benchRequests)
	eng := mocker.DefaultConfig()
	eng.MaxModelLen = 131072
	cfg := Config{Workers: workers, Engine: eng, Router: kv.DefaultConfig(eng.BlockSize), Seed: 1}
	var simulated, wall time.Duration
	var requests int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, st, err := Run(context.Background(), cfg, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range out.Results {
			if r.Error != "" {
				b.Fatalf("request %d: %s: %s", r.Index, r.Error, r.Detail)
			}
		}
		simulated += st.SimulatedTime
		wall += st.WallTime
		requests += st.Requests
	}
	b.ReportMetric(float64(requests)/wall.Seconds(), "req/s")
	b.ReportMetric(simulated.Seconds()/wall.Seconds(), "x-realtime")
}
