//go:build !race

package tracing_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
