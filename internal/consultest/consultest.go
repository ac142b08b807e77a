// Package consultest runs a real Consul agent (`consul agent -dev`, 1.14) for tests: on
// 127.0.0.1, on free ports, in its own process group, stopped when the test ends. An agent
// can be stopped and restarted on the same ports — in dev mode a restart loses every
// registration, which is the case the cluster's Consul provider must survive — and paused
// with SIGSTOP.
//
// The binary comes from $TURBINE_CONSUL, else `consul` on PATH, else
// ${TURBINE_CACHE_DIR:-~/.cache/turbine}/consul-v1.14.11/consul, which
// scripts/ensure-consul.sh builds.
package consultest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Version is the Consul release the cached binary is built from.
const Version = "v1.14.11"

const (
	readyTimeout = 30 * time.Second // from exec to an elected leader
	stopTimeout  = 5 * time.Second  // from SIGTERM to SIGKILL
	pollEvery    = 50 * time.Millisecond
	logTailBytes = 4 << 10
)

// Binary returns the path of a Consul binary: $TURBINE_CONSUL, else `consul` on PATH, else
// the cached build. With none, the test is skipped under -short and fails otherwise,
// telling to run scripts/ensure-consul.sh.
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := Find(); err == nil {
		return p
	} else if testing.Short() {
		t.Skipf("consultest: %v (skipped under -short)", err)
	} else {
		t.Fatalf("consultest: %v; run `bash scripts/ensure-consul.sh` once to build it", err)
	}
	return ""
}

func Find() (string, error) {
	if p := os.Getenv("TURBINE_CONSUL"); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("TURBINE_CONSUL=%s is not an executable", p)
		}
		return p, nil
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	cache := os.Getenv("TURBINE_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no Consul binary: $TURBINE_CONSUL unset, none on PATH, no home directory for the cache: %w", err)
		}
		cache = filepath.Join(home, ".cache", "turbine")
	}
	p := filepath.Join(cache, "consul-"+Version, "consul")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("no Consul binary: $TURBINE_CONSUL unset, none on PATH, none at %s", p)
	}
	return p, nil
}

// Ports are the agent's listeners; all on 127.0.0.1.
type Ports struct {
	HTTP, SerfLAN, SerfWAN, Server int
}

// Agent is a running (or stopped) dev-mode Consul agent.
type Agent struct {
	bin   string
	ports Ports
	dir   string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	starts int
	log    string // current log file
}

// Start starts a dev-mode agent on free ports and waits until its HTTP API answers and a
// leader is elected. The agent is stopped when the test ends; if the test failed, the tail
// of the agent's log is printed.
func Start(t testing.TB) *Agent {
	t.Helper()
	a := &Agent{bin: Binary(t), dir: t.TempDir()}
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("consultest: tail of %s:\n%s", a.logPath(), a.LogTail())
		}
	})
	// The ports are free when chosen but released before the agent binds them; another
	// process (an outgoing connection's ephemeral port, another test's listener) can take
	// one meanwhile. The agent then exits at once, and fresh ports are tried.
	var err error
	for range portTries {
		if a.ports, err = freePorts(); err != nil {
			t.Fatalf("consultest: %v", err)
		}
		if err = a.start(); !errors.Is(err, errPortTaken) {
			break
		}
		t.Logf("consultest: %v; trying other ports", err)
	}
	if err != nil {
		t.Fatalf("consultest: %v\n%s", err, a.LogTail())
	}
	return a
}

// errPortTaken: the agent exited because one of its ports was bound by then.
var errPortTaken = errors.New("a port of the agent was taken before it bound it")

// portTries bounds Start's attempts with fresh ports.
const portTries = 5

// Addr is the agent's HTTP API address, "127.0.0.1:PORT".
func (a *Agent) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.HTTP)) }

// Ports are the agent's listener ports, the same across restarts.
func (a *Agent) Ports() Ports { return a.ports }

// Restart starts a stopped agent again on the same ports and waits for a leader. A dev-mode
// agent keeps no state: every service registration is gone. Restarting a running agent
// stops it first.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.Stop()
	if err := a.start(); err != nil {
		t.Fatalf("consultest: restart: %v\n%s", err, a.LogTail())
	}
}

// Stop sends SIGTERM to the agent's process group, then SIGKILL after five seconds, and
// waits for the agent to exit. Safe to call on a stopped agent.
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT) // a paused agent cannot handle SIGTERM
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Pause freezes the agent (SIGSTOP): its listeners accept connections but nothing answers.
// It returns once every thread of the agent is stopped (the signal is delivered to each
// thread as it next runs, so a thread running right now could still answer).
func (a *Agent) Pause() error {
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	a.mu.Lock()
	pid := a.cmd.Process.Pid
	a.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("consultest: agent %d not stopped 5 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// allStopped reports whether every thread of process pid is in state T (stopped), from
// /proc/<pid>/task/*/stat.
func allStopped(pid int) bool {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Resume continues a paused agent (SIGCONT).
func (a *Agent) Resume() error { return a.signal(syscall.SIGCONT) }

func (a *Agent) signal(sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return errors.New("consultest: agent is not running")
	}
	return syscall.Kill(-a.cmd.Process.Pid, sig)
}

// LogTail returns the last few KiB of the current log file.
func (a *Agent) LogTail() string {
	p := a.logPath()
	if p == "" {
		return ""
	}
	return string(tailOf(p))
}

// tailOf returns the last logTailBytes of file p, or the error opening it as text.
func tailOf(p string) []byte {
	f, err := os.Open(p)
	if err != nil {
		return []byte(err.Error())
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > logTailBytes {
		_, _ = f.Seek(-logTailBytes, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return b
}

func (a *Agent) logPath() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log
}

func (a *Agent) args() []string {
	p := a.ports
	return []string{"agent", "-dev",
		"-node", "turbine-test-" + strconv.Itoa(p.HTTP),
		"-bind", "127.0.0.1", "-client", "127.0.0.1", "-advertise", "127.0.0.1",
		"-disable-host-node-id",
		"-http-port", strconv.Itoa(p.HTTP),
		"-serf-lan-port", strconv.Itoa(p.SerfLAN),
		"-serf-wan-port", strconv.Itoa(p.SerfWAN),
		"-server-port", strconv.Itoa(p.Server),
		"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-log-level", "info",
	}
}

func (a *Agent) start() error {
	a.mu.Lock()
	a.starts++
	a.log = filepath.Join(a.dir, fmt.Sprintf("consul-%d.log", a.starts))
	a.mu.Unlock()
	logFile, err := os.Create(a.log)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(a.bin, a.args()...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", a.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	a.mu.Unlock()
	if err := a.waitReady(exited); err != nil {
		a.Stop()
		return err
	}
	return nil
}

// waitReady polls /v1/status/leader until it names a leader.
func (a *Agent) waitReady(exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + a.Addr() + "/v1/status/leader"
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if leader, err := getLeader(client, url); err == nil && leader != "" {
			return nil
		}
		select {
		case <-exited:
			if bytes.Contains(tailOf(a.log), []byte("address already in use")) {
				return fmt.Errorf("consul agent on %+v exited: %w (log %s)", a.ports, errPortTaken, a.log)
			}
			return fmt.Errorf("consul agent exited before electing a leader (log %s)", a.log)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul agent on %s elected no leader within %s (log %s)", a.Addr(), readyTimeout, a.log)
		}
	}
}

func getLeader(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return strings.Trim(strings.TrimSpace(string(b)), `"`), nil
}

// freePorts picks four distinct free ports; the serf ports are free for TCP and UDP. The
// listeners are held until all are chosen so that no port is picked twice.
func freePorts() (Ports, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	pick := func(udp bool) (int, error) {
		for range 50 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, fmt.Errorf("find a free port: %w", err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			if !udp {
				closers = append(closers, l)
				return port, nil
			}
			u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				_ = l.Close()
				continue
			}
			closers = append(closers, l, u)
			return port, nil
		}
		return 0, errors.New("find a free port: no port free for both TCP and UDP in 50 tries")
	}
	var p Ports
	var err error
	for _, f := range []struct {
		dst *int
		udp bool
	}{{&p.HTTP, false}, {&p.SerfLAN, true}, {&p.SerfWAN, true}, {&p.Server, false}} {
		if *f.dst, err = pick(f.udp); err != nil {
			return Ports{}, err
		}
	}
	return p, nil
}
