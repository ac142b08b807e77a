package kvbmtier

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/engines/internal/redistest"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/kvbm/resp"
)

// startRedis runs Debian's redis-server on a free port (redistest.StartRedisServer).
func startRedis(t *testing.T) string { return redistest.StartRedisServer(t) }

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
	tier, err := Dial(ctx, Options{URL: "resp://" + addr, Model: "m", BlockBytes: bb, QueueBytes: 8 * bb})
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
	tier, err := Dial(ctx, Options{URL: "redis://" + addr, Model: "m", BlockBytes: 16, QueueBytes: 16})
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
		{URL: "resp://127.0.0.1:1", Model: "m", BlockBytes: 64, QueueBytes: -1},
	} {
		if tier, err := Dial(ctx, o); err == nil {
			tier.Close()
			t.Errorf("%+v: no error", o)
		}
	}
}

// One engine step that evicts 100 blocks offloads them all under the default queue
// bound while the writer is held (the queue was 32 blocks: 68 were dropped, and every
// cached prefix had a hole); a queue bounded to 10 blocks' bytes drops the other 90.
func TestStepEvictionFitsQueue(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		blockBytes  int64
		queueBytes  int64
		wantDropped uint64
	}{
		{"default queue, 16 tokens of 8 KiB", 16 * 8 << 10, 0, 0},
		{"default queue, 16 tokens of 1 KiB", 16 << 10, 0, 0},
		{"queue of 10 blocks", 16 << 10, 10 * 16 << 10, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			tier, err := Dial(ctx, Options{URL: "resp://" + addr, Model: "m", BlockBytes: tc.blockBytes,
				QueueBytes: tc.queueBytes, Logger: zerolog.New(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			defer tier.Close()
			raw := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			defer raw.Close()
			if err := raw.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := raw.Do(ctx, "CLIENT", "PAUSE", "1000", "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			for h := uint64(1); h <= 100; h++ { // one step's evictions
				tier.Offload(h)
			}
			if err := raw.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Fatal(err)
			}
			if err := tier.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			st := tier.Stats()
			if st.Dropped != tc.wantDropped || st.Offloaded != 100-tc.wantDropped || st.WriteErrors != 0 {
				t.Fatalf("stats %+v: want %d dropped, the rest written", st, tc.wantDropped)
			}
			if n := raw.DBSize(ctx).Val(); n != int64(100-tc.wantDropped) {
				t.Fatalf("server holds %d blocks, want %d", n, 100-tc.wantDropped)
			}
			// The first drop is logged, once (the next line is a minute later).
			if got := strings.Count(logs.String(), "offload queue full"); got != min(int(tc.wantDropped), 1) {
				t.Fatalf("%d queue-full lines, want %d:\n%s", got, min(int(tc.wantDropped), 1), logs.String())
			}
		})
	}
}

// The queue's bound in blocks is QueueBytes over the block's bytes, at least one: the
// default holds one step's evictions of 16-token blocks at 128 KiB a token (88 blocks
// in the trial that found the 32-block queue dropping most of them).
func TestQueueBound(t *testing.T) {
	for _, tc := range []struct {
		blockBytes, queueBytes int64
		want                   int
	}{
		{16 * 128 << 10, 0, 128},
		{64 * 128 << 10, 0, 32},
		{16 << 10, 0, 16384},
		{1 << 20, 1, 1},
		{1 << 20, 10 << 20, 10},
	} {
		qb := tc.queueBytes
		if qb == 0 {
			qb = DefaultQueueBytes
		}
		if got := queueBlocks(qb, tc.blockBytes); got != tc.want {
			t.Errorf("block %d, queue %d bytes: %d blocks, want %d", tc.blockBytes, tc.queueBytes, got, tc.want)
		}
	}
}

// lockedBuffer is a log sink the tier's goroutines may write to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An engine whose block manager is not listening yet starts all the same: offloads are
// dropped and counted, Match finds nothing; when a RESP server appears on the port the
// tier reconnects and offloads begin; when it goes away the tier is down again. One
// warning per outage, one info line per recovery.
func TestTierStartsWithoutServer(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	var logs lockedBuffer
	tier, err := Dial(ctx, Options{URL: "resp://" + addr, Model: "m", BlockBytes: 64, Timeout: time.Second,
		Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatalf("Dial with nothing listening: %v, want a tier that connects later", err)
	}
	defer tier.Close()
	tier.Offload(1)
	if got := tier.Match([]uint64{1}); len(got) != 0 {
		t.Fatalf("Match while down = %v", got)
	}
	if n := tier.Onboard([]uint64{1}); n != 0 {
		t.Fatalf("Onboard while down read %d", n)
	}
	if st := tier.Stats(); st.Up || st.Unreachable != 1 || st.Offloaded != 0 {
		t.Fatalf("stats while down %+v", st)
	}

	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := resp.New(st, resp.Options{})
	go func() { _ = srv.Serve(l) }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tier.WaitUp(wctx); err != nil {
		t.Fatalf("not reconnected: %v", err)
	}
	tier.Offload(2)
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tier.Match([]uint64{2}); len(got) != 1 {
		t.Fatalf("Match after reconnection = %v, want block 2", got)
	}
	if s := tier.Stats(); !s.Up || s.Offloaded != 1 || s.Unreachable != 1 {
		t.Fatalf("stats after reconnection %+v", s)
	}

	srv.Close()
	_ = l.Close()
	tier.Offload(3)
	_ = tier.Flush(ctx)
	if s := tier.Stats(); s.Up || s.WriteErrors != 1 {
		t.Fatalf("stats after the server went away %+v", s)
	}
	if got := tier.Match([]uint64{2}); len(got) != 0 {
		t.Fatalf("Match after the server went away = %v", got)
	}
	out := logs.String()
	if w, i := strings.Count(out, "unreachable"), strings.Count(out, "reachable again"); w != 2 || i != 1 {
		t.Fatalf("%d warnings and %d recoveries logged, want 2 and 1:\n%s", w, i, out)
	}
}
