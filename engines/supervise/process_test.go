package supervise

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestProcessLogsAndExit(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	p, err := Start([]string{"sh", "-c", "echo out; echo err >&2; exit 3"}, nil, func(stream, line string) {
		mu.Lock()
		lines = append(lines, stream+":"+line)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() == nil || !strings.Contains(p.Err().Error(), "exit status 3") {
		t.Fatalf("exit error = %v, want exit status 3", p.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(lines, ",")
	if !strings.Contains(got, "stdout:out") || !strings.Contains(got, "stderr:err") {
		t.Fatalf("lines = %q", got)
	}
}

// TestSecretsNotInherited: the engine sees neither TURBINE_API_KEY nor
// TURBINE_ADMIN_API_KEY; other variables and the extra environment pass.
func TestSecretsNotInherited(t *testing.T) {
	t.Setenv("TURBINE_API_KEY", "sk-secret")
	t.Setenv("TURBINE_ADMIN_API_KEY", "sk-admin-secret")
	t.Setenv("TURBINE_TEST_VISIBLE", "yes")
	var mu sync.Mutex
	var lines []string
	p, err := Start([]string{"sh", "-c", `echo "key=${TURBINE_API_KEY:-none} admin=${TURBINE_ADMIN_API_KEY:-none} visible=$TURBINE_TEST_VISIBLE extra=$EXTRA"`},
		[]string{"EXTRA=1"}, func(_, line string) {
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
		})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(lines, "\n"); got != "key=none admin=none visible=yes extra=1" {
		t.Fatalf("the engine saw %q", got)
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	// The shell ignores SIGTERM and starts a child; Stop must kill both.
	var mu sync.Mutex
	childPID := 0
	started := make(chan struct{})
	p, err := Start([]string{"sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait"}, nil, func(stream, line string) {
		mu.Lock()
		defer mu.Unlock()
		if stream == "stdout" && childPID == 0 {
			childPID, _ = strconv.Atoi(line)
			close(started)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	p.Stop(100 * time.Millisecond)
	mu.Lock()
	child := childPID
	mu.Unlock()
	// SIGKILL is delivered asynchronously and the orphaned child is reaped by whoever
	// adopts it: wait (bounded) for it to be gone or a zombie, which is dead too.
	deadline := time.Now().Add(10 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the process group still running 10 s after Stop", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil && !os.IsNotExist(err)
	}
	// Format: pid (comm) state ...; comm may hold spaces, so cut at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestStartMissingExecutable(t *testing.T) {
	if _, err := Start([]string{"/nonexistent/engine"}, nil, nil); err == nil {
		t.Fatal("want an error for a missing executable")
	}
}

// TestFreePortNotRepeated: ports handed out within the quarantine are not handed out
// again, however often the kernel offers them.
func TestFreePortNotRepeated(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice within %v", p, portQuarantine)
		}
		seen[p] = true
	}
	r := &recentPorts{at: map[int]time.Time{}}
	t0 := time.Unix(1000, 0)
	if !r.claim(9000, t0) || r.claim(9000, t0.Add(portQuarantine-time.Millisecond)) || !r.claim(9000, t0.Add(portQuarantine)) {
		t.Fatal("claim does not follow the quarantine")
	}
}
