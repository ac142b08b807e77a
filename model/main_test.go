package model

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
)

// loadedMerges holds the merges of every tokenizer.json loaded in this test binary, by
// absolute folder path.
var loadedMerges sync.Map // string → *hfSpec

func init() {
	onHFSpec = func(source string, spec *hfSpec) {
		if abs, err := filepath.Abs(source); err == nil {
			loadedMerges.Store(abs, spec)
		}
	}
}

// TestMain lets the heap grow further between collections: loading a real tokenizer
// allocates hundreds of MB of short-lived JSON values, and under the race detector
// collecting them dominated the package's test time.
func TestMain(m *testing.M) {
	debug.SetGCPercent(300)
	os.Exit(m.Run())
}
