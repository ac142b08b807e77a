package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/rs/zerolog"
)

// Multi-member tests run each extra member in a child process — this test binary run
// again with childEnv naming the role — because protoactor races when two members share a
// process (docs/actor-library.md §13). The child speaks a line protocol: commands on stdin, answers
// on stdout; its logs (zerolog JSON) go to stderr.
const (
	childEnv          = "TURBINE_CLUSTER_TEST_CHILD"
	childDiscoveryEnv = "TURBINE_CLUSTER_TEST_DISCOVERY"
	childNameEnv      = "TURBINE_CLUSTER_TEST_NAME"
	childKindEnv      = "TURBINE_CLUSTER_TEST_KIND"  // a grain kind of echo actors the child hosts
	freshEnv          = "TURBINE_CLUSTER_TEST_FRESH" // the test this fresh process runs
	childTLSEnv       = "TURBINE_CLUSTER_TEST_TLS"   // "CERT,KEY,CA": the child's member TLS files
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// syncBuffer is a log sink the test reads while members write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// lines returns the log lines written from byte offset from on, and the current end.
func (s *syncBuffer) linesFrom(from int) ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buf.Bytes()
	if from > len(b) {
		from = len(b)
	}
	text := strings.TrimSpace(string(b[from:]))
	if text == "" {
		return nil, len(b)
	}
	return strings.Split(text, "\n"), len(b)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Len()
}

// inFreshProcess runs the calling test alone in a fresh run of this test binary and
// reports true there, in the parent, when it is done; the test then returns at once. In
// the fresh process it reports false and the test runs.
//
// Tests whose member in this process talks to peers use it: protoactor's Remote.Start
// sets gRPC's global logger, which the transport goroutines of a member that talked to
// peers read without synchronisation — a benign race (the same discarding logger each
// time) that the race detector reports against the next member started in the process,
// whatever the timing (docs/actor-library.md §13). One such member per process has
// nothing to race with.
func inFreshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(freshEnv) == t.Name() {
		return false
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v=true"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), freshEnv+"="+t.Name())
	cmd.SysProcAttr = childProcAttr()
	out, err := cmd.CombinedOutput()
	report := testReport(string(out))
	switch {
	case err != nil:
		// The test's own report comes last: a long output's tail would otherwise be the
		// members' and the agent's logs printed at cleanup, and hide why it failed.
		t.Fatalf("%s in a fresh process: %v\noutput (tail):\n%s\n\n%s's report: %v\n%s", t.Name(), err,
			tail(string(out), 20000), t.Name(), err, tail(failureReport(string(out)), 6000))
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skip(report)
	default:
		t.Log(report)
	}
	return true
}

// testReport keeps a test run's own report lines: results and the test's logs, not the
// members' JSON logs.
func testReport(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if trimmed := strings.TrimSpace(l); trimmed == "" || strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "=== RUN") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// failureReport keeps the lines a failed test run wrote itself: its file:line messages
// and results, without the logs its cleanup printed (member JSON logs, Consul's log lines).
func failureReport(out string) string {
	var keep []string
	for _, l := range strings.Split(testReport(out), "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "---") || strings.HasPrefix(t, "FAIL") ||
			strings.HasPrefix(t, "panic") || goTestMessage.MatchString(t) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// goTestMessage matches a line that t.Log/t.Error wrote: "name_test.go:123: ...".
var goTestMessage = regexp.MustCompile(`^\w+_test\.go:\d+: `)

// echoProps is an actor that answers every message with the message itself.
func echoProps() *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			if ctx.Sender() != nil {
				ctx.Respond(ctx.Message())
			}
		}
	})
}

// topologyLog follows a member's published topologies: the latest member ids, and every
// id that ever left.
type topologyLog struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every topology
	ids     []string
	left    []string
	seen    bool // a topology event arrived
}

// followTopology subscribes to m's topologies. Those published before it subscribed are
// summed up by the provider's last published list (Consul) or not at all (local).
func followTopology(m *Member, onChange func(ids []string)) *topologyLog {
	tl := &topologyLog{changed: make(chan struct{})}
	m.System.EventStream.Subscribe(func(evt any) {
		t, ok := evt.(*pcluster.ClusterTopology)
		if !ok {
			return
		}
		tl.mu.Lock()
		defer tl.mu.Unlock()
		tl.ids = memberIDs(t.Members)
		tl.left = append(tl.left, memberIDs(t.Left)...)
		tl.seen = true
		close(tl.changed)
		tl.changed = make(chan struct{})
		if onChange != nil {
			onChange(tl.ids)
		}
	})
	if m.consul != nil {
		tl.mu.Lock()
		if !tl.seen {
			tl.ids = memberIDs(m.consul.members())
		}
		tl.mu.Unlock()
	}
	return tl
}

func memberIDs(ms []*pcluster.Member) []string {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.Id)
	}
	slices.Sort(ids)
	return ids
}

func (tl *topologyLog) state() (ids, left []string, changed <-chan struct{}) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.ids), slices.Clone(tl.left), tl.changed
}

// waitFor waits until cond holds for the latest topology; it returns how long that took
// and false on timeout.
func (tl *topologyLog) waitFor(timeout time.Duration, cond func(ids []string) bool) (time.Duration, bool) {
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ids, _, changed := tl.state()
		if cond(ids) {
			return time.Since(start), true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return time.Since(start), false
		}
	}
}

// child is a member in another process.
type child struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout lines
	stderr *syncBuffer
	exited chan struct{}
	ID     string
	Addr   string
}

// startChild starts this test binary in role, with extra environment, and waits for its
// "ready ID ADDRESS" line.
func startChild(t testing.TB, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	cmd.SysProcAttr = childProcAttr()
	c := &child{t: t, cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() { _ = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = c.stdin.Close() // the child exits on end of input
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("child %s (%s) stderr:\n%s", role, c.ID, tail(c.stderr.String(), 6000))
		}
	})
	ready := c.waitLine("ready ", 30*time.Second)
	f := strings.Fields(ready)
	if len(f) != 3 {
		t.Fatalf("child %s: bad ready line %q", role, ready)
	}
	c.ID, c.Addr = f[1], f[2]
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// send writes one command line to the child.
func (c *child) send(line string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, line); err != nil {
		c.t.Fatalf("child %s: send %q: %v", c.ID, line, err)
	}
}

// waitLine returns the next stdout line starting with prefix, skipping others.
func (c *child) waitLine(prefix string, timeout time.Duration) string {
	c.t.Helper()
	line, ok := c.waitLineMatch(timeout, func(l string) bool { return strings.HasPrefix(l, prefix) })
	if !ok {
		c.t.Fatalf("child %s: no %q line within %s; stderr:\n%s", c.ID, prefix, timeout, tail(c.stderr.String(), 6000))
	}
	return line
}

func (c *child) waitLineMatch(timeout time.Duration, match func(string) bool) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return "", false
			}
			if match(l) {
				return l, true
			}
		case <-deadline.C:
			return "", false
		}
	}
}

// status asks the child for its state.
func (c *child) status() childStatus {
	c.t.Helper()
	c.send("status")
	line := c.waitLine("status ", 10*time.Second)
	var s childStatus
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "status ")), &s); err != nil {
		c.t.Fatalf("child %s: status %q: %v", c.ID, line, err)
	}
	return s
}

// waitMembers waits until the child's topology satisfies cond and returns false on
// timeout. It asks for the status again between short waits for "topology" lines: a
// topology line printed while a status was asked is consumed by that status's wait, and
// the status may have been taken just before the change.
func (c *child) waitMembers(timeout time.Duration, cond func(ids []string) bool) bool {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond(c.status().Members) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if _, ok := c.waitLineMatch(200*time.Millisecond, func(l string) bool {
			rest, found := strings.CutPrefix(l, "topology ")
			return found && cond(strings.Split(rest, ","))
		}); ok {
			return true
		}
	}
}

type childStatus struct {
	Members []string `json:"members"` // the latest topology
	Left    []string `json:"left"`    // every id that ever left the topology
	Blocked []string `json:"blocked"` // the block list
	Lost    string   `json:"lost"`    // Member.LostReason
}

// runChild is the child process's main. It prints "topology ID,ID,…" whenever its
// topology changes. Commands on stdin:
//
//	status                    → "status {json childStatus}"
//	stop                      → Member.Stop, then "stopped"
//	send-unknown ADDRESS      → a message of an unlinked type to ADDRESS/echo, then a
//	                            normal request: "reply ok" or "reply error ..."
//	send-large ADDRESS EVENTS → a request with a BlockDump of EVENTS events: "large ok BYTES"
//	                            or "large error ..."
//	send-echo ADDRESS WAIT TEXT → a request with TEXT to ADDRESS/echo, answered within WAIT
//	                            (a duration): "echo ok TEXT" or "echo error ..." (tls_test.go)
//
// End of input ends the process.
func runChild(role string) int {
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	var kinds []*pcluster.Kind
	if k := os.Getenv(childKindEnv); k != "" {
		kinds = append(kinds, pcluster.NewKind(k, echoProps()))
	}
	var tlsFiles TLS
	if f := strings.Split(os.Getenv(childTLSEnv), ","); len(f) == 3 {
		tlsFiles = TLS{CertFile: f[0], KeyFile: f[1], CAFile: f[2]}
	}
	m, err := Start(Config{Name: os.Getenv(childNameEnv), Discovery: os.Getenv(childDiscoveryEnv), Logger: log,
		WatchdogInterval: 200 * time.Millisecond, Kinds: kinds, TLS: tlsFiles})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child start:", err)
		return 2
	}
	tl := followTopology(m, func(ids []string) { fmt.Printf("topology %s\n", strings.Join(ids, ",")) })
	if _, err := m.System.Root.SpawnNamed(echoProps(), "echo"); err != nil {
		fmt.Fprintln(os.Stderr, "child echo:", err)
		return 2
	}
	fmt.Printf("ready %s %s\n", m.ID(), m.Address())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "status":
			ids, left, _ := tl.state()
			bl := m.Cluster.Remote.BlockList()
			blocked := []string{}
			if bl.Len() > 0 {
				blocked = bl.BlockedMembers().ToSlice()
			}
			b, _ := json.Marshal(childStatus{Members: ids, Left: left, Blocked: blocked, Lost: m.LostReason()})
			fmt.Printf("status %s\n", b)
		case "stop":
			m.Stop()
			fmt.Println("stopped")
		case "send-unknown":
			fmt.Println(sendUnknown(m, f[1]))
		case "send-large":
			fmt.Println(sendLarge(m, f[1], f[2]))
		case "send-echo":
			fmt.Println(sendEcho(m, f[1], f[2], f[3]))
		default:
			fmt.Fprintf(os.Stderr, "child %s: unknown command %q\n", role, sc.Text())
		}
	}
	return 0
}
