package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestFolder writes files (name -> content) into a new folder and returns its path.
func digestFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func baseDigestFiles() map[string]string {
	return map[string]string{fileTokenizer: `{"model":{}}`, fileTokenizerConfig: `{"eos_token":"</s>"}`}
}

func TestSourceDigestStabilityAndSensitivity(t *testing.T) {
	base, err := SourceDigest(digestFolder(t, baseDigestFiles()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(files map[string]string)
		same   bool
	}{
		{"identical copy", func(map[string]string) {}, true},
		{"unrelated file added", func(f map[string]string) { f["README.md"] = "hello" }, true},
		{"weights added", func(f map[string]string) { f["model.safetensors"] = "\x00\x01" }, true},
		{"one byte of tokenizer.json", func(f map[string]string) { f[fileTokenizer] = `{"model":{ }}` }, false},
		{"one byte of tokenizer_config.json", func(f map[string]string) { f[fileTokenizerConfig] = `{"eos_token":"<s>"}` }, false},
		{"chat_template.jinja added", func(f map[string]string) { f[fileChatTemplate] = "{{ messages }}" }, false},
		{"empty chat_template.jinja added", func(f map[string]string) { f[fileChatTemplate] = "" }, false},
		{"config.json added", func(f map[string]string) { f[ConfigFile] = `{"max_position_embeddings":8}` }, false},
		{"generation_config.json added", func(f map[string]string) { f[GenerationConfigFile] = `{"eos_token_id":2}` }, false},
		{"contents of the two files swapped", func(f map[string]string) {
			f[fileTokenizer], f[fileTokenizerConfig] = f[fileTokenizerConfig], f[fileTokenizer]
		}, false},
		{"bytes moved across the file boundary", func(f map[string]string) {
			f[fileTokenizer] += `{`
			f[fileTokenizerConfig] = strings.TrimPrefix(f[fileTokenizerConfig], `{`)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := baseDigestFiles()
			tc.change(files)
			got, err := SourceDigest(digestFolder(t, files))
			if err != nil {
				t.Fatal(err)
			}
			if (got == base) != tc.same {
				t.Fatalf("digest %s, base %s: want same=%v", got, base, tc.same)
			}
		})
	}
}

func TestSourceDigestRenamedFile(t *testing.T) {
	with := baseDigestFiles()
	with[fileChatTemplate] = "{{ messages }}"
	dir := digestFolder(t, with)
	before, err := SourceDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, fileChatTemplate), filepath.Join(dir, fileChatTemplate+".bak")); err != nil {
		t.Fatal(err)
	}
	after, err := SourceDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	base, err := SourceDigest(digestFolder(t, baseDigestFiles()))
	if err != nil {
		t.Fatal(err)
	}
	if after == before || after != base {
		t.Fatalf("after renaming chat_template.jinja away: digest %s, want the folder's without it (%s), not %s", after, base, before)
	}
}

func TestTokenizerDigest(t *testing.T) {
	a := []TokenizerFile{{Name: "tokenizer.json", Data: []byte("x")}, {Name: "tokenizer_config.json", Data: []byte("y")}}
	for _, tc := range []struct {
		name  string
		files []TokenizerFile
		same  bool
	}{
		{"same files in another order", []TokenizerFile{a[1], a[0]}, true},
		{"a file renamed", []TokenizerFile{{Name: "config.json", Data: []byte("x")}, a[1]}, false},
		{"name and content boundary moved", []TokenizerFile{{Name: "tokenizer.jsonx", Data: nil}, a[1]}, false},
		{"a file dropped", a[:1], false},
		{"an empty file added", append([]TokenizerFile{{Name: "chat_template.jinja"}}, a...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TokenizerDigest(tc.files) == TokenizerDigest(a); got != tc.same {
				t.Fatalf("same digest %v, want %v", got, tc.same)
			}
		})
	}
	// The digest is a wire format shared by nodes and frontends of different versions:
	// pinned for a fixed input. sha256("tokenizer.json\x00" + be64(1) + "x" +
	// "tokenizer_config.json\x00" + be64(1) + "y").
	if got, want := TokenizerDigest(a), pinnedDigest; got != want {
		t.Fatalf("TokenizerDigest = %s, want %s", got, want)
	}
	if !IsTokenizerDigest(TokenizerDigest(a)) || IsTokenizerDigest("../x") || IsTokenizerDigest(strings.ToUpper(pinnedDigest)) {
		t.Fatal("IsTokenizerDigest accepts only 64 lower-case hex digits")
	}
}

func TestSourceDigestBuiltinAndErrors(t *testing.T) {
	if d, err := SourceDigest("builtin:cl100k_base"); d != "" || err != nil {
		t.Fatalf("builtin: digest %q, err %v; want empty and no error", d, err)
	}
	missing := baseDigestFiles()
	delete(missing, fileTokenizerConfig)
	if _, err := SourceDigest(digestFolder(t, missing)); err == nil || !strings.Contains(err.Error(), fileTokenizerConfig) {
		t.Fatalf("missing tokenizer_config.json: err %v, want one naming the file", err)
	}
	if _, err := SourceDigest(filepath.Join(t.TempDir(), "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("absent folder: err %v, want one naming the folder", err)
	}
	dir := digestFolder(t, baseDigestFiles())
	files, err := ReadTokenizerFiles(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(files[0].Data) + len(files[1].Data))
	if _, err := ReadTokenizerFiles(dir, size); err != nil {
		t.Fatalf("files of exactly maxBytes: %v", err)
	}
	if _, err := ReadTokenizerFiles(dir, size-1); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("files over maxBytes: err %v, want a size error", err)
	}
}

// pinnedDigest is TokenizerDigest of tokenizer.json "x" and tokenizer_config.json "y",
// computed independently of this package.
const pinnedDigest = "59adaeafac4390b92d29623cdd387c07c56c7faa79db0d711167d9677c6c280a"
