package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The block managers' checks afterwards, one case each (testdata/kvbm.json): caps, the
// disk directory against the disk tier, and since the nemesis ended no errors and, on a
// disk that was filled, blocks written again.
func TestKvbmCheck(t *testing.T) {
	b, err := os.ReadFile("testdata/kvbm.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name        string
		After, Base *string
		Dir         DirUsage
		Filled      bool
		Want        []string
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	fams := func(text *string) map[string]*dto.MetricFamily {
		if text == nil {
			return nil
		}
		return families(t, *text)
	}
	for _, c := range cases {
		check := KvbmCheck{Node: "n-1", After: fams(c.After), Base: fams(c.Base), Dir: c.Dir, Filled: c.Filled,
			HostCap: kvbmHostBytes, DiskCap: kvbmDiskBytes}
		got := check.Problems()
		if len(got) != len(c.Want) {
			t.Errorf("%s: problems %q, want %d like %q", c.Name, got, len(c.Want), c.Want)
			continue
		}
		for i, w := range c.Want {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("%s: problem %d is %q, want %q…", c.Name, i, got[i], w)
			}
		}
	}
	// A problem of the check fails the run.
	v := Check(nil, nil, nil, DefaultWindows, 3, After{Kvbm: []string{"n-1's disk tier wrote no block"}}, Bound{})
	if v.Pass() || !slices.Contains(v.Problems, "kvbm: n-1's disk tier wrote no block") {
		t.Errorf("a block-manager problem: %v (pass %v)", v.Problems, v.Pass())
	}
}

// A full block-manager disk explains no failure: a documented error while only a disk
// was full is unexplained.
func TestDiskFullExplainsNothing(t *testing.T) {
	r := Record{ID: 1, Frontend: "fe-1", Status: 503, ErrCode: "no_live_workers", Start: 10 * time.Second, End: 10 * time.Second}
	full := Event{At: 8 * time.Second, For: 5 * time.Second, Kind: DiskFull, Target: "n-1"}
	if o, why := Classify(r, nil, []Event{full}, DefaultWindows); o != Unexplained || !strings.Contains(why, "while the cluster was whole") {
		t.Errorf("during a disk-full: %s (%s), want unexplained", o, why)
	}
	kill := Event{At: 8 * time.Second, For: 5 * time.Second, Kind: KillNode, Target: "n-1"}
	if o, _ := Classify(r, nil, []Event{full, kill}, DefaultWindows); o != Failed {
		t.Errorf("during a disk-full and a node kill: %s, want failed", o)
	}
}

// An earlier run's disks are found by their source name, whatever their folder.
func TestLeftoverMounts(t *testing.T) {
	b, err := os.ReadFile("testdata/mountinfo.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := leftoverMounts(string(b), "tch")
	want := []string{"/srv/chaos-out/kvbm/n-1", "/srv/chaos-out/kvbm/n-2", "/tmp/out dir/kvbm/n-1"}
	if !slices.Equal(got, want) {
		t.Errorf("leftovers %q, want %q", got, want)
	}
}

// The filler takes every free byte of a real tmpfs until the deadline, space freed
// meanwhile included, and leaves nothing once removed. It needs root (a mount); skipped
// without.
func TestFillDisk(t *testing.T) {
	mp := t.TempDir()
	if err := syscall.Mount("chaostest-kvbm-fill", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("no tmpfs to fill (needs root): %v", err)
	}
	defer syscall.Unmount(mp, syscall.MNT_DETACH)
	d := &disks{mounts: map[string]string{"n-1": mp}}
	if err := os.Mkdir(d.blockDir("n-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(d.blockDir("n-1"), "a.kvb")
	if err := os.WriteFile(block, make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	go func() {
		size, err := d.fill(context.Background(), "n-1", time.Now().Add(300*time.Millisecond))
		if err != nil {
			t.Error(err)
		}
		done <- size
	}()
	time.Sleep(100 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(d.blockDir("n-1"), "b.kvb"), make([]byte, 4096), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write while full: %v, want ENOSPC", err)
	}
	_ = os.Remove(filepath.Join(d.blockDir("n-1"), "b.kvb"))
	if err := os.Remove(block); err != nil { // freed while full: the filler takes it back
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(d.blockDir("n-1"), "c.kvb"), make([]byte, 64<<10), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write after space was freed while full: %v, want ENOSPC", err)
	}
	_ = os.Remove(filepath.Join(d.blockDir("n-1"), "c.kvb"))
	if size := <-done; size < 768<<10 {
		t.Errorf("filler of %d bytes on a 1 MiB file system", size)
	}
	if err := d.removeFiller("n-1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.blockDir("n-1"), "d.kvb"), make([]byte, 512<<10), 0o644); err != nil {
		t.Errorf("a write once the filler is gone: %v", err)
	}
	u, err := listDir(d.blockDir("n-1"))
	if err != nil || u.Blocks != 1 || u.Bytes != 512<<10 || u.Temps != 0 || len(u.Other) != 0 {
		t.Errorf("listing %+v, %v", u, err)
	}
}
