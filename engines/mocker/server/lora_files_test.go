package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/model"
)

// TestVLLMLoadLoraConfigFile: the mock engine reads adapter_config.json as the worker's
// check does (docs/reference.md §26.1): a regular file of at most 1 MiB, refused at once
// (vLLM's 400) when it is larger or not a regular file (a FIFO, a device), and a rank
// written as an integral number (8.0) taken as Python's PEFT takes it, 8.5 refused.
func TestVLLMLoadLoraConfigFile(t *testing.T) {
	_, hs := startServer(t, loraOptions(t, 8))
	root := t.TempDir()
	folder := func(name string, write func(path string) error) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := write(filepath.Join(dir, "adapter_config.json")); err != nil {
			t.Skipf("%s: %v", name, err)
		}
		return dir
	}
	config := func(r string, pad int) func(string) error {
		return func(path string) error {
			return os.WriteFile(path, fmt.Appendf(nil, `{"base_model_name_or_path":"Qwen/Qwen3-8B","peft_type":"LORA","r":%s,"lora_alpha":16,"pad":"%s"}`,
				r, strings.Repeat("x", pad)), 0o644)
		}
	}
	fifo := func(path string) error {
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			return err
		}
		// Registered after startServer's cleanup, so run before it: a load blocked on
		// the FIFO gets its writer and ends, and the test server can close.
		t.Cleanup(func() {
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
		return nil
	}
	devNull := func(path string) error { return os.Symlink("/dev/null", path) }
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct {
		name   string
		dir    string
		status int
		want   string // the success sentence, or a substring of the error's message
	}{
		{"r 8.0", folder("r8.0", config("8.0", 0)), 200, "Success: LoRA adapter 'r 8.0' added successfully."},
		{"r 8e0", folder("r8e0", config("8e0", 0)), 200, "added successfully"},
		{"r 8.5", folder("r8.5", config("8.5", 0)), 400, "r 8.5: want an integer"},
		{"r a string", folder("rstr", config(`"8"`, 0)), 400, "invalid adapter_config.json in"},
		{"r 1e400", folder("rhuge", config("1e400", 0)), 400, "invalid adapter_config.json in"},
		{"a 1 MiB file", folder("big-ok", config("8", model.MaxAdapterConfigBytes-200)), 200, "added successfully"},
		{"larger than 1 MiB", folder("big", config("8", model.MaxAdapterConfigBytes)), 400, "larger than 1048576 bytes"},
		{"a FIFO", folder("fifo", fifo), 400, "is not a regular file (a named pipe)"},
		{"a link to /dev/null", folder("devnull", devNull), 400, "is not a regular file (a device)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"lora_name":%q,"lora_path":%q}`, tc.name, tc.dir)
			resp, err := client.Post(hs.URL+"/v1/load_lora_adapter", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			b := readAll(t, resp)
			got := b
			if resp.StatusCode != 200 {
				var e errorResponse
				if err := json.Unmarshal([]byte(b), &e); err != nil || e.Error.Code != resp.StatusCode || e.Error.Type != "BadRequestError" {
					t.Fatalf("%d %s: not vLLM's BadRequestError", resp.StatusCode, b)
				}
				got = e.Error.Message
			}
			if resp.StatusCode != tc.status || !strings.Contains(got, tc.want) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, got, tc.status, tc.want)
			}
		})
	}
}

// TestAdapterRankAgrees: the mock engine takes a rank r exactly when the worker's check
// (model.ParseAdapterConfig) does, up to the rank limit the engine applies later.
func TestAdapterRankAgrees(t *testing.T) {
	for _, r := range []string{"8", "8.0", "8e0", "80e-1", "8.5", "0", "-8", "-8.0", `"8"`, "true", "null", "1e400", "[8]"} {
		dir := t.TempDir()
		cfg := fmt.Sprintf(`{"peft_type":"LORA","base_model_name_or_path":"b","r":%s,"lora_alpha":16,"target_modules":["q_proj"]}`, r)
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		_, workerErr := model.ParseAdapterConfig([]byte(cfg), "adapter_config.json")
		got, engineErr := readAdapter(dir)
		if (workerErr == nil) != (engineErr == nil) {
			t.Errorf("r %s: the worker's check says %v, the mock engine %v", r, workerErr, engineErr)
		}
		if engineErr == nil && got.Rank != 8 {
			t.Errorf("r %s: rank %d, want 8", r, got.Rank)
		}
	}
}
