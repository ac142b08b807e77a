package planner

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRunRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", ""}, "--mode"},
		{[]string{"--mode", "auto"}, "--mode"},
		{[]string{"--mode", "sla"}, "--planner-profile"},
		{[]string{"--ttft-target", "-5"}, "--ttft-target"},
		{[]string{"--gpu-budget", "0"}, "--gpu-budget"},
		{[]string{"--connector", "kubernetes"}, "--kube-namespace"},
		{[]string{"--connector", "virtual"}, "--virtual-file"},
		{[]string{"--discovery", "etcd://x"}, "--discovery"},
		{[]string{"stray"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := Run(context.Background(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestDefaultsAreValid(t *testing.T) {
	o := Defaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Mode != "load" || o.Connector != "local" || o.GPUBudget != 8 || o.TTFTTargetMs != 500 || o.ITLTargetMs != 50 || o.MinWorkers != 1 {
		t.Fatalf("defaults changed: %+v", o.Planner)
	}
}

// lineWatch is a log writer that closes seen once a line holds want.
type lineWatch struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// `turbine planner` joins its cluster hosting the planner, and leaves when its context
// ends.
func TestRunJoinsAndLeaves(t *testing.T) {
	seen := make(chan struct{})
	logs := &lineWatch{want: "turbine planner joined the cluster", seen: seen}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--discovery", "local", "--cluster-name", "planner-cmd-test", "--connector", "virtual",
			"--virtual-file", filepath.Join(t.TempDir(), "decisions.jsonl"), "--log-format", "json"}, io.Discard, logs)
	}()
	select {
	case <-seen:
	case err := <-done:
		t.Fatalf("Run returned %v before joining:\n%s", err, logs)
	case <-time.After(60 * time.Second): // a bound on a stuck start, not a timing assertion
		t.Fatalf("no join in 60 s:\n%s", logs)
	}
	for _, want := range []string{`"mode":"load"`, `"connector":"virtual"`, `"gpu_budget":8`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the join line lacks %s:\n%s", want, logs)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
