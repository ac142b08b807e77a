package model

import (
	"runtime"
	"strings"
	"testing"
)

// stopBenchSets are the stop sets of the stop-count benchmarks: 1 and 4 ordinary stop
// strings, and 100 and 100,000 strings cut from the text itself (textStops), which
// never match but whose prefixes match often and deeply.
func stopBenchSets(text string) []struct {
	name  string
	stops []string
} {
	ordinary := []string{"<|stop|>", "\n\nUser:", "END OF ANSWER", "Observation:"}
	return []struct {
		name  string
		stops []string
	}{
		{"1", ordinary[:1]},
		{"4", ordinary},
		{"100", textStops(text, 100, 1)},
		{"100000", textStops(text, 100_000, 1)},
	}
}

// BenchmarkStopMatcherStops pushes the detokenized chunks of 1,000 tokens, one token at a
// time, through a matcher with 1, 4, 100 and 100,000 stop strings (one choice of a
// request). The matcher is built once (see BenchmarkNewStopMatcher): no stop string
// matches, and Flush starts each pass on a new text.
func BenchmarkStopMatcherStops(b *testing.B) {
	chunks := stopWorkload(b, 1000)
	text := strings.Join(chunks, "")
	for _, set := range stopBenchSets(text) {
		b.Run(set.name, func(b *testing.B) {
			s := NewStopMatcher(set.stops)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for _, c := range chunks {
					if _, stopped := s.Push(c); stopped {
						b.Fatalf("a stop string matched: %q", s.Matched())
					}
				}
				s.Flush()
			}
			perToken := float64(b.Elapsed().Nanoseconds()) / float64(b.N*len(chunks))
			b.ReportMetric(perToken, "ns/token")
			b.ReportMetric(1e9/perToken, "tokens/s")
		})
	}
}

// BenchmarkNewStopMatcher builds the automaton for each stop set of
// BenchmarkStopMatcherStops, as NewStopMatcher does for a list no live matcher uses.
func BenchmarkNewStopMatcher(b *testing.B) {
	text := strings.Join(stopWorkload(b, 1000), "")
	for _, set := range stopBenchSets(text) {
		bytes := 0
		for _, s := range set.stops {
			bytes += len(s)
		}
		b.Run(set.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buildStops(set.stops)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/build")
			b.ReportMetric(float64(bytes), "stop-bytes")
		})
	}
}

// BenchmarkNewStopMatcherShared is NewStopMatcher for a list a live matcher already uses
// (the other choices of a request): the list is hashed and compared, nothing is built.
func BenchmarkNewStopMatcherShared(b *testing.B) {
	text := strings.Join(stopWorkload(b, 1000), "")
	for _, set := range stopBenchSets(text) {
		b.Run(set.name, func(b *testing.B) {
			live := NewStopMatcher(set.stops)
			b.ReportAllocs()
			for b.Loop() {
				NewStopMatcher(set.stops)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/matcher")
			runtime.KeepAlive(live)
		})
	}
}
