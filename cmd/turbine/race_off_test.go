//go:build !race

package main

// raceDetector is true when the tests run with the race detector, which slows every
// process the tests start several times over.
const raceDetector = false
