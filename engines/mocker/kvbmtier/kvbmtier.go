// Package kvbmtier is the mock engine's lower KV tier over the network (mocker.LowerTier,
// docs/reference.md §9): the node's KV block manager (`turbine kvbm`), or any server of
// the RESP2 subset LMCache's connectors use (redis-server too), at a resp:// or redis://
// URL. Each block is stored under kvbm.BlockKey(model, sequence hash) with real bytes,
// BlockBytes of them, so that the block manager's memory, disk and network carry the
// model's KV size:
//
//   - Offload queues the block for one writer goroutine (SET); a full queue drops it
//     (Stats.Dropped), so that an engine step never waits for the network;
//   - Match asks EXISTS for every block in one pipeline and returns the leading run held;
//   - Onboard GETs the blocks in one pipeline and checks each value's length and the
//     sequence hash written in its first 8 bytes; the leading run that checks is read.
//
// RESP says whether a block exists, not in which tier: Match reports Options.Tier for
// every block (TierHost by default), which sets the modelled onboarding bandwidth.
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

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
)

// Defaults of Options.
const (
	// DefaultQueueBlocks is the offload queue's length in blocks: at the default 8 MiB
	// block (64 tokens of 128 KiB), 256 MiB in flight at most.
	DefaultQueueBlocks = 32
	// DefaultTimeout bounds each command (a SET, a pipeline of EXISTS or GET).
	DefaultTimeout = 5 * time.Second
)

// Options configure a Tier.
type Options struct {
	// URL is the block manager's address: resp://host:port, redis://[user:password@]host:port[/db],
	// rediss:// or unix://path (the schemes LMCache's connectors take).
	URL string
	// Model is the served model name the block keys carry (kvbm.BlockKey).
	Model string
	// BlockBytes is the size of one block's value in bytes (block size × KV bytes per
	// token), at least 8.
	BlockBytes int64
	// Tier is the tier Match reports (TierHost when TierNone).
	Tier kv.Tier
	// QueueBlocks is the offload queue's length (DefaultQueueBlocks when 0).
	QueueBlocks int
	// Timeout bounds each command (DefaultTimeout when 0).
	Timeout time.Duration
}

// Stats are a Tier's counters since Dial.
type Stats struct {
	// Offloaded and OffloadedBytes count blocks written; Dropped blocks the full queue
	// refused; WriteErrors writes that failed.
	Offloaded, OffloadedBytes, Dropped, WriteErrors uint64
	// Matched counts blocks Match found; Onboarded and OnboardedBytes blocks read and
	// checked; ReadErrors failed pipelines, missing blocks and values that did not check.
	Matched, Onboarded, OnboardedBytes, ReadErrors uint64
}

// Tier is a mocker.LowerTier over RESP. Offload, Match and Onboard are called by the
// engine's one owner; Stats and Close from anywhere.
type Tier struct {
	opts   Options
	client *redis.Client
	queue  chan job
	buf    []byte // the writer's value; its first 8 bytes are the block's sequence hash
	done   chan struct{}
	once   sync.Once
	stop   context.CancelFunc
	ctx    context.Context

	offloaded, offloadedBytes, dropped, writeErrors atomic.Uint64
	matched, onboarded, onboardedBytes, readErrors  atomic.Uint64
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

// Dial connects to the block manager at opts.URL (a PING answered) and starts the
// writer. Errors: a bad URL or option, or no answer within the timeout.
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
	case opts.QueueBlocks < 0:
		return nil, fmt.Errorf("kvbmtier: queue of %d blocks must not be negative", opts.QueueBlocks)
	}
	if opts.Tier == kv.TierNone {
		opts.Tier = kv.TierHost
	}
	if opts.QueueBlocks == 0 {
		opts.QueueBlocks = DefaultQueueBlocks
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	ro.ReadTimeout, ro.WriteTimeout = opts.Timeout, opts.Timeout
	ro.PoolSize = 4 // the writer and the engine's reads
	c := redis.NewClient(ro)
	pctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("kvbmtier: %s: %w", opts.URL, err)
	}
	t := &Tier{opts: opts, client: c, queue: make(chan job, opts.QueueBlocks), buf: make([]byte, opts.BlockBytes),
		done: make(chan struct{})}
	for i := 8; i < len(t.buf); i++ {
		t.buf[i] = byte(i * 131) // not all zeros: nothing on the path may compress it away
	}
	t.ctx, t.stop = context.WithCancel(context.Background())
	go t.write()
	return t, nil
}

// job is a block to write, or a Flush's marker.
type job struct {
	seqHash uint64
	flush   chan struct{}
}

// Key is the key block seqHash is stored under.
func (t *Tier) Key(seqHash uint64) string { return kvbm.BlockKey(t.opts.Model, seqHash) }

// Offload queues the block for writing, or drops it when the queue is full.
func (t *Tier) Offload(seqHash uint64) {
	select {
	case t.queue <- job{seqHash: seqHash}:
	default:
		t.dropped.Add(1)
	}
}

// write is the writer goroutine: one SET at a time until Close.
func (t *Tier) write() {
	defer close(t.done)
	for {
		select {
		case <-t.ctx.Done():
			return
		case j := <-t.queue:
			if j.flush != nil {
				close(j.flush)
				continue
			}
			h := j.seqHash
			binary.LittleEndian.PutUint64(t.buf, h)
			ctx, cancel := context.WithTimeout(t.ctx, t.opts.Timeout)
			err := t.client.Set(ctx, t.Key(h), t.buf, 0).Err()
			cancel()
			if err != nil {
				t.writeErrors.Add(1)
				continue
			}
			t.offloaded.Add(1)
			t.offloadedBytes.Add(uint64(len(t.buf)))
		}
	}
}

// Match returns Options.Tier for each leading block the server holds (EXISTS, one
// pipeline); none when the pipeline fails.
func (t *Tier) Match(seqHashes []uint64) []kv.Tier {
	if len(seqHashes) == 0 {
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
// whole: BlockBytes bytes starting with their sequence hash.
func (t *Tier) Onboard(seqHashes []uint64) int {
	if len(seqHashes) == 0 {
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
		WriteErrors: t.writeErrors.Load(), Matched: t.matched.Load(), Onboarded: t.onboarded.Load(),
		OnboardedBytes: t.onboardedBytes.Load(), ReadErrors: t.readErrors.Load()}
}

// Flush waits until the blocks queued before it are written (or failed), or ctx ends:
// for tests and a graceful shutdown.
func (t *Tier) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case t.queue <- job{flush: ack}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.done:
		return errClosed
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.done:
		return errClosed
	}
}

var errClosed = errors.New("kvbmtier: closed")

// Close stops the writer (blocks still queued are dropped) and the connections.
func (t *Tier) Close() error {
	var err error
	t.once.Do(func() {
		t.stop()
		<-t.done
		err = t.client.Close()
	})
	return err
}
