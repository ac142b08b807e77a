package worker

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/lora/*.txt")

// Scripted tests of the adapter slot table (loraTable): the test plays the actor, and
// the expected outcome of each command is written beside it. Each file under
// testdata/lora is a sequence of cases:
//
//	command args
//	----
//	expected output: the command's result, then the table
//	(blank line)
//
// Commands (NAME's path is /adapters/NAME unless given):
//
//	max N                        a new table of N slots
//	begin NAME [PATH] [pinned]   a load asked: check, held, join, or the refusal
//	reserve NAME [rank=R]        NAME's folder check passed: its slot, and the victim,
//	                             or wait (for a slot)
//	wake                         the waiting loads settled (a slot freed, a wait ended):
//	                             NAME: load[, evicting V] or NAME: error, oldest first
//	cancel-wait NAME             an unload of waiting NAME
//	drop NAME                    NAME's folder check failed
//	loaded NAME ok|fail          the engine's load of NAME ended
//	evicted NAME ok|fail         the engine's unload of an evicted NAME ended ("loaded
//	                             again": requests came meanwhile)
//	use NAME | release NAME      a request of NAME starts (or waits for its load), ends
//	unload NAME                  an unload asked
//	unloaded NAME ok|fail        the engine's unload of NAME ended
//	lost                         the engine exited
//	pin NAME                     a pinned adapter of the worker's configuration (--lora)
//	restored NAME ok|fail        a pinned adapter's load into a started engine ended
//	known N                      the table keeps at most N known adapters; from now on
//	                             the known adapters are printed too (known: by name)
//	reject NAME                  NAME is bad (its folder, or the engine refused it)
//	forget NAME                  an unload of a known NAME
//
// The table is printed as name:state, '*' for pinned, rN for N requests using it; run
// with -rewrite to regenerate the expected output.
func TestLoraScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "lora", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata/lora (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runLoraScript(t, f) })
	}
}

type loraScriptCase struct {
	lead     []string // comment and blank lines before the command
	cmd      string
	expected string
}

func parseLoraScript(t *testing.T, path string) (cases []loraScriptCase, tail []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var lead []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			lead = append(lead, l)
			continue
		}
		c := loraScriptCase{lead: lead, cmd: strings.TrimSpace(l)}
		lead = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, i+1)
		}
		i += 2
		var out []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
		i-- // the blank line ends the case; the loop reads it as a lead line
	}
	return cases, lead
}

func runLoraScript(t *testing.T, path string) {
	cases, tail := parseLoraScript(t, path)
	var tab *loraTable
	gens := map[string]uint64{} // each name's latest generation, as the actor keeps it
	showKnown := false
	var out strings.Builder
	for _, c := range cases {
		got := runLoraCommand(t, &tab, gens, &showKnown, c.cmd)
		if !*rewrite && got != c.expected {
			t.Errorf("%s: %s\n got:\n%s\nwant:\n%s", path, c.cmd, got, c.expected)
		}
		for _, l := range c.lead {
			out.WriteString(l + "\n")
		}
		out.WriteString(c.cmd + "\n----\n" + got + "\n")
	}
	for _, l := range tail {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runLoraCommand(t *testing.T, tab **loraTable, gens map[string]uint64, showKnown *bool, cmd string) string {
	t.Helper()
	f := strings.Fields(cmd)
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		t.Fatalf("%q: argument %d missing", cmd, i)
		return ""
	}
	okArg := func() bool { return arg(2) == "ok" }
	var res string
	errText := func(err *loraError) string {
		return "error " + err.failure.String() + ": " + err.msg
	}
	switch f[0] {
	case "max":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			t.Fatal(err)
		}
		*tab = newLoraTable(n)
		res = "ok"
	case "begin":
		name, path, pinned := arg(1), "/adapters/"+arg(1), false
		for _, a := range f[2:] {
			if a == "pinned" {
				pinned = true
			} else {
				path = a
			}
		}
		next, gen, err := (*tab).begin(&messages.LoraAdapter{Name: name, Path: path, Pinned: pinned})
		switch {
		case err != nil:
			res = errText(err)
		case next == loraBeginCheck:
			gens[name] = gen
			res = "check"
		case next == loraBeginHeld:
			res = "held"
		default:
			res = "join"
		}
	case "reserve":
		rank := 8
		if len(f) > 2 {
			r, err := strconv.Atoi(strings.TrimPrefix(f[2], "rank="))
			if err != nil {
				t.Fatal(err)
			}
			rank = r
		}
		victim, wait, err := (*tab).reserve(arg(1), gens[arg(1)], model.Adapter{BaseModel: "base", Rank: rank})
		switch {
		case err != nil:
			res = errText(err)
		case wait:
			res = "wait"
		case victim != "":
			res = "load, evicting " + victim
		default:
			res = "load"
		}
	case "drop":
		(*tab).drop(arg(1), gens[arg(1)])
		res = "ok"
	case "wake":
		var lines []string
		for _, o := range (*tab).wake() {
			if o.gen != gens[o.name] || o.path != "/adapters/"+o.name {
				t.Errorf("%q: %s of generation %d from %s, want %d from /adapters/%s", cmd, o.name, o.gen, o.path, gens[o.name], o.name)
			}
			switch {
			case o.err != nil:
				lines = append(lines, o.name+": "+errText(o.err))
			case o.victim != "":
				lines = append(lines, o.name+": load, evicting "+o.victim)
			default:
				lines = append(lines, o.name+": load")
			}
		}
		res = "-"
		if len(lines) > 0 {
			res = strings.Join(lines, "\n")
		}
	case "cancel-wait":
		res = "not waiting"
		if gen, ok := (*tab).cancelWaiting(arg(1)); ok {
			if gen != gens[arg(1)] {
				t.Errorf("%q: generation %d, want %d", cmd, gen, gens[arg(1)])
			}
			res = "cancelled"
		}
	case "loaded":
		(*tab).loaded(arg(1), gens[arg(1)], okArg())
		res = "ok"
	case "evicted":
		res = "ok"
		if _, back := (*tab).evicted(arg(1), okArg()); back {
			res = "ok, loaded again for its requests"
		}
	case "use":
		gen, state, ok := (*tab).use(arg(1))
		if !ok {
			res = "refused"
		} else {
			gens[arg(1)] = gen
			res = "uses it (" + state.String() + ")"
		}
	case "release":
		if (*tab).release(arg(1), gens[arg(1)]) {
			res = "unload now"
		} else {
			res = "ok"
		}
	case "unload":
		gen, running, err := (*tab).beginUnload(arg(1))
		if err != nil {
			res = errText(err)
		} else {
			gens[arg(1)] = gen
			res = fmt.Sprintf("unloading, %d running", running)
		}
	case "unloaded":
		(*tab).unloaded(arg(1), gens[arg(1)], okArg())
		res = "ok"
	case "lost":
		(*tab).engineLost()
		res = "ok"
	case "pin":
		(*tab).pin(&messages.LoraAdapter{Name: arg(1), Path: "/adapters/" + arg(1)})
		gens[arg(1)] = (*tab).entries[arg(1)].gen
		res = "ok"
	case "restored":
		(*tab).restored(arg(1), okArg())
		res = "ok"
	case "known":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			t.Fatal(err)
		}
		(*tab).maxKnown, *showKnown = n, true
		res = "ok"
	case "reject":
		(*tab).reject(arg(1), gens[arg(1)])
		res = "ok"
	case "forget":
		res = "not known"
		if (*tab).forget(arg(1)) {
			res = "forgotten"
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	out := res + "\n" + showLoraTable(*tab)
	if *showKnown {
		known := []string{}
		for _, a := range (*tab).knownList() {
			if a.Pinned {
				t.Errorf("%q: known adapter %s pinned", cmd, a.Name)
			}
			if (*tab).entries[a.Name] != nil {
				t.Errorf("%q: adapter %s both known and in the table", cmd, a.Name)
			}
			known = append(known, a.Name)
		}
		if len(known) == 0 {
			known = []string{"-"}
		}
		out += "\nknown: " + strings.Join(known, ",")
	}
	return out
}

// showLoraTable prints the table: name:state by name, '*' pinned, rN requests using it;
// then what the worker registers (held).
func showLoraTable(tab *loraTable) string {
	names := make([]string, 0, len(tab.entries))
	for n := range tab.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := []string{}
	for _, n := range names {
		e := tab.entries[n]
		s := n + ":" + e.state.String()
		if e.adapter.Pinned {
			s += "*"
		}
		if e.running > 0 {
			s += fmt.Sprintf(" r%d", e.running)
		}
		parts = append(parts, s)
	}
	held := []string{}
	for _, a := range tab.held() {
		held = append(held, a.Name)
	}
	if len(parts) == 0 {
		parts = []string{"-"}
	}
	if len(held) == 0 {
		held = []string{"-"}
	}
	return "table: " + strings.Join(parts, ", ") + "\nregistered: " + strings.Join(held, ",")
}
