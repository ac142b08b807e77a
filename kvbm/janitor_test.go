package kvbm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

// TestFSInventoryScan: each case is a sequence of scans of a listing ("name:size@minute"
// entries, minutes after t0) under a cap; each expects the deletions and the changes.
func TestFSInventoryScan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at      int // minutes after t0
		listing string
		del     string
		changes string
	}
	cases := []struct {
		name  string
		cap   int64
		steps []step
	}{
		{"under the cap", 100, []step{
			{1, "a.data:40@0 b.data:40@1 x.txt:99@0", "", "+a +b"},
			{2, "a.data:40@0 b.data:40@1", "", ""},
		}},
		{"oldest mtime first", 100, []step{
			{5, "b.data:40@2 a.data:40@1 c.data:40@3", "a.data", "+a +b +c -a"},
			{6, "b.data:40@2 c.data:40@3 d.data:50@4", "b.data", "+d -b"},
		}},
		{"equal mtimes: first seen first, then name", 100, []step{
			{1, "z.data:40@0", "", "+z"},
			{2, "z.data:40@0 a.data:40@0 m.data:40@0", "z.data", "+a +m -z"},
			{3, "a.data:40@0 m.data:40@0 b.data:40@0", "a.data", "+b -a"},
		}},
		{"rewritten file is recent again", 100, []step{
			{1, "a.data:40@0 b.data:40@1", "", "+a +b"},
			{3, "a.data:40@2 b.data:40@1 c.data:40@2", "b.data", "+c -b"},
		}},
		{"vanished and resized files", 100, []step{
			{1, "a.data:40@0 b.data:40@1", "", "+a +b"},
			{2, "b.data:90@1", "", "-a"},
			{3, "b.data:90@1 c.data:20@2", "b.data", "+c -b"},
		}},
		{"stale tmp files", 100, []step{
			{12, "a.data.tmp:500@0 b.tmp:5@4 a.data:10@4", "a.data.tmp", "+a"},
			{30, "b.tmp:5@4 a.data:10@4", "b.tmp", ""},
		}},
		{"a file over the cap alone", 10, []step{
			{1, "big.data:11@0 .data:1@0", "big.data", "+big -big"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := newFSInventory(100)
			for i, s := range c.steps {
				var listing []fsFile
				for _, f := range strings.Fields(s.listing) {
					var name string
					var size, min int64
					at := strings.LastIndexByte(f, ':')
					name = f[:at]
					if _, err := fmt.Sscanf(f[at+1:], "%d@%d", &size, &min); err != nil {
						t.Fatal(err)
					}
					listing = append(listing, fsFile{Name: name, Size: size, ModTime: t0.Add(time.Duration(min) * time.Minute)})
				}
				del := v.scan(listing, t0.Add(time.Duration(s.at)*time.Minute), c.cap, 10*time.Minute)
				var chs []string
				for _, ch := range v.changes {
					sign := "+"
					if ch.Removed {
						sign = "-"
					}
					chs = append(chs, sign+ch.Key)
				}
				v.changes = v.changes[:0]
				if got := strings.Join(del, " "); got != s.del {
					t.Errorf("scan %d: deleted %q, want %q", i, got, s.del)
				}
				if got := strings.Join(chs, " "); got != s.changes {
					t.Errorf("scan %d: changes %q, want %q", i, got, s.changes)
				}
				if v.used > c.cap {
					t.Errorf("scan %d: %d bytes over the cap", i, v.used)
				}
			}
		})
	}
}

// TestJanitorDir: a directory laid out as LMCache's fs:// connector writes it.
func TestJanitorDir(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	put := func(key string, size int, age time.Duration, ext string) {
		p := filepath.Join(dir, strings.ReplaceAll(key, "/", "-")+ext)
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := now.Add(-age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	put("m@1@0@aa@bfloat16", 1000, 3*time.Hour, ".data")
	put("m@1@0@bb@bfloat16", 1000, 2*time.Hour, ".data")
	put("m@1@0@cc@bfloat16", 1000, time.Hour, ".data")
	put("m@1@0@dd@bfloat16", 1000, time.Hour, ".data.tmp") // being written, fresh
	put("m@1@0@ee@bfloat16", 1000, 2*time.Hour, ".data.tmp")
	if err := os.Mkdir(filepath.Join(dir, "sub.data"), 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := NewJanitor(JanitorConfig{Dir: dir, MaxBytes: 2500, TmpMaxAge: 90 * time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	del, err := j.Scan()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(del)
	if want := "m@1@0@aa@bfloat16.data m@1@0@ee@bfloat16.data.tmp"; strings.Join(del, " ") != want {
		t.Errorf("deleted %v, want %s", del, want)
	}
	names := dirNames(t, dir)
	if want := "m@1@0@bb@bfloat16.data m@1@0@cc@bfloat16.data m@1@0@dd@bfloat16.data.tmp sub.data"; strings.Join(names, " ") != want {
		t.Errorf("left %v, want %s", names, want)
	}
	var keys []string
	j.Snapshot(func(k string, tier kv.Tier) { keys = append(keys, k+"@"+tier.String()) })
	if want := "m@1@0@bb@bfloat16@disk m@1@0@cc@bfloat16@disk"; strings.Join(keys, " ") != want {
		t.Errorf("snapshot %v", keys)
	}
	chs, over := j.Changes(nil)
	if over || len(chs) != 4 || !chs[3].Removed || chs[3].Tier != kv.TierDisk {
		t.Errorf("changes %v", chs)
	}
	if st := j.Stats(); st.UsedBytes != 2000 || st.Blocks != 2 || st.Evicted != 1 || st.CapacityBytes != 2500 {
		t.Errorf("stats %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := j.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	if _, err := NewJanitor(JanitorConfig{Dir: dir}); !errors.Is(err, ErrConfig) {
		t.Errorf("no cap: %v", err)
	}
}
