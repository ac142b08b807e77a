package model

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadAdapterSpecialFiles: an adapter folder whose adapter_config.json or weights
// file is not a regular file (a FIFO, a device, a folder) is refused at once, naming the
// file, without waiting for a writer or reading a device; symbolic links to regular
// files are followed.
func TestReadAdapterSpecialFiles(t *testing.T) {
	const config = `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":["q_proj"]}`
	type setup func(t *testing.T, dir string)
	file := func(name, data string) setup {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fifo := func(name string) setup {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, name)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Skipf("no FIFO here: %v", err)
			}
			// A check that opened the FIFO for reading waits for a writer: be that writer
			// at the end, so that a blocked check ends with the test.
			t.Cleanup(func() {
				if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
		}
	}
	link := func(name, target string) setup {
		return func(t *testing.T, dir string) {
			if _, err := os.Stat(target); err != nil {
				t.Skipf("no %s here: %v", target, err)
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	folder := func(name string) setup {
		return func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	linkToFile := func(name, data string) setup {
		return func(t *testing.T, dir string) {
			target := filepath.Join(t.TempDir(), "real-"+name)
			if err := os.WriteFile(target, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	weights := file("adapter_model.safetensors", "weights")
	for _, tc := range []struct {
		name    string
		files   []setup
		wantErr string // "" : accepted
	}{
		{"config a FIFO", []setup{fifo(AdapterConfigFile), weights}, "adapter_config.json is not a regular file (a named pipe)"},
		{"config a link to /dev/zero", []setup{link(AdapterConfigFile, "/dev/zero"), weights}, "adapter_config.json is not a regular file (a device)"},
		{"config a link to /dev/null", []setup{link(AdapterConfigFile, "/dev/null"), weights}, "adapter_config.json is not a regular file (a device)"},
		{"config a folder", []setup{folder(AdapterConfigFile), weights}, "adapter_config.json is not a regular file (a folder)"},
		{"weights a FIFO", []setup{file(AdapterConfigFile, config), fifo("adapter_model.safetensors")}, "adapter_model.safetensors is not a regular file (a named pipe)"},
		{"weights a link to /dev/zero", []setup{file(AdapterConfigFile, config), link("adapter_model.bin", "/dev/zero")}, "adapter_model.bin is not a regular file (a device)"},
		{"weights a folder", []setup{file(AdapterConfigFile, config), folder("adapter_model.safetensors")}, "adapter_model.safetensors is not a regular file (a folder)"},
		{"links to regular files", []setup{linkToFile(AdapterConfigFile, config), linkToFile("adapter_model.safetensors", "weights")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, s := range tc.files {
				s(t, dir)
			}
			type result struct {
				a   Adapter
				err error
			}
			done := make(chan result, 1)
			go func() {
				a, err := ReadAdapter(dir)
				done <- result{a, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadAdapter still blocked after 10 s")
			}
			switch {
			case tc.wantErr == "" && r.err != nil:
				t.Fatal(r.err)
			case tc.wantErr == "" && r.a.Rank != 8:
				t.Fatalf("read %+v", r.a)
			case tc.wantErr != "" && (r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) || !strings.HasPrefix(r.err.Error(), "model: ")):
				t.Fatalf("error %v, want one with %q", r.err, tc.wantErr)
			}
		})
	}
}

// TestReadAdapterConfigBound: ReadAdapterConfig takes a configuration of
// MaxAdapterConfigBytes and refuses a longer one, naming the bound.
func TestReadAdapterConfigBound(t *testing.T) {
	for _, tc := range []struct {
		size    int
		wantErr string
	}{
		{MaxAdapterConfigBytes, ""},
		{MaxAdapterConfigBytes + 1, "larger than 1048576 bytes"},
	} {
		dir := t.TempDir()
		data := []byte(`{"pad":"` + strings.Repeat("x", tc.size-10) + `"}`)
		if err := os.WriteFile(filepath.Join(dir, AdapterConfigFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadAdapterConfig(dir)
		switch {
		case tc.wantErr == "" && (err != nil || len(got) != tc.size):
			t.Errorf("%d bytes: read %d, %v", tc.size, len(got), err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%d bytes: %v, want %q", tc.size, err, tc.wantErr)
		}
	}
	if _, err := ReadAdapterConfig(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing folder: %v", err)
	}
}
