//go:build race

package cluster

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
