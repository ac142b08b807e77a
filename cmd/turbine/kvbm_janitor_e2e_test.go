package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lmcacheWrite writes key's file into an LMCache fs:// directory as LMCache's connector
// does: size bytes into "<key>.data.tmp", then a rename to "<key>.data" ('/' in the key
// turned into '-'), and dates it at mtime.
func lmcacheWrite(t *testing.T, dir, key string, size int, mtime time.Time) {
	t.Helper()
	name := filepath.Join(dir, strings.ReplaceAll(key, "/", "-")+".data")
	if err := os.WriteFile(name+".tmp", bytes.Repeat([]byte{'k'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name+".tmp", name); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(name, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// lmcacheFiles lists the keys of dir's ".data" files, sorted.
func lmcacheFiles(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	var out []string
	for _, p := range paths {
		out = append(out, strings.TrimSuffix(filepath.Base(p), ".data"))
	}
	slices.Sort(out)
	return out
}

// kvbmFS is GET /admin/kvbm's "fs" entry of the first node.
type kvbmFS struct {
	Dir           string `json:"dir"`
	CapacityBytes int64  `json:"capacity_bytes"`
	UsedBytes     int64  `json:"used_bytes"`
	Files         int64  `json:"files"`
	Seen          uint64 `json:"seen"`
	Evicted       uint64 `json:"evicted"`
}

func (s *server) kvbmFS() *kvbmFS {
	s.t.Helper()
	resp, err := http.Get(s.url + "/admin/kvbm")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Nodes []struct {
			FS *kvbmFS `json:"fs"`
		} `json:"nodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || len(l.Nodes) != 1 {
		s.t.Fatalf("GET /admin/kvbm: %v, %+v", err, l)
	}
	return l.Nodes[0].FS
}

// TestKvbmJanitor: a block manager with --kvbm-fs-dir keeps an LMCache fs:// directory
// under --kvbm-fs-bytes while it runs: files written LMCache's way past the cap are
// deleted oldest written first, a file being written (".tmp") is left alone, and GET
// /admin/kvbm and /metrics show the directory's figures.
func TestKvbmJanitor(t *testing.T) {
	dir := t.TempDir()
	const size, limit = 64 << 10, 4 * 64 << 10 // four files fit
	s := startServe(t, 1, "--kvbm", "--kvbm-resp-port", "0", "--kvbm-lm-port", "-1", "--kvbm-host-bytes", "16MiB",
		"--kvbm-fs-dir", dir, "--kvbm-fs-bytes", fmt.Sprint(limit), "--kvbm-fs-scan-interval", "50ms")
	if fs := s.kvbmFS(); fs == nil || fs.Dir != dir || fs.CapacityBytes != limit || fs.Files != 0 {
		t.Fatalf("GET /admin/kvbm fs: %+v, want the empty directory %s under %d bytes", fs, dir, limit)
	}
	// Six chunks written a minute apart, in an order other than their names'.
	t0 := time.Now().Add(-time.Hour)
	keys := []string{"m@1@0@f6@bfloat16", "m@1@0@a1@bfloat16", "m@1@0@e5@bfloat16", "m@1@0@b2@bfloat16",
		"m@1@0@d4@bfloat16", "m@1@0@c3@bfloat16"}
	for i, k := range keys {
		lmcacheWrite(t, dir, k, size, t0.Add(time.Duration(i)*time.Minute))
	}
	// A write in progress: not counted, not deleted (younger than the 10-minute bound).
	if err := os.WriteFile(filepath.Join(dir, "m@1@0@ff@bfloat16.data.tmp"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var fs *kvbmFS
	s.waitFor(10*time.Second, "the janitor keeping the cap", func() bool {
		fs = s.kvbmFS()
		return fs != nil && fs.Evicted == 2
	})
	want := slices.Sorted(slices.Values(keys[2:]))
	if got := lmcacheFiles(dir); !slices.Equal(got, want) {
		t.Fatalf("files left %v, want the four written last %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "m@1@0@ff@bfloat16.data.tmp")); err != nil {
		t.Fatalf("the file being written was touched: %v", err)
	}
	if fs.Files != 4 || fs.UsedBytes != limit || fs.Seen != 6 {
		t.Fatalf("GET /admin/kvbm fs: %+v, want 4 files of %d bytes, 6 seen, 2 evicted", fs, limit)
	}
	for name, v := range map[string]float64{"turbine_kvbm_fs_bytes": limit, "turbine_kvbm_fs_capacity_bytes": limit,
		"turbine_kvbm_fs_files": 4, "turbine_kvbm_fs_evictions_total": 2, "turbine_kvbm_fs_files_seen_total": 6} {
		if got := metricSum(s, name); got != v {
			t.Errorf("/metrics %s = %v, want %v", name, got, v)
		}
	}
	// The store's own families are there too (serve's /metrics shows them).
	if metricSum(s, "turbine_kvbm_capacity_bytes") < 16<<20 {
		t.Errorf("/metrics lacks turbine_kvbm_capacity_bytes of the host tier")
	}
}
