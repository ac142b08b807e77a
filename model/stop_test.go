package model

import (
	"math/rand"
	"strings"
	"testing"
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
