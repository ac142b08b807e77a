package configure

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/planner"
)

// serveProc is the `turbine serve` that --verify serve starts: the best layout's flags,
// mock engines playing the profile at --verify-speedup.
type serveProc struct {
	cmd  *exec.Cmd
	args []string // after "serve"
	url  string   // from its "turbine serving" log line
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	mu   sync.Mutex
	tail []string // its last log lines, for errors
}

// serveGrace is how long the serve may drain after SIGTERM before its process group is
// killed.
const serveGrace = 20 * time.Second

// startServe starts this binary's `turbine serve` for layout l and waits until it serves
// with every worker ready, within --ready-timeout.
func (o *Options) startServe(ctx context.Context, s *setup, l planner.Layout, stderr io.Writer) (*serveProc, error) {
	prof, err := filepath.Abs(o.Profile)
	if err != nil {
		return nil, err
	}
	args, ok := o.serveArgs(s, l, prof)
	if !ok {
		return nil, fmt.Errorf("layout %s: turbine serve runs one engine configuration, and its prefill and decode engines differ (TP%d, TP%d); start them with turbine node and give --verify URL",
			l, l.PrefillTP, l.TP)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(exe, ".test") {
		return nil, fmt.Errorf("%s is a test binary; run the turbine binary", exe)
	}
	args = append(args, "--speedup-ratio", strconv.FormatFloat(o.VerifySpeedup, 'g', -1, 64),
		"--host", "127.0.0.1", "--port", "0", "--log-format", "json")
	fmt.Fprintf(stderr, "configure: starting turbine serve %s\n", shellJoin(args))
	cmd := exec.Command(exe, append([]string{"serve"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = withoutEnv(os.Environ(), cli.EnvName("api-key")) // its API stays open to this check
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %v", exe, err)
	}
	p := &serveProc{cmd: cmd, args: args, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.keep(line)
			var rec struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if !sent && json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "turbine serving" && rec.URL != "" {
				urlc <- rec.URL
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		p.err = cmd.Wait()
		close(p.done)
	}()
	timer := time.NewTimer(o.ReadyTimeout)
	defer timer.Stop()
	select {
	case p.url = <-urlc:
	case <-p.done:
		return nil, fmt.Errorf("serve ended (%v) before serving%s", p.err, p.logs())
	case <-timer.C:
		p.stop()
		return nil, fmt.Errorf("serve not serving within --ready-timeout %v%s", o.ReadyTimeout, p.logs())
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
	workers := l.Workers + l.PrefillWorkers
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := readyWorkers(ctx, p.url, s.card.GetModel())
		if err == nil && n >= workers {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("serve ended (%v) before its workers were ready%s", p.err, p.logs())
		case <-timer.C:
			p.stop()
			return nil, fmt.Errorf("serve's %d workers not ready within --ready-timeout %v (%d ready, %v)%s", workers, o.ReadyTimeout, n, err, p.logs())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

func (p *serveProc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == 20 {
		p.tail = p.tail[1:]
	}
	p.tail = append(p.tail, line)
}

func (p *serveProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == 0 {
		return ""
	}
	return "; its last log lines:\n  " + strings.Join(p.tail, "\n  ")
}

// stop sends SIGTERM and waits for the exit; after serveGrace, and in any case once it
// exited, what is left of its process group (engines) is killed.
func (p *serveProc) stop() {
	pid := p.cmd.Process.Pid
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(serveGrace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// readyWorkers counts model's ready workers from url's /metrics
// (turbine_router_worker_ready 1).
func readyWorkers(ctx context.Context, url, model string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	n := 0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "turbine_router_worker_ready{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); !ok || err != nil || v != 1 {
			continue
		}
		for _, lb := range strings.Split(labels, ",") {
			if lb == `model="`+model+`"` {
				n++
			}
		}
	}
	return n, sc.Err()
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if k, _, _ := strings.Cut(e, "="); k != name {
			out = append(out, e)
		}
	}
	return out
}
