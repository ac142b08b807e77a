package supervise

import (
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

func TestStopKillsProcessGroup(t *testing.T) {
	// The shell ignores SIGTERM and starts a child; Stop must kill both.
	p, err := Start([]string{"sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(100 * time.Millisecond)
	if err := syscall.Kill(-p.Pid(), 0); err == nil {
		t.Fatalf("process group %d still alive after Stop", p.Pid())
	}
}

func TestStartMissingExecutable(t *testing.T) {
	if _, err := Start([]string{"/nonexistent/engine"}, nil, nil); err == nil {
		t.Fatal("want an error for a missing executable")
	}
}
