package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// stoppingServer answers like completions, except the stopAt-th request (from 1): that
// one calls stop and waits, in flight, until the client goes (or release is closed).
func stoppingServer(t *testing.T, stopAt int, stop func(), release <-chan struct{}) *httptest.Server {
	var mu sync.Mutex
	n := 0
	answer := completions(t)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		hold := n == stopAt
		mu.Unlock()
		if !hold {
			answer(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection once the body is read
		stop()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
}

// TestRunStopped: a run stopped early (SIGINT, SIGTERM, its context) writes its files
// with the requests sent, prints its summary, and returns ErrStopped saying what stopped
// it and how far it got, even when nothing succeeded (not ErrNoSuccess). The requests not
// sent are no failures: they are counted apart, and are not in requests.csv.
func TestRunStopped(t *testing.T) {
	synthetic := []string{"--isl", "20", "--osl", "2", "--requests", "5", "--concurrency", "1"}
	for _, tc := range []struct {
		name     string
		workload []string
		stopAt   int   // the request in flight when the run is stopped (from 1)
		cause    error // of the cancellation; nil: a plain cancel
		want     string
		// the summary: requests sent, of them succeeded, and not sent
		requests, succeeded, notSent int
	}{
		{"SIGINT during the third of five", synthetic, 3, stopSignal{os.Interrupt},
			"stopped by a signal (interrupt) after 2 of 5 requests were answered (1 canceled in flight, 2 not sent)", 3, 2, 2},
		{"SIGTERM during the first: none succeeded", synthetic, 1, stopSignal{syscall.SIGTERM},
			"stopped by a signal (terminated) after 0 of 5 requests were answered (1 canceled in flight, 4 not sent)", 1, 0, 4},
		{"SIGINT during the last", synthetic, 5, stopSignal{os.Interrupt},
			"stopped by a signal (interrupt) after 4 of 5 requests were answered (1 canceled in flight)", 5, 4, 0},
		{"the caller's context", synthetic, 2, nil, "stopped (context canceled) after 1 of 5 requests were answered (1 canceled in flight, 3 not sent)", 2, 1, 3},
		{"a trace", []string{"--trace", "testdata/mini.jsonl", "--time-scale", "0.01", "--concurrency", "1"}, 2, stopSignal{os.Interrupt},
			"stopped by a signal (interrupt) after 1 of 3 requests were answered (1 canceled in flight, 1 not sent)", 2, 1, 1},
		{"a closed loop of a duration", []string{"--isl", "20", "--osl", "2", "--duration", "1h", "--concurrency", "1"}, 4, stopSignal{os.Interrupt},
			"stopped by a signal (interrupt) after 3 of 4 requests were answered (1 canceled in flight)", 4, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			release := make(chan struct{})
			srv := stoppingServer(t, tc.stopAt, func() { cancel(tc.cause) }, release)
			defer srv.Close()
			defer close(release)
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			args := append([]string{"--url", srv.URL, "--model", "m", "--out", dir, "--progress-interval", "0"}, tc.workload...)
			err := Run(ctx, args, &stdout, &stderr)
			if !errors.Is(err, ErrStopped) || errors.Is(err, ErrNoSuccess) || err.Error() != tc.want {
				t.Fatalf("Run: %v, want ErrStopped: %q\n%s", err, tc.want, stderr.String())
			}
			s := readSummary(t, filepath.Join(dir, "summary.json"))
			canceled := tc.requests - tc.succeeded
			if s.Requests != tc.requests || s.Succeeded != tc.succeeded || s.Failed != canceled || s.Errors[bench.ErrCanceled] != canceled || s.NotSent != tc.notSent {
				t.Fatalf("summary: %d requests, %d ok, %d failed %v, %d not sent; want %d, %d, %d canceled, %d",
					s.Requests, s.Succeeded, s.Failed, s.Errors, s.NotSent, tc.requests, tc.succeeded, canceled, tc.notSent)
			}
			f, err := os.Open(filepath.Join(dir, "requests.csv"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rows, err := csv.NewReader(f).ReadAll()
			if err != nil || len(rows) != 1+tc.requests {
				t.Fatalf("requests.csv: %v, %d rows; want one per request sent (%d)", err, len(rows)-1, tc.requests)
			}
			if _, err := os.Stat(filepath.Join(dir, "plot.svg")); err != nil {
				t.Fatal(err)
			}
			line := fmt.Sprintf("%d requests, %d ok, %d failed", tc.requests, tc.succeeded, canceled)
			if tc.notSent > 0 {
				line = fmt.Sprintf("%d requests (stopped: %d more not sent), %d ok, %d failed", tc.requests, tc.notSent, tc.succeeded, canceled)
			}
			if !strings.Contains(stdout.String(), line) {
				t.Fatalf("stdout has no %q:\n%s", line, stdout.String())
			}
			if tc.workload[0] == "--trace" { // the ceiling of the requests sent
				f, err := os.Open("testdata/mini.jsonl")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				reqs, err := bench.ReadMooncake(f, "mini.jsonl", bench.DefaultBlockTokens, tc.requests)
				if err != nil {
					t.Fatal(err)
				}
				if want := bench.Ceiling(reqs, bench.DefaultBlockTokens); s.HitRateCeiling == nil || math.Abs(*s.HitRateCeiling-want) > 1e-12 {
					t.Fatalf("hit-rate ceiling %v, want %v (the first %d requests')", s.HitRateCeiling, want, tc.requests)
				}
			}
		})
	}
}

// runEnv makes the test binary run `turbine bench` with its arguments (see TestMain)
// and exit as the turbine command does: 1 after an error.
const runEnv = "TURBINE_BENCH_TEST_RUN"

// runMain is the turbine command's handling of `turbine bench`.
func runMain() int {
	if err := Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "turbine bench: %v\n", err)
		return 1
	}
	return 0
}

// TestRunSignal: SIGINT or SIGTERM to a running `turbine bench` stops it with exit status
// 1, after it wrote its files.
func TestRunSignal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		want string
	}{
		{syscall.SIGINT, "turbine bench: stopped by a signal (interrupt) after 0 of 5 requests were answered (2 canceled in flight, 3 not sent)"},
		{syscall.SIGTERM, "turbine bench: stopped by a signal (terminated) after 0 of 5 requests were answered (2 canceled in flight, 3 not sent)"},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			arrived := make(chan struct{}, 5)
			release := make(chan struct{})
			srv := httptest.NewServer(holdAll(arrived, release))
			defer srv.Close()
			defer close(release)
			dir := t.TempDir()
			cmd := exec.Command(exe, "--url", srv.URL, "--model", "m", "--isl", "20", "--osl", "2", "--requests", "5",
				"--concurrency", "2", "--out", dir, "--progress-interval", "0")
			cmd.Env = append(os.Environ(), runEnv+"=1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // both in flight: the signal handler is installed
				select {
				case <-arrived:
				case <-time.After(time.Minute):
					_ = cmd.Process.Kill()
					t.Fatalf("no request arrived\n%s", stderr.String())
				}
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %v, want status 1 and %q on stderr:\n%s", err, tc.want, stderr.String())
			}
			if s := readSummary(t, filepath.Join(dir, "summary.json")); s.Requests != 2 || s.Errors[bench.ErrCanceled] != 2 || s.NotSent != 3 {
				t.Fatalf("summary %+v: want 2 requests canceled in flight, 3 not sent", s)
			}
		})
	}
}

// holdAll signals each request's arrival and holds it until the client goes or release
// is closed.
func holdAll(arrived chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection once the body is read
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
}
