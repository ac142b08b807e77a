package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
)

// TestLimits: inputs that would overflow a time, exhaust memory or be silently ignored
// are refused before anything is sent, with an error naming the flag or the file and
// line. Every case must fail fast: none reaches a server (the URL has none).
func TestLimits(t *testing.T) {
	real := []string{"--model", "m", "--url", "http://127.0.0.1:1"}
	sim := []string{"--simulate"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		// 1. Arrivals past MaxArrival, which would wrap around to negative times.
		{"rate 1e-12 for an hour", with(real, "--rate", "1e-12", "--duration", "1h", "--isl", "5", "--osl", "1"), []string{"--rate 1e-12: want 0 or at least 1e-06"}},
		{"simulated rate 1e-12 for an hour", with(sim, "--rate", "1e-12", "--duration", "1h", "--isl", "5", "--osl", "1"), []string{"--rate 1e-12"}},
		{"rate 1e-300", with(real, "--rate", "1e-300", "--requests", "3"), []string{"--rate 1e-300"}},
		{"rate too low for the requests", with(real, "--rate", "1e-6", "--requests", "1000", "--isl", "5", "--osl", "1"), []string{"--rate 1e-06 with --requests 1000", "beyond the 720h0m0s limit"}},
		{"duration past 30 days", with(real, "--rate", "1", "--duration", "721h"), []string{"--duration 721h0m0s: want at most 720h0m0s"}},
		{"time scale 1e300", with(real, "--trace", "testdata/mini.jsonl", "--time-scale", "1e300"), []string{"--time-scale 1e+300 with --trace testdata/mini.jsonl", "request 1"}},
		{"Mooncake timestamp 1e300", with(real, "--trace", "testdata/late.jsonl"), []string{"testdata/late.jsonl:2: timestamp 1e+300 ms"}},
		{"simulated Mooncake timestamp 1e300", with(sim, "--trace", "testdata/late.jsonl"), []string{"testdata/late.jsonl:2: timestamp 1e+300 ms"}},
		{"Azure years 0001 to 9999", with(real, "--trace", "testdata/years.csv"), []string{"testdata/years.csv:3: TIMESTAMP 9999-12-31 23:59:59.9"}},
		{"simulated Azure years 0001 to 9999", with(sim, "--trace", "testdata/years.csv"), []string{"testdata/years.csv:3"}},
		// 3. A trace out of arrival order.
		{"trace going back", with(real, "--trace", "testdata/backwards.jsonl"), []string{"testdata/backwards.jsonl:2: timestamp 0 ms is earlier than line 1's 2000 ms"}},
		{"simulated trace going back", with(sim, "--trace", "testdata/backwards.jsonl"), []string{"testdata/backwards.jsonl:2"}},
		// 4. Simulated figures whose times overflow.
		{"bandwidth 1e-300", with(sim, "--rate", "1", "--kv-transfer-bandwidth", "1e-300"), []string{"--kv-transfer-bandwidth 1e-300: want 1e+06 (1 MB/s) to 1e+13 (10 TB/s)"}},
		{"bandwidth 1e14", with(sim, "--rate", "1", "--kv-transfer-bandwidth", "1e14"), []string{"--kv-transfer-bandwidth"}},
		{"bytes per token at int64's maximum", with(sim, "--rate", "1", "--kv-bytes-per-token", "9223372036854775807"), []string{"--kv-bytes-per-token 9223372036854775807: want 0 to 16777216"}},
		{"speedup 1e-300", with(sim, "--rate", "1", "--speedup-ratio", "1e-300"), []string{"--speedup-ratio 1e-300: want 0.001 to 1e+06"}},
		{"speedup 1e7", with(sim, "--rate", "1", "--speedup-ratio", "1e7"), []string{"--speedup-ratio"}},
		{"compare speedup 1e-300", []string{"compare", "--speedup-ratio", "1e-300"}, []string{"--speedup-ratio"}},
		// 5. Sizes that exhaust memory.
		{"a hundred million prefix groups", with(real, "--concurrency", "1", "--shared-prefix-groups", "100000000", "--shared-prefix-tokens", "10", "--isl", "20"), []string{"--shared-prefix-groups 100000000: want 0 to 1000000"}},
		{"3000 simulated workers", with(sim, "--rate", "1", "--workers", "3000"), []string{"--workers 3000", "3000 engines needs about", "lower --num-gpu-blocks to at most"}},
		{"3000 simulated workers of small contexts", with(sim, "--rate", "1", "--workers", "3000", "--max-model-len", "32768"), []string{"--workers 3000"}},
		{"compare 3000 simulated workers", []string{"compare", "--simulate", "--rate", "1", "--workers", "3000"}, []string{"--workers 3000"}},
		{"100 prefill + 3000 decode workers", with(sim, "--rate", "1", "--workers", "3000", "--prefill-workers", "100"), []string{"--prefill-workers 100", "3100 engines"}},
		// 6. Synthetic-only flags with a trace.
		{"--isl with a trace", with(real, "--trace", "testdata/mini.jsonl", "--isl", "5"), []string{"--isl 5: only for a synthetic workload, not with --trace"}},
		{"--osl with a trace", with(real, "--trace", "testdata/mini.jsonl", "--osl", "5"), []string{"--osl 5: only for a synthetic workload"}},
		{"--rate with a trace", with(real, "--trace", "testdata/mini.jsonl", "--rate", "5"), []string{"--rate 5: only for a synthetic workload"}},
		{"--requests with a trace", with(real, "--trace", "testdata/mini.jsonl", "--requests", "5"), []string{"--requests 5: only for a synthetic workload"}},
		{"--isl with a simulated trace", with(sim, "--trace", "testdata/mini.jsonl", "--isl", "5"), []string{"--isl 5"}},
		{"compare --rate with a trace", []string{"compare", "--trace", "testdata/mini.jsonl", "--rate", "5"}, []string{"--rate 5: only for a synthetic workload"}},
		{"--limit without a trace", with(real, "--concurrency", "1", "--limit", "5"), []string{"--limit 5: only with --trace"}},
		{"--time-scale without a trace", with(real, "--concurrency", "1", "--time-scale", "2"), []string{"--time-scale 2: only with --trace"}},
		// 8. A URL without a host, or not one at all.
		{"url without a host", []string{"--model", "m", "--url", "http://"}, []string{`--url "http://": no host`}},
		{"url of an unclosed IPv6 host", []string{"--model", "m", "--url", "http://[::1"}, []string{`--url "http://[::1"`}},
		{"url port out of range", []string{"--model", "m", "--url", "http://127.0.0.1:99999"}, []string{"port 99999"}},
		{"url with a query", []string{"--model", "m", "--url", "http://127.0.0.1:8000/?x=1"}, []string{"--url", "query"}},
		{"url of another scheme", []string{"--model", "m", "--url", "ftp://host"}, []string{"want http:// or https://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := with(tc.args, "--out", t.TempDir())
			err := Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("%v: error %v, want one containing %q", tc.args, err, want)
				}
			}
		})
	}
}

// TestLimitsAllowed: what the limits must leave working: 8 to 256 simulated workers at
// the default settings, a concurrency with a trace, the lowest rate for a few requests,
// the largest lengths.
func TestLimitsAllowed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"8 simulated workers", func(o *Options) { o.Simulate, o.Rate, o.Fleet.Workers = true, 1, 8 }},
		{"256 simulated workers", func(o *Options) { o.Simulate, o.Rate, o.Fleet.Workers = true, 1, 256 }},
		{"128 prefill + 128 decode workers", func(o *Options) { o.Simulate, o.Rate, o.Fleet.Workers, o.Fleet.PrefillWorkers = true, 1, 128, 128 }},
		{"concurrency with a trace", func(o *Options) { o.Model, o.Trace, o.Concurrency = "m", "testdata/mini.jsonl", 4 }},
		{"the bounds of the simulated transfer", func(o *Options) {
			o.Simulate, o.Rate, o.Fleet.KVBytesPerToken, o.Fleet.KVTransferBandwidth, o.Fleet.SpeedupRatio = true, 1, 16<<20, 1e6, 1e-3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			tc.edit(&o)
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSyntheticFromEnvironmentWithTrace: a synthetic-only flag set by its environment
// variable is refused with --trace as well, naming the variable.
func TestSyntheticFromEnvironmentWithTrace(t *testing.T) {
	t.Setenv("TURBINE_ISL", "2048")
	err := Run(context.Background(), []string{"--model", "m", "--trace", "testdata/mini.jsonl", "--out", t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "TURBINE_ISL=2048: only for a synthetic workload") {
		t.Fatalf("error %v, want one naming TURBINE_ISL", err)
	}
}

// TestWorkloadLabelLengths: lengths of a million tokens and more are written as
// integers in the workload's label, which --isl reads back.
func TestWorkloadLabelLengths(t *testing.T) {
	o := Defaults()
	o.Model, o.ISL, o.OSL, o.Rate, o.Requests, o.SharedPrefixGroups, o.SharedPrefixTokens = "m", "16777216", "uniform:1000000:2000000", 1, 1, 2, 1000000
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	_, name, err := o.synthetic()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(name, "isl 16777216 osl uniform:1000000:2000000 shared prefix 2×1000000") {
		t.Fatalf("label %q: want the lengths as integers", name)
	}
	for _, l := range []string{strings.Fields(name)[2], strings.Fields(name)[4]} {
		if _, err := bench.ParseLength(l); err != nil {
			t.Errorf("label %q: %q does not parse back: %v", name, l, err)
		}
	}
}

// TestPlotAbsurdSummaries: `bench plot` refuses a summary it could not have written
// (series no run gives, JSON that is not a summary), naming the file and field, instead
// of panicking, running out of memory or drawing nonsense.
func TestPlotAbsurdSummaries(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long.json")
	var b strings.Builder
	b.WriteString(`{"throughput_bucket_s":1,"throughput_tokens_per_s":[1`)
	for range 10_000_000 - 1 {
		b.WriteString(",1")
	}
	b.WriteString("]}")
	if err := os.WriteFile(long, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	descending := make([]string, 101)
	for i := range descending {
		descending[i] = strconv.Itoa(101 - i)
	}
	cases := []struct{ file, want string }{
		{"testdata/absurd_summary.json", "testdata/absurd_summary.json: ttft_cdf_ms[0] = 1e+308"},
		{long, long + ": larger than 16 MiB"},
	}
	for _, c := range []struct{ name, json, want string }{
		{"null.json", "null", "JSON null: not a benchmark summary (want a JSON object)"},
		{"empty.json", "{}", "no requests field: not a benchmark summary"},
		{"descending.json", `{"requests":0,"ttft_cdf_ms":[` + strings.Join(descending, ",") + `]}`, "ttft_cdf_ms[1] = 100 is below ttft_cdf_ms[0] = 101"},
		{"tiny-bucket.json", `{"requests":0,"throughput_bucket_s":1e-300}`, "throughput_bucket_s 1e-300"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ file, want string }{path, "plot: " + path + ": " + c.want})
	}
	for _, tc := range cases {
		err := Run(context.Background(), []string{"plot", "-o", filepath.Join(dir, "out.svg"), tc.file}, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("plot %s: error %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}
