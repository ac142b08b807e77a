package cluster

import (
	"bytes"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/internal/consultest"
)

// These tests run against a real Consul agent (internal/consultest): the member under
// test in this process, the others in child processes.

const (
	seeTimeout = 20 * time.Second // for members to find each other
	testTTL    = DefaultTTL
)

type consulMember struct {
	*Member
	topo *topologyLog
	logs *syncBuffer
}

func startConsulMember(t *testing.T, agent *consultest.Agent, name string) *consulMember {
	t.Helper()
	logs := &syncBuffer{}
	m, err := Start(Config{Name: name, Discovery: "consul://" + agent.Addr(), Logger: zerolog.New(logs),
		WatchdogInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			t.Logf("member %s logs:\n%s", m.ID(), tail(logs.String(), 6000))
		}
	})
	if _, err := m.System.Root.SpawnNamed(echoProps(), "echo"); err != nil {
		t.Fatal(err)
	}
	return &consulMember{Member: m, topo: followTopology(m, nil), logs: logs}
}

func startConsulChild(t *testing.T, agent *consultest.Agent, name string) *child {
	t.Helper()
	return startChild(t, "member", childDiscoveryEnv+"=consul://"+agent.Addr(), childNameEnv+"="+name)
}

// skipIfPeerLeavesUnderRace skips a test in which a peer leaves this process's member:
// protoactor then races with itself (BlockList.Block against the gossip loop's IsBlocked,
// the endpoint manager's stop against removeEndpoint; docs/actor-library.md §13). Such tests run
// without -race.
func skipIfPeerLeavesUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("a peer leaves this process's member: protoactor's own data races (docs/reference.md §13); run without -race")
	}
}

// skipLongUnderShort skips a fault test that takes tens of seconds under -short.
func skipLongUnderShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault test (tens of seconds); skipped under -short")
	}
}

// componentLines keeps the zerolog JSON lines whose "component" field is component.
func componentLines(lines []string, component string) []string {
	var out []string
	for _, l := range lines {
		var rec struct {
			Component string `json:"component"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Component == component {
			out = append(out, l)
		}
	}
	return out
}

func has(ids ...string) func([]string) bool {
	return func(got []string) bool {
		for _, id := range ids {
			if !slices.Contains(got, id) {
				return false
			}
		}
		return true
	}
}

func lacks(id string) func([]string) bool {
	return func(got []string) bool { return !slices.Contains(got, id) }
}

// seeEachOther waits until p and c each have both in their topology.
func seeEachOther(t *testing.T, p *consulMember, c *child) {
	t.Helper()
	if _, ok := p.topo.waitFor(seeTimeout, has(p.ID(), c.ID)); !ok {
		ids, _, _ := p.topo.state()
		t.Fatalf("member %s does not see child %s: topology %v", p.ID(), c.ID, ids)
	}
	if !c.waitMembers(seeTimeout, has(p.ID(), c.ID)) {
		t.Fatalf("child %s does not see member %s: %+v", c.ID, p.ID(), c.status())
	}
}

// passingIDs asks the agent which members of the cluster pass their checks.
func passingIDs(t *testing.T, agent *consultest.Agent, name string) []string {
	t.Helper()
	client, err := api.NewClient(&api.Config{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := client.Health().Service(name, "", true, nil)
	if err != nil {
		t.Fatalf("health query: %v", err)
	}
	return memberIDs(passingMembers(name, entries))
}

func TestConsulMembersSeeEachOtherAndStopLeaves(t *testing.T) {
	skipIfPeerLeavesUnderRace(t)
	if inFreshProcess(t) {
		return
	}
	agent := consultest.Start(t)
	p := startConsulMember(t, agent, "see")
	c := startConsulChild(t, agent, "see")
	seeEachOther(t, p, c)
	if got := passingIDs(t, agent, "see"); !has(p.ID(), c.ID)(got) {
		t.Fatalf("consul lists %v, want both members", got)
	}

	stopAt := time.Now()
	c.send("stop")
	if _, ok := p.topo.waitFor(10*time.Second, lacks(c.ID)); !ok {
		t.Fatalf("a stopping member is still in the topology %s after Stop began", time.Since(stopAt).Round(time.Millisecond))
	}
	t.Logf("Stop to removal from the other member's topology: %s", time.Since(stopAt).Round(time.Millisecond))
	c.waitLine("stopped", 30*time.Second)
	if slices.Contains(passingIDs(t, agent, "see"), c.ID) {
		t.Fatal("the stopped member is still registered with Consul")
	}
	select {
	case <-p.Lost():
		t.Fatalf("the remaining member is lost: %s", p.LostReason())
	default:
	}
}

func TestConsulKilledMemberLeavesWithinTTL(t *testing.T) {
	skipIfPeerLeavesUnderRace(t)
	if inFreshProcess(t) {
		return
	}
	agent := consultest.Start(t)
	p := startConsulMember(t, agent, "kill")
	c := startConsulChild(t, agent, "kill")
	seeEachOther(t, p, c)

	killed := time.Now()
	if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Steady state: the dead member must leave within its TTL and the agent's sync, not
	// wait out a recovery window (2×TTL + 5 s).
	limit := testTTL + 3*time.Second
	if _, ok := p.topo.waitFor(limit, lacks(c.ID)); !ok {
		t.Fatalf("a member killed %s ago is still in the topology", time.Since(killed).Round(time.Millisecond))
	}
	t.Logf("kill -9 to removal from the other member's topology: %s (TTL %s)",
		time.Since(killed).Round(time.Millisecond), testTTL)
}

// The agent goes away for ten seconds and comes back empty (dev mode): nobody crashes,
// nobody leaves or is blocked, both register again, and the logs stay short.
func TestConsulAgentRestartKeepsMembers(t *testing.T) {
	skipLongUnderShort(t)
	if inFreshProcess(t) {
		return
	}
	agent := consultest.Start(t)
	p := startConsulMember(t, agent, "restart")
	defer p.Stop() // before the child ends: no peer leaves this member
	c := startConsulChild(t, agent, "restart")
	seeEachOther(t, p, c)

	pFrom, cFrom := p.logs.Len(), c.stderr.Len()
	agent.Stop()
	time.Sleep(10 * time.Second) // the outage under test
	agent.Restart(t)

	// Both register again.
	deadline := time.Now().Add(seeTimeout)
	for !has(p.ID(), c.ID)(passingIDs(t, agent, "restart")) {
		if time.Now().After(deadline) {
			t.Fatalf("after the restart consul lists %v, want both members", passingIDs(t, agent, "restart"))
		}
		time.Sleep(100 * time.Millisecond) // polling Consul: there is no event to wait on
	}
	// Let the recovery window close: from now on absences would count again. The window
	// is read once the member's membership query has answered again (its watch may still
	// be backing off when the registrations show): that answer, seeing Consul's index go
	// backwards, extends the window.
	for !p.consul.healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("the member's Consul provider is not healthy %s after the restart", seeTimeout)
		}
		time.Sleep(50 * time.Millisecond) // polling the provider: there is no event to wait on
	}
	p.consul.mu.Lock()
	windowEnd := p.consul.view.distrustUntil
	p.consul.mu.Unlock()
	time.Sleep(time.Until(windowEnd) + time.Second)
	seeEachOther(t, p, c)

	// The outage is logged in a few lines by the Consul provider (component "cluster"),
	// not once per retry. Warnings of the actor library are shown, not counted: they speak
	// of remoting and gossip under the machine's load, not of Consul.
	pLines, _ := p.logs.linesFrom(pFrom)
	cLines, _ := c.stderr.linesFrom(cFrom)
	t.Logf("log lines from the outage to the end of the recovery window: member %d, child %d:\n%s\n%s", len(pLines), len(cLines), strings.Join(pLines, "\n"), strings.Join(cLines, "\n"))
	for who, lines := range map[string][]string{"member": pLines, "child": cLines} {
		if own := componentLines(lines, "cluster"); len(own) > 12 {
			t.Errorf("%s's Consul provider logged %d lines through a 10 s outage, want a few:\n%s", who, len(own), strings.Join(own, "\n"))
		}
	}
	if _, left, _ := p.topo.state(); slices.Contains(left, c.ID) {
		t.Errorf("the child left the member's topology during the outage (left: %v)", left)
	}
	if bl := p.Cluster.Remote.BlockList(); bl.Len() > 0 {
		t.Errorf("the member blocked %v", bl.BlockedMembers().ToSlice())
	}
	st := c.status()
	if len(st.Blocked) > 0 || slices.Contains(st.Left, p.ID()) || st.Lost != "" {
		t.Errorf("child after the outage: %+v", st)
	}
	if p.LostReason() != "" {
		t.Errorf("member lost: %s", p.LostReason())
	}
	// And they still talk.
	if _, err := p.System.Root.RequestFuture(echoPID(c.Addr), wrapString("ping"), 5*time.Second).Result(); err != nil {
		t.Errorf("request to the child after the outage: %v", err)
	}
}

// A paused agent (SIGSTOP: connections hang, nothing answers) must not make anyone leave
// when it resumes with every TTL check expired.
func TestConsulAgentPauseKeepsMembers(t *testing.T) {
	skipLongUnderShort(t)
	if inFreshProcess(t) {
		return
	}
	agent := consultest.Start(t)
	p := startConsulMember(t, agent, "pause")
	defer p.Stop() // before the child ends: no peer leaves this member
	c := startConsulChild(t, agent, "pause")
	seeEachOther(t, p, c)

	if err := agent.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * testTTL) // the freeze under test: every TTL expires meanwhile
	if err := agent.Resume(); err != nil {
		t.Fatal(err)
	}
	p.consul.mu.Lock()
	windowEnd := p.consul.view.distrustUntil
	p.consul.mu.Unlock()
	if windowEnd.Before(time.Now()) {
		t.Fatal("the member did not notice the frozen agent")
	}
	time.Sleep(time.Until(windowEnd) + time.Second)
	seeEachOther(t, p, c)
	if _, left, _ := p.topo.state(); slices.Contains(left, c.ID) {
		t.Errorf("the child left the member's topology (left: %v)", left)
	}
	if st := c.status(); slices.Contains(st.Left, p.ID()) || len(st.Blocked) > 0 {
		t.Errorf("child after the pause: %+v", st)
	}
}

// A member started while its agent is down retries quietly and registers once the agent
// is up.
func TestConsulMemberStartsBeforeAgent(t *testing.T) {
	agent := consultest.Start(t)
	agent.Stop()
	p := startConsulMember(t, agent, "early")
	time.Sleep(3 * time.Second) // time for a hot loop to show: thousands of attempts
	lines, _ := p.logs.linesFrom(0)
	if len(lines) > 6 {
		t.Errorf("%d log lines in 3 s of an absent agent:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if p.consul.healthy() {
		t.Error("the provider reports healthy with no agent")
	}
	agent.Restart(t)
	deadline := time.Now().Add(seeTimeout)
	for !slices.Contains(passingIDs(t, agent, "early"), p.ID()) {
		if time.Now().After(deadline) {
			t.Fatalf("the member did not register within %s of the agent starting", seeTimeout)
		}
		time.Sleep(100 * time.Millisecond) // polling Consul: there is no event to wait on
	}
}

// Start → Stop → Start in one process: the first member deregisters, its provider's
// goroutines end, and the second member (a new id) registers.
func TestConsulStartStopStart(t *testing.T) {
	agent := consultest.Start(t)
	logs := &syncBuffer{}
	cfg := Config{Name: "again", Discovery: "consul://" + agent.Addr(), Logger: zerolog.New(logs)}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, agent, "again", first.ID())
	first.Stop()
	select {
	case <-first.consul.Done():
	default:
		t.Fatal("the provider's goroutines still run after Stop")
	}
	if n := providerGoroutines(); n != 0 {
		t.Fatalf("%d provider goroutines after Stop", n)
	}
	if slices.Contains(passingIDs(t, agent, "again"), first.ID()) {
		t.Fatal("the stopped member is still registered")
	}

	second, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	if second.ID() == first.ID() {
		t.Fatal("the second member has the first one's id")
	}
	waitRegistered(t, agent, "again", second.ID())
	if n := providerGoroutines(); n != 2 {
		t.Fatalf("%d provider goroutines with one member, want 2 (registration and watch)", n)
	}
}

func waitRegistered(t *testing.T, agent *consultest.Agent, name, id string) {
	t.Helper()
	deadline := time.Now().Add(seeTimeout)
	for !slices.Contains(passingIDs(t, agent, name), id) {
		if time.Now().After(deadline) {
			t.Fatalf("member %s did not register within %s", id, seeTimeout)
		}
		time.Sleep(50 * time.Millisecond) // polling Consul: there is no event to wait on
	}
}

// providerGoroutines counts the goroutines running the Consul provider's loops.
func providerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var count int
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("cluster.(*consulProvider).keep")) || bytes.Contains(g, []byte("cluster.(*consulProvider).watch")) {
			count++
		}
	}
	return count
}

// Consul loses a member's registration behind its back (an operator's deregister, an
// agent's anti-entropy): the other member, in steady state, drops it and blocks its id for
// good; the member itself registers again and looks healthy in Consul — a zombie. Its
// watchdog must notice that nobody gossips to it any more and close Lost.
func TestConsulMemberDroppedBehindItsBackIsLost(t *testing.T) {
	skipLongUnderShort(t)
	if inFreshProcess(t) {
		return
	}
	agent := consultest.Start(t)
	p := startConsulMember(t, agent, "dropped")
	defer p.Stop() // before the child ends: no peer leaves this member
	c := startConsulChild(t, agent, "dropped")
	seeEachOther(t, p, c)

	client, err := api.NewClient(&api.Config{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	if err := client.Agent().ServiceDeregister(p.ID()); err != nil {
		t.Fatal(err)
	}
	if !c.waitMembers(seeTimeout, lacks(p.ID())) {
		t.Fatalf("the child kept the deregistered member: %+v", c.status())
	}
	waitRegistered(t, agent, "dropped", p.ID()) // it registers again: healthy in Consul
	select {
	case <-p.Lost():
	case <-time.After(peerSilenceLimit + 10*time.Second):
		t.Fatal("the dropped member never noticed")
	}
	t.Logf("lost %s after the drop: %s", time.Since(dropped).Round(time.Millisecond), p.LostReason())
	if !strings.Contains(p.LostReason(), "none of the 1 members") {
		t.Errorf("LostReason = %q, want the silence of its peers", p.LostReason())
	}
	if st := c.status(); st.Lost != "" {
		t.Errorf("the child, which did nothing wrong, is lost: %s", st.Lost)
	}
}
