//go:build race

package chaintest_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
