package kvbm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

// writeLMCacheFile writes name.data as LMCache's fs:// connector does (a ".tmp" file,
// then a rename) and dates it at mtime.
func writeLMCacheFile(t *testing.T, dir, name string, size int, mtime time.Time) {
	t.Helper()
	tmp := filepath.Join(dir, name+".data.tmp")
	if err := os.WriteFile(tmp, bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, name+".data")
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(final, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// TestManagerRunsJanitor: with Config.FS the manager keeps an LMCache fs:// directory
// under its cap, oldest written first; the status carries the janitor's figures, the
// metrics its families, and a file named by a Turbine block key is published to the
// model's router in the disk tier.
func TestManagerRunsJanitor(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().Add(-time.Hour)
	block := store.BlockKey("m", 0x77)
	names := []string{"lm@1@0@aa@bf16", "lm@1@0@bb@bf16", block, "lm@1@0@cc@bf16"}
	for i, n := range names {
		writeLMCacheFile(t, dir, n, 1000, t0.Add(time.Duration(i)*time.Minute))
	}
	rt := fakeRouter{got: make(chan *messages.KvbmInventory, 64), needDump: make(chan struct{})}
	m, err := Open(Config{NodeID: "n1", Store: store.Config{HostBytes: 1 << 20}, Epoch: 42,
		Routers: func(string) RouterClient { return rt }, PublishInterval: time.Millisecond,
		FS: &store.JanitorConfig{Dir: dir, MaxBytes: 3000, Interval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Open's first scan deleted the oldest file (4000 bytes over a 3000-byte cap).
	if _, err := os.Stat(filepath.Join(dir, names[0]+".data")); !os.IsNotExist(err) {
		t.Fatalf("the oldest file survived the cap: %v", err)
	}
	st := m.Status(nil)
	if fs := st.GetFs(); st.GetFsDir() != dir || fs.GetCapacityBytes() != 3000 || fs.GetUsedBytes() != 3000 ||
		fs.GetBlocks() != 3 || fs.GetEvicted() != 1 || fs.GetStored() != 4 || fs.GetTier() != messages.KvTier_KV_TIER_DISK {
		t.Fatalf("status fs %v (dir %q)", fs, st.GetFsDir())
	}
	// The running janitor finds a newer file and deletes the oldest left, not the newest.
	writeLMCacheFile(t, dir, "lm@1@0@dd@bf16", 1000, t0.Add(10*time.Minute))
	deadline := time.Now().Add(5 * time.Second)
	for m.Status(nil).GetFs().GetEvicted() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the janitor did not keep the cap in 5 s: %v", m.Status(nil).GetFs())
		}
		time.Sleep(5 * time.Millisecond) // polling the scan interval's outcome
	}
	var left []string
	paths, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	for _, p := range paths {
		left = append(left, strings.TrimSuffix(filepath.Base(p), ".data"))
	}
	if want := fmt.Sprint([]string{"lm@1@0@cc@bf16", "lm@1@0@dd@bf16", block}); fmt.Sprint(left) != want {
		t.Fatalf("files left %v, want %v", left, want)
	}
	var metrics bytes.Buffer
	WriteFSMetrics(&metrics, "n1", m.Janitor().Stats())
	for _, want := range []string{`turbine_kvbm_fs_bytes{node="n1"} 3000`, `turbine_kvbm_fs_evictions_total{node="n1"} 2`,
		`turbine_kvbm_fs_files{node="n1"} 3`, `turbine_kvbm_fs_capacity_bytes{node="n1"} 3000`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics.String())
		}
	}
	// The block-keyed file reaches the router as a disk-tier block.
	sys := actor.NewActorSystem()
	pid, err := sys.Root.SpawnNamed(m.Props(), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sys.Root.PoisonFuture(pid).Wait(); sys.Shutdown() }()
	b := rt.next(t)
	if !b.GetSnapshot() || len(b.GetChanges()) != 1 || b.GetChanges()[0].GetTier() != messages.KvTier_KV_TIER_DISK ||
		fmt.Sprint(hashes(b)) != "[119]" {
		t.Fatalf("first batch %v, want a snapshot of block 0x77 on disk", b)
	}
}
