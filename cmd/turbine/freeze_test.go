package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/openai/openai-go/v3"
	"github.com/redis/go-redis/v9"
)

// A member frozen with SIGSTOP for longer than its TTL is dropped by the cluster, which
// blocks its id for good. Frozen past protoactor's heartbeat expiry (20 s), it blocks
// every peer in turn once resumed, having heard none of them meanwhile, and answers
// "blocked" when they connect to it — unless it first reads the gossip they sent it
// before they dropped it, a race inside protoactor: the tests log which healthy members
// heard the answer. The frozen member must restart itself (a new member id); the healthy
// members must not take its answer for their own loss, and requests that do not need the
// frozen member must not fail.
const freezeFor = 22 * time.Second

// Log messages of the cluster package's watchdog.
const (
	lostMsg    = "cluster member lost: the cluster has dropped it for good; restart it with a new id"
	ignoredMsg = "a member the cluster has dropped answered that it has blocked this member; ignored: it is the one to restart"
	adoptedMsg = "engine adopted from the node's previous cluster member: its model and KV cache kept"
)

func TestClusterFrozenFrontendRestartsAlone(tt *testing.T) {
	t := newVerdict(tt)
	c := newLocalCluster(t)
	fa, fb := c.frontend("frontend-a"), c.frontend("frontend-b")
	n1, n2 := c.node("node-1", 1), c.node("node-2", 1)
	for _, fe := range []*server{fa, fb} {
		fe.waitReady(model, 2)
	}
	mustChat(t, fa, 2, "through frontend-a")
	mustChat(t, fb, 2, "through frontend-b")
	// Freeze the frontend that does not host the model's Router grain, and send the load
	// through the one that does: the healthy path.
	frozen, healthy := fa, fb
	if strings.Contains(fa.Logs(), `"router":"`+model+`"`) {
		frozen, healthy = fb, fa
	}
	healthyMembers := []*server{healthy, n1, n2}
	before := memberStarts(healthyMembers...)
	frozenID := lastMemberID(t, frozen)

	l := startLoad(healthy, model)
	defer l.finish()
	frozenAt := freeze(t, frozen)
	// The Catalog grain may live on the frozen frontend: the healthy one serves again
	// once it has dropped it and the grain has moved. From then on nothing may fail.
	waitDropped(t, c, frozenID, 15*time.Second)
	healthy.waitFor(30*time.Second, "a request served through the healthy frontend after the drop", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := chat(ctx, healthy, "still there?")
		return err == nil
	})
	windowFrom := time.Now()
	t.Logf("%s frozen; dropped and served around %.1f s later", frozen.name, windowFrom.Sub(frozenAt).Seconds())

	resumedAt := thaw(t, frozen, frozenAt)
	reason := waitRestarted(t, frozen, frozenID, 20*time.Second)
	t.Logf("%s restarted its member %.1f s after SIGCONT: %s", frozen.name, time.Since(resumedAt).Seconds(), reason)
	// The new member may take over the Router or the Catalog grain (rendezvous hashing
	// over the frontends), which requests in flight on the healthy frontend at that
	// moment may not survive: the window checked ends when the old member is lost, just
	// before the new one starts and registers (checkNoFailures).
	windowTo := lostAt(t, frozen, frozenID)
	frozen.waitReady(model, 2)
	mustChat(t, frozen, 2, "through the restarted frontend")
	observe(resumedAt)
	report := l.finish()
	t.Logf("load through %s: %s; the window checked: %.1f s from the drop to %.1f s after SIGCONT",
		healthy.name, report.summary(windowFrom, windowTo), windowTo.Sub(windowFrom).Seconds(), windowTo.Sub(resumedAt).Seconds())
	checkHealthyMembers(t, before, healthyMembers...)
	checkNoFailures(t, report, windowFrom, windowTo)
	if !strings.Contains(reason, "did not run") {
		t.Errorf("%s's member was lost for %q, want its pause", frozen.name, reason)
	}
}

// TestClusterFrozenNodeRestartsAlone freezes, together, a node (node-1), a node running
// its own KV block manager (node-3, --kvbm) and a block manager on its own (`turbine
// kvbm`): each must restart its member alone, keep its engine (node-1, node-3) and keep
// its block store serving on the same port with what it held (node-3, the kvbm).
func TestClusterFrozenNodeRestartsAlone(tt *testing.T) {
	t := newVerdict(tt)
	const healthyModel, kvbmModel = "healthy-mock", "kvbm-mock"
	c := newLocalCluster(t)
	fe := c.frontend("frontend")
	n1 := c.node("node-1", 1)
	n2 := c.node("node-2", 1, "--served-model-name", healthyModel)
	n3 := c.node("node-3", 1, "--served-model-name", kvbmModel, "--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "-1")
	k, kAddr := startKvbm(t, append(c.clusterArgs(), "--node-id", "kvbm-node")...)
	k.waitFor(30*time.Second, "the block manager's member", func() bool { return len(logRecords(k, "cluster member started")) > 0 })
	fe.waitReady(model, 1)
	fe.waitReady(healthyModel, 1)
	fe.waitReady(kvbmModel, 1)
	mustChat(t, fe, 2, "to node-1")
	// A long prompt cached in node-1's and node-3's engines before the freeze, and a
	// value in the block manager's store.
	prefix := longText("frozen", 300)
	if _, err := chat(context.Background(), fe, prefix+" first question"); err != nil {
		t.Fatal(err)
	}
	if _, err := chatWith(context.Background(), fe, kvbmModel, prefix+" first question"); err != nil {
		t.Fatal(err)
	}
	// A value in each block manager's store (node-3's and the one on its own).
	stores := map[*server]*redis.Client{n3: kvbmClient(kvbmAddr(t, n3), 1), k: kvbmClient(kAddr, 1)}
	for s, rdb := range stores {
		defer rdb.Close()
		if err := rdb.Set(context.Background(), "kept", "across members", 0).Err(); err != nil {
			t.Fatalf("%s's block manager: %v", s.name, err)
		}
	}
	healthyMembers := []*server{fe, n2}
	before := memberStarts(healthyMembers...)
	frozen := []*server{n1, n3, k}
	frozenIDs := map[*server]string{}
	for _, s := range frozen {
		frozenIDs[s] = lastMemberID(t, s)
	}

	// The healthy path: the model node-2 serves, through the frontend.
	l := startLoad(fe, healthyModel)
	defer l.finish()
	windowFrom := time.Now()
	frozenAt := map[*server]time.Time{}
	for _, s := range frozen {
		frozenAt[s] = freeze(t, s)
	}
	for _, s := range frozen {
		waitDropped(t, c, frozenIDs[s], 15*time.Second)
	}
	var resumedAt time.Time
	for _, s := range frozen {
		resumedAt = thaw(t, s, frozenAt[s])
	}
	for _, s := range frozen {
		reason := waitRestarted(t, s, frozenIDs[s], 20*time.Second)
		t.Logf("%s restarted its member %.1f s after SIGCONT: %s", s.name, time.Since(resumedAt).Seconds(), reason)
		if !strings.Contains(reason, "did not run") {
			t.Errorf("%s's member was lost for %q, want its pause", s.name, reason)
		}
	}
	fe.waitReady(model, 1)
	fe.waitReady(kvbmModel, 1)
	mustChat(t, fe, 2, "to the restarted node-1")
	// The new member's worker adopted the engine the lost one parked: no second start,
	// and the prompt cached before the freeze is still a prefix hit.
	for _, m := range []struct {
		node  *server
		model string
	}{{n1, model}, {n3, kvbmModel}} {
		u, err := chatWith(context.Background(), fe, m.model, prefix+" second question")
		if err != nil {
			t.Fatal(err)
		}
		if u.PromptTokensDetails.CachedTokens == 0 {
			t.Errorf("%s: no cached token for the prompt cached before the freeze (%d prompt tokens): the engine's KV cache was lost", m.node.name, u.PromptTokens)
		}
		if starts, adopted := len(logRecords(m.node, "engine started")), len(logRecords(m.node, adoptedMsg)); starts != 1 || adopted != 1 {
			t.Errorf("%s logged %d engine starts and %d adoptions, want 1 and 1: the lost member's engine was not kept", m.node.name, starts, adopted)
		}
	}
	// The block managers served on through the new members: one start each, the same
	// port, the store's contents kept.
	for _, s := range []*server{n3, k} {
		if n := len(logRecords(s, "KV block manager serving")); n != 1 {
			t.Errorf("%s started its block manager %d times, want once", s.name, n)
		}
	}
	for s, rdb := range stores {
		if got, err := rdb.Get(context.Background(), "kept").Result(); err != nil || got != "across members" {
			t.Errorf("%s's block manager after its member was replaced: GET kept = %q, %v; want the value set before", s.name, got, err)
		}
	}
	observe(resumedAt)
	report := l.finish()
	t.Logf("load for %s: %s", healthyModel, report.summary(windowFrom, time.Now()))
	checkHealthyMembers(t, before, healthyMembers...)
	checkNoFailures(t, report, windowFrom, time.Now())
}

// chatWith sends one non-streaming chat request for model and returns the usage.
func chatWith(ctx context.Context, s *server, model, prompt string) (openai.CompletionUsage, error) {
	c := sdk(s)
	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(4),
	})
	if err != nil {
		return openai.CompletionUsage{}, err
	}
	return resp.Usage, nil
}

// kvbmAddr is the RESP address (host:port) s's block manager logged when it started.
func kvbmAddr(t testing.TB, s *server) string {
	t.Helper()
	recs := logRecords(s, "KV block manager serving")
	if len(recs) == 0 {
		t.Fatalf("%s logged no block manager start", s.name)
	}
	resp, _ := recs[0]["resp"].(string)
	return strings.TrimPrefix(resp, "resp://")
}

// freeze stops s's process (not its engines) with SIGSTOP; a cleanup resumes it if the
// test ends first.
func freeze(t testing.TB, s *server) time.Time {
	t.Helper()
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT) })
	return time.Now()
}

// thaw resumes s with SIGCONT once it has been stopped for freezeFor.
func thaw(t testing.TB, s *server, frozenAt time.Time) time.Time {
	t.Helper()
	<-time.After(time.Until(frozenAt.Add(freezeFor))) // the length of the fault under test
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// observe lets the load go on until observeFor after the resume: time for the healthy
// members to take the resumed member's "blocked" answers (it gossips every 300 ms until
// its member stops) for their own loss, which their watchdogs would find within a check
// (1 s), and for the requests of a member restarting to fail.
func observe(resumedAt time.Time) {
	<-time.After(time.Until(resumedAt.Add(observeFor))) // an observation window: nothing is to happen in it
}

// observeFor is how long after SIGCONT the healthy members are watched.
const observeFor = 8 * time.Second

// waitDropped waits until Consul no longer lists member id among the passing members:
// its check lapsed, and the cluster drops it.
func waitDropped(t testing.TB, c *localCluster, id string, limit time.Duration) {
	t.Helper()
	client, err := consulapi.NewClient(&consulapi.Config{Address: c.consul.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for {
		entries, _, err := client.Health().Service("turbine", "", true, nil)
		if err == nil && !slices.ContainsFunc(entries, func(e *consulapi.ServiceEntry) bool { return e.Service.Meta["id"] == id }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s still passes its Consul check %s after SIGSTOP (err %v)", id, limit, err)
		}
		time.Sleep(50 * time.Millisecond) // polling Consul: there is no event to wait on
	}
}

// logRecords returns the JSON log lines of s whose message is msg.
func logRecords(s *server, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s.Logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["message"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// lastMemberID is the id of s's latest cluster member.
func lastMemberID(t testing.TB, s *server) string {
	t.Helper()
	recs := logRecords(s, "cluster member started")
	if len(recs) == 0 {
		t.Fatalf("%s logged no member start", s.name)
	}
	id, _ := recs[len(recs)-1]["member"].(string)
	return id
}

// memberStarts counts, per process, its member starts and engine starts.
func memberStarts(ss ...*server) map[*server][2]int {
	out := map[*server][2]int{}
	for _, s := range ss {
		out[s] = [2]int{len(logRecords(s, "cluster member started")), len(logRecords(s, "engine started"))}
	}
	return out
}

// lostAt is when s logged the loss of its member id.
func lostAt(t testing.TB, s *server, id string) time.Time {
	t.Helper()
	for _, rec := range logRecords(s, lostMsg) {
		if rec["member"] != id {
			continue
		}
		ts, _ := rec["time"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("%s: the time of member %s's loss, %q: %v", s.name, id, ts, err)
		}
		return at
	}
	t.Fatalf("%s: member %s was never lost", s.name, id)
	return time.Time{}
}

// waitRestarted waits until s has lost its member oldID and started a new one, and
// returns why the old one was lost.
func waitRestarted(t testing.TB, s *server, oldID string, limit time.Duration) string {
	t.Helper()
	var reason string
	s.waitFor(limit, s.name+" to restart its member", func() bool {
		for _, rec := range logRecords(s, lostMsg) {
			if rec["member"] == oldID {
				reason, _ = rec["reason"].(string)
			}
		}
		return reason != "" && lastMemberID(t, s) != oldID
	})
	return reason
}

// checkHealthyMembers fails the test for every member of ss that restarted its member or
// its engines since before, or lost its member. It logs which of them ignored the frozen
// member's "blocked" answers: whether the frozen member blocked its peers on resume is a
// race inside protoactor, so not every run shows them.
func checkHealthyMembers(t testing.TB, before map[*server][2]int, ss ...*server) {
	t.Helper()
	now := memberStarts(ss...)
	var ignored []string
	for _, s := range ss {
		if len(logRecords(s, ignoredMsg)) > 0 {
			ignored = append(ignored, s.name)
		}
	}
	t.Logf("healthy members that heard the resumed member answer \"blocked\" and ignored it: %v", ignored)
	for _, s := range ss {
		if now[s] != before[s] {
			t.Errorf("healthy %s restarted: member starts %d → %d, engine starts %d → %d",
				s.name, before[s][0], now[s][0], before[s][1], now[s][1])
		}
		for _, rec := range logRecords(s, lostMsg) {
			t.Errorf("healthy %s lost its member %v: %v", s.name, rec["member"], rec["reason"])
		}
	}
}

// checkNoFailures fails the test if a request started in [from, to) failed, naming the
// first ten. A request still in flight at to (what happens after to may fail it) counts
// only when it had run for over inFlightLimit by then: no request of the load takes that
// long unless it hangs.
func checkNoFailures(t testing.TB, r loadReport, from, to time.Time) {
	t.Helper()
	n := 0
	for _, f := range r.failures {
		if !f.counts(from, to) {
			continue
		}
		if n++; n <= 10 {
			t.Errorf("request on the healthy path started %s failed at %s: %s", f.at.Format("15:04:05.000"), f.end.Format("15:04:05.000"), f.err)
		}
	}
	if n > 10 {
		t.Errorf("… %d failed requests on the healthy path in all", n)
	}
}

// load sends requests for one model through one frontend until finish: a light load of
// two loops, one non-streaming and one streaming, each starting a request at most every
// loadEvery.
type load struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	mu     sync.Mutex
	report loadReport
}

const loadEvery = 50 * time.Millisecond

type loadReport struct {
	ok       int
	failures []loadFailure
}

type loadFailure struct {
	at  time.Time // when the request started
	end time.Time // when it failed
	err string
}

// inFlightLimit: no request of the load takes that long unless it hangs.
const inFlightLimit = 5 * time.Second

// counts reports whether f fails the window [from, to) (checkNoFailures).
func (f loadFailure) counts(from, to time.Time) bool {
	return !f.at.Before(from) && f.at.Before(to) && (f.end.Before(to) || to.Sub(f.at) > inFlightLimit)
}

func (r loadReport) summary(from, to time.Time) string {
	var before, in, atEnd, after int
	for _, f := range r.failures {
		switch {
		case f.at.Before(from):
			before++
		case f.counts(from, to):
			in++
		case f.at.Before(to):
			atEnd++
		default:
			after++
		}
	}
	return fmt.Sprintf("%d requests succeeded, %d failed: %d before the window checked, %d in it, %d in flight at its end, %d after it",
		r.ok, len(r.failures), before, in, atEnd, after)
}

func startLoad(s *server, model string) *load {
	l := &load{stop: make(chan struct{})}
	c := sdk(s)
	for _, stream := range []bool{false, true} {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			pace := time.NewTicker(loadEvery)
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-pace.C:
				}
				at := time.Now()
				err := loadRequest(c, model, stream, fmt.Sprintf("request %d about the tides", i))
				l.mu.Lock()
				if err != nil {
					l.report.failures = append(l.report.failures, loadFailure{at: at, end: time.Now(), err: err.Error()})
				} else {
					l.report.ok++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// loadRequest sends one chat request; a stream must end with its usage and no error.
func loadRequest(c openai.Client, model string, stream bool, prompt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(8),
	}
	if !stream {
		_, err := c.Chat.Completions.New(ctx, p)
		return err
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, p)
	defer st.Close()
	usage := false
	for st.Next() {
		usage = usage || st.Current().Usage.CompletionTokens > 0
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if !usage {
		return fmt.Errorf("stream ended without its usage chunk")
	}
	return nil
}

// finish stops the load, waits for the requests in flight and returns the report.
func (l *load) finish() loadReport {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.report
}
