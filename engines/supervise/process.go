package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one running engine subprocess, in its own process group so that stopping it
// also stops its children; on Linux it is also killed when the parent dies
// (PR_SET_PDEATHSIG).
type Process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
	once    sync.Once
}

// secretEnv is the environment an engine does not inherit: the gateway's API keys
// (TURBINE_API_KEY, TURBINE_ADMIN_API_KEY) are not an engine's to read.
var secretEnv = []string{"TURBINE_API_KEY", "TURBINE_ADMIN_API_KEY"}

// Start runs argv[0] with argv[1:] and extra environment (KEY=VALUE), on top of this
// process's environment less secretEnv. Each line the process writes to stdout or stderr
// is passed to logLine (which must be safe for concurrent use). Errors: the executable
// cannot be started.
func Start(argv []string, env []string, logLine func(stream, line string)) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("supervise: empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(slices.DeleteFunc(cmd.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(secretEnv, k)
	}), env...)
	cmd.SysProcAttr = sysProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("supervise: start %s: %w", argv[0], err)
	}
	p := &Process{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go copyLines(&pipes, "stdout", stdout, logLine)
	go copyLines(&pipes, "stderr", stderr, logLine)
	go func() {
		pipes.Wait()
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func copyLines(wg *sync.WaitGroup, stream string, r io.Reader, logLine func(stream, line string)) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if logLine != nil {
			logLine(stream, sc.Text())
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// Pid is the process id (also its process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Started is when the process was started.
func (p *Process) Started() time.Time { return p.started }

// Done is closed when the process has exited; Err then tells how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error (nil for exit status 0); valid after Done is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM to the process group, waits up to grace for the exit, then sends
// SIGKILL to the group and waits for the exit. Safe to call more than once and after the
// process has exited.
func (p *Process) Stop(grace time.Duration) {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
			<-p.done
		}
	})
	<-p.done
}

// Kill sends SIGKILL to the process group at once (fault injection and hard stops).
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
}

// FreePort asks the kernel for a free TCP port on host. The port is free when this
// returns; another process may still take it before the caller binds it, in which case
// the engine fails to start and is restarted on a new port (after the worker's restart
// backoff, 250 ms the first time). Within this process a port is not handed out twice
// within portQuarantine: the workers of one `turbine serve` each pick an engine port and
// a KV events port at about the same moment, and the kernel may offer a port again as
// soon as it was closed.
func FreePort(host string) (int, error) {
	var port int
	for range maxPortTries {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("supervise: free port on %s: %w", host, err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if given.claim(port, time.Now()) {
			break
		}
	}
	return port, nil
}

// portQuarantine is how long FreePort does not hand out a port again, time enough for
// an engine to bind the port it was given; maxPortTries bounds its attempts (the last
// port offered is returned even if recently given).
const (
	portQuarantine = 30 * time.Second
	maxPortTries   = 16
)

// given remembers the ports FreePort handed out recently.
var given = &recentPorts{at: map[int]time.Time{}}

type recentPorts struct {
	mu sync.Mutex
	at map[int]time.Time
}

// claim records port as given at now and reports true, unless it was given within
// portQuarantine; entries older than that are dropped.
func (r *recentPorts) claim(port int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, at := range r.at {
		if now.Sub(at) >= portQuarantine {
			delete(r.at, p)
		}
	}
	if _, ok := r.at[port]; ok {
		return false
	}
	r.at[port] = now
	return true
}
