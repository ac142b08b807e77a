package preprocess

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain lets the heap grow further between collections: loading a real tokenizer
// allocates hundreds of MB of short-lived JSON values, and under the race detector
// collecting them dominated the package's test time.
func TestMain(m *testing.M) {
	debug.SetGCPercent(300)
	os.Exit(m.Run())
}
