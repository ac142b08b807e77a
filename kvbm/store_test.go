package kvbm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// block returns a block's deterministic bytes: n bytes derived from key and version.
func block(key string, version, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(len(key))*7919+uint64(version), uint64(version)))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	b = b[:n:n]
	copy(b, key)
	return b
}

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// blockFiles lists dir's block files and any other files, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func TestStoreTiersAndPolicies(t *testing.T) {
	const n = 1000
	fp := footprint("k0", []byte{0}, make([]byte, n))
	cases := []struct {
		policy Policy
		disk   bool
		// the inventory after putting k0..k5 (host memory holds 3) with k1 read after k2's
		// put: "host:KEYS disk:KEYS", each tier in eviction order
		want string
		// the keys readable afterwards
		readable string
	}{
		{PolicyDemote, true, "host:k3,k4,k5 disk:k0,k2,k1", "k0 k1 k2 k3 k4 k5"},
		{PolicyWriteThrough, true, "host:k3,k4,k5 disk:k0,k2,k1,k3,k4,k5", "k0 k1 k2 k3 k4 k5"},
		{PolicyReuse, true, "host:k3,k4,k5 disk:k1", "k1 k4 k5"}, // k1's promotion drops k3
		{PolicyDemote, false, "host:k3,k4,k5", "k3 k4 k5"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/disk=%v", c.policy, c.disk), func(t *testing.T) {
			cfg := Config{HostBytes: 3 * fp, Policy: c.policy}
			dir := t.TempDir()
			if c.disk {
				cfg.DiskDir, cfg.DiskBytes = dir, 100*fp
			}
			s := mustOpen(t, cfg)
			defer s.Close()
			key := func(i int) string { return fmt.Sprintf("k%d", i) }
			for i := range 6 {
				if err := s.Put(key(i), []byte{byte(i)}, block(key(i), 0, n), 0); err != nil {
					t.Fatal(err)
				}
				if i == 2 {
					if e, err := s.Get(key(1)); err != nil || e.Tier != kv.TierHost {
						t.Fatal(err)
					}
				}
			}
			inv := map[kv.Tier][]string{}
			s.Snapshot(func(key string, tier kv.Tier) { inv[tier] = append(inv[tier], key) })
			got := "host:" + strings.Join(inv[kv.TierHost], ",")
			if c.disk {
				got += " disk:" + strings.Join(inv[kv.TierDisk], ",")
			}
			if got != c.want {
				t.Errorf("inventory %s, want %s", got, c.want)
			}
			var readable []string
			for i := range 6 {
				e, err := s.Get(key(i))
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil || !bytes.Equal(e.Data, block(key(i), 0, n)) || !bytes.Equal(e.Meta, []byte{byte(i)}) {
					t.Errorf("%s: %v, or not its bytes", key(i), err)
				}
				readable = append(readable, key(i))
			}
			if strings.Join(readable, " ") != c.readable {
				t.Errorf("readable %v, want %s", readable, c.readable)
			}
			files := 0
			for _, f := range dirNames(t, dir) {
				if strings.HasSuffix(f, fileExt) {
					files++
				}
			}
			st := s.Stats()
			if int64(files) != st.Tiers[kv.TierDisk].Blocks {
				t.Errorf("%d block files, %d blocks on disk", files, st.Tiers[kv.TierDisk].Blocks)
			}
			if h := st.Tiers[kv.TierHost]; h.UsedBytes != 3*fp || h.Blocks != 3 {
				t.Errorf("host tier %+v", h)
			}
		})
	}
}

func TestStoreReopen(t *testing.T) {
	for _, p := range []Policy{PolicyDemote, PolicyWriteThrough} {
		t.Run(p.String(), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{HostBytes: 10_000, DiskDir: dir, DiskBytes: 1 << 20, Policy: p}
			s := mustOpen(t, cfg)
			for i := range 20 {
				k := fmt.Sprintf("key/%d", i)
				if err := s.Put(k, []byte("meta"), block(k, 1, 3000), i%3); err != nil {
					t.Fatal(err)
				}
			}
			var onDisk []string
			s.Snapshot(func(key string, tier kv.Tier) {
				if tier == kv.TierDisk {
					onDisk = append(onDisk, key)
				}
			})
			s.Close()
			if err := s.Put("x", nil, nil, 0); !errors.Is(err, ErrClosed) {
				t.Fatalf("put after close: %v", err)
			}
			s = mustOpen(t, cfg)
			defer s.Close()
			chs, over := s.Changes(nil)
			if over || len(chs) != len(onDisk) {
				t.Fatalf("changes after open: %v (overflow %v), want %d stored", chs, over, len(onDisk))
			}
			for _, k := range onDisk {
				e, err := s.Get(k)
				if err != nil || e.Tier != kv.TierDisk || !bytes.Equal(e.Data, block(k, 1, 3000)) || string(e.Meta) != "meta" {
					t.Errorf("%s after reopen: %v %v", k, e.Tier, err)
				}
			}
			if len(onDisk) == 0 {
				t.Fatal("nothing on disk")
			}
		})
	}
}

// TestStoreOpenCleans: Open deletes temporary, torn, corrupt and superseded files,
// leaves foreign files alone, and enforces DiskBytes, oldest modification time first.
func TestStoreOpenCleans(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{HostBytes: 1, DiskDir: dir, DiskBytes: 1 << 20}
	write := func(key string, gen uint64, data []byte, age time.Duration) string {
		if err := writeBlockFile(osCreateTemp, dir, false, key, gen, 0, nil, data); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fileName(key, gen))
		mt := time.Now().Add(-age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("old", 1, block("old", 1, 100), 3*time.Hour)
	write("mid", 2, block("mid", 2, 100), 2*time.Hour)
	write("new", 3, block("new", 3, 100), time.Hour)
	write("dup", 4, block("dup", 4, 100), time.Hour)
	write("dup", 9, block("dup", 9, 100), time.Hour) // the newer generation wins
	torn := write("torn", 5, block("torn", 5, 100), 0)
	if err := os.Truncate(torn, 120); err != nil {
		t.Fatal(err)
	}
	bad := write("badhdr", 6, block("badhdr", 6, 100), 0)
	b, _ := os.ReadFile(bad)
	b[20] ^= 1
	_ = os.WriteFile(bad, b, 0o644)
	moved := write("moved", 7, block("moved", 7, 100), 0)
	_ = os.Rename(moved, filepath.Join(dir, fileName("other", 7)))
	_ = os.WriteFile(filepath.Join(dir, "tmp-123.kvt"), []byte("half a block"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644)

	s := mustOpen(t, cfg)
	var got []string
	s.Snapshot(func(key string, tier kv.Tier) { got = append(got, key+"@"+tier.String()) })
	s.Close()
	if want := "old@disk mid@disk new@disk dup@disk"; strings.Join(got, " ") != want && strings.Join(got, " ") != "old@disk mid@disk dup@disk new@disk" {
		t.Errorf("inventory %v, want %s (oldest first)", got, want)
	}
	wantFiles := []string{"README", fileName("dup", 9), fileName("mid", 2), fileName("new", 3), fileName("old", 1)}
	sort.Strings(wantFiles)
	if names := dirNames(t, dir); strings.Join(names, " ") != strings.Join(wantFiles, " ") {
		t.Errorf("files %v, want %v", names, wantFiles)
	}
	// Reopened under a cap of two blocks: the two oldest go.
	cfg.DiskBytes = 2 * footprint("mid", nil, make([]byte, 100))
	s = mustOpen(t, cfg)
	defer s.Close()
	if s.Exists("old") || s.Exists("mid") || !s.Exists("new") || !s.Exists("dup") {
		t.Errorf("after a smaller cap: old %v mid %v new %v dup %v", s.Exists("old"), s.Exists("mid"), s.Exists("new"), s.Exists("dup"))
	}
	if e, err := s.Get("dup"); err != nil || !bytes.Equal(e.Data, block("dup", 9, 100)) {
		t.Errorf("dup: %v, want generation 9's bytes", err)
	}
	if n := len(dirNames(t, dir)); n != 2 { // README and new (dup moved to host)
		t.Errorf("%d files left: %v", n, dirNames(t, dir))
	}
}

func TestStoreCorruptBlockIsNotServed(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Config{HostBytes: 1 << 20, DiskDir: dir, DiskBytes: 1 << 20, Policy: PolicyWriteThrough})
	if err := s.Put("k", nil, block("k", 0, 5000), 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := filepath.Join(dir, fileName("k", 1))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-7] ^= 0x40 // the header parses; the body does not match its checksum
	_ = os.WriteFile(p, b, 0o644)
	s = mustOpen(t, Config{HostBytes: 1 << 20, DiskDir: dir, DiskBytes: 1 << 20, Policy: PolicyWriteThrough})
	defer s.Close()
	if !s.Exists("k") {
		t.Fatal("a block whose header is sound is in the inventory until read")
	}
	if _, err := s.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a corrupt block: %v, want ErrNotFound", err)
	}
	if s.Exists("k") || s.Stats().Errors != 1 {
		t.Errorf("after: exists %v, errors %d", s.Exists("k"), s.Stats().Errors)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("corrupt file kept: %v", err)
	}
}

// fullDisk is a file system whose files take limit bytes, then fail with ENOSPC.
type fullDisk struct {
	limit int
}

type fullFile struct {
	*os.File
	left int
}

func (f *fullFile) Write(b []byte) (int, error) {
	if len(b) > f.left {
		n, _ := f.File.Write(b[:f.left])
		f.left = 0
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.left -= len(b)
	return f.File.Write(b)
}

func (d fullDisk) create(dir, pattern string) (blockFile, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: f, left: d.limit}, nil
}

func TestStoreDiskFull(t *testing.T) {
	t.Run("write-through", func(t *testing.T) {
		dir := t.TempDir()
		s := mustOpen(t, Config{HostBytes: 1 << 20, DiskDir: dir, DiskBytes: 1 << 20, Policy: PolicyWriteThrough})
		defer s.Close()
		if err := s.Put("ok", nil, block("ok", 0, 100), 0); err != nil {
			t.Fatal(err)
		}
		s.create = fullDisk{limit: 1000}.create
		err := s.Put("big", nil, block("big", 0, 5000), 0)
		if !errors.Is(err, ErrFull) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("put on a full disk: %v, want ErrFull wrapping ENOSPC", err)
		}
		if s.Exists("big") {
			t.Error("a failed write-through put left its block")
		}
		if names := dirNames(t, dir); len(names) != 1 || names[0] != fileName("ok", 1) {
			t.Errorf("files after a failed write: %v", names)
		}
		if e, err := s.Get("ok"); err != nil || !bytes.Equal(e.Data, block("ok", 0, 100)) {
			t.Errorf("other blocks affected: %v", err)
		}
		if st := s.Stats(); st.Errors != 1 || st.Tiers[kv.TierDisk].Blocks != 1 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("demote", func(t *testing.T) {
		dir := t.TempDir()
		fp := footprint("a", nil, make([]byte, 5000))
		s := mustOpen(t, Config{HostBytes: fp, DiskDir: dir, DiskBytes: 1 << 20})
		defer s.Close()
		s.create = fullDisk{limit: 10}.create
		if err := s.Put("a", nil, block("a", 0, 5000), 0); err != nil {
			t.Fatal(err)
		}
		// b evicts a; a's demotion fails: a is dropped, b's put succeeds.
		if err := s.Put("b", nil, block("b", 0, 5000), 0); err != nil {
			t.Fatalf("put whose victim's demotion fails: %v", err)
		}
		if s.Exists("a") || !s.Exists("b") || len(dirNames(t, dir)) != 0 {
			t.Errorf("a %v b %v files %v", s.Exists("a"), s.Exists("b"), dirNames(t, dir))
		}
		chs, _ := s.Changes(nil)
		want := []Change{{"a", kv.TierHost, false}, {"a", kv.TierHost, true}, {"a", kv.TierDisk, false}, {"b", kv.TierHost, false}, {"a", kv.TierDisk, true}}
		if fmt.Sprint(chs) != fmt.Sprint(want) {
			t.Errorf("changes %v, want %v", chs, want)
		}
	})
}

func TestStoreBadInput(t *testing.T) {
	s := mustOpen(t, Config{HostBytes: 1000, MaxKeyBytes: 10, MaxValueBytes: 500})
	cases := []struct {
		key  string
		data int
		want error
	}{
		{"", 1, ErrKeyTooLong},
		{"01234567890", 1, ErrKeyTooLong},
		{"k", 501, ErrValueTooLarge},
		{"0123456789", 500, nil},
		{"k", 1000, ErrValueTooLarge}, // over MaxValueBytes
	}
	for _, c := range cases {
		if err := s.Put(c.key, nil, make([]byte, c.data), 0); !errors.Is(err, c.want) {
			t.Errorf("put %q (%d bytes): %v, want %v", c.key, c.data, err, c.want)
		}
	}
	s2 := mustOpen(t, Config{HostBytes: 100})
	if err := s2.Put("k", nil, make([]byte, 50), 0); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("over HostBytes: %v", err)
	}
	for _, cfg := range []Config{{}, {HostBytes: 1, DiskDir: "x"}, {HostBytes: 1, Policy: 9}, {HostBytes: 1, MaxKeyBytes: 1 << 20}} {
		if _, err := Open(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("Open(%+v): %v, want ErrConfig", cfg, err)
		}
	}
	s.Close()
	if _, err := s.Get("k"); !errors.Is(err, ErrClosed) {
		t.Errorf("get after close: %v", err)
	}
	if _, err := s.Delete("k"); !errors.Is(err, ErrClosed) {
		t.Errorf("delete after close: %v", err)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{PolicyDemote, PolicyWriteThrough, PolicyReuse} {
		if q, err := ParsePolicy(p.String()); err != nil || q != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), q, err)
		}
	}
	if _, err := ParsePolicy("lru"); err == nil || !strings.Contains(err.Error(), "write-through") {
		t.Errorf("ParsePolicy(lru): %v", err)
	}
}

// TestStoreConcurrent hammers a small key space from several goroutines, then checks
// that every read was a whole version of its key, that the inventory matches the files,
// and that the byte accounting matches the inventory.
func TestStoreConcurrent(t *testing.T) {
	for _, p := range []Policy{PolicyDemote, PolicyWriteThrough, PolicyReuse} {
		t.Run(p.String(), func(t *testing.T) {
			dir := t.TempDir()
			const size = 4096
			fp := footprint("k00", []byte{0}, make([]byte, size))
			cfg := Config{HostBytes: 6 * fp, DiskDir: dir, DiskBytes: 10 * fp, Policy: p}
			s := mustOpen(t, cfg)
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 400 {
						k := fmt.Sprintf("k%02d", r.IntN(24))
						switch op := r.IntN(10); {
						case op < 5:
							v := r.IntN(3)
							if err := s.Put(k, []byte{byte(v)}, block(k, v, size), r.IntN(2)); err != nil {
								errc <- err
								return
							}
						case op < 9:
							e, err := s.Get(k)
							if err == nil && (len(e.Meta) != 1 || !bytes.Equal(e.Data, block(k, int(e.Meta[0]), size))) {
								errc <- fmt.Errorf("%s: read a block that is no version of it", k)
								return
							}
						default:
							if _, err := s.Delete(k); err != nil {
								errc <- err
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			s.Close()
			var want []string
			s.Snapshot(func(key string, tier kv.Tier) {
				if tier == kv.TierDisk {
					want = append(want, key)
				}
			})
			st := s.Stats()
			if d := st.Tiers[kv.TierDisk]; d.UsedBytes != int64(len(want))*fp || d.UsedBytes > d.CapacityBytes || d.Pinned != 0 {
				t.Errorf("disk tier %+v with %d blocks", d, len(want))
			}
			if h := st.Tiers[kv.TierHost]; h.UsedBytes != h.Blocks*fp || h.UsedBytes > h.CapacityBytes {
				t.Errorf("host tier %+v", h)
			}
			var files []string
			for _, n := range dirNames(t, dir) {
				f, err := scanBlockFile(dir, n)
				if err != nil {
					t.Errorf("%s: %v", n, err)
					continue
				}
				files = append(files, f.key)
			}
			sort.Strings(files)
			sort.Strings(want)
			if strings.Join(files, " ") != strings.Join(want, " ") {
				t.Errorf("files hold %v, the disk inventory %v", files, want)
			}
		})
	}
}
