package kv

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/scripts/*.txt")

// Scripted interaction tests of the Router core: the test delivers every message, and the
// expected outcome is written beside it. Each file under testdata/scripts is a sequence
// of cases:
//
//	command key=value ...
//	optional input lines (events)
//	----
//	expected output
//	(blank line)
//
// Commands:
//
//	config block-size=4 policy=kv weight=1 temperature=0 max-age=300s max-unacked=30s busy-kv=0 busy-prefill=0 max-buffered=N
//	  [predict-active=true] [approx-ttl=120s] [predict-blocks=N] [approx-after=N] [approx-silence=30s] [session-ttl=10m] [max-sessions=N]
//	  [ignore-adapters=true] [lora-load-ms=200]
//	  [tier-credit=host,disk,remote]
//	add-worker id=w1 [node=n1] [block-size=4] [total=100] [ready=true] [epoch=1] [last-seq=0] [no-events=true]
//	  [max-loras=N] [loras=a,b] [pinned=a] [known=c] [load-ms=M]   (adapter a at /adapters/a)
//	kv-event worker=w1 [epoch=1] seq=1      input: one event per line (see parseEvent)
//	dump worker=w1 [epoch=1] last-seq=3 [part=0] [last=true]   input: events
//	route id=r1 (blocks=a,b | tokens=1,2,..) [extra=N] [lora=x] [weight=W] [temp=T] [exclude=w1,w2] [will-ack] [pin=w1] [session=s]
//	  [on-demand=true] [path=/dir]   prints load=PATH when a chosen worker loads the adapter first
//	adapters   each worker's adapters as the router sees them (* pinned, ~ placed, unreported,
//	           (c) known: evicted, loaded again on request)
//	prefill-done id=r1 | free id=r1 | ack id=r1 | tick 10s | expire | kill-worker id=w1
//	first-token id=r1   PrefillDoneAt at the script's clock; prints the worker's learnt speed
//	busy [kv=0.9] [prefill=1000] | overlaps (blocks=..|tokens=..) [lora=x] | stats | replay
//	inventory node=n1 [epoch=1] seq=1 [snapshot] [serves-remote]   input: one tier change per line,
//	  (host|disk|remote|none) blocks=a,b,c [skip=N] [removed]: the chain's sequence hashes, the first N skipped
//	tiers      the tier index's nodes | forget-node node=n1
//
// A block written as a name (blocks=sys,q1) stands for block-size tokens derived from
// the name, so scripts read as prompts built from shared pieces. The RNG is seeded per
// file and the clock starts at a fixed instant; run with -rewrite to regenerate.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scripts", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata/scripts (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type scriptCase struct {
	line     int
	comments []string // comment lines just before the command, kept by -rewrite
	cmd      string
	input    []string
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
	header := true // the file's leading comment block is written back by leadingComments
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			if header {
				comments = nil
			}
			header = false
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		header = false
		c := scriptCase{line: i + 1, cmd: l, comments: comments}
		comments = nil
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "----"; i++ {
			if in := strings.TrimSpace(lines[i]); in != "" {
				c.input = append(c.input, in)
			}
		}
		if i >= len(lines) {
			t.Fatalf("%s:%d: %q has no ---- separator", path, c.line, c.cmd)
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

func runScript(t *testing.T, path string) {
	cases := parseScript(t, path)
	h := &harness{now: t0, rng: rand.New(rand.NewPCG(1, 2)), cfg: DefaultConfig(4)}
	// The scripts that do not name a policy were written for the KV cost (docs/reference.md §3).
	h.cfg.Policy = PolicyKV
	var rewritten strings.Builder
	for _, c := range cases {
		got := strings.TrimRight(h.run(t, c), "\n")
		if *rewrite {
			for _, cm := range c.comments {
				rewritten.WriteString(cm + "\n")
			}
			rewritten.WriteString(c.cmd + "\n")
			for _, in := range c.input {
				rewritten.WriteString(in + "\n")
			}
			rewritten.WriteString("----\n" + got + "\n\n")
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\n want:\n%s", path, c.line, c.cmd, got, c.expected)
		}
	}
	if *rewrite {
		header := leadingComments(t, path)
		if err := os.WriteFile(path, []byte(header+rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// leadingComments keeps a script's header comment across rewrites.
func leadingComments(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		sb.WriteString(l + "\n")
	}
	if sb.Len() > 0 {
		sb.WriteString("\n")
	}
	return sb.String()
}

type harness struct {
	cfg Config
	r   *Router
	now time.Time
	rng *rand.Rand
}

func (h *harness) router(t *testing.T) *Router {
	if h.r == nil {
		r, err := NewRouter(h.cfg)
		if err != nil {
			t.Fatalf("NewRouter: %v", err)
		}
		h.r = r
	}
	return h.r
}

type args map[string]string

func parseArgs(fields []string) args {
	a := args{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		a[k] = v
	}
	return a
}

func (a args) str(k, def string) string {
	if v, ok := a[k]; ok {
		return v
	}
	return def
}

func (a args) int(t *testing.T, k string, def int) int {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

func (a args) u64(t *testing.T, k string, def uint64) uint64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

func (a args) float(t *testing.T, k string, def float64) float64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return f
}

// scriptAdapters is add-worker's loras=a,b (held, at /adapters/<name>) with pinned=a,
// or with key "known" its known=c,d.
func scriptAdapters(a args, key string) []AdapterSpec {
	var out []AdapterSpec
	for _, n := range a.list(key) {
		out = append(out, AdapterSpec{Name: n, Path: "/adapters/" + n, Pinned: slices.Contains(a.list("pinned"), n)})
	}
	return out
}

// adapterView prints each worker's adapters as the router sees them at now: name, * when
// pinned, ~ when placed on demand and not yet reported.
func (r *Router) adapterView(now time.Time) string {
	var lines []string
	for _, rw := range r.workers {
		if rw == nil {
			continue
		}
		var names []string
		for n, h := range rw.lora.held {
			switch {
			case !rw.lora.holds(n, now) && h.known:
				n = "(" + n + ")"
			case !rw.lora.holds(n, now):
				continue
			case h.pinned:
				n += "*"
			case !h.resident:
				n += "~"
			}
			names = append(names, n)
		}
		slices.Sort(names)
		lines = append(lines, fmt.Sprintf("%s max=%d [%s]", rw.name, rw.lora.max, strings.Join(names, " ")))
	}
	return strings.Join(lines, "\n")
}

func (a args) list(k string) []string {
	v, ok := a[k]
	if !ok || v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// namedBlock is the content of a block written by name in a script.
func namedBlock(name string, bs int) []uint32 {
	f := fnv.New32a()
	f.Write([]byte(name))
	base := f.Sum32() % 100000 * 100
	out := make([]uint32, bs)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func (h *harness) tokens(t *testing.T, a args) []uint32 {
	var toks []uint32
	for _, n := range a.list("blocks") {
		toks = append(toks, namedBlock(n, h.cfg.BlockSize)...)
	}
	for _, s := range a.list("tokens") {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatalf("tokens: %v", err)
		}
		toks = append(toks, uint32(v))
	}
	for i := 0; i < a.int(t, "extra", 0); i++ {
		toks = append(toks, 7)
	}
	return toks
}

func (h *harness) hashes(t *testing.T, s string) []uint64 {
	var out []uint64
	for _, x := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(x, 0, 64)
		if err != nil {
			t.Fatalf("hashes %q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

// parseEvent reads one event line:
//
//	stored hashes=1,2 [parent=7] (blocks=a,b | tokens=...) [lora=x] [medium=GPU] [block-size=N]
//	removed hashes=1,2 [medium=...]
//	cleared
func (h *harness) parseEvent(t *testing.T, line string) Event {
	f := strings.Fields(line)
	a := parseArgs(f[1:])
	switch f[0] {
	case "stored":
		ev := Event{Kind: BlockStored, EngineHashes: h.hashes(t, a["hashes"]), TokenIDs: h.tokens(t, a),
			BlockSize: a.int(t, "block-size", h.cfg.BlockSize), LoraName: a.str("lora", ""), Medium: a.str("medium", "")}
		if _, ok := a["parent"]; ok {
			ev.HasParent, ev.ParentHash = true, a.u64(t, "parent", 0)
		}
		return ev
	case "removed":
		return Event{Kind: BlockRemoved, EngineHashes: h.hashes(t, a["hashes"]), Medium: a.str("medium", "")}
	case "cleared":
		return Event{Kind: AllBlocksCleared}
	}
	t.Fatalf("unknown event %q", line)
	return Event{}
}

func result(needDump bool, err error) string {
	s := fmt.Sprintf("need-dump=%v", needDump)
	if err != nil {
		s += "\nerror: " + err.Error()
	}
	return s
}

func (h *harness) run(t *testing.T, c scriptCase) string {
	f := strings.Fields(c.cmd)
	a := parseArgs(f[1:])
	switch f[0] {
	case "config":
		if h.r != nil {
			t.Fatalf("line %d: config after the router started", c.line)
		}
		h.cfg.BlockSize = a.int(t, "block-size", h.cfg.BlockSize)
		h.cfg.Policy = a.str("policy", h.cfg.Policy)
		h.cfg.OverlapWeight = a.float(t, "weight", h.cfg.OverlapWeight)
		h.cfg.Temperature = a.float(t, "temperature", h.cfg.Temperature)
		h.cfg.Busy.KVUsage = a.float(t, "busy-kv", h.cfg.Busy.KVUsage)
		h.cfg.Busy.PrefillTokens = int64(a.int(t, "busy-prefill", int(h.cfg.Busy.PrefillTokens)))
		h.cfg.MaxBufferedBatches = a.int(t, "max-buffered", h.cfg.MaxBufferedBatches)
		if v, ok := a["max-age"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			h.cfg.MaxSequenceAge = d
		}
		if v, ok := a["max-unacked"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			h.cfg.MaxUnackedAge = d
		}
		h.cfg.PredictActive = a.str("predict-active", fmt.Sprint(h.cfg.PredictActive)) == "true"
		for k, d := range map[string]*time.Duration{"approx-ttl": &h.cfg.ApproxTTL,
			"approx-silence": &h.cfg.ApproxAfterSilence, "session-ttl": &h.cfg.SessionTTL} {
			if v, ok := a[k]; ok {
				x, err := time.ParseDuration(v)
				if err != nil {
					t.Fatal(err)
				}
				*d = x
			}
		}
		h.cfg.PredictBlocks = int64(a.int(t, "predict-blocks", int(h.cfg.PredictBlocks)))
		h.cfg.ApproxAfterRequests = a.int(t, "approx-after", h.cfg.ApproxAfterRequests)
		h.cfg.MaxSessions = a.int(t, "max-sessions", h.cfg.MaxSessions)
		h.cfg.IgnoreAdapters = a.str("ignore-adapters", fmt.Sprint(h.cfg.IgnoreAdapters)) == "true"
		h.cfg.LoraLoadMs = a.float(t, "lora-load-ms", h.cfg.LoraLoadMs)
		if v, ok := a["tier-credit"]; ok {
			f := strings.Split(v, ",")
			if len(f) != 3 {
				t.Fatalf("tier-credit=%q: want host,disk,remote", v)
			}
			x := [3]float64{}
			for i := range f {
				var err error
				if x[i], err = strconv.ParseFloat(f[i], 64); err != nil {
					t.Fatal(err)
				}
			}
			h.cfg.TierCredit = TierCredit{Host: x[0], Disk: x[1], Remote: x[2]}
		}
		if _, err := NewRouter(h.cfg); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "add-worker":
		nd, err := h.router(t).Register(WorkerSpec{
			ID: a.str("id", ""), BlockSize: a.int(t, "block-size", h.cfg.BlockSize),
			TotalBlocks: int64(a.int(t, "total", 0)), Ready: a.str("ready", "true") == "true",
			Epoch: a.u64(t, "epoch", 1), LastSeq: a.u64(t, "last-seq", 0), NoKVEvents: a.str("no-events", "false") == "true",
			MaxLoras: a.int(t, "max-loras", 0), LoraLoadMs: a.float(t, "load-ms", 0), Adapters: scriptAdapters(a, "loras"),
			KnownAdapters: scriptAdapters(a, "known"), Node: a.str("node", ""),
		})
		return result(nd, err)
	case "kv-event":
		var evs []Event
		for _, in := range c.input {
			evs = append(evs, h.parseEvent(t, in))
		}
		nd, err := h.router(t).ApplyBatch(a.str("worker", ""), a.u64(t, "epoch", 1), a.u64(t, "seq", 0), evs)
		return result(nd, err)
	case "dump":
		var evs []Event
		for _, in := range c.input {
			evs = append(evs, h.parseEvent(t, in))
		}
		nd, err := h.router(t).ApplyDump(a.str("worker", ""), a.u64(t, "epoch", 1), a.u64(t, "last-seq", 0),
			evs, a.int(t, "part", 0), a.str("last", "true") == "true")
		return result(nd, err)
	case "route":
		in := RouteInput{RequestID: a.str("id", ""), Tokens: h.tokens(t, a), LoraName: a.str("lora", ""), Exclude: a.list("exclude"),
			WillAck: a.str("will-ack", "false") == "true", PinWorker: a.str("pin", ""), SessionID: a.str("session", ""),
			LoraOnDemand: a.str("on-demand", "false") == "true", LoraPath: a.str("path", ""),
			Explain: a.str("explain", "false") == "true"}
		if _, ok := a["weight"]; ok {
			in.HasOverlapWeight, in.OverlapWeight = true, a.float(t, "weight", 0)
		}
		if _, ok := a["temp"]; ok {
			in.HasTemperature, in.Temperature = true, a.float(t, "temp", 0)
		}
		d, err := h.router(t).Route(in, h.now, h.rng)
		if err != nil {
			return "error: " + err.Error()
		}
		out := fmt.Sprintf("%s overlap=%d prompt=%d prefill=%d", d.WorkerID, d.OverlapBlocks, d.PromptBlocks, d.PrefillTokens)
		if d.LoraPath != "" {
			out += " load=" + d.LoraPath
		}
		if d.HostBlocks+d.DiskBlocks+d.RemoteBlocks > 0 {
			out += fmt.Sprintf(" host=%d disk=%d remote=%d", d.HostBlocks, d.DiskBlocks, d.RemoteBlocks)
		}
		for _, c := range d.Candidates {
			out += fmt.Sprintf("\n  %s cost=%.1f", c.WorkerID, c.Cost)
			for _, tm := range c.Terms {
				if tm.Value != 0 {
					out += fmt.Sprintf(" %s=%.1f", tm.Name, tm.Value)
				}
			}
		}
		return out
	case "adapters":
		return h.router(t).adapterView(h.now)
	case "first-token":
		r := h.router(t)
		id := a.str("id", "")
		w, ok := r.active.Worker(id)
		active := r.PrefillDoneAt(id, h.now)
		if rw := r.workerByID(w); ok && rw != nil {
			return fmt.Sprintf("active=%v %s speed=%.3f", active, rw.name, rw.speed)
		}
		return fmt.Sprintf("active=%v", active)
	case "prefill-done":
		return fmt.Sprintf("active=%v", h.router(t).PrefillDone(a.str("id", "")))
	case "free":
		return fmt.Sprintf("active=%v", h.router(t).Free(a.str("id", "")))
	case "ack":
		return fmt.Sprintf("awaiting=%v", h.router(t).Ack(a.str("id", "")))
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			t.Fatal(err)
		}
		h.now = h.now.Add(d)
		return "now=+" + h.now.Sub(t0).String()
	case "expire":
		e := h.router(t).Expire(h.now)
		return fmt.Sprintf("expired=%d unacked=%d stale=%d", e.Total(), e.Unacked, e.Stale)
	case "kill-worker":
		n, err := h.router(t).RemoveWorker(a.str("id", ""))
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("freed=%d", n)
	case "busy":
		b := h.router(t).BusyThresholds()
		b.KVUsage = a.float(t, "kv", b.KVUsage)
		b.PrefillTokens = int64(a.int(t, "prefill", int(b.PrefillTokens)))
		if err := h.router(t).SetBusyThresholds(b); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "overlaps":
		r := h.router(t)
		hs := SequenceHashes(h.tokens(t, a), h.cfg.BlockSize, a.str("lora", ""))
		out := r.Index().Overlaps(hs, nil)
		var sb strings.Builder
		for _, ws := range r.Stats().Workers {
			n := uint32(0)
			if int(ws.Worker) < len(out) {
				n = out[ws.Worker]
			}
			fmt.Fprintf(&sb, "%s=%d ", ws.ID, n)
		}
		return strings.TrimSpace(sb.String())
	case "demand":
		// the replica credit's demand for the prefix ending at the prompt's last block
		r := h.router(t)
		hs := SequenceHashes(h.tokens(t, a), h.cfg.BlockSize, a.str("lora", ""))
		if len(hs) == 0 {
			return "demand=0"
		}
		return fmt.Sprintf("demand=%.2f", r.demand.note(hs[len(hs)-1], r.clock(h.now), false))
	case "stats":
		return formatStats(h.router(t).Stats())
	case "inventory":
		inv := Inventory{Epoch: a.u64(t, "epoch", 1), Seq: a.u64(t, "seq", 0), Snapshot: a.str("snapshot", "false") == "true",
			ServesRemote: a.str("serves-remote", "false") == "true"}
		for _, in := range c.input {
			inv.Changes = append(inv.Changes, h.tierChange(t, in))
		}
		return fmt.Sprintf("need-dump=%v", h.router(t).ApplyInventory(a.str("node", ""), inv))
	case "forget-node":
		return fmt.Sprintf("forgotten=%v", h.router(t).ForgetNode(a.str("node", "")))
	case "tiers":
		return formatTiers(h.router(t).Stats())
	case "replay":
		return h.replay(t)
	}
	t.Fatalf("line %d: unknown command %q", c.line, f[0])
	return ""
}

func formatStats(s Stats) string {
	var sb strings.Builder
	for _, w := range s.Workers {
		fmt.Fprintf(&sb, "%s: indexed=%d active=%d prefill=%d requests=%d busy=%v ready=%v epoch=%d seq=%d synced=%v\n",
			w.ID, w.IndexedBlocks, w.ActiveBlocks, w.ActivePrefillTokens, w.ActiveRequests, w.Busy, w.Ready, w.Epoch, w.LastSeq, w.Synced)
		if w.IndexMode != IndexEvents || w.PredictedBlocks != 0 {
			s := sb.String()
			sb.Reset()
			fmt.Fprintf(&sb, "%s mode=%s predicted=%d\n", strings.TrimSuffix(s, "\n"), w.IndexMode, w.PredictedBlocks)
		}
	}
	fmt.Fprintf(&sb, "routed=%d prompt-blocks=%d overlap-blocks=%d nodes=%d active-requests=%d unknown-removals=%d skipped=%d",
		s.Routed, s.PromptBlocks, s.OverlapBlocks, s.IndexNodes, s.ActiveRequests, s.UnknownRemovals, s.SkippedEvents)
	if s.Expired != (Expired{}) || s.AwaitingAck != 0 {
		fmt.Fprintf(&sb, "\nexpired-unacked=%d expired-stale=%d awaiting-ack=%d", s.Expired.Unacked, s.Expired.Stale, s.AwaitingAck)
	}
	if s.Pinned != 0 || s.PinFallbacks != 0 {
		fmt.Fprintf(&sb, "\npinned=%d pin-fallbacks=%d", s.Pinned, s.PinFallbacks)
	}
	if s.PredictedNodes != 0 || s.Sessions != 0 {
		fmt.Fprintf(&sb, "\npredicted-nodes=%d sessions=%d", s.PredictedNodes, s.Sessions)
	}
	return sb.String()
}

// replay rebuilds a fresh router from this one's registrations and per-worker dumps
// (what a moved Router grain or a new replica does) and compares their indexes.
func (h *harness) replay(t *testing.T) string {
	r := h.router(t)
	fresh, err := NewRouter(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range r.Stats().Workers {
		if _, err := fresh.Register(WorkerSpec{ID: ws.ID, BlockSize: h.cfg.BlockSize, TotalBlocks: ws.TotalBlocks,
			Ready: ws.Ready, Epoch: ws.Epoch, LastSeq: ws.LastSeq}); err != nil {
			return "error: " + err.Error()
		}
		epoch, last, evs, err := r.DumpWorker(ws.ID)
		if err != nil {
			return "error: " + err.Error()
		}
		if nd, err := fresh.ApplyDump(ws.ID, epoch, last, evs, 0, true); nd || err != nil {
			return result(nd, err)
		}
	}
	a, b := r.Stats(), fresh.Stats()
	var diffs []string
	if a.IndexNodes != b.IndexNodes {
		diffs = append(diffs, fmt.Sprintf("nodes %d vs %d", a.IndexNodes, b.IndexNodes))
	}
	for i := range a.Workers {
		x, y := a.Workers[i], b.Workers[i]
		if x.IndexedBlocks != y.IndexedBlocks || x.LastSeq != y.LastSeq || x.Epoch != y.Epoch {
			diffs = append(diffs, fmt.Sprintf("%s: %+v vs %+v", x.ID, x, y))
		}
		ea := r.Index().Dump(x.Worker)
		eb := fresh.Index().Dump(y.Worker)
		if !eventsEqual(ea, eb) {
			diffs = append(diffs, x.ID+": dumps differ")
		}
	}
	if len(diffs) > 0 {
		return "replay differs: " + strings.Join(diffs, "; ")
	}
	return fmt.Sprintf("replayed %d workers, %d nodes", len(b.Workers), b.IndexNodes)
}

// tierChange reads one inventory line: (host|disk|remote|none) blocks=a,b [skip=N] [removed].
func (h *harness) tierChange(t *testing.T, line string) TierChange {
	f := strings.Fields(line)
	a := parseArgs(f[1:])
	tiers := map[string]Tier{"host": TierHost, "disk": TierDisk, "remote": TierRemote, "none": TierNone}
	tier, ok := tiers[f[0]]
	if !ok {
		t.Fatalf("unknown tier %q", line)
	}
	hs := SequenceHashes(h.tokens(t, a), h.cfg.BlockSize, a.str("lora", ""))
	return TierChange{Tier: tier, Removed: a.str("removed", "false") == "true", SeqHashes: hs[min(a.int(t, "skip", 0), len(hs)):]}
}

func formatTiers(s Stats) string {
	var sb strings.Builder
	for _, n := range s.Tiers {
		fmt.Fprintf(&sb, "%s: workers=%d known=%v synced=%v epoch=%d seq=%d serves-remote=%v host=%d disk=%d remote=%d\n",
			n.Node, n.Workers, n.Known, n.Synced, n.Epoch, n.LastSeq, n.ServesRemote,
			n.Blocks[TierHost], n.Blocks[TierDisk], n.Blocks[TierRemote])
	}
	fmt.Fprintf(&sb, "tier-hits host=%d disk=%d remote=%d skipped=%d unknown-removals=%d",
		s.TierHitBlocks[TierHost], s.TierHitBlocks[TierDisk], s.TierHitBlocks[TierRemote], s.SkippedTierChanges, s.UnknownTierRemovals)
	return sb.String()
}
