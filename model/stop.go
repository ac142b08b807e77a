package model

import (
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"
)

func newStopMatcher(stops []string) *StopMatcher {
	return &StopMatcher{ac: compiledStops(stops)}
}

// stopAutomata holds the automaton of every stop list some live matcher uses, by
// stopListHash: the choices of one request (and requests that send the same list) share
// one automaton instead of building one each. An entry points at its automaton weakly,
// so the cache keeps nothing alive; it is removed when the automaton is collected.
var (
	stopAutomata sync.Map // uint64 → *stopAutomatonEntry
	stopHashSeed = maphash.MakeSeed()
)

type stopAutomatonEntry struct {
	stops []string // the list as given (its own copy of the slice)
	a     weak.Pointer[stopAutomaton]
}

// compiledStops returns the automaton for stops (nil when it holds no non-empty string),
// from stopAutomata when a live matcher already uses an equal list.
func compiledStops(stops []string) *stopAutomaton {
	key := stopListHash(stops)
	if v, ok := stopAutomata.Load(key); ok {
		e := v.(*stopAutomatonEntry)
		if a := e.a.Value(); a != nil && slices.Equal(e.stops, stops) {
			return a
		}
	}
	a := buildStops(stops)
	if a == nil {
		return nil
	}
	// A dead entry, or another list with the same hash, is replaced; two goroutines that
	// build the same list at once each keep their own automaton.
	e := &stopAutomatonEntry{stops: slices.Clone(stops), a: weak.Make(a)}
	stopAutomata.Store(key, e)
	runtime.AddCleanup(a, func(e *stopAutomatonEntry) { stopAutomata.CompareAndDelete(key, e) }, e)
	return a
}

// buildStops builds the automaton for stops, ignoring empty and duplicate strings (nil
// when none is left).
func buildStops(stops []string) *stopAutomaton {
	unique := slices.DeleteFunc(slices.Clone(stops), func(stop string) bool { return stop == "" })
	if len(unique) == 0 {
		return nil
	}
	slices.Sort(unique)
	return newStopAutomaton(slices.Compact(unique))
}

// stopListHash hashes the list in order (two lists that differ but hash alike are told
// apart by comparing them).
func stopListHash(stops []string) uint64 {
	h := uint64(len(stops))
	for _, s := range stops {
		h = (h ^ maphash.String(stopHashSeed, s)) * 0x9e3779b97f4a7c15
	}
	return h
}

// push runs the automaton over text. The first byte whose state has a match ends the
// stream: the stop string that completes first wins, and of those completing at the same
// byte the longest (docs/reference.md §20); deciding by end rather than start keeps the
// result independent of how the text is chunked. Without a match, the text held back is
// the state's string: the longest suffix of the text that is a proper prefix of a stop
// string.
func (s *StopMatcher) push(text string) (string, bool) {
	if s.stopped {
		return "", true
	}
	if s.ac == nil {
		return text, false
	}
	a, st := s.ac, s.state
	for i := 0; i < len(text); i++ {
		st = a.step(st, text[i])
		if l := int(a.match[st]); l > 0 {
			buf := s.held + text[:i+1]
			start := len(buf) - l
			s.stopped = true
			s.matched = strings.Clone(buf[start:])
			s.held = ""
			return buf[:start], true
		}
	}
	s.state = st
	keep := int(a.depth[st])
	if keep <= len(text) {
		emit := s.held + text[:len(text)-keep]
		s.held = text[len(text)-keep:]
		return emit, false
	}
	buf := s.held + text
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

func (s *StopMatcher) flush() string {
	out := s.held
	s.held, s.state = "", 0
	return out
}
