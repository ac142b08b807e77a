package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxTokenizerBytes bounds the total size in bytes of a model folder's tokenizer files
// (48 MiB): the files travel between cluster members in one message, and the cluster's
// gRPC limit is 64 MiB per batch of messages. Real tokenizers are far smaller (Qwen3's
// tokenizer.json is 11 MB).
const MaxTokenizerBytes = 48 << 20

// TokenizerFile is one file of an HF model folder that LoadModel reads.
type TokenizerFile struct {
	Name string // base name, e.g. "tokenizer.json"
	Data []byte
}

// tokenizerFiles are the files loadHF reads from a model folder, in name order.
var tokenizerFiles = []struct {
	name     string
	required bool
}{
	{fileChatTemplate, false},
	{ConfigFile, false},
	{GenerationConfigFile, false},
	{fileTokenizer, true},
	{fileTokenizerConfig, true},
}

// TokenizerFileNames returns the base names of the files LoadModel reads from a model
// folder, in name order: tokenizer.json and tokenizer_config.json (required), and
// chat_template.jinja, config.json and generation_config.json (optional).
func TokenizerFileNames() []string {
	names := make([]string, len(tokenizerFiles))
	for i, f := range tokenizerFiles {
		names[i] = f.name
	}
	return names
}

// IsTokenizerFile reports whether name is the base name of a file LoadModel reads from a
// model folder.
func IsTokenizerFile(name string) bool {
	return slices.Contains(TokenizerFileNames(), name)
}

// IsBuiltin reports whether source names an embedded tokenizer ("builtin:…"), which has no
// files.
func IsBuiltin(source string) bool { return strings.HasPrefix(source, BuiltinPrefix) }

// ReadTokenizerFiles reads from model folder dir the files LoadModel reads, in name
// order; absent optional files are left out. Errors name the folder or file: a missing
// required file, an unreadable file, or files totalling more than maxBytes bytes.
func ReadTokenizerFiles(dir string, maxBytes int64) ([]TokenizerFile, error) {
	var out []TokenizerFile
	var total int64
	for _, f := range tokenizerFiles {
		path := filepath.Join(dir, f.name)
		data, err := readLimited(path, maxBytes-total)
		if errors.Is(err, fs.ErrNotExist) && !f.required {
			continue
		}
		if errors.Is(err, errTooLarge) {
			return nil, fmt.Errorf("model: model folder %q: tokenizer files total more than %d bytes (%d MiB)", dir, maxBytes, maxBytes>>20)
		}
		if err != nil {
			return nil, fmt.Errorf("model: %s: %v", path, err)
		}
		total += int64(len(data))
		out = append(out, TokenizerFile{Name: f.name, Data: data})
	}
	return out, nil
}

var errTooLarge = errors.New("too large")

// readLimited reads the file at path, failing with errTooLarge when it holds more than
// limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit < 0 {
		limit = 0
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errTooLarge
	}
	return data, nil
}

// TokenizerDigest returns the digest of a model folder's tokenizer files, the
// ModelCard's tokenizer_digest: the sha256 (64 lower-case hex digits) of, for each file in
// name order, its name, a NUL byte, its length as 8 bytes big-endian and its content.
// The order of files does not matter; their names and contents do.
func TokenizerDigest(files []TokenizerFile) string {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b TokenizerFile) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	var n [8]byte
	for _, f := range sorted {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IsTokenizerDigest reports whether s has the form of a TokenizerDigest (64 lower-case
// hex digits), which makes it safe as a file name.
func IsTokenizerDigest(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SourceDigest returns the tokenizer digest of a model source as LoadModel takes it: ""
// for a builtin tokenizer, else TokenizerDigest of the folder's files (read with
// ReadTokenizerFiles, at most MaxTokenizerBytes). Errors are ReadTokenizerFiles'.
func SourceDigest(source string) (string, error) {
	if IsBuiltin(source) {
		return "", nil
	}
	files, err := ReadTokenizerFiles(source, MaxTokenizerBytes)
	if err != nil {
		return "", err
	}
	return TokenizerDigest(files), nil
}
