package model

import "strings"

func newStopMatcher(stops []string) *StopMatcher {
	s := &StopMatcher{}
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

func (s *StopMatcher) push(text string) (string, bool) {
	if s.stopped {
		return "", true
	}
	if len(s.stops) == 0 {
		return text, false
	}
	buf := s.held + text
	// The stop string that completes first in the stream wins (the smallest end; of those
	// ending together, the longest); the text before it is emitted, the rest dropped.
	// Deciding by end rather than start keeps the result independent of how the text is
	// chunked: generation stops as soon as any stop string is complete.
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
	keep := s.longestPrefixSuffix(buf)
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// longestPrefixSuffix returns the length of the longest suffix of buf that is a proper
// prefix of some stop string (buf holds no whole stop string).
func (s *StopMatcher) longestPrefixSuffix(buf string) int {
	best := 0
	for _, stop := range s.stops {
		n := min(len(stop)-1, len(buf))
		for k := n; k > best; k-- {
			if strings.HasSuffix(buf, stop[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

func (s *StopMatcher) flush() string {
	out := s.held
	s.held = ""
	return out
}
