package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turbine-llm/turbine/internal/consultest"
)

// localCluster is a cluster of separate turbine processes around a real Consul agent.
type localCluster struct {
	t      testing.TB
	consul *consultest.Agent
}

func newLocalCluster(t testing.TB) *localCluster {
	t.Helper()
	if turbineBin == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
	return &localCluster{t: t, consul: consultest.Start(t)}
}

func (c *localCluster) discovery() string { return "consul://" + c.consul.Addr() }

// clusterArgs are the membership flags every member of a test cluster gets: a killed
// member leaves within about three seconds, and a member starved of CPU for a moment
// (six refreshes missed) does not.
func (c *localCluster) clusterArgs() []string {
	return []string{"--discovery", c.discovery(), "--log-format", "json", "--consul-ttl", "3s",
		"--consul-ttl-refresh", "500ms"}
}

func (c *localCluster) frontend(name string) *server {
	c.t.Helper()
	args := append([]string{"frontend", "--port", "0"}, c.clusterArgs()...)
	return startTurbine(c.t, name, "turbine frontend serving", args...)
}

func (c *localCluster) node(id string, workers int, extra ...string) *server {
	c.t.Helper()
	args := append([]string{"node", "--node-id", id, "--workers", strconv.Itoa(workers), "--heartbeat", "200ms",
		"--speedup-ratio", "50", "--http-port", "0"}, c.clusterArgs()...)
	return startTurbine(c.t, id, "node agent joined the cluster", append(args, extra...)...)
}

// chat sends one non-streaming chat request and returns the usage.
func chat(ctx context.Context, s *server, prompt string) (openai.CompletionUsage, error) {
	return chatWith(ctx, s, model, prompt)
}

// mustChat sends n requests and fails the test on any error.
func mustChat(t testing.TB, s *server, n int, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := chat(ctx, s, fmt.Sprintf("%s request %d about rivers", what, i)); err != nil {
			t.Fatalf("%s: request %d: %v", what, i, err)
		}
	}
}

// workersOn lists the workers (by id prefix) the router of model routes to.
func workersOn(s *server, prefix string) []string {
	var out []string
	for id := range s.workerStats(model) {
		if strings.HasPrefix(id, prefix) {
			out = append(out, id)
		}
	}
	return out
}

// servesModel reports whether GET /v1/models lists the model.
func servesModel(s *server) bool {
	resp, err := http.Get(s.url + "/v1/models")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode == http.StatusOK && strings.Contains(b.String(), `"`+model+`"`)
}

func TestClusterNodeKilled(t *testing.T) {
	c := newLocalCluster(t)
	t0 := time.Now()
	fe := c.frontend("frontend")
	n1 := c.node("node-1", 1)
	c.node("node-2", 1)
	fe.waitReady(model, 2)
	t.Logf("1 frontend + 2 nodes: model served by 2 ready workers %.1f s after start", time.Since(t0).Seconds())
	mustChat(t, fe, 6, "before the kill")

	// kill -9 one node: its worker leaves routing, the other node keeps serving.
	killed := time.Now()
	n1.kill()
	fe.waitFor(30*time.Second, "node-1's worker to leave routing", func() bool {
		return len(workersOn(fe, "node-1")) == 0 && len(workersOn(fe, "node-2")) == 1
	})
	t.Logf("node kill -9 → its workers out of routing: %.2f s", time.Since(killed).Seconds())
	mustChat(t, fe, 6, "after node-1 died")
	if !servesModel(fe) {
		t.Fatal("/v1/models dropped the model while node-2 still serves it")
	}

	// Restarting the node brings its worker back.
	c.node("node-1", 1)
	fe.waitReady(model, 2)
	mustChat(t, fe, 4, "after node-1 came back")
}

func TestClusterLastNodeKilledDropsTheModel(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	n := c.node("node-1", 1)
	fe.waitReady(model, 1)
	mustChat(t, fe, 2, "before the kill")
	n.kill()
	fe.waitFor(30*time.Second, "/v1/models to drop the model", func() bool { return !servesModel(fe) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := chat(ctx, fe, "anyone there?")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request for a model whose last node died: %v, want 503", err)
	}
	c.node("node-1", 1)
	fe.waitReady(model, 1)
	mustChat(t, fe, 2, "after the node came back")
}

func TestClusterRouterGrainMoves(t *testing.T) {
	c := newLocalCluster(t)
	fes := []*server{c.frontend("frontend-a"), c.frontend("frontend-b")}
	c.node("node-1", 2, "--heartbeat", "1s") // the default: the move is timed as operators get it
	for _, fe := range fes {
		fe.waitReady(model, 2)
	}
	// Any frontend serves any model.
	mustChat(t, fes[0], 2, "through frontend-a")
	mustChat(t, fes[1], 2, "through frontend-b")

	// Fill the KV index with one long prefix.
	prefix := longText("delta", 300)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := chat(ctx, fes[0], prefix+" first question"); err != nil {
		t.Fatal(err)
	}
	fes[0].waitFor(10*time.Second, "indexed blocks", func() bool { return indexedBlocks(fes[0]) > 0 })

	// The Router grain lives on the member whose log has the router's lines.
	host, other := fes[0], fes[1]
	if !strings.Contains(host.Logs(), `"router":"`+model+`"`) {
		host, other = other, host
	}
	if !strings.Contains(host.Logs(), `"router":"`+model+`"`) {
		t.Fatalf("no frontend logged hosting the %s router:\n%s\n%s", model, fes[0].Logs(), fes[1].Logs())
	}
	t.Logf("the %s Router grain lives on %s; killing it", model, host.name)
	killed := time.Now()
	host.kill()

	// The next requests are served once the grain re-activates on the other frontend.
	// Short client timeouts: a request caught by the kill waits for its own timeout, which
	// would otherwise be what this measures.
	other.waitFor(30*time.Second, "a request served after the router's member died", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := chat(ctx, other, "are you back?")
		return err == nil
	})
	served := time.Since(killed)
	// KV-aware placement is back once the moved grain rebuilt its index from the workers'
	// block-list dumps: the long prefix is found again.
	other.waitFor(30*time.Second, "a prefix hit through the moved router", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		u, err := chat(ctx, other, prefix+" second question")
		return err == nil && u.PromptTokensDetails.CachedTokens > 0
	})
	t.Logf("router member kill -9 → first request served: %.2f s; → KV-aware again (prefix hit): %.2f s (%.2f s after the first served)",
		served.Seconds(), time.Since(killed).Seconds(), (time.Since(killed) - served).Seconds())
	if !strings.Contains(other.Logs(), `"router":"`+model+`"`) {
		t.Fatalf("%s served after the move but logged no router lines", other.name)
	}
}

func TestClusterSurvivesConsulOutage(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	n := c.node("node-1", 1)
	fe.waitReady(model, 1)
	mustChat(t, fe, 2, "before the outage")

	linesBefore := []int{strings.Count(fe.Logs(), "\n"), strings.Count(n.Logs(), "\n")}
	c.consul.Stop()
	// Ten seconds without the agent: members already known keep serving.
	end := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		mustChat(t, fe, 1, fmt.Sprintf("during the outage (%d)", i))
		select {
		case <-fe.done:
			t.Fatalf("frontend exited during the Consul outage:\n%s", fe.Logs())
		case <-n.done:
			t.Fatalf("node exited during the Consul outage:\n%s", n.Logs())
		case <-time.After(500 * time.Millisecond):
		}
	}
	c.consul.Restart(t) // dev mode: every registration is gone

	// Membership converges again: both members re-register and pass their checks.
	client, err := consulapi.NewClient(&consulapi.Config{Address: c.consul.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	fe.waitFor(30*time.Second, "both members passing in Consul again", func() bool {
		entries, _, err := client.Health().Service("turbine", "", true, nil)
		return err == nil && len(entries) == 2
	})
	for i, s := range []*server{fe, n} {
		if grown := strings.Count(s.Logs(), "\n") - linesBefore[i]; grown > 60 {
			t.Errorf("%s logged %d lines during a 10 s Consul outage (flooding):\n%s", s.name, grown, s.Logs())
		}
	}
	mustChat(t, fe, 2, "after the outage")
	// A new frontend learns the cluster from Consul alone, so it proves convergence.
	fe2 := c.frontend("frontend-2")
	fe2.waitReady(model, 1)
	mustChat(t, fe2, 2, "through a frontend started after the outage")
}

// indexedBlocks sums the KV blocks the router indexes over every worker.
func indexedBlocks(s *server) float64 {
	total := 0.0
	for _, w := range s.workerStats(model) {
		total += w.IndexedBlocks
	}
	return total
}

// A node serves a model whose tokenizer folder the frontend's machine does not have: the
// frontend fetches the files from a worker (digest-checked) and preprocesses with them.
// The node names the folder by a relative path, which resolves only in its own working
// directory, as a path on another machine would.
func TestClusterFrontendFetchesTokenizerFiles(t *testing.T) {
	c := newLocalCluster(t)
	nodeDir := t.TempDir()
	src := filepath.Join("..", "..", "actors", "frontend", "testdata", "tiny")
	if err := os.CopyFS(filepath.Join(nodeDir, "tiny-model"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	fe := startTurbineIn(t, t.TempDir(), "frontend", "turbine frontend serving",
		append([]string{"frontend", "--port", "0", "--model-cache-dir", cache}, c.clusterArgs()...)...)
	args := append([]string{"node", "--node-id", "node-1", "--workers", "1", "--heartbeat", "200ms",
		"--speedup-ratio", "50", "--model", "tiny", "--tokenizer", "./tiny-model", "--max-model-len", "512", "--http-port", "0"},
		c.clusterArgs()...)
	startTurbineIn(t, nodeDir, "node-1", "node agent joined the cluster", args...)
	fe.waitReady("tiny", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := sdk(fe)
	resp, err := cl.Completions.New(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel("tiny"),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello world")},
		MaxTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatalf("completion with a tokenizer only the node has: %v\n%s", err, fe.Logs())
	}
	if resp.Usage.PromptTokens == 0 {
		t.Fatalf("usage %+v", resp.Usage)
	}
	fetched, err := filepath.Glob(filepath.Join(cache, "*", "tokenizer.json"))
	if err != nil || len(fetched) != 1 {
		t.Fatalf("frontend's model cache holds %v (%v), want one fetched tokenizer.json", fetched, err)
	}
}

// SIGTERM to a node under load: its workers leave routing at once, the streams they are
// serving run to their end within the drain timeout, and the node exits cleanly.
func TestClusterNodeDrainsOnSIGTERM(t *testing.T) {
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	n1 := c.node("node-1", 1, "--speedup-ratio", "5", "--drain-timeout", "60s")
	c.node("node-2", 1, "--speedup-ratio", "5")
	fe.waitReady(model, 2)

	const streams, maxTokens = 8, 120
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type result struct {
		worker, finish string
		tokens         int64
		err            error
	}
	results := make(chan result, streams)
	started := make(chan struct{}, streams)
	for i := 0; i < streams; i++ {
		go func(i int) {
			cl := sdk(fe)
			st := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:         model,
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("drain %d", i))},
				MaxTokens:     openai.Int(maxTokens),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, option.WithJSONSet("ignore_eos", true))
			var r result
			first := true
			for st.Next() {
				ch := st.Current()
				if first && len(ch.Choices) > 0 {
					first = false
					started <- struct{}{}
				}
				for _, c := range ch.Choices {
					if c.FinishReason != "" {
						r.finish = c.FinishReason
					}
				}
				if ch.Usage.CompletionTokens > 0 {
					r.tokens = ch.Usage.CompletionTokens
				}
			}
			r.err = st.Err()
			results <- r
		}(i)
	}
	for i := 0; i < streams; i++ {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("streams did not start")
		}
	}
	if err := n1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	fe.waitFor(10*time.Second, "node-1's worker to leave routing", func() bool { return len(workersOn(fe, "node-1")) == 0 })
	for i := 0; i < streams; i++ {
		r := <-results
		if r.err != nil || r.finish != "length" || r.tokens != maxTokens {
			t.Errorf("stream %d: finish %q, %d tokens, error %v; want length, %d tokens, no error", i, r.finish, r.tokens, r.err, maxTokens)
		}
	}
	select {
	case <-n1.done:
	case <-time.After(30 * time.Second):
		t.Fatal("node-1 did not exit after draining")
	}
	if err := n1.cmd.Wait(); err != nil {
		t.Fatalf("node-1 exit: %v", err)
	}
	// Drained: the node finished its streams (a stream whose last chunk raced the worker's
	// stop may have moved to node-2, which the client cannot tell).
	if !strings.Contains(n1.Logs(), "draining workers") {
		t.Fatalf("node-1 did not log draining its workers:\n%s", n1.Logs())
	}
	t.Logf("drain: %d streams finished; migrated %v", streams, metricSum(fe, "turbine_frontend_migrations_total"))
	mustChat(t, fe, 2, "after node-1 drained")
}

// metricSum adds up every series of a metric on s's /metrics.
func metricSum(s *server, name string) float64 {
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if n, _, v, ok := parseMetricLine(line); ok && n == name {
			total += v
		}
	}
	return total
}

// kill -9 of a whole node process mid-stream, under 200 concurrent streams over three
// nodes: every stream finishes with exactly the text of an undisturbed run (the mock
// engine's tokens are a function of the seed and every token before them), the killed
// node's streams migrated to the others.
func TestClusterNodeKilledMidStreamMigrates(tt *testing.T) {
	t := newVerdict(tt)
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	nodes := map[string]*server{}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		nodes[id] = c.node(id, 1, "--speedup-ratio", "10")
	}
	fe.waitReady(model, 3)
	const n, maxTokens = 200, 1200
	base := runStreamsN(t, fe, n, maxTokens, 3*time.Minute, nil)
	for i, r := range base {
		if r.transport != "" || r.errFrame != "" || !r.done || r.finish != "length" || r.completion != maxTokens {
			t.Fatalf("undisturbed request %d: %+v", i, r)
		}
	}
	victim := ""
	got := runStreamsN(t, fe, n, maxTokens, 3*time.Minute, func(started map[string]int) {
		victim = mostStarted(t, started)
		node := nodes[victim[:strings.LastIndexByte(victim, '-')]]
		if node == nil {
			t.Errorf("no node for worker %s", victim)
			return
		}
		node.kill()
	})
	checkMigrated(t, fe, 3, victim, base, got)
}
