package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startKvbm runs `turbine kvbm` on its own (local discovery, a free RESP port, lm://
// off) with args and returns it with its RESP address (host:port), read from its
// "KV block manager serving" line.
func startKvbm(t testing.TB, args ...string) (*server, string) {
	t.Helper()
	all := append([]string{"kvbm", "--node-id", "crash-node", "--discovery", "local", "--member-port", "0",
		"--log-format", "json", "--kvbm-resp-port", "0", "--kvbm-lm-port", "-1"}, args...)
	s := startTurbine(t, "kvbm", "KV block manager serving", all...)
	for _, line := range strings.Split(s.Logs(), "\n") {
		var rec struct {
			Message string `json:"message"`
			RESP    string `json:"resp"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "KV block manager serving" {
			return s, strings.TrimPrefix(rec.RESP, "resp://")
		}
	}
	t.Fatalf("no RESP address in the kvbm's log:\n%s", s.Logs())
	return nil, ""
}

// kvbmClient is a go-redis client of addr that never retries (an acknowledgement is one
// reply to one SET).
func kvbmClient(addr string, conns int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: conns, DialTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
}

// crashValue is key i's value: 1 to 2 MiB of bytes drawn from seed i, so that any byte
// served from another key, another offset or a torn write differs.
func crashValue(i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 0x6b76626d))
	v := make([]byte, 1<<20+rng.IntN(1<<20))
	for j := 0; j+8 <= len(v); j += 8 {
		x := rng.Uint64()
		for k := 0; k < 8; k++ {
			v[j+k] = byte(x >> (8 * k))
		}
	}
	return v
}

func crashKey(i int) string { return fmt.Sprintf("crash-%05d", i) }

// ackLog records, in acknowledgement order, the keys whose SET was answered +OK, and
// every key whose SET was sent.
type ackLog struct {
	mu    sync.Mutex
	acked []int
	sent  map[int]bool
	errs  []error
}

// writeUntilKilled runs conns writers SETting keys 0, 1, 2, … (each key once) until
// they fail, as they do when the server is killed. It returns once every writer has
// ended; reached is closed once `after` SETs are acknowledged.
func writeUntilKilled(ctx context.Context, c *redis.Client, conns, after int, log *ackLog, reached chan struct{}) {
	var next int
	var nextMu sync.Mutex
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				nextMu.Lock()
				i := next
				next++
				nextMu.Unlock()
				log.mu.Lock()
				log.sent[i] = true
				log.mu.Unlock()
				if err := c.Set(ctx, crashKey(i), crashValue(i), 0).Err(); err != nil {
					log.mu.Lock()
					log.errs = append(log.errs, err)
					log.mu.Unlock()
					return
				}
				log.mu.Lock()
				log.acked = append(log.acked, i)
				n := len(log.acked)
				log.mu.Unlock()
				if n >= after {
					once.Do(func() { close(reached) })
				}
			}
		}()
	}
	wg.Wait()
}

// TestKvbmKill9: `turbine kvbm` with a small host tier and a disk tier, killed with
// SIGKILL while SETs of 1–2 MiB values are in flight, then restarted on the same
// directory. What an acknowledged SET guarantees depends on the policy (docs/reference.md
// §9.1):
//   - write-through: a put returns once its file is in place, so every acknowledged value
//     is served after the restart, byte-exact;
//   - demote: a put returns once the host tier holds it and the demotions it caused are
//     written, so a value survives once it has been demoted: with one writer, every
//     acknowledged value except the newest ones that the host tier (plus the SET in
//     flight's evictions) may still hold.
//
// Under both, no value is ever served with bytes other than those SET.
func TestKvbmKill9(t *testing.T) {
	const hostBytes = 8 << 20
	for _, tc := range []struct {
		policy string
		conns  int
		// atRisk: how many of the newest acknowledged keys may be lost.
		atRisk int
	}{
		{"write-through", 4, 0},
		// 1 MiB values at least: the host tier holds at most 8 of them, and the SET in
		// flight (at most 2 MiB) evicts at most 3 whose demotion the kill may cut short.
		{"demote", 1, hostBytes>>20 + 3},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--kvbm-policy", tc.policy, "--kvbm-host-bytes", fmt.Sprint(hostBytes),
				"--kvbm-disk-dir", dir, "--kvbm-disk-bytes", "1GiB"}
			s, addr := startKvbm(t, args...)
			c := kvbmClient(addr, tc.conns)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			log := &ackLog{sent: map[int]bool{}}
			reached := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				writeUntilKilled(ctx, c, tc.conns, 40, log, reached)
			}()
			select {
			case <-reached:
			case <-done:
				t.Fatalf("the writers stopped before 40 acknowledgements: %v", log.errs)
			case <-ctx.Done():
				t.Fatal("40 SETs not acknowledged in 60 s")
			}
			s.kill() // the writers have SETs in flight: they never wait between them
			<-done
			log.mu.Lock()
			acked, sent := append([]int(nil), log.acked...), len(log.sent)
			log.mu.Unlock()
			if sent <= len(acked) {
				t.Fatalf("%d SETs sent, %d acknowledged: none was in flight at the kill", sent, len(acked))
			}
			_ = c.Close()

			_, addr = startKvbm(t, args...)
			c2 := kvbmClient(addr, 1)
			defer c2.Close()
			mustKeep := map[int]bool{}
			for _, i := range acked[:len(acked)-tc.atRisk] {
				mustKeep[i] = true
			}
			kept := 0
			for i := 0; i < sent; i++ {
				got, err := c2.Get(ctx, crashKey(i)).Bytes()
				switch {
				case errors.Is(err, redis.Nil):
					if mustKeep[i] {
						t.Errorf("%s: acknowledged and lost (ack %d of %d)", crashKey(i), indexOf(acked, i)+1, len(acked))
					}
				case err != nil:
					t.Fatalf("GET %s after the restart: %v", crashKey(i), err)
				case !bytes.Equal(got, crashValue(i)):
					t.Errorf("%s: served %d bytes that differ from the %d SET", crashKey(i), len(got), len(crashValue(i)))
				default:
					kept++
				}
			}
			t.Logf("%s: %d SETs sent, %d acknowledged, %d served after kill -9 and restart", tc.policy, sent, len(acked), kept)
		})
	}
}

func indexOf(xs []int, x int) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// TestKvbmDiskFull: a write-through disk tier on a 16 MiB tmpfs under a 64 MiB cap: the
// SETs the file system cannot hold are answered an error reply (redis's OOM), the
// process keeps serving what it holds, byte-exact, and takes SETs again once keys are
// deleted. Needs permission to mount (root); skipped otherwise.
func TestKvbmDiskFull(t *testing.T) {
	if turbineBin == "" {
		t.Skip("end-to-end test: skipped with -short")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("a full disk needs a 16 MiB tmpfs, and mount is not permitted here (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	s, addr := startKvbm(t, "--kvbm-policy", "write-through", "--kvbm-host-bytes", "4MiB",
		"--kvbm-disk-dir", dir, "--kvbm-disk-bytes", "64MiB")
	c := kvbmClient(addr, 1)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stored []int
	var refusal error
	for i := 0; i < 32 && refusal == nil; i++ { // 32 MiB at least: twice the file system
		switch err := c.Set(ctx, crashKey(i), crashValue(i), 0).Err(); {
		case err == nil:
			stored = append(stored, i)
		case strings.HasPrefix(err.Error(), "OOM "):
			refusal = err
		default:
			t.Fatalf("SET %s: %v, want OK or an OOM error reply", crashKey(i), err)
		}
	}
	if refusal == nil || len(stored) == 0 {
		t.Fatalf("%d SETs stored, refusal %v: want some stored, then an error reply", len(stored), refusal)
	}
	t.Logf("full after %d SETs: %v", len(stored), refusal)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the refusal: %v", err)
	}
	for _, i := range stored {
		if got, err := c.Get(ctx, crashKey(i)).Bytes(); err != nil || !bytes.Equal(got, crashValue(i)) {
			t.Fatalf("GET %s after the refusal: %d bytes, %v", crashKey(i), len(got), err)
		}
	}
	// The refused SET left nothing behind: deleting three keys makes room for it.
	var del []string
	for _, i := range stored[:min(3, len(stored))] {
		del = append(del, crashKey(i))
	}
	if n, err := c.Del(ctx, del...).Result(); err != nil || n != int64(len(del)) {
		t.Fatalf("DEL: %d, %v", n, err)
	}
	next := stored[len(stored)-1] + 1
	if err := c.Set(ctx, crashKey(next), crashValue(next), 0).Err(); err != nil {
		t.Fatalf("SET %s after deleting three keys: %v", crashKey(next), err)
	}
	if got, err := c.Get(ctx, crashKey(next)).Bytes(); err != nil || !bytes.Equal(got, crashValue(next)) {
		t.Fatalf("GET %s: %d bytes, %v", crashKey(next), len(got), err)
	}
	if left, _ := os.ReadDir(dir); len(left) == 0 {
		t.Fatal("the disk tier is empty")
	}
	s.stop()
}
