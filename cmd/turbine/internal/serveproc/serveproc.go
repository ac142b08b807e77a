// Package serveproc runs a `turbine serve` child process for the commands that measure one
// (bench compare, configure --verify serve): started in its own process group, ready once
// it logs "turbine serving" and its router reports the workers ready, stopped with a drain
// and then killed with whatever is left of its group.
package serveproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
)

// LogLines is how many of a serve's last log lines an error quotes.
const LogLines = 20

// Grace is how long a serve may take to drain and exit after SIGTERM before it
// and its engines are killed.
const Grace = 30 * time.Second

// Proc is a `turbine serve` child process.
type Proc struct {
	cmd  *exec.Cmd
	URL  string // the OpenAI API's base URL, from the "turbine serving" log line
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	mu   sync.Mutex
	tail []string // last LogLines lines of its stderr
}

// Start runs exe with args in its own process group and waits until it logs
// "turbine serving" with its URL (JSON logs), then until its /v1/models lists model and
// its router reports workers ready workers, all within limit.
func Start(ctx context.Context, exe string, args []string, model string, workers int, limit time.Duration) (*Proc, error) {
	cmd := exec.Command(exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The serve is the comparison's own and its API stays open to it: an API key the
	// environment would give it (TURBINE_API_KEY) is left out, and so are a certificate
	// (its plain HTTP client would be refused) and an admin port (it may be taken).
	cmd.Env = os.Environ()
	for _, f := range []string{"api-key", "tls-cert", "tls-key", "admin-port"} {
		cmd.Env = WithoutEnv(cmd.Env, cli.EnvName(f))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %v", exe, err)
	}
	s := &Proc{cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.keep(line)
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if !sent && json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "turbine serving" && rec.URL != "" {
				urlc <- rec.URL
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		s.err = cmd.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case s.URL = <-urlc:
	case <-s.done:
		return nil, fmt.Errorf("serve %s %s before logging \"turbine serving\"%s", exe, Exited(s.err), s.Logs())
	case <-timer.C:
		s.Stop()
		return nil, fmt.Errorf("serve did not log \"turbine serving\" within --ready-timeout %v%s", limit, s.Logs())
	case <-ctx.Done():
		s.Stop()
		return nil, ctx.Err()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := ready(ctx, s.URL, model, workers)
		if err == nil && ok {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("serve %s %s before its workers were ready%s", exe, Exited(s.err), s.Logs())
		case <-timer.C:
			s.Stop()
			if err == nil {
				err = fmt.Errorf("fewer than %d ready workers", workers)
			}
			return nil, fmt.Errorf("serve not ready within --ready-timeout %v: %v%s", limit, err, s.Logs())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Exited describes a process's end from cmd.Wait's error: "exited with status 0" (nil),
// "exited with status 3", "was killed by signal: killed".
func Exited(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exited with status 0"
	case errors.As(err, &ee) && ee.Exited():
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	case errors.As(err, &ee):
		return fmt.Sprintf("was killed by %v", ee) // "signal: killed"
	}
	return fmt.Sprintf("ended (%v)", err)
}

func (s *Proc) keep(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) == LogLines {
		s.tail = append(s.tail[:0], s.tail[1:]...)
	}
	s.tail = append(s.tail, line)
}

// Logs returns the last log lines, indented after a newline ("" when there are none).
func (s *Proc) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tail) == 0 {
		return ""
	}
	return "; serve's last log lines:\n  " + strings.Join(s.tail, "\n  ")
}

// Stop sends SIGTERM and waits for the exit (the serve drains its workers); after
// Grace it kills the process group. Whatever is left in the group (engines) is
// killed too. It returns the exit error of a serve that did not exit cleanly.
func (s *Proc) Stop() error {
	pid := s.cmd.Process.Pid
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-s.done:
		err = s.err
	case <-time.After(Grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
		err = fmt.Errorf("no exit %v after SIGTERM: killed", Grace)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return err
}

// ready reports whether url's /v1/models lists model and its /metrics show workers
// workers of model ready (turbine_router_worker_ready 1).
func ready(ctx context.Context, url, model string, workers int) (bool, error) {
	body, err := get(ctx, url+"/v1/models")
	if err != nil {
		return false, err
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, fmt.Errorf("/v1/models: %v", err)
	}
	listed := false
	for _, m := range list.Data {
		listed = listed || m.ID == model
	}
	if !listed {
		return false, fmt.Errorf("/v1/models does not list %q", model)
	}
	body, err = get(ctx, url+"/metrics")
	if err != nil {
		return false, err
	}
	n := ReadyWorkers(string(body), model)
	if n < workers {
		return false, fmt.Errorf("%d of %d workers ready", n, workers)
	}
	return true, nil
}

func get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return body, nil
}

// ReadyWorkers counts the workers of model whose turbine_router_worker_ready gauge is 1
// in a Prometheus text exposition.
func ReadyWorkers(exposition, model string) int {
	n := 0
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, "turbine_router_worker_ready{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil || v != 1 {
			continue
		}
		for _, l := range strings.Split(labels, ",") {
			if l == `model="`+model+`"` {
				n++
			}
		}
	}
	return n
}

// WithoutEnv returns env (KEY=value entries) without those of the variable name.
func WithoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k != name {
			out = append(out, e)
		}
	}
	return out
}

// Done is closed once the process has exited; Err is then its exit error.
func (s *Proc) Done() <-chan struct{} { return s.done }

// Err is cmd.Wait's error once Done is closed.
func (s *Proc) Err() error { return s.err }
