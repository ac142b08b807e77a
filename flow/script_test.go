package flow

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/turbine-llm/turbine/messages"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

// Scripted tests of the flow: each file under testdata is a story of requests, a
// sequence of cases
//
//	command key=value ...
//	----
//	expected output: the effects the event produced, one a line ("(nothing)" for none)
//	(blank line)
//
// with comment lines (#) kept by -rewrite. Commands:
//
//	config [credits=4] [limit=3] [stall=2m] [accept=0s] [release-wait=2s] [grace=100ms] [queue=0s]   (for the
//	       next new; the scripts' defaults are flow.DefaultConfig's but for 4 credits and no
//	       accept timer: testdata/accept.txt sets one)
//	new [id=req] [prompt=1,2,3,4,5] [max=8] [min=6] [structured] [prompt-logprobs=N] [weight=W] [temp=T]
//	    [queued=D]   (queued: the request joined its shell's queue D before the flow's start)
//	start [behind]
//	routed worker=w0 [prefill=p0] [prefill-id=ID] [bootstrap=host:port] [decision=D] [no-address] [no-prefill-address] [room=N]
//	       [no-ack] [no-prefill-ack]   (the workers, or the prefill worker, do not acknowledge legs)
//	routed outcome=all_busy [error="why"] | routed call-failed [error="why"]
//	chunk leg=1 [tokens=5,6] [finish=stop] [fault=engine_error] [error="why"] [cached=N] [kv=P] [index=N]
//	terminated leg=1 | accepted leg=1
//	fire stall | fire grace leg=1 | fire release leg=2 | fire accept leg=1 | fire queue [stale]   (the timer last set
//	      of that kind and leg, armed or not, or with stale the one it replaced: a stale timer
//	      is ignored)
//	unparked | queue-full [message="why"] | drain | deadline
//	client-gone | advance 30s | state | timers
//
// routed answers the last Route (the decision is "remote" when a prefill worker is
// named); a chunk's index is, unless given, the next its leg expects. The clock starts
// at a fixed instant and moves only with advance. Run with -rewrite to regenerate.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

type scriptCase struct {
	line     int
	comments []string // comment lines just before the command ("" a blank line), kept by -rewrite
	cmd      string
	expected string
}

func parseScript(t *testing.T, path string) (header string, cases []scriptCase) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var comments []string
	inHeader := true // the file's leading comment block, up to its first blank line
	var hdr []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			switch {
			case inHeader:
				hdr, comments = comments, nil
			case len(comments) > 0 && comments[len(comments)-1] != "":
				comments = append(comments, "") // a comment block of its own: kept apart
			}
			inHeader = false
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		inHeader = false
		c := scriptCase{line: i + 1, cmd: l, comments: comments}
		comments = nil
		if i++; i >= len(lines) || strings.TrimSpace(lines[i]) != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", path, c.line, c.cmd)
		}
		var out []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	if len(hdr) > 0 {
		header = strings.Join(hdr, "\n") + "\n\n"
	}
	return header, cases
}

func runScript(t *testing.T, path string) {
	header, cases := parseScript(t, path)
	h := newScriptHarness()
	var sb strings.Builder
	sb.WriteString(header)
	for _, c := range cases {
		got, err := h.run(c.cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, c.line, c.cmd, err)
		}
		if *rewrite {
			for _, cm := range c.comments {
				sb.WriteString(cm + "\n")
			}
			sb.WriteString(c.cmd + "\n----\n" + got + "\n\n")
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\n want:\n%s", path, c.line, c.cmd, got, c.expected)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(sb.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// t0 is the scripts' starting instant.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// scriptHarness drives one flow at a time, as a shell would: it remembers what the
// effects said (the last route's id, each leg's next chunk index, the timers set) so
// that the scripts need not.
type scriptHarness struct {
	cfg    Config
	f      *Flow
	now    time.Time
	lastID string             // of the last Route
	next   map[LegID]uint32   // each leg's next chunk index
	timers map[timerKey]Timer // the last set of each kind and leg
	prev   map[timerKey]Timer // the one it replaced
	armed  map[timerKey]bool  // set, and not stopped, fired or forgotten since
	after  map[timerKey]time.Duration
}

type timerKey struct {
	kind TimerKind
	leg  LegID
}

func newScriptHarness() *scriptHarness {
	cfg := DefaultConfig()
	cfg.Credits, cfg.AcceptTimeout = 4, 0
	return &scriptHarness{cfg: cfg, now: t0}
}

// scriptArgs are a command's key=value arguments (a bare key is "true"); a value may be
// a Go-quoted string.
type scriptArgs map[string]string

// splitFields splits a command line at spaces outside double quotes.
func splitFields(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && quoted && i+1 < len(s):
			cur.WriteByte(c)
			i++
			cur.WriteByte(s[i])
		case c == '"':
			quoted = !quoted
			cur.WriteByte(c)
		case unicode.IsSpace(rune(c)) && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}

func parseScriptArgs(fields []string) (scriptArgs, error) {
	a := scriptArgs{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", f, err)
			}
			v = u
		}
		a[k] = v
	}
	return a, nil
}

func (a scriptArgs) has(k string) bool { _, ok := a[k]; return ok }

func (a scriptArgs) int(k string, def int) (int, error) {
	v, ok := a[k]
	if !ok {
		return def, nil
	}
	return strconv.Atoi(v)
}

func (a scriptArgs) dur(k string, def time.Duration) (time.Duration, error) {
	v, ok := a[k]
	if !ok {
		return def, nil
	}
	return time.ParseDuration(v)
}

func (a scriptArgs) tokens(k string) ([]uint32, error) {
	v := a[k]
	if v == "" {
		return nil, nil
	}
	var out []uint32
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %v", k, v, err)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

// run carries out one command and returns its output.
func (h *scriptHarness) run(line string) (string, error) {
	fields, err := splitFields(line)
	if err != nil {
		return "", err
	}
	a, err := parseScriptArgs(fields[1:])
	if err != nil {
		return "", err
	}
	cmd := fields[0]
	if h.f == nil && cmd != "config" && cmd != "new" {
		return "", errors.New("no flow: start with new")
	}
	var ev Event
	switch cmd {
	case "config":
		return "ok", h.config(a)
	case "new":
		return "ok", h.newFlow(a)
	case "start":
		ev = Start{Behind: a.has("behind")}
	case "routed":
		ev, err = h.routed(a)
	case "chunk":
		ev, err = h.chunk(a)
	case "terminated":
		var n int
		n, err = a.int("leg", 0)
		ev = WorkerTerminated{Leg: LegID(n), ReceiverLost: a.has("receiver-lost")}
	case "accepted":
		var n int
		n, err = a.int("leg", 0)
		ev = Accepted{Leg: LegID(n)}
	case "fire":
		ev, err = h.fire(fields, a)
	case "client-gone":
		ev = ClientGone{}
	case "deadline":
		ev = Deadline{}
	case "unparked":
		ev = Unparked{}
	case "queue-full":
		ev = QueueFull{Message: a["message"]}
	case "drain":
		ev = Drain{}
	case "advance":
		if len(fields) != 2 {
			return "", errors.New("advance takes a duration")
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return "", err
		}
		h.now = h.now.Add(d)
		return "now=+" + h.now.Sub(t0).String(), nil
	case "state":
		in := h.f.Info()
		st := fmt.Sprintf("worker=%s decision=%s prefill=%s decode=%s migrations=%d done=%v",
			orNone(in.Worker), in.Decision.Label(), orNone(in.PrefillWorker), orNone(in.DecodeWorker), in.Migrations, h.f.Done())
		if in.Parked {
			st += " parked"
		}
		return st, nil
	case "timers":
		return h.armedTimers(), nil
	default:
		return "", fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		return "", err
	}
	effects := h.f.Step(ev, h.now)
	h.observe(effects)
	if len(effects) == 0 {
		return "(nothing)", nil
	}
	lines := make([]string, len(effects))
	for i, e := range effects {
		lines[i] = formatEffect(e)
	}
	return strings.Join(lines, "\n"), nil
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (h *scriptHarness) config(a scriptArgs) error {
	var err error
	c := h.cfg
	n, err1 := a.int("credits", int(c.Credits))
	c.Credits = int32(n)
	c.MigrationLimit, err = a.int("limit", c.MigrationLimit)
	err = errors.Join(err1, err)
	var e2, e3, e4, e5, e6 error
	c.StallTimeout, e2 = a.dur("stall", c.StallTimeout)
	c.AcceptTimeout, e6 = a.dur("accept", c.AcceptTimeout)
	c.PrefillReleaseWait, e3 = a.dur("release-wait", c.PrefillReleaseWait)
	c.TerminatedGrace, e4 = a.dur("grace", c.TerminatedGrace)
	c.QueueTimeout, e5 = a.dur("queue", c.QueueTimeout)
	if err = errors.Join(err, e2, e3, e4, e5, e6); err != nil {
		return err
	}
	h.cfg = c
	return nil
}

func (h *scriptHarness) newFlow(a scriptArgs) error {
	prompt := []uint32{1, 2, 3, 4, 5}
	if a.has("prompt") {
		p, err := a.tokens("prompt")
		if err != nil {
			return err
		}
		prompt = p
	}
	maxT, err1 := a.int("max", 8)
	minT, err2 := a.int("min", 6)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	sp := &messages.SamplingParams{MaxTokens: int32(maxT), MinTokens: int32(minT)}
	if a.has("structured") {
		sp.Structured = &messages.StructuredOutput{JsonObject: true}
	}
	if a.has("prompt-logprobs") {
		n, err := a.int("prompt-logprobs", 0)
		if err != nil {
			return err
		}
		v := int32(n)
		sp.PromptLogprobs = &v
	}
	req := Request{ID: "req", Model: "m", Tokens: prompt, Sampling: sp}
	if v, ok := a["id"]; ok {
		req.ID = v
	}
	if a.has("queued") {
		d, err := a.dur("queued", 0)
		if err != nil {
			return err
		}
		req.QueuedAt = t0.Add(-d)
	}
	for k, p := range map[string]**float64{"weight": &req.OverlapWeight, "temp": &req.Temperature} {
		if v, ok := a[k]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			*p = &x
		}
	}
	h.f = New(req, h.cfg)
	h.now, h.lastID = t0, ""
	h.next, h.timers, h.prev = map[LegID]uint32{}, map[timerKey]Timer{}, map[timerKey]Timer{}
	h.armed, h.after = map[timerKey]bool{}, map[timerKey]time.Duration{}
	return nil
}

func ref(id string) *messages.ActorRef {
	return &messages.ActorRef{Address: "10.0.0.1:7000", Id: "worker/" + id}
}

func (h *scriptHarness) routed(a scriptArgs) (Event, error) {
	if a.has("call-failed") {
		msg := a["error"]
		if msg == "" {
			msg = "error request: request failed: context deadline exceeded"
		}
		return Routed{Err: errors.New(msg)}, nil
	}
	if o, ok := a["outcome"]; ok {
		v, ok := messages.RouteOutcome_value["ROUTE_"+strings.ToUpper(o)]
		if !ok {
			return nil, fmt.Errorf("unknown outcome %q", o)
		}
		return Routed{Response: &messages.RouteResponse{Outcome: messages.RouteOutcome(v), Error: a["error"]}}, nil
	}
	w := a["worker"]
	if w == "" {
		return nil, errors.New("routed needs worker=, outcome= or call-failed")
	}
	r := &messages.RouteResponse{WorkerId: w, Worker: ref(w), Router: &messages.ActorRef{Address: "10.0.0.9:7000", Id: "router/m"},
		WorkerAcknowledges: !a.has("no-ack"), PrefillWorkerAcknowledges: !a.has("no-ack") && !a.has("no-prefill-ack")}
	if a.has("no-address") {
		r.Worker = nil
	}
	if p := a["prefill"]; p != "" {
		r.DisaggDecision = messages.DisaggDecision_DISAGG_REMOTE
		r.PrefillWorkerId, r.PrefillWorker, r.PrefillRequestId = p, ref(p), h.lastID+"/p"
		if v, ok := a["prefill-id"]; ok {
			r.PrefillRequestId = v
		}
		if a.has("no-prefill-address") {
			r.PrefillWorker = nil
		}
		if b := a["bootstrap"]; b != "" {
			host, port, _ := strings.Cut(b, ":")
			n, err := strconv.Atoi(port)
			if err != nil {
				return nil, fmt.Errorf("bootstrap=%s: %v", b, err)
			}
			r.PrefillBootstrapHost, r.PrefillBootstrapPort = host, int32(n)
		}
	}
	if d := a["decision"]; d != "" {
		v, ok := messages.ParseDisaggDecision(d)
		if !ok {
			return nil, fmt.Errorf("unknown decision %q", d)
		}
		r.DisaggDecision = v
	}
	room := uint64(4242)
	if v, ok := a["room"]; ok {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return nil, err
		}
		room = n
	}
	return Routed{Response: r, Room: room}, nil
}

func (h *scriptHarness) chunk(a scriptArgs) (Event, error) {
	n, err := a.int("leg", 0)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("chunk needs leg=N (%v)", err)
	}
	leg := LegID(n)
	toks, err := a.tokens("tokens")
	if err != nil {
		return nil, err
	}
	idx, err := a.int("index", int(h.next[leg]))
	if err != nil {
		return nil, err
	}
	cached, err := a.int("cached", 0)
	if err != nil {
		return nil, err
	}
	ch := &messages.TokenChunk{RequestId: "?", Index: uint32(idx), TokenIds: toks, FinishReason: a["finish"],
		Error: a["error"], KvTransferParams: a["kv"], CachedTokens: int32(cached)}
	if f := a["fault"]; f != "" {
		v, ok := messages.Fault_value["FAULT_"+strings.ToUpper(f)]
		if !ok {
			return nil, fmt.Errorf("unknown fault %q", f)
		}
		ch.Fault = messages.Fault(v)
	}
	if ch.FinishReason != "" {
		ch.PromptTokens = int32(len(h.f.req.Tokens)) // the engine's count: the flow rewrites it
		ch.CompletionTokens = 1
	}
	h.next[leg] = uint32(idx) + 1
	return Chunk{Leg: leg, Chunk: ch}, nil
}

func (h *scriptHarness) fire(fields []string, a scriptArgs) (Event, error) {
	if len(fields) < 2 {
		return nil, errors.New("fire stall|grace|release|queue|accept")
	}
	kinds := map[string]TimerKind{}
	for _, k := range []TimerKind{TimerStall, TimerTerminatedGrace, TimerPrefillRelease, TimerQueue, TimerAccept} {
		kinds[k.String()] = k
	}
	k, ok := kinds[fields[1]]
	if !ok {
		return nil, fmt.Errorf("unknown timer %q", fields[1])
	}
	n, err := a.int("leg", 0)
	if err != nil {
		return nil, err
	}
	key := timerKey{k, LegID(n)}
	if k == TimerStall {
		key.leg = 0
	}
	tm, ok := h.timers[key]
	if a.has("stale") {
		tm, ok = h.prev[key]
	} else {
		delete(h.armed, key)
	}
	if !ok {
		return nil, fmt.Errorf("no such %s timer was set", fields[1])
	}
	return TimerFired{Timer: tm}, nil
}

// observe keeps what the effects tell the harness.
func (h *scriptHarness) observe(effects []Effect) {
	for _, e := range effects {
		switch e := e.(type) {
		case Route:
			h.lastID = e.Request.RequestId
		case Send:
			h.next[e.Leg] = 0
		case SetTimer:
			key := timerKey{e.Timer.Kind, e.Timer.Leg}
			if key.kind == TimerStall {
				key.leg = 0
			}
			if old, ok := h.timers[key]; ok {
				h.prev[key] = old
			}
			h.timers[key], h.armed[key], h.after[key] = e.Timer, true, e.After
		case StopTimer:
			key := timerKey{e.Timer.Kind, 0}
			if e.Timer.Kind != TimerStall {
				key.leg = e.Timer.Leg
			}
			delete(h.armed, key)
		case Forget:
			for key := range h.armed {
				if key.kind != TimerStall && key.leg == e.Leg {
					delete(h.armed, key)
				}
			}
		}
	}
}

func (h *scriptHarness) armedTimers() string {
	var out []string
	for key := range h.armed {
		tm := h.timers[key]
		out = append(out, fmt.Sprintf("%s leg=%d after=%v", tm.Kind, tm.Leg, h.after[key]))
	}
	if len(out) == 0 {
		return "(none)"
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func joinTokens(toks []uint32) string {
	s := make([]string, len(toks))
	for i, t := range toks {
		s[i] = strconv.FormatUint(uint64(t), 10)
	}
	return strings.Join(s, ",")
}

var noteNames = map[NoteKind]string{NoteDecided: "decided", NoteMigrated: "migrated", NoteNotMigrated: "not-migrated",
	NotePrefillRetried: "prefill-retried", NotePrefillLeg: "prefill-leg", NoteTransferWait: "transfer-wait",
	NoteReleased: "released", NoteWarning: "warning", NoteDeadline: "deadline", NoteNotMoved: "not-moved"}

// formatEffect writes e in the scripts' compact form.
func formatEffect(e Effect) string {
	var b strings.Builder
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	quoted := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
	}
	switch e := e.(type) {
	case Route:
		r := e.Request
		b.WriteString("route")
		kv("id", r.RequestId)
		kv("tokens", joinTokens(r.TokenIds))
		kv("exclude", strings.Join(r.ExcludeWorkers, ","))
		kv("exclude-prefill", strings.Join(r.ExcludePrefillWorkers, ","))
		if r.LocalPrefill {
			b.WriteString(" local-prefill")
		}
		if !r.WillAck {
			b.WriteString(" no-ack")
		}
		if r.Admitted {
			b.WriteString(" admitted")
		}
		if r.OverlapWeight != nil {
			kv("weight", strconv.FormatFloat(*r.OverlapWeight, 'g', -1, 64))
		}
		if r.Temperature != nil {
			kv("temp", strconv.FormatFloat(*r.Temperature, 'g', -1, 64))
		}
	case Send:
		g := e.Generate
		fmt.Fprintf(&b, "send leg=%d", e.Leg)
		kv("worker", e.Worker.ID)
		kv("id", g.RequestId)
		kv("tokens", joinTokens(g.TokenIds))
		sp := g.Sampling
		fmt.Fprintf(&b, " max=%d min=%d", sp.GetMaxTokens(), sp.GetMinTokens())
		if sp.GetStructured() != nil {
			b.WriteString(" structured")
		}
		if sp.PromptLogprobs != nil {
			fmt.Fprintf(&b, " prompt-logprobs=%d", sp.GetPromptLogprobs())
		}
		if d := sp.GetDisagg(); d != nil {
			kv("disagg", d.Leg.Label())
			kv("kv", d.KvTransferParams)
			if d.BootstrapHost != "" {
				fmt.Fprintf(&b, " bootstrap=%s:%d room=%d", d.BootstrapHost, d.BootstrapPort, d.BootstrapRoom)
			}
		}
		if g.InitialCredits != 4 {
			fmt.Fprintf(&b, " credits=%d", g.InitialCredits)
		}
		if e.Worker.Ref == nil {
			b.WriteString(" no-ref")
		}
	case Ack:
		b.WriteString("ack")
		kv("id", e.RequestID)
		if e.Router == nil {
			b.WriteString(" no-router")
		}
	case Credit:
		fmt.Fprintf(&b, "credit leg=%d worker=%s id=%s n=%d", e.Leg, e.Worker.ID, e.Credit.RequestId, e.Credit.Credits)
	case Cancel:
		fmt.Fprintf(&b, "cancel leg=%d worker=%s id=%s", e.Leg, e.Worker.ID, e.Cancel.RequestId)
		quoted("reason", e.Cancel.Reason)
	case Forget:
		fmt.Fprintf(&b, "forget leg=%d", e.Leg)
	case PrefillDone:
		fmt.Fprintf(&b, "prefill-done id=%s", e.RequestID)
	case Free:
		fmt.Fprintf(&b, "free id=%s", e.RequestID)
	case ReleaseKV:
		fmt.Fprintf(&b, "release-kv worker=%s id=%s", e.Worker.ID, e.Release.RequestId)
		kv("kv", e.Release.KvTransferParams)
	case Emit:
		ch := e.Chunk
		fmt.Fprintf(&b, "emit index=%d", ch.Index)
		kv("tokens", joinTokens(ch.TokenIds))
		kv("finish", ch.FinishReason)
		if ch.FinishReason != "" {
			fmt.Fprintf(&b, " usage=%d+%d cached=%d", ch.PromptTokens, ch.CompletionTokens, ch.CachedTokens)
		}
		if ch.Fault != messages.Fault_FAULT_NONE {
			kv("fault", ch.Fault.Label())
		}
		quoted("error", ch.Error)
	case Fail:
		fmt.Fprintf(&b, "fail outcome=%s", e.Outcome.Label())
		if e.Cause != FailRouted {
			kv("cause", e.Cause.String())
		}
		quoted("message", e.Message)
	case Park:
		b.WriteString("park")
	case Unpark:
		b.WriteString("unpark")
	case SetTimer:
		fmt.Fprintf(&b, "set-timer %s leg=%d after=%v", e.Timer.Kind, e.Timer.Leg, e.After)
	case StopTimer:
		fmt.Fprintf(&b, "stop-timer %s leg=%d", e.Timer.Kind, e.Timer.Leg)
	case Note:
		b.WriteString("note " + noteNames[e.Kind])
		if e.Kind == NoteDecided || e.Kind == NotePrefillRetried && e.Detail == "" {
			kv("decision", e.Decision.Label())
		}
		if e.Fault != messages.Fault_FAULT_NONE {
			kv("fault", e.Fault.Label())
		}
		kv("from", e.From)
		kv("to", e.To)
		if e.Duration != 0 {
			kv("took", e.Duration.String())
		}
		quoted("detail", e.Detail)
	default:
		fmt.Fprintf(&b, "%T", e)
	}
	return b.String()
}
