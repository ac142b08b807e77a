package chaos

import (
	"fmt"
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

// explainers are the kinds that can cut a client's connection to a frontend host.
var explainers = []Kind{KillFrontend, Pause, Lossy}

// Classify is the outcome of r against its reference tokens ref (what an undisturbed
// engine produces for its prompt and max_tokens), with events the nemesis's timeline
// and grace how far before and after a request an event still explains its cut. The
// string says why, for a violation.
func Classify(r Record, ref []uint32, events []Event, grace time.Duration) (Outcome, string) {
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
	if r.ErrCode != "" && slices.Contains(DocumentedCodes, r.ErrCode) {
		if r.Status != 200 || r.Done {
			return Failed, ""
		}
		if explained(r, events, grace) {
			return Failed, ""
		}
		return Unexplained, fmt.Sprintf("error frame %q without data: [DONE]", r.ErrCode)
	}
	if r.ErrCode != "" {
		return Unexplained, fmt.Sprintf("undocumented error code %q (HTTP %d)", r.ErrCode, r.Status)
	}
	if r.Status != 0 && r.Status != 200 {
		return Unexplained, fmt.Sprintf("HTTP %d without an error code", r.Status)
	}
	if explained(r, events, grace) {
		return Failed, ""
	}
	what := "stream cut without data: [DONE]"
	if r.Transport != "" {
		what = r.Transport
	}
	if r.Status == 200 && r.Done {
		what = "data: [DONE] without a finish_reason"
	}
	return Unexplained, fmt.Sprintf("%s (sent to %s, %.3f–%.3f s) with no nemesis event on that frontend", what, r.Frontend, r.Start.Seconds(), r.End.Seconds())
}

// explained reports whether an event that can cut the client's connection to r's
// frontend overlapped the request (widened by grace on both sides).
func explained(r Record, events []Event, grace time.Duration) bool {
	for _, e := range events {
		if e.Target == r.Frontend && slices.Contains(explainers, e.Kind) && e.At <= r.End+grace && e.End()+grace >= r.Start {
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
}

// MaxProblems bounds Verdict.Problems.
const MaxProblems = 200

// Pass reports whether nothing was lost, duplicated, corrupted, unexplained or leaked
// and membership converged.
func (v Verdict) Pass() bool {
	return v.Count[Lost]+v.Count[Duplicated]+v.Count[Corrupted]+v.Count[Unexplained]+v.Leaked == 0 &&
		!slices.ContainsFunc(v.Problems, func(p string) bool { return strings.HasPrefix(p, "membership: ") })
}

// Line is the summary line: "requests N, ok N, failed N, lost N, duplicated N, leaked N".
// Corrupted and unexplained requests count as lost (their answer is not the one owed).
func (v Verdict) Line() string {
	return fmt.Sprintf("requests %d, ok %d, failed %d, lost %d, duplicated %d, leaked %d",
		v.Requests, v.Count[OK], v.Count[Failed], v.Count[Lost]+v.Count[Corrupted]+v.Count[Unexplained], v.Count[Duplicated], v.Leaked)
}

// Detail is a second line: disconnects, corrupted and unexplained apart, failures by kind.
func (v Verdict) Detail() string {
	kinds := make([]string, 0, len(v.ByKind))
	for k, n := range v.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("disconnected by the client %d, corrupted %d, unexplained %d; failures by kind: %s",
		v.Count[Disconnected], v.Count[Corrupted], v.Count[Unexplained], strings.Join(kinds, ", "))
}

// Check classifies every record against its reference (refs by Record.ID; a record with
// none is a problem) and the cluster's state afterwards.
func Check(recs []Record, refs map[int][]uint32, events []Event, grace time.Duration, after After, bound Bound) Verdict {
	v := Verdict{Requests: len(recs), ByKind: map[string]int{}}
	problem := func(format string, args ...any) {
		if len(v.Problems) < MaxProblems {
			v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range recs {
		ref, ok := refs[r.ID]
		if !ok {
			v.Count[Unexplained]++
			problem("request %d: no reference tokens", r.ID)
			continue
		}
		o, why := Classify(r, ref, events, grace)
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
		if n := after.Held[place]; n > 0 {
			v.Leaked += int(n)
			problem("leak: %s %g after the run", place, n)
		}
	}
	for _, what := range sortedKeys(after.Growth) {
		g := after.Growth[what]
		if limit := max(g[0]+bound.Slack, g[0]*bound.Factor); g[1] > limit {
			v.Leaked++
			problem("leak: %s grew from %g to %g (bound %g)", what, g[0], g[1], limit)
		}
	}
	for _, m := range after.Members {
		problem("membership: %s", m)
	}
	return v
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
