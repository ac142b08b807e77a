package kvbm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// A Janitor owns an LMCache fs:// directory (docs/reference.md §9.1): LMCache writes one
// file per chunk there, named key.replace('/','-') + ".data", through a ".tmp" file and a
// rename, and never deletes any. The Janitor keeps the ".data" files under a byte cap by
// deleting the least recently written first, removes ".tmp" files older than a bound
// (left by a crashed writer), and reports its inventory as Changes in kv.TierDisk, keyed
// by file name minus ".data" (LMCache's key with '/' turned into '-').
//
// Recency: LMCache's reads do not touch a file, and access times are unreliable (noatime,
// relatime), so the order is the files' modification time, then the order in which the
// Janitor first saw them, then their names. Bytes are file sizes; ".tmp" files do not
// count.

// JanitorConfig configures a Janitor.
type JanitorConfig struct {
	Dir      string // the fs:// directory; required
	MaxBytes int64  // the cap on the ".data" files' total size; required > 0
	// TmpMaxAge: a ".tmp" file older than this (by modification time) is removed
	// (0: DefaultTmpMaxAge).
	TmpMaxAge time.Duration
	// Interval between scans in Run (0: DefaultJanitorInterval).
	Interval time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// MaxChanges bounds the undrained inventory changes (0: DefaultMaxChanges).
	MaxChanges int
}

// Defaults of JanitorConfig.
const (
	DefaultTmpMaxAge       = 10 * time.Minute
	DefaultJanitorInterval = 5 * time.Second
)

// fsFile is one directory entry as a scan lists it.
type fsFile struct {
	Name    string
	Size    int64
	ModTime time.Time
}

type fsEntry struct {
	key   string
	size  int64
	mtime time.Time
	seen  uint64 // the scan order in which it was first seen
	name  string
}

// fsInventory is the Janitor's pure core: what the directory holds, and what to delete.
type fsInventory struct {
	files      map[string]*fsEntry // by file name
	seq        uint64
	used       int64
	st         TierStats
	changes    []Change
	maxChanges int
	overflow   bool
}

func newFSInventory(maxChanges int) *fsInventory {
	return &fsInventory{files: map[string]*fsEntry{}, maxChanges: maxChanges}
}

func (v *fsInventory) change(key string, removed bool) {
	if v.overflow {
		return
	}
	if len(v.changes) >= v.maxChanges {
		v.overflow = true
		v.changes = v.changes[:0]
		return
	}
	v.changes = append(v.changes, Change{Key: key, Tier: kv.TierDisk, Removed: removed})
}

// scan takes a full listing of the directory at now and returns the files to delete:
// ".tmp" files older than tmpMaxAge, then ".data" files, least recently written first,
// until the rest fit in maxBytes. The inventory then holds what is left: new files are
// reported stored, vanished and deleted ones removed (a deletion that fails brings its
// file back, as new, on the next scan).
func (v *fsInventory) scan(listing []fsFile, now time.Time, maxBytes int64, tmpMaxAge time.Duration) (del []string) {
	present := make(map[string]bool, len(listing))
	var fresh []fsFile
	for _, f := range listing {
		switch {
		case strings.HasSuffix(f.Name, ".tmp"):
			if now.Sub(f.ModTime) > tmpMaxAge {
				del = append(del, f.Name)
			}
		case strings.HasSuffix(f.Name, ".data") && len(f.Name) > len(".data"):
			present[f.Name] = true
			e := v.files[f.Name]
			if e == nil {
				fresh = append(fresh, f)
				continue
			}
			v.used += f.Size - e.size
			e.size, e.mtime = f.Size, f.ModTime
		}
	}
	// Vanished files (removed by someone else) leave the inventory.
	var gone []string
	for name := range v.files {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		v.drop(v.files[name])
	}
	// New files enter in name order (a listing's order is the file system's).
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Name < fresh[j].Name })
	for _, f := range fresh {
		v.seq++
		e := &fsEntry{key: strings.TrimSuffix(f.Name, ".data"), size: f.Size, mtime: f.ModTime, seen: v.seq, name: f.Name}
		v.files[f.Name] = e
		v.used += f.Size
		v.st.Stored++
		v.st.BytesIn += uint64(f.Size)
		v.change(e.key, false)
	}
	if v.used <= maxBytes {
		return del
	}
	order := make([]*fsEntry, 0, len(v.files))
	for _, e := range v.files {
		order = append(order, e)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if !a.mtime.Equal(b.mtime) {
			return a.mtime.Before(b.mtime)
		}
		if a.seen != b.seen {
			return a.seen < b.seen
		}
		return a.name < b.name
	})
	for _, e := range order {
		if v.used <= maxBytes {
			break
		}
		del = append(del, e.name)
		v.drop(e)
		v.st.Evicted++
	}
	return del
}

func (v *fsInventory) drop(e *fsEntry) {
	delete(v.files, e.name)
	v.used -= e.size
	v.change(e.key, true)
}

// Janitor keeps an LMCache fs:// directory under a byte cap (see the comment above
// JanitorConfig). It is safe for concurrent use.
type Janitor struct {
	cfg JanitorConfig
	mu  sync.Mutex
	inv *fsInventory
}

// NewJanitor returns a Janitor of cfg.Dir; it scans nothing until Scan or Run. Errors:
// ErrConfig (wrapped, naming the field).
func NewJanitor(cfg JanitorConfig) (*Janitor, error) {
	switch {
	case cfg.Dir == "":
		return nil, fmt.Errorf("%w: janitor Dir is required", ErrConfig)
	case cfg.MaxBytes <= 0:
		return nil, fmt.Errorf("%w: janitor MaxBytes must be > 0", ErrConfig)
	case cfg.TmpMaxAge < 0 || cfg.Interval < 0 || cfg.MaxChanges < 0:
		return nil, fmt.Errorf("%w: janitor TmpMaxAge, Interval and MaxChanges must be ≥ 0", ErrConfig)
	}
	if cfg.TmpMaxAge == 0 {
		cfg.TmpMaxAge = DefaultTmpMaxAge
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultJanitorInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxChanges == 0 {
		cfg.MaxChanges = DefaultMaxChanges
	}
	return &Janitor{cfg: cfg, inv: newFSInventory(cfg.MaxChanges)}, nil
}

// Scan lists the directory once, deletes what the cap and the temporary-file bound say
// to, and updates the inventory. It returns the names it deleted; an error listing the
// directory, or the first deletion that failed (other than a file already gone).
func (j *Janitor) Scan() ([]string, error) {
	ents, err := os.ReadDir(j.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("kvbm: janitor: %w", err)
	}
	listing := make([]fsFile, 0, len(ents))
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		listing = append(listing, fsFile{Name: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	j.mu.Lock()
	del := j.inv.scan(listing, j.cfg.Now(), j.cfg.MaxBytes, j.cfg.TmpMaxAge)
	j.mu.Unlock()
	var first error
	for _, name := range del {
		if err := os.Remove(filepath.Join(j.cfg.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = fmt.Errorf("kvbm: janitor: %w", err)
		}
	}
	return del, first
}

// Run scans every Interval until ctx is done; it returns ctx's error. A failed scan is
// retried at the next interval.
func (j *Janitor) Run(ctx context.Context) error {
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		_, _ = j.Scan()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Changes appends the inventory changes since the last call to dst and forgets them;
// overflowed as Store.Changes.
func (j *Janitor) Changes(dst []Change) (out []Change, overflowed bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out = append(dst, j.inv.changes...)
	overflowed = j.inv.overflow
	j.inv.changes = j.inv.changes[:0]
	j.inv.overflow = false
	return out, overflowed
}

// Snapshot calls fn for every ".data" file's key known after the last scan, with
// kv.TierDisk, in key order (under the Janitor's lock: fn must not call it).
func (j *Janitor) Snapshot(fn func(key string, tier kv.Tier)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	keys := make([]string, 0, len(j.inv.files))
	for _, e := range j.inv.files {
		keys = append(keys, e.key)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fn(k, kv.TierDisk)
	}
}

// Stats returns the directory's figures as a disk tier's: capacity, bytes and files held,
// files seen (Stored, BytesIn) and deleted to keep the cap (Evicted). Reads are LMCache's
// own: Hits, Misses and BytesOut stay zero.
func (j *Janitor) Stats() TierStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.inv.st
	st.CapacityBytes = j.cfg.MaxBytes
	st.UsedBytes = j.inv.used
	st.Blocks = int64(len(j.inv.files))
	return st
}
