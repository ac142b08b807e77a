package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestClusterLegsAcknowledgedAcrossProcesses: a node's worker acknowledges each
// Generate to the frontend in another process (GenerateAccepted through the cluster),
// so a request that waits in its engine's queue for longer than the frontend's accept
// timeout is neither moved nor asked about: with one sequence slot, a long answer holds
// the engine while a second request waits behind it. Without the acknowledgement the
// frontend would ask the router for another worker after 500 ms and, finding none, log
// that the request waits on a worker that has not acknowledged it.
func TestClusterLegsAcknowledgedAcrossProcesses(t *testing.T) {
	const acceptTimeout = 500 * time.Millisecond
	c := newLocalCluster(t)
	fe := c.frontendWith("frontend", "--accept-timeout", acceptTimeout.String())
	c.node("node-1", 1, "--max-num-seqs", "1", "--speedup-ratio", "1")
	fe.waitReady(model, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	started := make(chan struct{})
	longDone := make(chan streamResult, 1)
	go func() { longDone <- streamCompletion(ctx, fe, 1, 300, func(string) { close(started) }) }()
	select {
	case <-started:
	case r := <-longDone:
		t.Fatalf("the long request ended before its first text: %+v", r)
	}
	queued := streamCompletion(ctx, fe, 2, 4, nil)
	long := <-longDone
	for _, r := range []streamResult{long, queued} {
		if r.transport != "" || r.errFrame != "" || !r.done || r.finish != "length" {
			t.Fatalf("request %+v, want it answered in full", r)
		}
	}
	if queued.took < 3*acceptTimeout {
		t.Fatalf("the second request took %v: it did not wait in the engine's queue past the accept timeout (%v), so this proves nothing",
			queued.took, acceptTimeout)
	}
	logs := fe.Logs()
	for _, msg := range []string{"has not acknowledged it", "request migrated"} {
		if strings.Contains(logs, msg) {
			t.Errorf("the frontend logged %q: a leg was taken for unacknowledged", msg)
		}
	}
	t.Logf("the second request waited %v behind the first (%v)", queued.took, long.took)
}
