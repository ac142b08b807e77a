package kvbm

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/ledger/*.txt")

// Scripted tests of the ledger (the store's pure core): the script carries out every
// disk write and read the ledger asks for, so pins and writes in flight are explicit.
// Each file under testdata/ledger is a sequence of cases:
//
//	command args...
//	----
//	expected output
//	(blank line)
//
// Commands (SIZE is the block's footprint, header included: at least 56+len(KEY)):
//
//	config host=BYTES [disk=BYTES] [policy=demote|write-through|reuse] [max-changes=N]
//	put KEY SIZE [prio=N] [hold]   hold: its disk writes stay in flight
//	get KEY [hold] [fail]          hold: a disk read stays in flight (the block pinned);
//	                               fail: the read finds a corrupt file
//	write-done KEY [fail]          the in-flight write of KEY completes
//	read-done KEY [fail]           the in-flight read of KEY completes
//	del KEY | touch KEY PRIO | exists KEY
//	state                          each tier in eviction order: key#gen(prio,size[,flags])
//	stats
//
// After each command the output lists the changes it made (+tier:key, -tier:key), the
// writes it started and the files it removed. Run with -rewrite to regenerate.
func TestLedgerScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "ledger", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata/ledger (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runLedgerScript(t, f) })
	}
}

type scriptCase struct {
	line     int
	comments []string
	cmd      string
	expected string
}

func parseScript(t *testing.T, path string) []scriptCase {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cases []scriptCase
	var comments []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		c := scriptCase{line: i + 1, cmd: l, comments: comments}
		comments = nil
		i++
		if i >= len(lines) || strings.TrimSpace(lines[i]) != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", path, c.line, c.cmd)
		}
		var out []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runLedgerScript(t *testing.T, path string) {
	h := &ledgerHarness{}
	var rw strings.Builder
	failed := false
	for _, c := range parseScript(t, path) {
		got := strings.TrimRight(h.run(c.cmd), "\n")
		for _, cm := range c.comments {
			rw.WriteString(cm + "\n")
		}
		fmt.Fprintf(&rw, "%s\n----\n%s\n\n", c.cmd, got)
		if !*rewrite && got != c.expected {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, c.line, c.cmd, got, c.expected)
			failed = true
		}
		if h.l != nil {
			if err := h.l.check(); err != nil {
				t.Fatalf("%s:%d: %s: invariant: %v", path, c.line, c.cmd, err)
			}
		}
	}
	if *rewrite && !failed {
		if err := os.WriteFile(path, []byte(strings.TrimRight(rw.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type ledgerHarness struct {
	l      *ledger
	writes []*item // in flight
	reads  []*item // in flight
}

func (h *ledgerHarness) run(cmd string) string {
	f := strings.Fields(cmd)
	args := map[string]string{}
	var pos []string
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("bad number %q", s))
		}
		return n
	}
	has := func(flag string) bool {
		for _, p := range pos {
			if p == flag {
				return true
			}
		}
		return false
	}
	if f[0] == "config" {
		p, err := ParsePolicy(args["policy"])
		if err != nil {
			return err.Error()
		}
		mc := int64(DefaultMaxChanges)
		if v, ok := args["max-changes"]; ok {
			mc = num(v)
		}
		_, hasDisk := args["disk"]
		var disk int64
		if hasDisk {
			disk = num(args["disk"])
		}
		h.l = newLedger(p, num(args["host"]), disk, hasDisk, int(mc))
		h.writes, h.reads = nil, nil
		return "ok"
	}
	var eff effects
	var out []string
	switch f[0] {
	case "put":
		key, size := pos[0], num(pos[1])
		data := make([]byte, size-int64(fileHeaderSize+len(key)))
		prio := 0
		if v, ok := args["prio"]; ok {
			prio = int(num(v))
		}
		if err := h.l.put(key, nil, data, prio, &eff); err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, "ok")
		}
	case "get":
		e, d, ok := h.l.get(pos[0])
		switch {
		case !ok:
			out = append(out, "miss")
		case d == nil:
			out = append(out, fmt.Sprintf("hit %s %d bytes", e.Tier, len(e.Data)))
		default:
			out = append(out, fmt.Sprintf("read %s#%d", d.key, d.gen))
			h.reads = append(h.reads, d)
			if !has("hold") {
				out = append(out, h.readDone(d, has("fail"), &eff))
			}
		}
	case "read-done":
		d := take(&h.reads, pos[0])
		if d == nil {
			return "no read of " + pos[0] + " in flight"
		}
		out = append(out, h.readDone(d, has("fail"), &eff))
	case "write-done":
		d := take(&h.writes, pos[0])
		if d == nil {
			return "no write of " + pos[0] + " in flight"
		}
		var err error
		if has("fail") {
			err = ErrFull
		}
		h.l.written(d, err, &eff)
		out = append(out, "ok")
	case "del":
		out = append(out, strconv.FormatBool(h.l.del(pos[0], &eff)))
	case "touch":
		out = append(out, strconv.FormatBool(h.l.touch(pos[0], int(num(pos[1])))))
	case "exists":
		out = append(out, strconv.FormatBool(h.l.exists(pos[0])))
	case "state":
		out = append(out, h.state()...)
	case "stats":
		var st Stats
		h.l.stats(&st)
		for _, t := range []kv.Tier{kv.TierHost, kv.TierDisk} {
			out = append(out, fmt.Sprintf("%s: %+v", t, st.Tiers[t]))
		}
	default:
		return "unknown command " + f[0]
	}
	// Carry out the effects as Store.do does: writes, then removes.
	for len(eff.writes) > 0 || len(eff.removes) > 0 {
		ws := eff.writes
		eff.writes = nil
		for _, d := range ws {
			out = append(out, fmt.Sprintf("write %s#%d", d.key, d.gen))
			if has("hold") && f[0] == "put" {
				h.writes = append(h.writes, d)
				continue
			}
			h.l.written(d, nil, &eff)
		}
		for _, d := range eff.removes {
			out = append(out, fmt.Sprintf("remove %s#%d", d.key, d.gen))
		}
		eff.removes = nil
	}
	chs, over := h.l.drain(nil)
	if len(chs) > 0 || over {
		var s []string
		for _, c := range chs {
			sign := "+"
			if c.Removed {
				sign = "-"
			}
			s = append(s, sign+c.Tier.String()+":"+c.Key)
		}
		if over {
			s = append(s, "(overflowed)")
		}
		out = append(out, "changes: "+strings.Join(s, " "))
	}
	return strings.Join(out, "\n")
}

func (h *ledgerHarness) readDone(d *item, fail bool, eff *effects) string {
	if fail {
		h.l.readDone(d, nil, nil, errBadBody, eff)
		return "read failed"
	}
	data := make([]byte, d.size-int64(fileHeaderSize+len(d.key)))
	h.l.readDone(d, nil, data, nil, eff)
	return fmt.Sprintf("read %d bytes", len(data))
}

func take(its *[]*item, key string) *item {
	for i, it := range *its {
		if it.key == key {
			*its = append((*its)[:i], (*its)[i+1:]...)
			return it
		}
	}
	return nil
}

func (h *ledgerHarness) state() []string {
	var out []string
	for _, t := range []*tier{h.l.host, h.l.disk} {
		if t == nil {
			continue
		}
		var its []string
		t.order.each(func(it *item) bool {
			s := it.key
			if t.id == kv.TierDisk {
				s += "#" + strconv.FormatUint(it.gen, 10)
			}
			s += fmt.Sprintf("(p%d,%d", it.prio, it.size)
			if it.pins > 0 {
				s += fmt.Sprintf(",pinned×%d", it.pins)
			}
			if it.state == stateWriting {
				s += ",writing"
			}
			if it.reused && t.id == kv.TierHost {
				s += ",reused"
			}
			its = append(its, s+")")
			return true
		})
		out = append(out, fmt.Sprintf("%s %d/%d: %s", t.id, t.used, t.cap, strings.Join(its, " ")))
	}
	return out
}

// check verifies the ledger's invariants (ledger.go).
func (l *ledger) check() error {
	var pinned int64
	for _, t := range []*tier{l.host, l.disk} {
		if t == nil {
			continue
		}
		var used int64
		n := 0
		prev := -1 << 62
		first := true
		t.order.each(func(it *item) bool {
			if !first && it.prio < prev {
				used = -1 << 62
			}
			first = false
			prev = it.prio
			used += it.size
			n++
			if t.items[it.key] != it || it.doomed || it.tier != t.id {
				used = -1 << 62
			}
			if it.pins > 0 {
				pinned++
			}
			return true
		})
		if used != t.used || n != len(t.items) {
			return fmt.Errorf("%s: used %d (index says %d), %d ordered of %d indexed", t.id, t.used, used, n, len(t.items))
		}
		if t.used > t.cap {
			return fmt.Errorf("%s: used %d over cap %d", t.id, t.used, t.cap)
		}
		ps := append([]int(nil), t.order.prios...)
		if !sort.IntsAreSorted(ps) || len(ps) != len(t.order.lists) {
			return fmt.Errorf("%s: priorities %v, %d lists", t.id, ps, len(t.order.lists))
		}
	}
	if pinned > l.pinned { // doomed blocks may be pinned too, out of the index
		return fmt.Errorf("%d pinned blocks indexed, ledger counts %d", pinned, l.pinned)
	}
	return nil
}
