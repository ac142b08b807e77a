package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/options"
)

// BenchmarkOverload measures the service above its capacity (BENCHMARKS.md, "Overload
// at 2× and 10× capacity"): one `turbine serve` of mock workers with the default
// admission bound (--max-concurrent-requests: 128 per CPU); its capacity C (requests/s)
// from a closed loop just under the bound; then Poisson arrivals at 0.5×C (baseline),
// 2×C, 10×C and 0.5×C again (recovery), each for overloadPhase. After each phase it
// waits for the frontend to hold no request and reads the router's load, which must be
// back at zero (no phantom load). Run once: -benchtime 1x.
//
// Metrics: capacity-req/s; per phase, refusal-p99-ms (503 header latency at the
// client), ttft-p99-ms of the answered requests, failed (anything but an answer or a
// 503 with Retry-After: timeouts, resets, other statuses), drain-ms (end of arrivals to
// no request in flight) and phantom (the router's active requests, decode blocks and
// prefill tokens summed over workers once drained).
func BenchmarkOverload(b *testing.B) {
	// The default bound, given explicitly so that the benchmark knows it.
	bound := options.DefaultMaxConcurrentRequestsPerCPU * runtime.GOMAXPROCS(0)
	s := startServe(b, overloadWorkers, "--speedup-ratio", "1", "--max-num-seqs", strconv.Itoa(*overloadSeqs),
		"--max-concurrent-requests", strconv.Itoa(bound))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0}}
	defer hc.CloseIdleConnections()
	ctx := context.Background()

	// The table goes to stdout: the testing package cuts a benchmark's log short.
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	b.ResetTimer()
	for range b.N {
		// serve's own process (docs/metrics.md): not the engines, which are its children.
		rss := func() float64 { return metricValue(s, "process_resident_memory_bytes", "") }
		cpuSecs := func() float64 { return metricValue(s, "process_cpu_seconds_total", "") }
		idleRSS, cpu0 := rss(), cpuSecs()
		var loaded atomic.Uint64
		time.AfterFunc(overloadCapacityRun/2, func() { loaded.Store(math.Float64bits(rss())) })
		capacity := closedLoop(ctx, hc, s.url, bound-bound/16, overloadCapacityRun)
		cpu := time.Duration((cpuSecs() - cpu0) * float64(time.Second))
		tokens := capacity * overloadCapacityRun.Seconds() * float64(*overloadOutputLen)
		logf("capacity: %.1f requests/s (closed loop of %d streams, bound %d); serve's own process (frontend, router, "+
			"workers; not the engines): %.2f CPU s, %.0f streamed tokens/s per CPU second, %.1f KiB RSS per stream (%d MiB idle)",
			capacity, bound-bound/16, bound, cpu.Seconds(), tokens/cpu.Seconds(),
			(math.Float64frombits(loaded.Load())-idleRSS)/1024/float64(bound-bound/16), int(idleRSS)>>20)
		b.ReportMetric(capacity, "capacity-req/s")
		b.ReportMetric(tokens/cpu.Seconds(), "tokens/s-per-core")
		rng := rand.New(rand.NewPCG(1, 2))
		logf("%-9s %9s %6s %8s %7s %6s %20s %17s %8s %7s",
			"phase", "rate/s", "sent", "answered", "refused", "failed", "refusal p50/p99/max", "ttft p50/p99", "drain", "phantom")
		for _, ph := range []struct {
			name string
			mult float64
		}{{"baseline", 0.5}, {"2x", 2}, {"10x", 10}, {"recovery", 0.5}} {
			rate := ph.mult * capacity
			overflows := listenOverflows()
			phaseStart := time.Now()
			res := openLoop(ctx, hc, s.url, rate, overloadPhase, rng)
			drainStart := time.Now()
			s.waitFor(2*time.Minute, "no request in flight after "+ph.name, func() bool {
				return inflight(s) == 0
			})
			drain := time.Since(drainStart)
			// The router's load comes back with the last Free; read it until it does, for
			// a bounded time, and report what is left.
			var phantom float64
			deadline := time.Now().Add(10 * time.Second)
			for {
				phantom = 0
				for _, w := range s.workerStats(model) {
					phantom += w.ActiveRequests + w.ActiveBlocks + w.PrefillToks
				}
				if phantom == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			ref, ttft := res.refusals, res.ttfts
			seen, srvRef, perWorker := serverSide(s.Logs(), phaseStart, time.Now())
			logf("%-9s server: %d requests logged (by worker %v), refusals p50/p99/max %s/%s/%s ms; listen queue overflows %d",
				ph.name, seen, perWorker, ms(pct(srvRef, 50)), ms(pct(srvRef, 99)), ms(pct(srvRef, 100)), listenOverflows()-overflows)
			logf("%-9s ttft p50/p99 of the requests sent in its second half: %s/%s ms", ph.name, ms(pct(res.late, 50)), ms(pct(res.late, 99)))
			b.ReportMetric(float64(pct(res.late, 99).Microseconds())/1000, ph.name+"-late-ttft-p99-ms")
			b.ReportMetric(float64(pct(srvRef, 99).Microseconds())/1000, ph.name+"-server-refusal-p99-ms")
			logf("%-9s %9.1f %6d %8d %7d %6d %20s %17s %8s %7.0f", ph.name, rate, res.sent, len(ttft), len(ref), res.failed,
				fmt.Sprintf("%s/%s/%s", ms(pct(ref, 50)), ms(pct(ref, 99)), ms(pct(ref, 100))),
				fmt.Sprintf("%s/%s", ms(pct(ttft, 50)), ms(pct(ttft, 99))), drain.Round(time.Millisecond), phantom)
			for _, f := range res.failures {
				logf("  %s: failure: %s", ph.name, f)
			}
			b.ReportMetric(float64(pct(ref, 99).Microseconds())/1000, ph.name+"-refusal-p99-ms")
			b.ReportMetric(float64(pct(ttft, 99).Microseconds())/1000, ph.name+"-ttft-p99-ms")
			b.ReportMetric(float64(res.failed), ph.name+"-failed")
			b.ReportMetric(float64(drain.Milliseconds()), ph.name+"-drain-ms")
			b.ReportMetric(phantom, ph.name+"-phantom")
			if res.failed > 0 || phantom != 0 {
				b.Errorf("%s: %d failed, phantom load %v", ph.name, res.failed, phantom)
			}
			if (ph.name == "baseline" || ph.name == "recovery") && len(ref) > 0 {
				b.Errorf("%s: %d of %d refused at half the capacity", ph.name, len(ref), res.sent)
			}
		}
	}
}

// The engines' --max-num-seqs and the requests' max_tokens (go test -args
// -overload.seqs N -overload.osl N). By default the engines, not the shared CPUs, bound
// the capacity, as GPUs do in production, and the frontend keeps CPU to refuse what it
// cannot run; -overload.seqs 256 -overload.osl 64 makes the frontend's CPU the bound.
var (
	overloadSeqs      = flag.Int("overload.seqs", 16, "BenchmarkOverload: each mock engine's --max-num-seqs")
	overloadOutputLen = flag.Int("overload.osl", 128, "BenchmarkOverload: max_tokens of every request (with ignore_eos)")
)

const (
	overloadWorkers   = 4
	overloadPromptLen = 256 // token ids per prompt

	overloadPhase       = 30 * time.Second
	overloadCapacityRun = 20 * time.Second
	overloadTimeout     = time.Minute // a request's limit at the client: past it, a failure
)

// inflight is the frontend's turbine_frontend_inflight_requests for the mock model.
func inflight(s *server) float64 { return metricValue(s, "turbine_frontend_inflight_requests", model) }

// metricValue is the value of series name of s's /metrics, with the model label given
// ("" for a series without one); -1 when /metrics cannot be read, 0 when the series is
// not there.
func metricValue(s *server, name, modelLabel string) float64 {
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		n, labels, v, ok := parseMetricLine(line)
		if ok && n == name && labels["model"] == modelLabel {
			return v
		}
	}
	return 0
}

// serverSide reads serve's "request" log lines (one per request answered) stamped between from and
// to: how many there are, and the durations of the 503 answers.
func serverSide(logs string, from, to time.Time) (n int, refusals []time.Duration, perWorker map[string]int) {
	perWorker = map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Message  string    `json:"message"`
			Status   int       `json:"status"`
			Duration float64   `json:"duration"` // ms
			Time     time.Time `json:"time"`
			Worker   string    `json:"worker"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Message != "request" || rec.Time.Before(from) || rec.Time.After(to) {
			continue
		}
		n++
		if rec.Worker != "" {
			perWorker[rec.Worker]++
		}
		if rec.Status == http.StatusServiceUnavailable {
			refusals = append(refusals, time.Duration(rec.Duration*float64(time.Millisecond)))
		}
	}
	return n, refusals, perWorker
}

// listenOverflows is the host's count of connections dropped for a full accept queue
// (Linux: TcpExt ListenOverflows in /proc/net/netstat; 0 elsewhere).
func listenOverflows() int {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j, name := range names {
			if name == "ListenOverflows" && j < len(values) {
				n, _ := strconv.Atoi(values[j])
				return n
			}
		}
	}
	return 0
}

// phaseResult is what one open-loop phase saw at the client.
type phaseResult struct {
	sent     int
	refusals []time.Duration // 503 with Retry-After: send → response header
	ttfts    []time.Duration // answered in full: send → first token
	late     []time.Duration // ttfts of the requests sent in the phase's second half
	failed   int
	failures []string // the first few failures, for the log
}

// overloadRequest sends one streaming completion and classifies its outcome: an answer
// (ttft > 0), a refusal (503 with Retry-After and an OpenAI error body), or a failure.
func overloadRequest(ctx context.Context, hc *http.Client, url string, rng *rand.Rand, mu *sync.Mutex) (ttft, refusal time.Duration, failure string) {
	ids := make([]int, overloadPromptLen)
	mu.Lock()
	for i := range ids {
		ids[i] = 100 + rng.IntN(30000)
	}
	mu.Unlock()
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": ids, "max_tokens": *overloadOutputLen,
		"ignore_eos": true, "stream": true})
	ctx, cancel := context.WithTimeout(ctx, overloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		header := time.Since(sent)
		msg, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		if resp.Header.Get("Retry-After") == "" || json.Unmarshal(msg, &e) != nil || e.Error.Code == "" {
			return 0, 0, fmt.Sprintf("503 without Retry-After or error code: %q", msg)
		}
		return 0, header, ""
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Sprintf("status %d: %s", resp.StatusCode, msg)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := false
	for sc.Scan() {
		data, isData := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !isData:
		case data == "[DONE]":
			done = true
		case strings.Contains(data, `"error"`):
			return 0, 0, "error frame: " + data
		case ttft == 0 && strings.Contains(data, `"text":"`) && !strings.Contains(data, `"text":""`):
			ttft = time.Since(sent)
		}
	}
	if err := sc.Err(); err != nil || !done || ttft == 0 {
		return 0, 0, fmt.Sprintf("stream cut (done %v, first token %v): %v", done, ttft, err)
	}
	return ttft, 0, ""
}

// closedLoop keeps n streams in flight for d and returns the answered requests per
// second.
func closedLoop(ctx context.Context, hc *http.Client, url string, n int, d time.Duration) float64 {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 4))
	var answered int
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ttft, _, _ := overloadRequest(ctx, hc, url, rng, &mu)
				if ttft > 0 && time.Now().Before(end) {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return float64(answered) / d.Seconds()
}

// openLoop sends Poisson arrivals at rate (requests/s) for d and waits for every answer.
func openLoop(ctx context.Context, hc *http.Client, url string, rate float64, d time.Duration, rng *rand.Rand) phaseResult {
	var res phaseResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	next := start
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if next.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(next))
		res.sent++
		late := next.Sub(start) >= d/2
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttft, refusal, failure := overloadRequest(ctx, hc, url, rng, &mu)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case failure != "":
				res.failed++
				if len(res.failures) < 5 {
					res.failures = append(res.failures, failure)
				}
			case refusal > 0:
				res.refusals = append(res.refusals, refusal)
			default:
				res.ttfts = append(res.ttfts, ttft)
				if late {
					res.late = append(res.late, ttft)
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// pct is the p-th percentile of ds (nearest rank; 0 for none); it sorts ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
