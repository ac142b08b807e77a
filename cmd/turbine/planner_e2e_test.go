package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/gateway"
)

// plannerPrompt is a prompt of n distinct random words (about 2n tokens with the builtin
// tokenizer): prompts share no prefix blocks.
func plannerPrompt(rng *rand.Rand, n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", rng.IntN(100000))
	}
	return strings.Join(words, " ")
}

// streamTally counts streamed completions and keeps those that did not end in full.
type streamTally struct {
	mu       sync.Mutex
	failures []string
	finished atomic.Int64
}

func (c *streamTally) check(r drainSSE) {
	c.finished.Add(1)
	if r.err != nil || r.errs > 0 || !r.done || r.finish != "length" {
		c.mu.Lock()
		c.failures = append(c.failures, fmt.Sprintf("%+v", r))
		c.mu.Unlock()
	}
}

// failed fails t when any request did not end in full.
func (c *streamTally) failed(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) > 0 {
		t.Fatalf("%d of %d requests failed: %v", len(c.failures), c.finished.Load(), c.failures[:min(len(c.failures), 5)])
	}
}

// closedLoad runs clients that each stream completions of maxTokens one after another
// until stop is called; stop returns once every started request has ended.
func closedLoad(ctx context.Context, s *server, tally *streamTally, clients, promptWords, maxTokens int) (stop func()) {
	loadCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 14))
			for loadCtx.Err() == nil {
				// ctx, not loadCtx: a started request runs to its end
				tally.check(streamSSE(ctx, s, plannerPrompt(rng, promptWords), maxTokens, nil))
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// plannerStatus reads GET /admin/planner (the only model served); nil when it does not
// answer 200.
func (s *server) plannerStatus() *gateway.PlannerStatus {
	resp, err := http.Get(s.url + "/admin/planner")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var st gateway.PlannerStatus
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	return &st
}

// plannerGauges reads the planner's per-pool gauges of /metrics for the aggregated pool
// of the mock model (target, ready, starting, stopping) and the model's other planner
// series, keyed by their name and labels as written.
func (s *server) plannerGauges() map[string]float64 {
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "turbine_planner_") && !strings.HasPrefix(line, "turbine_frontend_planner_") &&
			!strings.HasPrefix(line, "turbine_frontend_migrations_total") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[sp+1:], 64); err == nil {
			out[line[:sp]] = v
		}
	}
	return out
}

func term(st *gateway.PlannerStatus, name string) (float64, bool) {
	for _, t := range st.Terms {
		if t.Name == name {
			return t.Value, true
		}
	}
	return 0, false
}

// planned is the aggregated pool of a status.
func planned(st *gateway.PlannerStatus) gateway.PlannerPool {
	for _, p := range st.Pools {
		if p.Pool == "aggregated" {
			return p
		}
	}
	return gateway.PlannerPool{}
}

// TestE2EPlannerScalesUpAndDown: `turbine serve --planner load --workers 1` with short
// periods and a small KV cache per mock engine. Clients keep streaming completions: every
// worker fills its KV cache, and the planner starts workers (up to --gpu-budget), which
// /admin/planner explains (every ready worker over the KV usage target) and /metrics
// shows. Then the load stops, but for a few long streams spread over the workers: the
// planner drains workers one step at a time down to --min-workers 1; the streams of a
// drained worker move to the others (migration), and no request fails.
func TestE2EPlannerScalesUpAndDown(t *testing.T) {
	const (
		promptWords = 150 // about 300 tokens with the builtin tokenizer
		clients     = 24
		budget      = 4
	)
	s := startServe(t, 1, "--planner", "load", "--planner-interval", "500ms", "--planner-report-interval", "200ms",
		"--planner-drain-timeout", "1s", "--min-workers", "1", "--gpu-budget", strconv.Itoa(budget),
		"--num-gpu-blocks", "80", "--max-model-len", "4096", "--migration-limit", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Phase 1: a closed loop of clients until the planner has added workers and three are
	// ready.
	tally := &streamTally{}
	stopLoad := closedLoad(ctx, s, tally, clients, promptWords, 200)
	var scaleUp *gateway.PlannerStatus // the first decision that asked for more workers than there were
	maxReady := 0
	s.waitFor(150*time.Second, "the planner to add workers", func() bool {
		if st := s.plannerStatus(); st != nil && scaleUp == nil {
			if p := planned(st); p.Target > p.Ready+p.Starting {
				scaleUp = st
			}
		}
		g := s.plannerGauges()
		ready := int(g[`turbine_planner_ready_workers{model="turbine-mock",pool="aggregated"}`])
		maxReady = max(maxReady, ready)
		return scaleUp != nil && ready >= 3
	})
	stopLoad()

	// /admin/planner explained the scale-up: load mode on the local connector, every
	// ready worker at or over the KV usage target.
	if scaleUp.Mode != "load" || scaleUp.Connector != "local" || scaleUp.Decisions < 1 || scaleUp.At == "" ||
		scaleUp.GPUBudget != budget || scaleUp.MinWorkers != 1 || scaleUp.Frontends != 1 {
		t.Errorf("scale-up status %+v", scaleUp)
	}
	kvTarget, _ := term(scaleUp, "kv_usage_target")
	loads, okLoads := term(scaleUp, "aggregated_ready_loads")
	over, okOver := term(scaleUp, "aggregated_over")
	kvMax, okKV := term(scaleUp, "aggregated_kv_usage_max")
	if !okLoads || !okOver || !okKV || loads < 1 || over != loads || kvMax < kvTarget {
		t.Errorf("the scale-up is not explained by every worker over the KV usage target: terms %+v", scaleUp.Terms)
	}
	t.Logf("scale-up decision: %+v", scaleUp)

	// /metrics has the planner's gauges and the frontend's reports.
	g := s.plannerGauges()
	for _, series := range []string{
		`turbine_planner_target_workers{model="turbine-mock",pool="aggregated"}`,
		`turbine_planner_starting_workers{model="turbine-mock",pool="aggregated"}`,
		`turbine_planner_predicted_requests{model="turbine-mock"}`,
		`turbine_planner_correction_factor{model="turbine-mock",phase="decode"}`,
		`turbine_planner_held{model="turbine-mock"}`,
		`turbine_planner_gpu_budget{model="turbine-mock"}`,
	} {
		if _, ok := g[series]; !ok {
			t.Errorf("/metrics lacks %s: %v", series, g)
		}
	}
	if g[`turbine_planner_decisions_total{model="turbine-mock"}`] < 2 || g[`turbine_frontend_planner_reports_total{model="turbine-mock",outcome="sent"}`] < 1 {
		t.Errorf("decisions or reports not counted: %v", g)
	}

	// Phase 2: the clients stopped; one long stream per worker keeps running while the
	// planner drains workers.
	longs := max(maxReady, 3)
	rng := rand.New(rand.NewPCG(99, 14))
	var wg sync.WaitGroup
	for range longs {
		wg.Add(1)
		p := plannerPrompt(rng, promptWords)
		go func() {
			defer wg.Done()
			tally.check(streamSSE(ctx, s, p, 600, nil))
		}()
	}
	s.waitFor(150*time.Second, "the planner to shrink back to --min-workers 1", func() bool {
		g := s.plannerGauges()
		pool := `{model="turbine-mock",pool="aggregated"}`
		ready := 0
		for _, w := range s.workerStats(model) {
			if w.Ready {
				ready++
			}
		}
		return g["turbine_planner_target_workers"+pool] == 1 && g["turbine_planner_ready_workers"+pool] == 1 &&
			g["turbine_planner_stopping_workers"+pool] == 0 && ready == 1
	})
	wg.Wait()
	tally.failed(t)
	logs := s.Logs()
	drained := regexp.MustCompile(`"in_flight":([1-9][0-9]*)[^\n]*"message":"draining: leaving routing"`).FindAllString(logs, -1)
	migrated := s.plannerGauges()
	var moved float64
	for k, v := range migrated {
		if strings.HasPrefix(k, "turbine_frontend_migrations_total") {
			moved += v
		}
	}
	t.Logf("%d requests, all answered in full; peak %d ready workers; %d drained worker(s) had streams in flight; %v streams migrated",
		tally.finished.Load(), maxReady, len(drained), moved)
	if len(drained) > 0 && moved == 0 {
		t.Errorf("workers were drained with streams in flight, and no stream migrated:\n%s", strings.Join(drained, "\n"))
	}
}

// TestE2EPlannerCluster: `turbine planner` in a Consul cluster with a frontend (reporting
// on its own: --planner-reports auto) and one node agent running one mock worker. Under
// load the planner has the node start a second worker; /admin/planner on the frontend
// explains the decision with the frontend's reports in it; once the load stops the node
// drains it again, and no request failed.
func TestE2EPlannerCluster(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	node := c.node("node-1", 1, "--speedup-ratio", "1", "--num-gpu-blocks", "80", "--max-model-len", "4096")
	fe.waitReady(model, 1)
	args := append([]string{"planner", "--mode", "load", "--planner-interval", "500ms", "--planner-drain-timeout", "1s",
		"--gpu-budget", "2", "--min-workers", "1"}, c.clusterArgs()...)
	startTurbine(t, "planner", "turbine planner joined the cluster", args...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	tally := &streamTally{}
	stopLoad := closedLoad(ctx, fe, tally, 16, 150, 200)
	// The decision that grows the pool may come before the frontend's first report holds a
	// measurement (load mode scales on the workers' load): the measurements are awaited
	// in any status seen while the load runs.
	var explained, measured *gateway.PlannerStatus
	fe.waitFor(150*time.Second, "a second worker started by the planner, and the frontend's measurements in its status", func() bool {
		st := fe.plannerStatus()
		if st != nil && st.Frontends == 1 && planned(st).Target == 2 {
			explained = st
		}
		if st != nil && st.Frontends == 1 && (st.Requests > 0 || st.TTFTP90Ms > 0) {
			measured = st
		}
		return explained != nil && measured != nil && len(workersOn(fe, "node-1-")) == 2
	})
	stopLoad()
	if explained.Connector != "local" || explained.Mode != "load" || measured.Connector != "local" {
		t.Errorf("status %+v: want the local connector in load mode", explained)
	}
	fe.waitFor(150*time.Second, "the planner to drain back to one worker", func() bool {
		st := fe.plannerStatus()
		return st != nil && planned(st).Target == 1 && planned(st).Ready == 1 && planned(st).Stopping == 0 &&
			len(workersOn(fe, "node-1-")) == 1
	})
	tally.failed(t)
	if !strings.Contains(node.Logs(), `"message":"draining worker, then stopping it"`) {
		t.Errorf("the node drained no worker:\n%s", node.Logs())
	}
	t.Logf("%d requests, all answered in full; the decision that grew the pool: %+v", tally.finished.Load(), explained)
}
