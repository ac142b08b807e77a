package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Record is what the client saw of one streamed completion. Times are offsets from the
// start of the load.
type Record struct {
	ID         int           `json:"id"`
	Frontend   string        `json:"frontend"` // the host the request was sent to
	Model      string        `json:"model"`
	Start      time.Duration `json:"start"`
	End        time.Duration `json:"end"`
	MaxTokens  int           `json:"max_tokens"`
	Status     int           `json:"status"`              // HTTP status; 0 when no answer came
	Tokens     []uint32      `json:"tokens,omitempty"`    // output token ids, in the order received
	Finish     string        `json:"finish,omitempty"`    // the last finish_reason seen
	ErrCode    string        `json:"err_code,omitempty"`  // error.code of the body or of a stream error frame
	Done       bool          `json:"done,omitempty"`      // data: [DONE] was read
	Transport  string        `json:"transport,omitempty"` // connect, reset, timeout: the transport's failure
	Disconnect bool          `json:"disconnect,omitempty"`
	Detail     string        `json:"detail,omitempty"` // what the client could not read, clipped
	// Migrations is how many times the frontends logged moving it to another worker
	// (Migrations, filled in after the run).
	Migrations int `json:"migrations,omitempty"`
}

// Outcome is the checker's class of a request.
type Outcome int

// Outcomes. OK, Failed and Disconnected are allowed; the others are violations.
const (
	OK           Outcome = iota // complete, with exactly the reference tokens
	Failed                      // a documented failure with a clean end, or one a nemesis event explains
	Disconnected                // the client cut it on purpose; what came before is a prefix of the reference
	Lost                        // ended as complete but with tokens missing
	Duplicated                  // ended as complete with more tokens than the reference (a repeat)
	Corrupted                   // a token that differs from the reference
	Unexplained                 // a failure of no documented kind, or cut with no nemesis event to explain it
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "failed", "disconnected", "lost", "duplicated", "corrupted", "unexplained"}

func (o Outcome) String() string {
	if o < 0 || o >= numOutcomes {
		return fmt.Sprintf("outcome(%d)", int(o))
	}
	return outcomeNames[o]
}

// DocumentedCodes are the error codes a frontend may answer a valid request with while
// the cluster is broken (docs/chaos.md, "What counts as a failure"): the 503s of no or
// busy workers, overload and draining, an engine's failure, a transport failure inside
// the cluster, a timeout, and a model whose every worker is gone.
var DocumentedCodes = []string{
	"no_live_workers", "all_workers_busy", "server_overloaded", "service_draining",
	"engine_error", "backend_unavailable", "request_timeout", "model_not_found",
}

// Windows bound how far an event explains a failure.
type Windows struct {
	// Cut: a kill of a request's frontend explains its cut (a reset, a refused
	// connection, a stream ended without [DONE]) from Cut before the kill to Cut after the
	// frontend was started again (it takes a moment to listen again).
	Cut time.Duration
	// Recovery: a documented error code is a failure, not a violation, while any event is
	// in force and for Recovery after it ends (a restarted node registers its workers
	// again, a restarted Consul takes its members back); at any other time the cluster
	// is whole, and such an answer is unexplained.
	Recovery time.Duration
}

// DefaultWindows are the checker's windows (docs/chaos.md). Recovery covers the slowest
// documented way back: a member a partition dropped (its Consul check lapsed) finds out
// at the latest when a live peer has left it out of its topology, or every live peer has
// stayed silent, for 10 s, then starts a new member and, on a node, its engines again
// (within about 11 s of the partition's end by the quicker signs, measured).
var DefaultWindows = Windows{Cut: 10 * time.Second, Recovery: 20 * time.Second}

// Classify is the outcome of r against its reference tokens ref (what an undisturbed
// engine produces for its prompt and max_tokens), with events the nemesis's timeline
// (as carried out) and w the windows within which they explain a failure. The string
// says why, for a violation.
func Classify(r Record, ref []uint32, events []Event, w Windows) (Outcome, string) {
	if n := commonPrefix(r.Tokens, ref); n < min(len(r.Tokens), len(ref)) {
		return Corrupted, fmt.Sprintf("token %d is %d, the reference's is %d", n, r.Tokens[n], ref[n])
	}
	if r.Disconnect {
		if len(r.Tokens) > len(ref) {
			return Duplicated, fmt.Sprintf("%d tokens before the client left, the reference has %d", len(r.Tokens), len(ref))
		}
		return Disconnected, ""
	}
	complete := r.Status == 200 && r.Done && r.ErrCode == "" && r.Transport == "" && r.Finish != ""
	switch {
	case complete && len(r.Tokens) == len(ref):
		return OK, ""
	case complete && len(r.Tokens) < len(ref):
		return Lost, fmt.Sprintf("ended %q after %d of %d tokens", r.Finish, len(r.Tokens), len(ref))
	case complete || len(r.Tokens) > len(ref):
		return Duplicated, fmt.Sprintf("%d tokens, the reference has %d", len(r.Tokens), len(ref))
	}
	where := fmt.Sprintf("(sent to %s, %.3f–%.3f s)", r.Frontend, r.Start.Seconds(), r.End.Seconds())
	switch {
	case r.ErrCode != "" && !slices.Contains(DocumentedCodes, r.ErrCode):
		return Unexplained, fmt.Sprintf("undocumented error code %q (HTTP %d) %s%s", r.ErrCode, r.Status, where, detail(r))
	case r.Status != 0 && r.Status != 200 && r.ErrCode == "":
		return Unexplained, fmt.Sprintf("HTTP %d without an error code %s", r.Status, where)
	case r.Status == 200 && r.Done && r.ErrCode == "" && r.Transport == "":
		return Unexplained, "data: [DONE] without a finish_reason " + where
	case r.ErrCode != "" && (r.Status != 200 || r.Done):
		// A documented failure, cleanly ended: it needs a broken cluster around it.
		if inForce(r, events, w.Recovery) {
			return Failed, ""
		}
		return Unexplained, fmt.Sprintf("%q while the cluster was whole (no nemesis event in force or ended within %v) %s", r.ErrCode, w.Recovery, where)
	}
	// A cut: a stream ended without [DONE] (after an error frame or not), or a
	// transport failure.
	if cutBy(r, events, w.Cut) {
		return Failed, ""
	}
	what := "stream cut without data: [DONE]"
	switch {
	case r.ErrCode != "":
		what = fmt.Sprintf("error frame %q without data: [DONE]", r.ErrCode)
	case r.Transport != "":
		what = r.Transport
	}
	return Unexplained, fmt.Sprintf("%s %s with no kill of that frontend around its end", what, where)
}

func detail(r Record) string {
	if r.Detail == "" {
		return ""
	}
	return ": " + r.Detail
}

// inForce reports whether any event that breaks the cluster was in force during r, or
// ended within recovery before it began. A full block-manager disk breaks nothing: the
// block manager skips the offloads it cannot write and every request is still owed its
// answer (docs/chaos.md), so DiskFull explains no failure.
func inForce(r Record, events []Event, recovery time.Duration) bool {
	for _, e := range events {
		if e.Kind == DiskFull {
			continue
		}
		if e.At <= r.End && e.End()+recovery >= r.Start {
			return true
		}
	}
	return false
}

// cutBy reports whether a kill of r's frontend could have cut it: r ended from grace
// before the kill to grace after the frontend's restart.
func cutBy(r Record, events []Event, grace time.Duration) bool {
	for _, e := range events {
		if e.Kind == KillFrontend && e.Target == r.Frontend && e.At-grace <= r.End && r.End <= e.End()+grace {
			return true
		}
	}
	return false
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// After is what the cluster reports once the load and the nemesis have stopped and it
// has settled.
type After struct {
	// Held is, per place ("engine n-1/w-0 running", "router m/w-0 active requests", …),
	// a count of requests or blocks still held; each is a leak when above 0.
	Held map[string]float64
	// Growth is, per process and resource ("fe-1 goroutines"), the value before the load
	// and after it; growth past Bound is a leak.
	Growth map[string][2]float64
	// Members is the membership each frontend sees against the live set, as a mismatch
	// description; empty when they converged.
	Members []string
	// Crashes are the members' exits the rig did not cause; Rig what the rig failed to do
	// (a rule not applied, a process not started again). Either fails the run.
	Crashes, Rig []string
	// Index lists the workers whose blocks in the router's index differ from the blocks
	// their engine holds, one description each; empty when they agree.
	Index []string
	// Kvbm lists what is wrong with the nodes' block managers afterwards (a tier over its
	// cap, a disk directory that disagrees with the store, a disk tier that did not
	// accept writes again after it was filled), one description each.
	Kvbm []string
}

// Bound of resource growth: a process may end the run with at most Slack more of a
// resource than it began with, or Factor times as many, whichever is larger.
type Bound struct {
	Slack  float64
	Factor float64
}

// Verdict is the checker's summary.
type Verdict struct {
	Requests int
	Count    [numOutcomes]int
	ByKind   map[string]int // failures by kind (error code, or transport failure)
	Leaked   int            // requests held after the run, plus one per resource past its bound
	Problems []string       // every violation, one line each (the first MaxProblems)

	// Migrations is the requests' migrations together, MostMigrations one request's
	// highest, Retried the requests that went past the migration limit.
	Migrations, MostMigrations, Retried int
}

// MaxProblems bounds Verdict.Problems.
const MaxProblems = 200

// Pass reports whether nothing was lost, duplicated, corrupted, unexplained or leaked,
// no request migrated past the limit, no member crashed, the rig carried out its schedule, membership converged, the
// router's index agrees with the engines and the block managers are within their caps and work.
func (v Verdict) Pass() bool {
	return v.Count[Lost]+v.Count[Duplicated]+v.Count[Corrupted]+v.Count[Unexplained]+v.Leaked+v.Retried == 0 &&
		!slices.ContainsFunc(v.Problems, func(p string) bool {
			for _, kind := range []string{"membership: ", "index: ", "kvbm: ", "crash: ", "rig: "} {
				if strings.HasPrefix(p, kind) {
					return true
				}
			}
			return false
		})
}

// Line is the summary line: "requests N, ok N, failed N, lost N, duplicated N, leaked N".
// Corrupted and unexplained requests count as lost (their answer is not the one owed).
func (v Verdict) Line() string {
	return fmt.Sprintf("requests %d, ok %d, failed %d, lost %d, duplicated %d, leaked %d",
		v.Requests, v.Count[OK], v.Count[Failed], v.Count[Lost]+v.Count[Corrupted]+v.Count[Unexplained], v.Count[Duplicated], v.Leaked)
}

// Detail is a second line: disconnects, corrupted and unexplained apart, migrations, and
// failures by kind.
func (v Verdict) Detail() string {
	kinds := make([]string, 0, len(v.ByKind))
	for k, n := range v.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("disconnected by the client %d, corrupted %d, unexplained %d; migrations %d (at most %d for one request, %d past the limit); failures by kind: %s",
		v.Count[Disconnected], v.Count[Corrupted], v.Count[Unexplained], v.Migrations, v.MostMigrations, v.Retried, strings.Join(kinds, ", "))
}

// Check classifies every record against its reference (refs by Record.ID; a record with
// none is a problem), checks that none migrated more than migrationLimit times (the
// frontends' --migration-limit), and checks the cluster's state afterwards.
func Check(recs []Record, refs map[int][]uint32, events []Event, w Windows, migrationLimit int, after After, bound Bound) Verdict {
	v := Verdict{Requests: len(recs), ByKind: map[string]int{}}
	problem := func(format string, args ...any) {
		if len(v.Problems) < MaxProblems {
			v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range recs {
		v.Migrations += r.Migrations
		v.MostMigrations = max(v.MostMigrations, r.Migrations)
		if r.Migrations > migrationLimit {
			v.Retried++
			problem("migration: request %d migrated %d times, past the limit of %d", r.ID, r.Migrations, migrationLimit)
		}
		ref, ok := refs[r.ID]
		if !ok {
			v.Count[Unexplained]++
			problem("request %d: no reference tokens", r.ID)
			continue
		}
		o, why := Classify(r, ref, events, w)
		v.Count[o]++
		switch o {
		case Failed:
			v.ByKind[FailureKind(r)]++
		case OK, Disconnected:
		default:
			problem("request %d: %s: %s", r.ID, o, why)
		}
	}
	for _, place := range sortedKeys(after.Held) {
		if n := after.Held[place]; n != 0 {
			v.Leaked += int(math.Ceil(math.Abs(n)))
		}
	}
	for _, what := range sortedKeys(after.Growth) {
		g := after.Growth[what]
		if limit := max(g[0]+bound.Slack, g[0]*bound.Factor); g[1] > limit {
			v.Leaked++
		}
	}
	v.Problems = append(afterProblems(after, bound), v.Problems...)
	if len(v.Problems) > MaxProblems {
		v.Problems = v.Problems[:MaxProblems]
	}
	return v
}

// afterProblems are the violations found in the cluster's state afterwards, listed before
// the requests' (they are few, and Problems is bounded).
func afterProblems(after After, bound Bound) []string {
	var out []string
	for _, place := range sortedKeys(after.Held) {
		if n := after.Held[place]; n != 0 {
			out = append(out, fmt.Sprintf("leak: %s %g after the run", place, n))
		}
	}
	for _, what := range sortedKeys(after.Growth) {
		g := after.Growth[what]
		if limit := max(g[0]+bound.Slack, g[0]*bound.Factor); g[1] > limit {
			out = append(out, fmt.Sprintf("leak: %s grew from %g to %g (bound %g)", what, g[0], g[1], limit))
		}
	}
	for _, c := range after.Crashes {
		out = append(out, "crash: "+c)
	}
	for _, r := range after.Rig {
		out = append(out, "rig: "+r)
	}
	for _, m := range after.Members {
		out = append(out, "membership: "+m)
	}
	for _, m := range after.Index {
		out = append(out, "index: "+m)
	}
	for _, m := range after.Kvbm {
		out = append(out, "kvbm: "+m)
	}
	return out
}

// FailureKind names a failure for the verdict's counts: its error code, else the
// transport's failure ("cut" for a stream that ended without [DONE]).
func FailureKind(r Record) string {
	switch {
	case r.ErrCode != "":
		return r.ErrCode
	case r.Transport != "":
		return r.Transport
	}
	return "cut"
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
