package bench

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadTraceFileRefusesWhatIsNotAFile: a FIFO (whose open would block until a writer
// comes), a folder and a device are refused by their kind, at once; a regular file of
// each format is read; other extensions are refused before anything is opened.
func TestReadTraceFileRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "trace.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	folder := filepath.Join(dir, "folder.csv")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	device := filepath.Join(dir, "zero.jsonl")
	if err := os.Symlink("/dev/zero", device); err != nil {
		t.Fatal(err)
	}
	mooncake := filepath.Join(dir, "ok.jsonl")
	if err := os.WriteFile(mooncake, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	azure := filepath.Join(dir, "ok.csv")
	if err := os.WriteFile(azure, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
		n                int
	}{
		{"fifo", fifo, "is not a regular file (mode p", 0},
		{"folder", folder, "is not a regular file (mode d", 0},
		{"device through a link", device, "is not a regular file (mode D", 0},
		{"missing", filepath.Join(dir, "none.csv"), "no such file", 0},
		{"other extension", filepath.Join(dir, "trace.txt"), "want a Mooncake .jsonl or an Azure .csv file", 0},
		{"mooncake", mooncake, "", 1},
		{"azure", azure, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			reqs, err := ReadTraceFile(c.path, DefaultBlockTokens, 0)
			if c.want == "" {
				if err != nil || len(reqs) != c.n {
					t.Fatalf("ReadTraceFile(%s) = %d requests, %v; want %d, nil", c.path, len(reqs), err, c.n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "bench: ") {
				t.Fatalf("ReadTraceFile(%s) error %v; want one starting bench: and containing %q", c.path, err, c.want)
			}
		})
	}
}
