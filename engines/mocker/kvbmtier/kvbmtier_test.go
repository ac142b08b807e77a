package kvbmtier

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// startRedis runs Debian's redis-server on a free port (no persistence) and returns its
// address; the test skips when redis-server is not installed.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server): the RESP tier is tested against it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- true
				for sc.Scan() { // keep the pipe drained
				}
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("redis-server exited before it was ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("redis-server not ready within 10 s")
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, addr string
		db        int
		err       bool
	}{
		{"resp://127.0.0.1:6379", "127.0.0.1:6379", 0, false},
		{"redis://h:7000/2", "h:7000", 2, false},
		{"redis://:secret@h:7000", "h:7000", 0, false},
		{"lm://h:1", "", 0, true},
		{"http://h:1", "", 0, true},
		{"::", "", 0, true},
	} {
		o, err := ParseURL(tc.url)
		if tc.err {
			if err == nil {
				t.Errorf("%s: no error", tc.url)
			}
			continue
		}
		if err != nil || o.Addr != tc.addr || o.DB != tc.db || o.Protocol != 2 {
			t.Errorf("%s: %+v %v", tc.url, o, err)
		}
	}
}

// Offloaded blocks are stored under their block keys with real bytes; Match finds the
// leading run; Onboard reads and checks them; a value of the wrong size does not check.
func TestTierAgainstRedis(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	const bb = 64 << 10
	tier, err := Dial(ctx, Options{URL: "resp://" + addr, Model: "m", BlockBytes: bb, QueueBlocks: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for _, h := range []uint64{1, 2, 3, 5} {
		tier.Offload(h)
	}
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer raw.Close()
	v, err := raw.Get(ctx, kvbm.BlockKey("m", 2)).Bytes()
	if err != nil || len(v) != bb || v[0] != 2 {
		t.Fatalf("stored value: %d bytes, first %v, err %v", len(v), v[:min(len(v), 8)], err)
	}
	if got := tier.Match([]uint64{1, 2, 3, 4, 5}); len(got) != 3 || got[0] != kv.TierHost {
		t.Fatalf("Match = %v, want 3 host blocks (4 missing)", got)
	}
	if got := tier.Match([]uint64{4, 1}); len(got) != 0 {
		t.Fatalf("Match = %v, want none (first missing)", got)
	}
	if n := tier.Onboard([]uint64{1, 2, 3}); n != 3 {
		t.Fatalf("Onboard read %d, want 3", n)
	}
	// A torn value, and a value under another block's key, do not check.
	if err := raw.Set(ctx, kvbm.BlockKey("m", 3), make([]byte, bb-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := tier.Onboard([]uint64{1, 2, 3}); n != 2 {
		t.Fatalf("Onboard read %d, want 2 (block 3 torn)", n)
	}
	if err := raw.Set(ctx, kvbm.BlockKey("m", 1), v, 0).Err(); err != nil { // block 2's bytes
		t.Fatal(err)
	}
	if n := tier.Onboard([]uint64{1}); n != 0 {
		t.Fatalf("Onboard read %d, want 0 (block 1 holds block 2's bytes)", n)
	}
	st := tier.Stats()
	if st.Offloaded != 4 || st.OffloadedBytes != 4*bb || st.Onboarded != 5 || st.ReadErrors != 2 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A full queue drops offloads instead of blocking the caller.
func TestTierQueueFullDrops(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	tier, err := Dial(ctx, Options{URL: "redis://" + addr, Model: "m", BlockBytes: 16, QueueBlocks: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Hold the writer: pause the server so that its first SET waits.
	raw := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer raw.Close()
	if err := raw.Do(ctx, "CLIENT", "PAUSE", "2000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	for h := uint64(1); h <= 50; h++ {
		tier.Offload(h)
	}
	if err := raw.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := tier.Stats()
	if st.Dropped == 0 || st.Offloaded+st.Dropped+st.WriteErrors != 50 {
		t.Fatalf("stats %+v: want drops, and every block written, dropped or failed", st)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	tier.Offload(99) // after Close: dropped or queued, never blocks
}

func TestDialErrors(t *testing.T) {
	ctx := context.Background()
	for _, o := range []Options{
		{URL: "lm://x:1", Model: "m", BlockBytes: 64},
		{URL: "resp://127.0.0.1:1", Model: "", BlockBytes: 64},
		{URL: "resp://127.0.0.1:1", Model: "m", BlockBytes: 4},
		{URL: "resp://127.0.0.1:1", Model: "m", BlockBytes: 64, Timeout: 200 * time.Millisecond}, // nothing listens
	} {
		if tier, err := Dial(ctx, o); err == nil {
			tier.Close()
			t.Errorf("%+v: no error", o)
		}
	}
}
