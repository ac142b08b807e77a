package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The block managers of the aggregated nodes (docs/chaos.md, "The rig"): each runs in
// its node's process (--kvbm) with a host tier small enough that the blocks its engines
// evict go on to its disk tier, whose directory is on a tmpfs of its own that the run
// mounts under Out and DiskFull fills.
const (
	kvbmHostBytes = 4 << 20  // --kvbm-host-bytes: 60 blocks of 64 tokens × 1 KiB per token
	kvbmDiskBytes = 24 << 20 // --kvbm-disk-bytes: about 370 blocks
	// kvbmFSBytes is each disk's tmpfs: the disk cap, the page each block file rounds up
	// to (4 KiB of 65.6) and the files being written or replaced fit with room to spare,
	// so that only the nemesis fills it.
	kvbmFSBytes = 32 << 20
)

// kvbmNodes run a block manager with a disk tier.
var kvbmNodes = []string{"n-1", "n-2"}

// kvbmNodeArgs are the flags a node with a block manager gets beyond nodeArgs: a GPU
// cache of 256 blocks (16,384 tokens, four of the longest requests), small blocks (1 KiB
// per token: 64 KiB a block), the block manager without lm:// and its caps. Its disk
// directory is the run's (disks.blockDir).
var kvbmNodeArgs = []string{"--num-gpu-blocks", "256", "--max-model-len", "16384", "--kv-bytes-per-token", "1024",
	"--kvbm", "--kvbm-lm-port", "-1", "--kvbm-host-bytes", strconv.Itoa(kvbmHostBytes), "--kvbm-disk-bytes", strconv.Itoa(kvbmDiskBytes)}

// disks are the block managers' file systems: a tmpfs per node, mounted at
// Out/kvbm/<node> with the source name <prefix>kvbm-<node> (so that a later run with
// the same prefix finds what a crashed one left), the block manager's directory
// blocks/ in it and DiskFull's filler beside that.
type disks struct {
	mounts map[string]string // node -> mount point
}

// mountSource is the tmpfs source name of node's disk under prefix.
func mountSource(prefix, node string) string { return prefix + "kvbm-" + node }

// mountDisks unmounts what an earlier run with prefix left and mounts a tmpfs of
// kvbmFSBytes for each node under out.
func mountDisks(prefix, out string, nodes []string) (*disks, error) {
	unmountLeftovers(prefix)
	abs, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	d := &disks{mounts: map[string]string{}}
	for _, n := range nodes {
		mp := filepath.Join(abs, "kvbm", n)
		if err := os.MkdirAll(mp, 0o755); err != nil {
			d.Close()
			return nil, err
		}
		if err := syscall.Mount(mountSource(prefix, n), mp, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV,
			fmt.Sprintf("size=%d,mode=0755", kvbmFSBytes)); err != nil {
			d.Close()
			return nil, fmt.Errorf("chaos: mount a tmpfs for %s's block manager at %s: %w", n, mp, err)
		}
		d.mounts[n] = mp
		if err := os.Mkdir(d.blockDir(n), 0o755); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// blockDir is node's --kvbm-disk-dir.
func (d *disks) blockDir(node string) string { return filepath.Join(d.mounts[node], "blocks") }

// fillerPath is DiskFull's filler on node's file system (outside the block manager's
// directory).
func (d *disks) fillerPath(node string) string { return filepath.Join(d.mounts[node], "filler") }

// Close unmounts every disk (lazily: a process still holding a file lets go later).
func (d *disks) Close() {
	if d == nil {
		return
	}
	for n, mp := range d.mounts {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		delete(d.mounts, n)
	}
}

// unmountLeftovers unmounts every tmpfs whose source is one of prefix's disks
// (/proc/self/mountinfo), as NewNet deletes an earlier run's namespaces.
func unmountLeftovers(prefix string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, mp := range leftoverMounts(string(b), prefix) {
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// leftoverMounts are the mount points in mountinfo of tmpfs file systems whose source
// names one of prefix's disks, deepest first.
func leftoverMounts(mountinfo, prefix string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		// "id parent major:minor root mountpoint options [optional...] - fstype source super"
		before, after, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(before), strings.Fields(after)
		if !ok || len(f) < 5 || len(g) < 2 || g[0] != "tmpfs" || !strings.HasPrefix(g[1], prefix+"kvbm-") {
			continue
		}
		out = append(out, unescapeMountinfo(f[4]))
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a blank).
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fill fills node's file system with the filler until the file system refuses a write
// (ENOSPC), and keeps it full (space the block manager frees is taken again every
// 20 ms) until until or ctx ends. It returns the filler's largest size; the filler
// stays (removeFiller).
func (d *disks) fill(ctx context.Context, node string, until time.Time) (int64, error) {
	f, err := os.OpenFile(d.fillerPath(node), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var size int64
	for {
		for {
			n, err := f.Write(chunk)
			size += int64(n)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return size, fmt.Errorf("chaos: fill %s's disk: %w", node, err)
			}
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return size, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(20*time.Millisecond, time.Until(until))):
		}
	}
}

// removeFiller frees node's file system.
func (d *disks) removeFiller(node string) error {
	err := os.Remove(d.fillerPath(node))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// DirUsage is a block manager's disk directory as listed: its block files (.kvb) and
// their bytes, its temporary files (.kvt, a write under way or left behind) and any
// other file.
type DirUsage struct {
	Blocks int
	Bytes  int64
	Temps  int
	Other  []string
}

// listDir lists dir.
func listDir(dir string) (DirUsage, error) {
	var u DirUsage
	ents, err := os.ReadDir(dir)
	if err != nil {
		return u, err
	}
	for _, e := range ents {
		switch name := e.Name(); {
		case strings.HasSuffix(name, ".kvb") && e.Type().IsRegular():
			info, err := e.Info()
			if err != nil {
				continue // removed since the listing
			}
			u.Blocks++
			u.Bytes += info.Size()
		case strings.HasSuffix(name, ".kvt"):
			u.Temps++
		default:
			u.Other = append(u.Other, name)
		}
	}
	return u, nil
}

// KvbmCheck is one block manager as read once the run has settled.
type KvbmCheck struct {
	Node string
	// After is the node's /metrics now (nil: it did not answer); Base is what it was
	// when the nemesis ended (nil: not read).
	After, Base map[string]*dto.MetricFamily
	Dir         DirUsage
	DirErr      error // the directory could not be listed
	// Filled: a DiskFull event filled this node's disk during the run.
	Filled bool
	// HostCap and DiskCap are the caps the node was given.
	HostCap, DiskCap int64
}

// kvbmFigures are the figures a check reads of one node's block manager.
type kvbmFigures struct {
	bytes, capacity, blocks, stored map[string]float64 // by tier
	errors, start                   float64
}

func readKvbm(fams map[string]*dto.MetricFamily) (kvbmFigures, bool) {
	f := kvbmFigures{bytes: map[string]float64{}, capacity: map[string]float64{}, blocks: map[string]float64{}, stored: map[string]float64{}}
	for name, into := range map[string]map[string]float64{"turbine_kvbm_bytes": f.bytes, "turbine_kvbm_capacity_bytes": f.capacity,
		"turbine_kvbm_blocks": f.blocks, "turbine_kvbm_stored_total": f.stored} {
		for _, m := range fams[name].GetMetric() {
			into[label(m, "tier")] += value(m)
		}
	}
	e := fams["turbine_kvbm_errors_total"]
	for _, m := range e.GetMetric() {
		f.errors += value(m)
	}
	if s := fams["process_start_time_seconds"]; s != nil && len(s.GetMetric()) > 0 {
		f.start = value(s.GetMetric()[0])
	}
	_, host := f.capacity["host"]
	_, disk := f.capacity["disk"]
	return f, e != nil && host && disk
}

// Problems are the check's violations, one description each: a node that did not
// answer or shows no block manager with a disk tier; a tier holding more than its cap
// (the one the node was given); a disk directory whose block files differ from the disk
// tier's blocks and bytes, or that holds temporary or other files; and, since the
// nemesis ended (every disk free again), errors of the block manager, or, on a disk that
// was filled, no block written to disk (the disk tier's writes, less its errors, did not
// rise). A block manager restarted since Base (a new process: another start time, or a
// counter lower than Base's) counts from 0.
func (c KvbmCheck) Problems() []string {
	if c.After == nil {
		return []string{fmt.Sprintf("%s's /metrics did not answer", c.Node)}
	}
	now, ok := readKvbm(c.After)
	if !ok {
		return []string{fmt.Sprintf("%s shows no block manager with a disk tier on its /metrics", c.Node)}
	}
	var out []string
	for _, t := range []struct {
		name string
		cap  int64
	}{{"host", c.HostCap}, {"disk", c.DiskCap}} {
		if now.capacity[t.name] != float64(t.cap) {
			out = append(out, fmt.Sprintf("%s's %s tier reports a cap of %g bytes, it was given %d", c.Node, t.name, now.capacity[t.name], t.cap))
		}
		if now.bytes[t.name] > float64(t.cap) {
			out = append(out, fmt.Sprintf("%s's %s tier holds %g bytes, over its cap of %d", c.Node, t.name, now.bytes[t.name], t.cap))
		}
	}
	switch {
	case c.DirErr != nil:
		out = append(out, fmt.Sprintf("%s's disk directory: %v", c.Node, c.DirErr))
	case float64(c.Dir.Blocks) != now.blocks["disk"] || float64(c.Dir.Bytes) != now.bytes["disk"]:
		out = append(out, fmt.Sprintf("%s's disk directory holds %d block files of %d bytes, its disk tier %g blocks of %g bytes",
			c.Node, c.Dir.Blocks, c.Dir.Bytes, now.blocks["disk"], now.bytes["disk"]))
	}
	if c.Dir.Temps > 0 {
		out = append(out, fmt.Sprintf("%s's disk directory holds %d temporary files after the run", c.Node, c.Dir.Temps))
	}
	if len(c.Dir.Other) > 0 {
		out = append(out, fmt.Sprintf("%s's disk directory holds files that are not blocks: %s", c.Node, strings.Join(c.Dir.Other, ", ")))
	}
	base, ok := readKvbm(c.Base)
	switch {
	case c.Base == nil || !ok:
		if c.Filled {
			out = append(out, fmt.Sprintf("%s's block manager was not read when the nemesis ended: whether its disk took writes again is unknown", c.Node))
		}
		return out
	case base.start != now.start || now.stored["disk"] < base.stored["disk"] || now.stored["host"] < base.stored["host"] || now.errors < base.errors:
		base = kvbmFigures{} // a new process
	}
	if d := now.errors - base.errors; d > 0 {
		out = append(out, fmt.Sprintf("%s's block manager counted %g errors after the nemesis ended (%g then, %g after the run)", c.Node, d, base.errors, now.errors))
	}
	if written := (now.stored["disk"] - base.stored["disk"]) - (now.errors - base.errors); c.Filled && written <= 0 {
		out = append(out, fmt.Sprintf("%s's disk tier wrote no block after the nemesis ended (blocks stored %g then, %g after the run): its disk did not recover from being filled",
			c.Node, base.stored["disk"], now.stored["disk"]))
	}
	return out
}

// KvbmSummary is one line of node's block-manager figures after the run (kvbm.txt), with
// what its disk tier stored and its errors since the nemesis ended (base; nil: not read).
func KvbmSummary(node string, after, base map[string]*dto.MetricFamily) string {
	f, ok := readKvbm(after)
	if !ok {
		return node + ": no block manager figures"
	}
	s := fmt.Sprintf("%s: host %.0f of %.0f bytes (%.0f blocks), disk %.0f of %.0f bytes (%.0f blocks); disk blocks stored %.0f, errors %.0f",
		node, f.bytes["host"], f.capacity["host"], f.blocks["host"], f.bytes["disk"], f.capacity["disk"], f.blocks["disk"], f.stored["disk"], f.errors)
	if b, ok := readKvbm(base); ok && b.start == f.start && f.stored["disk"] >= b.stored["disk"] && f.errors >= b.errors {
		s += fmt.Sprintf("; since the nemesis ended %+.0f disk blocks stored, %+.0f errors", f.stored["disk"]-b.stored["disk"], f.errors-b.errors)
	}
	return s
}

// writeLines writes lines to path, one a line.
func writeLines(path string, lines []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if _, err := io.WriteString(f, l+"\n"); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
