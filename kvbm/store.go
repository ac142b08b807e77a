package kvbm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
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

// String returns the policy's name as flags, the admin API and messages.KvbmStatus
// spell it: "demote", "write-through" or "reuse".
func (p Policy) String() string {
	switch p {
	case PolicyDemote:
		return "demote"
	case PolicyWriteThrough:
		return "write-through"
	case PolicyReuse:
		return "reuse"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy is String's inverse ("" is PolicyDemote). Errors name the valid values.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "demote", "":
		return PolicyDemote, nil
	case "write-through":
		return PolicyWriteThrough, nil
	case "reuse":
		return PolicyReuse, nil
	}
	return 0, fmt.Errorf("kvbm: unknown policy %q (want demote, write-through or reuse)", s)
}

// Errors of the Store. Protocol servers map them to their own error replies.
var (
	ErrNotFound      = errors.New("kvbm: no such block")
	ErrKeyTooLong    = errors.New("kvbm: key too long")
	ErrValueTooLarge = errors.New("kvbm: value too large")
	ErrFull          = errors.New("kvbm: no room") // every tier full of pinned blocks, or the disk refused the write (ENOSPC)
	ErrClosed        = errors.New("kvbm: store closed")
	ErrConfig        = errors.New("kvbm: bad config")
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
	// Sync: fsync each block file (and the directory) before a put that writes it
	// returns. Off by default: a crashed process loses nothing the kernel accepted; only
	// a crash of the machine can lose (never tear: see §9.1) recent blocks.
	Sync bool
	// MaxChanges bounds the undrained inventory changes (0: DefaultMaxChanges); past it
	// they are dropped and Changes reports an overflow.
	MaxChanges int
}

// Defaults for Config's zero values.
const (
	DefaultMaxKeyBytes   = 1024
	DefaultMaxValueBytes = 512 << 20
	DefaultMaxChanges    = 1 << 16
)

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

// Stats are a Store's figures, per tier (indexed by kv.Tier; TierNone unused).
type Stats struct {
	Tiers    [kv.NumTiers]TierStats
	PutBytes uint64
	GetBytes uint64
	Errors   uint64
}

// TierStats are one tier's figures (see messages.KvbmTierStatus for each field's meaning).
// Bytes are blocks' footprints for CapacityBytes and UsedBytes (the disk file's size:
// 56-byte header, key, meta, data), their data lengths for BytesIn and BytesOut. A read
// counts a miss in each tier it reaches and that does not hold the key.
type TierStats struct {
	CapacityBytes, UsedBytes, Blocks, Pinned int64
	Hits, Misses, Stored, Evicted            uint64
	BytesIn, BytesOut                        uint64
}

// Store is the block store (docs/reference.md §9.1): a host-memory tier and an optional
// disk tier under byte caps. It is safe for concurrent use.
//
// The decisions (what is where, what to evict, where an evicted block goes) are the
// ledger's (ledger.go), called under mu; the disk I/O they ask for is done outside mu by
// the goroutine whose call caused it, before that call returns. Host puts and gets copy
// no bytes: the store keeps the caller's slice and returns it.
type Store struct {
	mu     sync.Mutex
	cfg    Config
	l      *ledger
	st     Stats // PutBytes, GetBytes, Errors
	closed bool
	busy   sync.WaitGroup // calls doing disk I/O; Close waits for them
	create func(dir, pattern string) (blockFile, error)
}

// Open opens a store. An existing disk tier's valid blocks are re-read into the inventory
// (their recency in file modification-time order); temporary and torn or corrupt files
// are deleted, and blocks beyond DiskBytes evicted. Errors: ErrConfig (wrapped, naming
// the field), or the directory's I/O error.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxKeyBytes == 0 {
		cfg.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if cfg.MaxValueBytes == 0 {
		cfg.MaxValueBytes = DefaultMaxValueBytes
	}
	if cfg.MaxChanges == 0 {
		cfg.MaxChanges = DefaultMaxChanges
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.HostBytes <= 0:
		return nil, fmt.Errorf("%w: HostBytes must be > 0", ErrConfig)
	case cfg.DiskDir != "" && cfg.DiskBytes <= 0:
		return nil, fmt.Errorf("%w: DiskBytes must be > 0 with DiskDir", ErrConfig)
	case cfg.Policy > PolicyReuse:
		return nil, fmt.Errorf("%w: Policy %d", ErrConfig, cfg.Policy)
	case cfg.MaxKeyBytes < 0 || cfg.MaxKeyBytes > maxFileKey || cfg.MaxValueBytes < 0 || cfg.MaxChanges < 0:
		return nil, fmt.Errorf("%w: MaxKeyBytes (≤ %d), MaxValueBytes or MaxChanges out of range", ErrConfig, maxFileKey)
	}
	s := &Store{cfg: cfg, create: osCreateTemp}
	s.l = newLedger(cfg.Policy, cfg.HostBytes, cfg.DiskBytes, cfg.DiskDir != "", cfg.MaxChanges)
	if cfg.DiskDir != "" {
		if err := s.load(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// load rebuilds the disk tier's inventory from DiskDir.
func (s *Store) load() error {
	dir := s.cfg.DiskDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kvbm: disk dir: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("kvbm: disk dir: %w", err)
	}
	var files []scannedFile
	for _, e := range ents {
		name := e.Name()
		switch {
		case !e.Type().IsRegular():
		case filepath.Ext(name) == tempExt:
			_ = os.Remove(filepath.Join(dir, name))
		case isBlockFileName(name):
			f, err := scanBlockFile(dir, name)
			if err != nil {
				_ = os.Remove(filepath.Join(dir, name))
				continue
			}
			files = append(files, f)
		}
	}
	// The newest generation of a key wins; recency follows modification time.
	sort.Slice(files, func(i, j int) bool {
		if files[i].key != files[j].key {
			return files[i].key < files[j].key
		}
		return files[i].h.Gen > files[j].h.Gen
	})
	keep := files[:0]
	for i, f := range files {
		if i > 0 && f.key == files[i-1].key {
			_ = os.Remove(filepath.Join(dir, f.name))
			continue
		}
		keep = append(keep, f)
	}
	sort.SliceStable(keep, func(i, j int) bool {
		if keep[i].modTime != keep[j].modTime {
			return keep[i].modTime < keep[j].modTime
		}
		return keep[i].h.Gen < keep[j].h.Gen
	})
	for _, f := range keep {
		s.l.restore(f.key, f.h.Gen, int(f.h.Prio), f.h.size())
	}
	var eff effects
	s.l.enforceDisk(&eff)
	s.l.disk.order.each(func(it *item) bool {
		s.l.change(it.key, kv.TierDisk, false)
		return true
	})
	s.removeFiles(eff.removes)
	return nil
}

func (s *Store) path(it *item) string { return filepath.Join(s.cfg.DiskDir, fileName(it.key, it.gen)) }

// do carries out eff outside the lock: writes, then removes (so that a replaced block's
// old file stays until its new one is in place: Open keeps the newest generation); it
// reports each write's outcome to the ledger and carries out what that asks in turn. It
// returns the error of eff.own's write.
func (s *Store) do(eff effects) error {
	var own error
	for len(eff.writes) > 0 || len(eff.removes) > 0 {
		writes := eff.writes
		eff.writes = nil
		for _, d := range writes {
			err := writeBlockFile(s.create, s.cfg.DiskDir, s.cfg.Sync, d.key, d.gen, d.prio, d.meta, d.data)
			if err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					err = fmt.Errorf("%w: %w", ErrFull, err)
				} else {
					err = fmt.Errorf("kvbm: write block: %w", err)
				}
			}
			s.mu.Lock()
			s.l.written(d, err, &eff)
			if err != nil {
				s.st.Errors++
			}
			s.mu.Unlock()
			if d == eff.own {
				own = err
			}
		}
		removes := eff.removes
		eff.removes = nil
		s.removeFiles(removes)
	}
	return own
}

func (s *Store) removeFiles(its []*item) {
	for _, it := range its {
		_ = os.Remove(s.path(it))
	}
}

// Put stores data (and its descriptor meta) under key, replacing any block there, in host
// memory first; priority orders eviction (lower goes first; LRU among equals). The store
// keeps data: the caller must not modify it afterwards. Blocks it evicts from host memory
// are demoted (written to disk) before it returns; under PolicyWriteThrough it returns
// once the block's file is in place. Errors: ErrKeyTooLong, ErrValueTooLarge, ErrFull
// (also wrapping ENOSPC), ErrClosed, or a disk error; on error the key holds nothing new
// (a write-through put whose write failed holds nothing at all).
func (s *Store) Put(key string, meta, data []byte, priority int) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	err := s.check(key, meta, data)
	var eff effects
	if err == nil {
		err = s.l.put(key, meta, data, priority, &eff)
	}
	if err != nil {
		s.st.Errors++
		s.mu.Unlock()
		return err
	}
	s.st.PutBytes += uint64(len(data))
	if len(eff.writes) == 0 && len(eff.removes) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.busy.Add(1)
	s.mu.Unlock()
	defer s.busy.Done()
	return s.do(eff)
}

func (s *Store) check(key string, meta, data []byte) error {
	switch {
	case len(key) > s.cfg.MaxKeyBytes || key == "":
		return ErrKeyTooLong
	case int64(len(data)) > s.cfg.MaxValueBytes || len(meta) > maxFileMeta:
		return ErrValueTooLarge
	}
	return nil
}

// Get returns the block under key, promoting a disk block to host memory (the block is
// pinned while it is read, so eviction never removes a file being read): copied under
// PolicyWriteThrough, moved (its file removed) under the others. A disk block whose file
// is missing or fails its checksum leaves the inventory and reads as ErrNotFound.
// Errors: ErrNotFound when no tier holds it, ErrClosed.
func (s *Store) Get(key string) (Entry, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Entry{}, ErrClosed
	}
	e, d, ok := s.l.get(key)
	if !ok {
		s.mu.Unlock()
		return Entry{}, ErrNotFound
	}
	if d == nil {
		s.st.GetBytes += uint64(len(e.Data))
		s.mu.Unlock()
		return e, nil
	}
	s.busy.Add(1)
	s.mu.Unlock()
	defer s.busy.Done()
	meta, data, err := readBlockFile(s.path(d), key, d.size)
	var eff effects
	s.mu.Lock()
	s.l.readDone(d, meta, data, err, &eff)
	if err != nil {
		s.st.Errors++
	} else {
		s.st.GetBytes += uint64(len(data))
	}
	s.mu.Unlock()
	_ = s.do(eff)
	if err != nil {
		return Entry{}, ErrNotFound
	}
	return Entry{Meta: meta, Data: data, Tier: kv.TierDisk}, nil
}

// Exists reports whether any tier holds key (without counting a read or touching its
// recency).
func (s *Store) Exists(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && s.l.exists(key)
}

// Touch makes key the most recently used block at priority in every tier holding it;
// false when none does.
func (s *Store) Touch(key string, priority int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && s.l.touch(key, priority)
}

// Delete removes key from every tier; false when none held it. A disk block being read
// leaves the inventory at once and its file once the read is done.
func (s *Store) Delete(key string) (bool, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	var eff effects
	ok := s.l.del(key, &eff)
	s.mu.Unlock()
	s.removeFiles(eff.removes)
	return ok, nil
}

// Changes appends the inventory changes since the last call to dst and forgets them.
// overflowed is true when changes were dropped (more than Config.MaxChanges undrained):
// the caller then publishes a Snapshot instead. Open reports every block it found on
// disk as stored.
func (s *Store) Changes(dst []Change) (out []Change, overflowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.drain(dst)
}

// Snapshot calls fn for every block and the tier it is in now, once per tier holding it
// (under write-through a block is in both), host blocks first, each tier in eviction
// order (under the store's lock: fn must not call the store).
func (s *Store) Snapshot(fn func(key string, tier kv.Tier)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l.each(func(it *item) { fn(it.key, it.tier) })
}

// Stats returns the store's figures now.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	s.l.stats(&st)
	return st
}

// Config returns the store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Close stops the store; later calls fail with ErrClosed. It waits for disk writes and
// reads under way. Blocks on disk stay.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.busy.Wait()
	return nil
}
