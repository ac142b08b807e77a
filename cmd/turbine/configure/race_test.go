//go:build race

package configure

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
