package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReadTraceFile reads the trace at path by its extension: `.jsonl` as Mooncake
// (ReadMooncake), `.csv` as Azure (ReadAzure), at most limit requests (0: all). The path
// must name a regular file (a link to one is followed): a FIFO, a device or a folder is
// refused before it is opened, since opening a FIFO blocks until a writer comes and a
// device never ends. Errors start with "bench: " and name the path (docs/reference.md §19).
func ReadTraceFile(path string, blockTokens, limit int) ([]Request, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".jsonl" && ext != ".csv" {
		return nil, fmt.Errorf("bench: %s: want a Mooncake .jsonl or an Azure .csv file", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("bench: %s is not a regular file (mode %v)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %v", err)
	}
	defer f.Close()
	if ext == ".jsonl" {
		return ReadMooncake(f, path, blockTokens, limit)
	}
	return ReadAzure(f, path, blockTokens, limit)
}
