package kvbm

import (
	"errors"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// Policy says when a block goes to the disk tier.
type Policy uint8

const (
	// PolicyDemote (the default): a block evicted from host memory is written to disk.
	PolicyDemote Policy = iota
	// PolicyWriteThrough: every put is written to disk as well as to host memory; host
	// memory is a cache of the disk.
	PolicyWriteThrough
	// PolicyReuse (promote on reuse): a block evicted from host memory goes to disk only
	// if it was reused — read at least once, or put again — while in host memory; others
	// are dropped on their first eviction.
	PolicyReuse
)

// Errors of the Store. Protocol servers map them to their own error replies.
var (
	ErrNotFound      = errors.New("kvbm: no such block")
	ErrKeyTooLong    = errors.New("kvbm: key too long")
	ErrValueTooLarge = errors.New("kvbm: value too large")
	ErrFull          = errors.New("kvbm: no room") // every tier full of pinned blocks, or the disk refused the write (ENOSPC)
	ErrClosed        = errors.New("kvbm: store closed")
)

// Config configures a Store. Zero values take the defaults in Defaults.
type Config struct {
	HostBytes int64  // host-memory tier cap (bytes); required > 0
	DiskDir   string // the disk tier's directory; "" for no disk tier
	DiskBytes int64  // disk tier cap (bytes); required > 0 when DiskDir is set
	Policy    Policy
	// MaxKeyBytes and MaxValueBytes bound one block (values also by HostBytes).
	MaxKeyBytes   int
	MaxValueBytes int64
	// Now is the clock (recency stamps); nil: time.Now.
	Now func() time.Time
}

// Entry is one block as Get returns it. Meta is the small opaque descriptor stored with the
// block (LMCache's fmt, dtype and shape, for lm://); Data its bytes. The slices must not be
// modified; they stay valid after later writes to the key (a put replaces, never mutates).
type Entry struct {
	Meta []byte
	Data []byte
	Tier kv.Tier // where the read found it
}

// Change is one inventory change: a block entered (Removed false) or left a tier.
type Change struct {
	Key     string
	Tier    kv.Tier
	Removed bool
}

// Defaults for Config's zero values.
const (
	DefaultMaxKeyBytes   = 1024
	DefaultMaxValueBytes = 512 << 20
)

// Stats are a Store's figures, per tier (indexed by kv.Tier; TierNone unused).
type Stats struct {
	Tiers    [kv.NumTiers]TierStats
	PutBytes uint64
	GetBytes uint64
	Errors   uint64
}

// TierStats are one tier's figures (see messages.KvbmTierStatus for each field's meaning).
type TierStats struct {
	CapacityBytes, UsedBytes, Blocks, Pinned int64
	Hits, Misses, Stored, Evicted            uint64
	BytesIn, BytesOut                        uint64
}

// Store is the block store. It is safe for concurrent use.
//
// TODO(store): a placeholder with the final API (host memory only, no eviction) that the
// protocol servers are written against; the tiered store replaces it.
type Store struct {
	mu      sync.Mutex
	cfg     Config
	m       map[string]Entry
	changes []Change
	closed  bool
}

// Open opens a store: an existing disk tier's blocks are re-read into the inventory.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.MaxValueBytes == 0 {
		cfg.MaxValueBytes = DefaultMaxValueBytes
	}
	return &Store{cfg: cfg, m: map[string]Entry{}}, nil
}

// Put stores data (and its descriptor meta) under key, replacing any block there, in host
// memory first; priority orders eviction (lower goes first; LRU among equals). The store
// keeps data: the caller must not modify it afterwards. Errors: ErrKeyTooLong,
// ErrValueTooLarge, ErrFull, ErrClosed, or a disk error.
func (s *Store) Put(key string, meta, data []byte, priority int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(key) > s.cfg.MaxKeyBytes || key == "" {
		return ErrKeyTooLong
	}
	if int64(len(data)) > s.cfg.MaxValueBytes {
		return ErrValueTooLarge
	}
	s.m[key] = Entry{Meta: meta, Data: data, Tier: kv.TierHost}
	s.changes = append(s.changes, Change{Key: key, Tier: kv.TierHost})
	return nil
}

// Get returns the block under key, promoting a disk block to host memory (the block is
// pinned while it is read, so eviction never removes a file being read). ErrNotFound
// when no tier holds it.
func (s *Store) Get(key string) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		return Entry{}, ErrNotFound
	}
	return e, nil
}

// Exists reports whether any tier holds key (without counting a read).
func (s *Store) Exists(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

// Delete removes key from every tier; false when none held it.
func (s *Store) Delete(key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	delete(s.m, key)
	if ok {
		s.changes = append(s.changes, Change{Key: key, Tier: kv.TierHost, Removed: true})
	}
	return ok, nil
}

// Changes appends the inventory changes since the last call to dst and forgets them.
// overflowed is true when changes were dropped (too many undrained): the caller then
// publishes a Snapshot instead.
func (s *Store) Changes(dst []Change) (out []Change, overflowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out = append(dst, s.changes...)
	s.changes = s.changes[:0]
	return out, false
}

// Snapshot calls fn for every block and the tier it is in now (under the store's lock:
// fn must not call the store).
func (s *Store) Snapshot(fn func(key string, tier kv.Tier)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.m {
		fn(k, e.Tier)
	}
}

// Stats returns the store's figures now.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	st.Tiers[kv.TierHost].Blocks = int64(len(s.m))
	return st
}

// Close stops the store; later calls fail with ErrClosed. Blocks on disk stay.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
