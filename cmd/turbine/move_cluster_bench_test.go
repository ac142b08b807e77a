package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkClusterRouterMove times the Router grain's move end to end in a real cluster
// (a Consul agent, two `turbine frontend` processes, one `turbine node` of mock workers)
// whose index holds about -move.blocks KV blocks (default 2^20, block size 16):
//
//  1. fill: distinct 8,192-token prompts (token ids, max_tokens 1), two per worker at a
//     time, through the frontends until the router indexes the target (each engine's
//     cache sized 10 % above its share; the engines at -move.speedup, 2 by default: an
//     8,192-token prefill takes about 85 ms, so that the prefill, not the shared CPUs,
//     is what the router balances);
//  2. kill -9 the frontend whose member hosts the model's Router grain;
//  3. on the other frontend, every 10 ms: a short request (the grain is back when one is
//     served), the index's size from /metrics, and one of the filled prompts' first half
//     with a new tail (KV-aware again when the engine reports cached tokens for it).
//
// Reported: kill → first served (the membership change and the new activation), kill →
// the index back to 99 % of its size, kill → the first prefix hit, and the last two
// from the first served request (the move itself, as the issue counts it).
func BenchmarkClusterRouterMove(b *testing.B) {
	c := newLocalCluster(b)
	workers := *moveWorkers
	const promptLen, blockSize = 8192, 16
	perWorker := *moveBlocks / workers * 11 / 10
	fes := []*server{c.frontend("frontend-a"), c.frontend("frontend-b")}
	c.node("node-1", workers, "--heartbeat", "1s", "--speedup-ratio", strconv.FormatFloat(*moveSpeedup, 'g', -1, 64),
		"--block-size", strconv.Itoa(blockSize),
		"--num-gpu-blocks", strconv.Itoa(perWorker), "--max-model-len", "16384")
	for _, fe := range fes {
		fe.waitReady(model, workers)
	}
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()

	for range b.N {
		// 1. Fill.
		rng := rand.New(rand.NewPCG(7, 7))
		var prompts [][]int
		var mu sync.Mutex
		next := func() []int {
			mu.Lock()
			defer mu.Unlock()
			ids := make([]int, promptLen)
			for i := range ids {
				ids[i] = 100 + rng.IntN(30000)
			}
			prompts = append(prompts, ids)
			return ids
		}
		fillStart := time.Now()
		var sent, failed atomic.Int64
		limit := int64(*moveBlocks/(promptLen/blockSize)) * 13 / 10
		var wg sync.WaitGroup
		for g := range 2 * workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sent.Add(1) <= limit {
					if _, err := completeIDs(hc, fes[g%2].url, next(), 30*time.Second); err != nil {
						failed.Add(1)
					}
					if sent.Load()%64 == 0 && indexedBlocks(fes[0]) >= float64(*moveBlocks) {
						return
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("fill: %d of %d requests failed", failed.Load(), sent.Load())
		}
		// The last events reach the index within a heartbeat or two.
		var before float64
		fes[0].waitFor(30*time.Second, "the index settled", func() bool {
			n := indexedBlocks(fes[0])
			settled := n == before && n > 0
			before = n
			if !settled {
				time.Sleep(500 * time.Millisecond)
			}
			return settled
		})
		logf("fill: %d prompts of %d tokens in %.1f s; the router indexes %.0f blocks (block size %d, %d workers of %d blocks)",
			len(prompts), promptLen, time.Since(fillStart).Seconds(), before, blockSize, workers, perWorker)
		if before < float64(*moveBlocks)*0.95 {
			for id, w := range fes[0].workerStats(model) {
				logf("  %s: %.0f indexed", id, w.IndexedBlocks)
			}
			for _, fe := range fes {
				for _, line := range strings.Split(fe.Logs(), "\n") {
					var rec struct {
						Worker   string  `json:"worker"`
						Duration float64 `json:"duration"`
						Message  string  `json:"message"`
						Time     string  `json:"time"`
					}
					if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "request" {
						logf("  %s %s %s %.1f ms", fe.name, rec.Time, rec.Worker, rec.Duration)
					}
				}
			}
			b.Fatalf("the index holds %.0f blocks, short of %d", before, *moveBlocks)
		}
		// Half of one of the last prompts filled (still cached: the caches are larger than
		// the fill), then a tail no engine has seen: a hit is the half. Each is sent once
		// (a miss would compute the half on another worker): the first 64 are the probes,
		// the last 16 the check afterwards.
		samples := make([][]int, 80)
		for i := range samples {
			p := prompts[len(prompts)-1-i]
			samples[i] = append(append([]int(nil), p[:promptLen/2]...), 99, 98, 97, i)
		}
		probes, checks := samples[:64], samples[64:]

		// 2. Kill the grain's host.
		host, other := fes[0], fes[1]
		if !strings.Contains(host.Logs(), `"router":"`+model+`"`) {
			host, other = other, host
		}
		if !strings.Contains(host.Logs(), `"router":"`+model+`"`) {
			b.Fatalf("no frontend logged hosting the %s router", model)
		}
		logf("the %s Router grain lives on %s; kill -9", model, host.name)
		killed := time.Now()
		host.kill()

		// 3. Watch the other frontend.
		var served, rebuilt, hit time.Duration
		var indexed float64
		probe := 0
		for served == 0 || rebuilt == 0 || hit == 0 {
			since := time.Since(killed)
			if since > 60*time.Second {
				b.Fatalf("60 s after the kill: served %v, index %.0f of %.0f blocks, hit %v", served, indexed, before, hit)
			}
			if served == 0 {
				if _, err := completeIDs(hc, other.url, []int{5, 6, 7, int(since/time.Millisecond) % 30000}, 300*time.Millisecond); err == nil {
					served = time.Since(killed)
				}
			}
			if rebuilt == 0 {
				indexed = 0
				for _, w := range other.workerStatsWithin(model, 300*time.Millisecond) {
					indexed += w.IndexedBlocks
				}
				if indexed >= 0.99*before {
					rebuilt = time.Since(killed)
				}
			}
			if served > 0 && hit == 0 {
				if probe == len(probes) {
					b.Fatalf("no prefix hit in %d probes (%.1f s after the kill)", probe, time.Since(killed).Seconds())
				}
				cached, err := completeIDs(hc, other.url, probes[probe], 10*time.Second)
				probe++
				if err == nil && cached >= promptLen/2 {
					hit = time.Since(killed)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Afterwards, every sample's half is a hit.
		hits := 0
		for _, s := range checks {
			if cached, err := completeIDs(hc, other.url, s, 10*time.Second); err == nil && cached >= promptLen/2 {
				hits++
			}
		}
		logf("kill → first served %.2f s; → index back to 99 %% (%.0f of %.0f blocks) %.2f s; → first prefix hit %.2f s "+
			"(after %d probes); after the first served: index %.2f s, hit %.2f s; samples hitting afterwards: %d of %d",
			served.Seconds(), indexed, before, rebuilt.Seconds(), hit.Seconds(), probe,
			(rebuilt - served).Seconds(), (hit - served).Seconds(), hits, len(checks))
		// The new activation began with its first line.
		var activated time.Duration
		for _, line := range strings.Split(other.Logs(), "\n") {
			var rec struct {
				Router string    `json:"router"`
				Time   time.Time `json:"time"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Router == model && rec.Time.After(killed) {
				activated = rec.Time.Sub(killed)
				break
			}
		}
		if activated == 0 {
			b.Fatalf("%s logged no router line after the kill", other.name)
		}
		logf("the new activation on %s began %.2f s after the kill: the index back %.2f s after it, a prefix hit %.2f s after it",
			other.name, activated.Seconds(), (rebuilt - activated).Seconds(), (hit - activated).Seconds())
		b.ReportMetric(activated.Seconds(), "activated-s")
		b.ReportMetric((rebuilt - activated).Seconds(), "rebuilt-after-move-s")
		b.ReportMetric((hit - activated).Seconds(), "hit-after-move-s")
		b.ReportMetric(before, "indexed-blocks")
		b.ReportMetric(served.Seconds(), "served-s")
		b.ReportMetric(float64(hits)/float64(len(checks)), "sample-hit-ratio")
	}
}

var (
	moveBlocks  = flag.Int("move.blocks", 1<<20, "BenchmarkClusterRouterMove: KV blocks to index before the move")
	moveWorkers = flag.Int("move.workers", 8, "BenchmarkClusterRouterMove: mock workers")
	moveSpeedup = flag.Float64("move.speedup", 2, "BenchmarkClusterRouterMove: the mock engines' --speedup-ratio")
)

// completeIDs sends a non-streaming completion of the token ids (max_tokens 1) and
// returns the prompt tokens the engine reports cached.
func completeIDs(hc *http.Client, url string, ids []int, timeout time.Duration) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": ids, "max_tokens": 1})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, msg)
	}
	var out struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(msg, &out); err != nil {
		return 0, err
	}
	return out.Usage.Details.Cached, nil
}
