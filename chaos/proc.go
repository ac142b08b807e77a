package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one host's main process (a Consul agent, a frontend, a node agent), started
// inside the host's namespace in its own process group, its output appended to one log
// file across restarts.
type Proc struct {
	Name, Host string
	net        *Net
	bin        string
	args       []string
	logPath    string

	mu      sync.Mutex
	cmd     *running
	starts  int
	crashes []string // exits the rig did not cause (Crashes)
}

type running struct {
	pid      int
	exited   chan struct{}
	expected bool // the rig killed or stopped it (under Proc.mu)
}

// NewProc describes a process; Start runs it.
func NewProc(n *Net, name, host, logPath, bin string, args ...string) *Proc {
	return &Proc{Name: name, Host: host, net: n, bin: bin, args: args, logPath: logPath}
}

// Start runs the process (again, after a kill).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.cmd.exited:
		default:
			return fmt.Errorf("chaos: %s is running", p.Name)
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	p.starts++
	fmt.Fprintf(f, "{\"chaos\":\"start %d of %s at %s\"}\n", p.starts, p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := p.net.Command(p.Host, p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	e := &running{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !e.expected {
			p.crashes = append(p.crashes, fmt.Sprintf("%s (pid %d) exited on its own at %s: %v", p.Name, e.pid, time.Now().UTC().Format(time.RFC3339), err))
		}
		p.mu.Unlock()
		close(e.exited)
	}()
	p.cmd = e
	return nil
}

// Pid is the running process's pid (0 when none runs).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	select {
	case <-p.cmd.exited:
		return 0
	default:
		return p.cmd.pid
	}
}

// Signal sends sig to the process (not its group: a node's engines have groups of
// their own and die with it).
func (p *Proc) Signal(sig syscall.Signal) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("chaos: %s is not running", p.Name)
	}
	return syscall.Kill(pid, sig)
}

// Crashes are the exits the rig did not cause, one line each.
func (p *Proc) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.crashes)
}

// expect marks the running process's coming exit as the rig's doing and returns it.
func (p *Proc) expect() *running {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.cmd.expected = true
	}
	return p.cmd
}

// Kill sends SIGKILL and waits until it exited.
func (p *Proc) Kill() {
	e := p.expect()
	if e == nil {
		return
	}
	_ = syscall.Kill(e.pid, syscall.SIGKILL)
	<-e.exited
}

// Stop ends the process: SIGCONT and SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	e := p.expect()
	if e == nil {
		return
	}
	_ = syscall.Kill(e.pid, syscall.SIGCONT)
	_ = syscall.Kill(e.pid, syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(grace):
		_ = syscall.Kill(e.pid, syscall.SIGKILL)
		<-e.exited
	}
}

// Engines are the pids of the node's live engine processes, one per worker, from the
// node's "engine started" log lines (the newest per worker whose process is alive),
// in the workers' order.
func (p *Proc) Engines() []int {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return nil
	}
	latest := map[string]int{}
	var workers []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"engine started"`)) {
			continue
		}
		var rec struct {
			Message string `json:"message"`
			Worker  string `json:"worker"`
			PID     int    `json:"pid"`
		}
		if json.Unmarshal(line, &rec) != nil || rec.Message != "engine started" || rec.PID <= 0 {
			continue
		}
		if _, ok := latest[rec.Worker]; !ok {
			workers = append(workers, rec.Worker)
		}
		latest[rec.Worker] = rec.PID
	}
	slices.Sort(workers)
	node := p.Pid()
	var pids []int
	for _, w := range workers {
		if pid := latest[w]; node != 0 && parent(pid) == node {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parent is pid's parent process id from /proc (0 when pid is gone): a pid from a log
// line is only signalled while it is still the node's child, never a recycled one.
func parent(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid ...": the fields after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || f[0] == "Z" {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
