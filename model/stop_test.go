package model

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		chunks  []string
		emits   []string // one per chunk
		stopped bool     // after the last chunk
		flush   string
	}{
		{"no stops", nil, []string{"a", "b"}, []string{"a", "b"}, false, ""},
		{"empty stop ignored", []string{""}, []string{"ab"}, []string{"ab"}, false, ""},
		{"in one chunk", []string{"END"}, []string{"abcENDdef"}, []string{"abc"}, true, ""},
		{"at the start", []string{"END"}, []string{"ENDx"}, []string{""}, true, ""},
		{"whole chunk", []string{"END"}, []string{"x", "END"}, []string{"x", ""}, true, ""},
		{"across chunks", []string{"END"}, []string{"abcE", "N", "Dzz"}, []string{"abc", "", ""}, true, ""},
		{"false start released", []string{"END"}, []string{"abE", "NX"}, []string{"ab", "ENX"}, false, ""},
		{"held at the end", []string{"END"}, []string{"abEN"}, []string{"ab"}, false, "EN"},
		{"only the longest prefix held", []string{"abc"}, []string{"xxab"}, []string{"xx"}, false, "ab"},
		{"prefix of one stop, not another", []string{"xyz", "b"}, []string{"axy"}, []string{"a"}, false, "xy"},
		{"first to occur wins", []string{"world", "lo"}, []string{"hello world"}, []string{"hel"}, true, ""},
		{"first to complete wins", []string{"abcd", "c"}, []string{"xabcd"}, []string{"xab"}, true, ""},
		{"longest of those ending together", []string{"d", "bcd"}, []string{"abcd"}, []string{"a"}, true, ""},
		{"first across chunks", []string{"bcd", "cx"}, []string{"abc", "d"}, []string{"a", ""}, true, ""},
		{"overlapping candidates", []string{"aab"}, []string{"aa", "a", "ab"}, []string{"", "a", "a"}, true, ""},
		{"newline stop", []string{"\n\n"}, []string{"line\n", "\nmore"}, []string{"line", ""}, true, ""},
		{"unicode", []string{"停止"}, []string{"好的停", "止了"}, []string{"好的", ""}, true, ""},
		{"after stop", []string{"x"}, []string{"axb", "more"}, []string{"a", ""}, true, ""},
		{"duplicates", []string{"x", "x"}, []string{"abx"}, []string{"ab"}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStopMatcher(tc.stops)
			var stopped bool
			for i, chunk := range tc.chunks {
				var emit string
				emit, stopped = s.Push(chunk)
				if emit != tc.emits[i] {
					t.Errorf("Push(%q) = %q, want %q", chunk, emit, tc.emits[i])
				}
			}
			if stopped != tc.stopped {
				t.Errorf("stopped = %v, want %v", stopped, tc.stopped)
			}
			if got := s.Flush(); got != tc.flush {
				t.Errorf("Flush = %q, want %q", got, tc.flush)
			}
		})
	}
}

// naiveStop is the reference: join everything and cut at the stop string that occurs
// first, i.e. whose first occurrence ends first (the longest of those ending together).
func naiveStop(stops, chunks []string) (string, bool) {
	all := strings.Join(chunks, "")
	for end := 1; end <= len(all); end++ {
		cut := -1
		for _, stop := range stops {
			if stop != "" && strings.HasSuffix(all[:end], stop) && (cut < 0 || end-len(stop) < cut) {
				cut = end - len(stop)
			}
		}
		if cut >= 0 {
			return all[:cut], true
		}
	}
	return all, false
}

// longestHeld is the reference for what may be held back: the longest suffix of text that
// is a proper prefix of a stop string.
func longestHeld(stops []string, text string) int {
	best := 0
	for _, stop := range stops {
		for k := 1; k < len(stop) && k <= len(text); k++ {
			if strings.HasSuffix(text, stop[:k]) && k > best {
				best = k
			}
		}
	}
	return best
}

// checkStopMatcher streams chunks and checks the result against naiveStop, and that
// while no stop is found exactly the longest stop prefix is held back.
func checkStopMatcher(t *testing.T, stops, chunks []string) {
	t.Helper()
	want, wantStopped := naiveStop(stops, chunks)
	s := NewStopMatcher(stops)
	var out strings.Builder
	var seen strings.Builder
	stopped := false
	for _, c := range chunks {
		seen.WriteString(c)
		emit, st := s.Push(c)
		out.WriteString(emit)
		if st {
			stopped = true
			continue
		}
		if held := longestHeld(stops, seen.String()); out.Len() != seen.Len()-held {
			t.Fatalf("stops %q chunks %q: after %q emitted %q (held %d, want %d)", stops, chunks, seen.String(), out.String(), seen.Len()-out.Len(), held)
		}
	}
	out.WriteString(s.Flush())
	if out.String() != want || stopped != wantStopped {
		t.Fatalf("stops %q chunks %q: got %q stopped %v, want %q stopped %v", stops, chunks, out.String(), stopped, want, wantStopped)
	}
}

func TestStopMatcherAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	word := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte("ab\n"[r.Intn(3)])
		}
		return sb.String()
	}
	for range 20000 {
		stops := make([]string, r.Intn(5))
		for i := range stops {
			stops[i] = word(r.Intn(5))
		}
		chunks := make([]string, r.Intn(8))
		for i := range chunks {
			chunks[i] = word(r.Intn(5))
		}
		checkStopMatcher(t, stops, chunks)
	}
}

// refStopMatcher is the matcher as it was before the automaton: every stop string is
// searched for in the held text plus each pushed chunk, and the held text is found by
// trying every prefix of every stop string. It is quadratic in the stop strings but
// plainly right, so the tests use it as the reference the automaton must agree with,
// push by push.
type refStopMatcher struct {
	stops   []string
	held    string
	stopped bool
	matched string
}

func newRefStopMatcher(stops []string) *refStopMatcher {
	s := &refStopMatcher{}
	seen := make(map[string]bool, len(stops))
	for _, stop := range stops {
		if stop == "" || seen[stop] {
			continue
		}
		seen[stop] = true
		s.stops = append(s.stops, stop)
	}
	return s
}

func (s *refStopMatcher) Push(text string) (string, bool) {
	if s.stopped {
		return "", true
	}
	if len(s.stops) == 0 {
		return text, false
	}
	buf := s.held + text
	first, firstEnd := -1, -1
	for _, stop := range s.stops {
		i := strings.Index(buf, stop)
		if i < 0 {
			continue
		}
		if end := i + len(stop); firstEnd < 0 || end < firstEnd || (end == firstEnd && i < first) {
			first, firstEnd = i, end
		}
	}
	if first >= 0 {
		s.stopped = true
		s.matched = buf[first:firstEnd]
		s.held = ""
		return buf[:first], true
	}
	keep := 0
	for _, stop := range s.stops {
		for k := min(len(stop)-1, len(buf)); k > keep; k-- {
			if strings.HasSuffix(buf, stop[:k]) {
				keep = k
				break
			}
		}
	}
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

func (s *refStopMatcher) Flush() string {
	out := s.held
	s.held = ""
	return out
}

// TestStopMatcherAgainstReference streams seeded random texts through random stop sets
// (a few to a few hundred strings over small alphabets, so that prefixes, overlaps,
// nested stops and multi-byte characters are common) and requires every Push, Matched
// and Flush to equal the reference matcher's.
func TestStopMatcherAgainstReference(t *testing.T) {
	alphabets := []string{"ab", "ab\n", "abc", "aé停"}
	r := rand.New(rand.NewSource(13))
	for iter := range 4000 {
		runes := []rune(alphabets[iter%len(alphabets)])
		word := func(n int) string {
			var sb strings.Builder
			for range n {
				sb.WriteRune(runes[r.Intn(len(runes))])
			}
			return sb.String()
		}
		nStops := r.Intn(6)
		if iter%10 == 0 {
			nStops = 50 + r.Intn(300)
		}
		stops := make([]string, nStops)
		for i := range stops {
			stops[i] = word(r.Intn(9))
		}
		chunks := make([]string, r.Intn(12))
		for i := range chunks {
			chunks[i] = word(r.Intn(7))
		}
		got, want := NewStopMatcher(stops), newRefStopMatcher(stops)
		for i, c := range chunks {
			gotEmit, gotStopped := got.Push(c)
			wantEmit, wantStopped := want.Push(c)
			if gotEmit != wantEmit || gotStopped != wantStopped {
				t.Fatalf("stops %q chunks %q: Push(%q) = %q, %v; reference %q, %v", stops, chunks, c, gotEmit, gotStopped, wantEmit, wantStopped)
			}
			if iter%7 == 0 && i%3 == 2 { // a Flush mid-stream starts the text anew
				if g, w := got.Flush(), want.Flush(); g != w {
					t.Fatalf("stops %q chunks %q: Flush after %q = %q, reference %q", stops, chunks, c, g, w)
				}
			}
		}
		if got.Matched() != want.matched {
			t.Fatalf("stops %q chunks %q: Matched = %q, reference %q", stops, chunks, got.Matched(), want.matched)
		}
		if g, w := got.Flush(), want.Flush(); g != w {
			t.Fatalf("stops %q chunks %q: Flush = %q, reference %q", stops, chunks, g, w)
		}
	}
}

// stopWorkload is the text and the stop sets of the stop-count tests and benchmarks: the
// detokenized chunks of a prompt (one per token) and stop strings cut from that same
// text with a byte it never contains appended, so they never match but their prefixes
// match often and deeply (the expensive case for any matcher).
func stopWorkload(tb testing.TB, tokens int) []string {
	tb.Helper()
	tok := builtinModel(tb, "cl100k_base").Tokenizer
	_, ids := benchPrompt(tb, tok)
	d := NewDetokenizer(tok, false)
	chunks := make([]string, 0, tokens)
	for _, id := range ids[:min(tokens, len(ids))] {
		chunks = append(chunks, d.Push(id))
	}
	return chunks
}

// textStops returns n stop strings of 6 to 17 bytes: pieces of text, each followed by
// "\x01", seeded.
func textStops(text string, n int, seed int64) []string {
	r := rand.New(rand.NewSource(seed))
	stops := make([]string, n)
	for i := range stops {
		l := 5 + r.Intn(12)
		off := r.Intn(len(text) - l)
		stops[i] = text[off:off+l] + "\x01"
	}
	return stops
}

// TestStopMatcherCostIndependentOfStopCount pushes the same 400 tokens through a matcher
// with one stop string and one with 100,000 (about 1.2 MB of stop strings, as a large
// request body may carry) and requires the second to cost at most 100 times the first.
// A matcher that tries every stop string at every token costs about 100,000 times more;
// an automaton costs a few times more (its tables no longer fit in the CPU's caches).
// Both are timed alternately, the best of five runs each, so load on the machine
// affects both alike.
func TestStopMatcherCostIndependentOfStopCount(t *testing.T) {
	chunks := stopWorkload(t, 400)
	text := strings.Join(chunks, "")
	one := []string{"<|stop|>"}
	many := textStops(text, 100_000, 1)
	run := func(s *StopMatcher) time.Duration {
		start := time.Now()
		for _, c := range chunks {
			if _, stopped := s.Push(c); stopped {
				t.Fatalf("a stop string matched: %q", s.Matched())
			}
		}
		d := time.Since(start)
		s.Flush() // the next run starts a new text
		return d
	}
	sOne, sMany := NewStopMatcher(one), NewStopMatcher(many)
	bestOne, bestMany := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 5 {
		bestOne = min(bestOne, run(sOne))
		bestMany = min(bestMany, run(sMany))
	}
	ratio := float64(bestMany) / float64(max(bestOne, time.Microsecond))
	t.Logf("400 tokens: 1 stop %v, 100,000 stops %v (%.1f×)", bestOne, bestMany, ratio)
	if ratio > 100 {
		t.Errorf("100,000 stop strings cost %.0f× one stop string (%v vs %v for 400 tokens), want ≤ 100×", ratio, bestMany, bestOne)
	}
}

// TestStopMatchersShareTheAutomaton builds 128 matchers for one list of 100,000 stop
// strings (one request with n = 128, each choice with its own matcher) and requires the
// automaton to be built once: the 127 later matchers together allocate less than 1 MB
// (one automaton is about 20 bytes per byte of stop strings). Matchers of another list
// get their own, and matchers that share one keep their own state.
func TestStopMatchersShareTheAutomaton(t *testing.T) {
	text := strings.Join(stopWorkload(t, 1000), "")
	stops := textStops(text, 100_000, 2)
	first := NewStopMatcher(stops)
	same := slices.Clone(stops) // equal content, another slice
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	more := make([]*StopMatcher, 0, 127)
	for i := range 127 {
		if i%2 == 0 {
			more = append(more, NewStopMatcher(stops))
		} else {
			more = append(more, NewStopMatcher(same))
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("127 matchers for the same %d stop strings allocated %d bytes, want < 1 MiB (one automaton each?)", len(stops), got)
	}

	other := NewStopMatcher([]string{"x", "yz"})
	if emit, stopped := other.Push("abyzc"); emit != "ab" || !stopped || other.Matched() != "yz" {
		t.Errorf("other list: Push = %q, %v, matched %q; want \"ab\", true, \"yz\"", emit, stopped, other.Matched())
	}
	a, b := NewStopMatcher([]string{"END", "STOP"}), NewStopMatcher([]string{"END", "STOP"})
	if emit, _ := a.Push("xxEN"); emit != "xx" {
		t.Errorf("a: Push = %q, want \"xx\"", emit)
	}
	if emit, stopped := b.Push("D and ST"); emit != "D and " || stopped {
		t.Errorf("b: Push = %q, %v; want \"D and \", false", emit, stopped)
	}
	if emit, stopped := a.Push("D"); emit != "" || !stopped || a.Matched() != "END" {
		t.Errorf("a: Push = %q, %v, matched %q; want \"\", true, \"END\"", emit, stopped, a.Matched())
	}
	if emit, stopped := b.Push("OP"); emit != "" || !stopped || b.Matched() != "STOP" {
		t.Errorf("b: Push = %q, %v, matched %q; want \"\", true, \"STOP\"", emit, stopped, b.Matched())
	}
	runtime.KeepAlive(first)
	runtime.KeepAlive(more)
}

// TestStopMatchersConcurrent builds and runs matchers of one list on several goroutines
// at once (the choices of a request), for the race detector: each must give the result
// a matcher of its own gives.
func TestStopMatchersConcurrent(t *testing.T) {
	stops := []string{"world", "lo w", "xyz"}
	chunks := []string{"hel", "lo", " wor", "ld"}
	want := newRefStopMatcher(stops)
	var wantOut strings.Builder
	for _, c := range chunks {
		e, _ := want.Push(c)
		wantOut.WriteString(e)
	}
	errs := make(chan string, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			s := NewStopMatcher(slices.Clone(stops))
			var out strings.Builder
			for _, c := range chunks {
				e, _ := s.Push(c)
				out.WriteString(e)
			}
			if out.String() != wantOut.String() || s.Matched() != want.matched {
				errs <- fmt.Sprintf("emitted %q, matched %q; want %q, %q", out.String(), s.Matched(), wantOut.String(), want.matched)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
