// Package kvbmtier is the mock engine's lower KV tier over the network (mocker.LowerTier,
// docs/reference.md §9): the node's KV block manager (`turbine kvbm`), or any server of
// the RESP2 subset LMCache's connectors use (redis-server too), at a resp:// or redis://
// URL. Each block is stored under kvbm.BlockKey(model, sequence hash) with real bytes,
// BlockBytes of them, so that the block manager's memory, disk and network carry the
// model's KV size:
//
//   - Offload queues the block for one writer goroutine (SET); the queue is bounded by
//     bytes (Options.QueueBytes, the bytes a real engine would hold in flight), and a
//     full queue drops the block (Stats.Dropped; the first drop is logged, then at most
//     one line a minute), so that an engine step never waits for the network;
//   - Match asks EXISTS for every block in one pipeline and returns the leading run held;
//   - Onboard GETs the blocks in one pipeline and checks each value's length and the
//     sequence hash written in its first 8 bytes; the leading run that checks is read.
//
// The server may be down when the engine starts or go away later: the tier then serves
// without it (Offload drops and counts in Stats.Unreachable, Match finds nothing,
// Onboard reads nothing) and reconnects in the background (a PING with backoff from
// 100 ms to 5 s); one warning when it goes, one info line when it is back.
//
// RESP says whether a block exists, not in which tier: Match reports Options.Tier for
// every block (TierHost by default), which sets the modelled onboarding bandwidth.
//
// Ownership: pending, enq, fin, progress, isUp and upCh are guarded by mu; up mirrors
// isUp for the engine's lock-free reads; buf is the writer goroutine's alone.
package kvbmtier

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// Defaults of Options and the reconnection's pacing.
const (
	// DefaultQueueBytes bounds the offload queue: 256 MiB of blocks waiting for the
	// writer (128 blocks of 16 tokens × 128 KiB, 32 of 64 tokens).
	DefaultQueueBytes = 256 << 20
	// DefaultTimeout bounds each command (a SET, a pipeline of EXISTS or GET).
	DefaultTimeout = 5 * time.Second
	// retryMin and retryMax bound the wait between reconnection attempts (doubling).
	retryMin, retryMax = 100 * time.Millisecond, 5 * time.Second
	// dropLogEvery spaces the lines that report queue-full drops.
	dropLogEvery = time.Minute
)

// Options configure a Tier.
type Options struct {
	// URL is the block manager's address: resp://host:port, redis://[user:password@]host:port[/db],
	// rediss:// or unix://path (the schemes LMCache's connectors take).
	URL string
	// Model is the served model name the block keys carry (kvbm.BlockKey).
	Model string
	// BlockBytes is the size of one block's value in bytes (block size × KV bytes per
	// token), 8 to 1 GiB.
	BlockBytes int64
	// Tier is the tier Match reports (TierHost when TierNone).
	Tier kv.Tier
	// QueueBytes bounds the offload queue in bytes (DefaultQueueBytes when 0); it holds
	// at least one block whatever its value.
	QueueBytes int64
	// Timeout bounds each command (DefaultTimeout when 0).
	Timeout time.Duration
	// Logger receives the connection's warnings and drops (and go-redis's own lines at
	// debug level); zero value: nothing is logged.
	Logger zerolog.Logger
}

// Stats are a Tier's counters since Dial.
type Stats struct {
	// Offloaded and OffloadedBytes count blocks written; Dropped blocks the full queue
	// refused; Unreachable blocks dropped because the server was down; WriteErrors
	// writes that failed.
	Offloaded, OffloadedBytes, Dropped, Unreachable, WriteErrors uint64
	// Matched counts blocks Match found; Onboarded and OnboardedBytes blocks read and
	// checked; ReadErrors failed pipelines, missing blocks and values that did not check.
	Matched, Onboarded, OnboardedBytes, ReadErrors uint64
	// Up: the server answered the last command or PING.
	Up bool
}

// Tier is a mocker.LowerTier over RESP. Offload, Match and Onboard are called by the
// engine's one owner; Stats, Flush, WaitUp and Close from anywhere.
type Tier struct {
	opts     Options
	log      zerolog.Logger
	client   *redis.Client
	maxQueue int    // the queue's bound in blocks, the one being written included
	buf      []byte // the writer's value; its first 8 bytes are the block's sequence hash
	wake     chan struct{}
	kick     chan struct{}
	done     chan struct{} // closed when the writer has ended
	wg       sync.WaitGroup
	once     sync.Once
	stop     context.CancelFunc
	ctx      context.Context

	mu       sync.Mutex
	pending  []uint64      // blocks queued, oldest first
	inflight int           // 1 while the writer holds a block taken from pending
	enq, fin uint64        // blocks queued and blocks the writer finished, since Dial
	progress chan struct{} // closed (and replaced) whenever fin advances
	isUp     bool
	upCh     chan struct{} // closed while up
	wasDown  bool          // a warning was logged since the last recovery

	up                                                           atomic.Bool
	lastDropLog                                                  atomic.Int64 // Unix ns
	offloaded, offloadedBytes, dropped, unreachable, writeErrors atomic.Uint64
	matched, onboarded, onboardedBytes, readErrors               atomic.Uint64
}

var _ mocker.LowerTier = (*Tier)(nil)

// ParseURL reads a block manager's URL into go-redis options (RESP2, no client
// identity). resp:// is redis:// (LMCache's native client's scheme).
func ParseURL(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("kvbmtier: --kvbm-url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "resp":
		raw = "redis" + strings.TrimPrefix(raw, "resp")
	case "redis", "rediss", "unix":
	default:
		return nil, fmt.Errorf("kvbmtier: --kvbm-url %q: want resp://, redis://, rediss:// or unix://", raw)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("kvbmtier: --kvbm-url %q: %w", raw, err)
	}
	o.Protocol = 2
	o.DisableIdentity = true
	return o, nil
}

// redisLogOnce routes go-redis's own lines (a pool's dial errors, process-wide) to the
// first tier's logger at debug level.
var redisLogOnce sync.Once

type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("component", "go-redis").Msgf(format, v...)
}

// Dial checks opts, makes the client and starts the writer and the reconnection. It
// tries one PING (bounded by the timeout): when the server does not answer, the tier
// starts down (one warning) and keeps trying in the background; WaitUp waits for it.
// Errors: a bad URL or option only.
func Dial(ctx context.Context, opts Options) (*Tier, error) {
	ro, err := ParseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Model == "":
		return nil, errors.New("kvbmtier: a model name is required")
	case opts.BlockBytes < 8 || opts.BlockBytes > 1<<30:
		return nil, fmt.Errorf("kvbmtier: block of %d bytes: want 8 to 1 GiB", opts.BlockBytes)
	case opts.QueueBytes < 0:
		return nil, fmt.Errorf("kvbmtier: queue of %d bytes must not be negative", opts.QueueBytes)
	}
	if opts.Tier == kv.TierNone {
		opts.Tier = kv.TierHost
	}
	if opts.QueueBytes == 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{opts.Logger}) })
	ro.ReadTimeout, ro.WriteTimeout, ro.DialTimeout = opts.Timeout, opts.Timeout, opts.Timeout
	ro.PoolSize = 4    // the writer, the engine's reads and the reconnection's PING
	ro.MaxRetries = -1 // a failed command marks the tier down; the reconnection retries
	t := &Tier{opts: opts, log: opts.Logger.With().Str("url", opts.URL).Logger(), client: redis.NewClient(ro),
		maxQueue: queueBlocks(opts.QueueBytes, opts.BlockBytes), buf: make([]byte, opts.BlockBytes),
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), done: make(chan struct{}),
		progress: make(chan struct{}), upCh: make(chan struct{}), isUp: false}
	for i := 8; i < len(t.buf); i++ {
		t.buf[i] = byte(i * 131) // not all zeros: nothing on the path may compress it away
	}
	t.ctx, t.stop = context.WithCancel(context.Background())
	pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	err = t.client.Ping(pctx).Err()
	cancel()
	if err == nil {
		t.markUp()
	} else {
		t.isUp = true // so that markDown warns and kicks the reconnection
		t.markDown(err)
	}
	t.wg.Add(1)
	go t.reconnect()
	go t.write()
	return t, nil
}

// queueBlocks is the offload queue's bound in blocks: queueBytes over blockBytes, at
// least 1 and at most 16 Mi entries.
func queueBlocks(queueBytes, blockBytes int64) int {
	return int(max(1, min(queueBytes/blockBytes, 1<<24)))
}

// Key is the key block seqHash is stored under.
func (t *Tier) Key(seqHash uint64) string { return kvbm.BlockKey(t.opts.Model, seqHash) }

// Offload queues the block for writing; it drops it when the server is down
// (Stats.Unreachable) or the queue holds Options.QueueBytes already (Stats.Dropped).
func (t *Tier) Offload(seqHash uint64) {
	if !t.up.Load() {
		t.unreachable.Add(1)
		return
	}
	t.mu.Lock()
	if len(t.pending)+t.inflight >= t.maxQueue {
		t.mu.Unlock()
		n := t.dropped.Add(1)
		now := time.Now().UnixNano()
		if last := t.lastDropLog.Load(); (last == 0 || now-last >= int64(dropLogEvery)) && t.lastDropLog.CompareAndSwap(last, now) {
			t.log.Warn().Uint64("dropped_total", n).Int64("queue_bytes", t.opts.QueueBytes).Int("queue_blocks", t.maxQueue).
				Msg("KV block manager offload queue full: evicted blocks dropped (a cached prefix is not reloaded past a dropped block)")
		}
		return
	}
	t.pending = append(t.pending, seqHash)
	t.enq++
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued block; ok is false when the queue is empty.
func (t *Tier) next() (h uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return 0, false
	}
	h = t.pending[0]
	t.pending = t.pending[1:]
	t.inflight = 1
	if len(t.pending) == 0 {
		t.pending = t.pending[:0:0] // let the array go
	}
	return h, true
}

// write is the writer goroutine: one SET at a time until Close.
func (t *Tier) write() {
	defer close(t.done)
	for {
		h, ok := t.next()
		if !ok {
			select {
			case <-t.ctx.Done():
				return
			case <-t.wake:
				continue
			}
		}
		if t.ctx.Err() != nil {
			return
		}
		if !t.up.Load() {
			t.unreachable.Add(1)
		} else {
			binary.LittleEndian.PutUint64(t.buf, h)
			ctx, cancel := context.WithTimeout(t.ctx, t.opts.Timeout)
			err := t.client.Set(ctx, t.Key(h), t.buf, 0).Err()
			cancel()
			if err != nil {
				t.writeErrors.Add(1)
				t.failed(err)
			} else {
				t.offloaded.Add(1)
				t.offloadedBytes.Add(uint64(len(t.buf)))
			}
		}
		t.mu.Lock()
		t.fin++
		t.inflight = 0
		close(t.progress)
		t.progress = make(chan struct{})
		t.mu.Unlock()
	}
}

// failed marks the tier down when err says the server is unreachable (not an error
// reply, not a missing key, not Close).
func (t *Tier) failed(err error) {
	var reply redis.Error
	if err == nil || errors.Is(err, redis.Nil) || errors.As(err, &reply) || t.ctx.Err() != nil {
		return
	}
	t.markDown(err)
}

// markDown records that the server is unreachable: one warning, and the reconnection
// starts.
func (t *Tier) markDown(err error) {
	t.mu.Lock()
	if !t.isUp {
		t.mu.Unlock()
		return
	}
	t.isUp, t.wasDown = false, true
	t.up.Store(false)
	t.upCh = make(chan struct{})
	t.mu.Unlock()
	t.log.Warn().Err(err).Msg("KV block manager unreachable: offloads are dropped and no lower-tier blocks are found until it answers again")
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// markUp records that the server answered; an info line when it was down.
func (t *Tier) markUp() {
	t.mu.Lock()
	if t.isUp {
		t.mu.Unlock()
		return
	}
	t.isUp = true
	t.up.Store(true)
	close(t.upCh)
	wasDown := t.wasDown
	t.wasDown = false
	t.mu.Unlock()
	if wasDown {
		t.log.Info().Msg("KV block manager reachable again: offloading")
	}
}

// reconnect is the reconnection goroutine: after each markDown, a PING with backoff
// until one is answered, until Close.
func (t *Tier) reconnect() {
	defer t.wg.Done()
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.kick:
		}
		wait := retryMin
		for !t.up.Load() {
			ctx, cancel := context.WithTimeout(t.ctx, t.opts.Timeout)
			err := t.client.Ping(ctx).Err()
			cancel()
			if err == nil {
				t.markUp()
				break
			}
			timer.Reset(wait)
			select {
			case <-t.ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			wait = min(2*wait, retryMax)
		}
	}
}

// WaitUp waits until the server answers (at once when it does), or ctx ends.
func (t *Tier) WaitUp(ctx context.Context) error {
	t.mu.Lock()
	ch := t.upCh
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Match returns Options.Tier for each leading block the server holds (EXISTS, one
// pipeline); none when the server is down or the pipeline fails.
func (t *Tier) Match(seqHashes []uint64) []kv.Tier {
	if len(seqHashes) == 0 || !t.up.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.Timeout)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(seqHashes))
	_, err := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range seqHashes {
			cmds[i] = p.Exists(ctx, t.Key(h))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.readErrors.Add(1)
		t.failed(err)
		return nil
	}
	var out []kv.Tier
	for _, c := range cmds {
		if c.Val() != 1 {
			break
		}
		out = append(out, t.opts.Tier)
	}
	t.matched.Add(uint64(len(out)))
	return out
}

// Onboard GETs the blocks (one pipeline) and returns how many leading ones were read
// whole: BlockBytes bytes starting with their sequence hash. None while the server is
// down.
func (t *Tier) Onboard(seqHashes []uint64) int {
	if len(seqHashes) == 0 || !t.up.Load() {
		return 0
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.Timeout)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(seqHashes))
	_, err := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range seqHashes {
			cmds[i] = p.Get(ctx, t.Key(h))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.readErrors.Add(1)
		t.failed(err)
		return 0
	}
	n := 0
	for i, c := range cmds {
		v, err := c.Bytes()
		if err != nil || int64(len(v)) != t.opts.BlockBytes || binary.LittleEndian.Uint64(v) != seqHashes[i] {
			t.readErrors.Add(1)
			break
		}
		n++
		t.onboardedBytes.Add(uint64(len(v)))
	}
	t.onboarded.Add(uint64(n))
	return n
}

// Stats returns the counters now.
func (t *Tier) Stats() Stats {
	return Stats{Offloaded: t.offloaded.Load(), OffloadedBytes: t.offloadedBytes.Load(), Dropped: t.dropped.Load(),
		Unreachable: t.unreachable.Load(), WriteErrors: t.writeErrors.Load(), Matched: t.matched.Load(),
		Onboarded: t.onboarded.Load(), OnboardedBytes: t.onboardedBytes.Load(), ReadErrors: t.readErrors.Load(),
		Up: t.up.Load()}
}

// Flush waits until the blocks queued before it are written (or failed, or dropped
// because the server went down), or ctx ends: for tests and a graceful shutdown.
// Errors: ctx's, or errClosed after Close.
func (t *Tier) Flush(ctx context.Context) error {
	t.mu.Lock()
	target := t.enq
	t.mu.Unlock()
	for {
		t.mu.Lock()
		if t.fin >= target {
			t.mu.Unlock()
			return nil
		}
		p := t.progress
		t.mu.Unlock()
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.done:
			return errClosed
		}
	}
}

var errClosed = errors.New("kvbmtier: closed")

// Close stops the writer (blocks still queued are dropped), the reconnection and the
// connections.
func (t *Tier) Close() error {
	var err error
	t.once.Do(func() {
		t.stop()
		<-t.done
		t.wg.Wait()
		err = t.client.Close()
	})
	return err
}
