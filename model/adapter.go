package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// LoRA adapter folders (docs/reference.md §26.2): a PEFT adapter is a folder holding
// adapter_config.json and one weights file. ReadAdapter reads and checks one;
// Adapter.CheckBase says whether it adapts a given base model; ParseAdapterConfig is the
// pure parse of the configuration.

// AdapterConfigFile is the configuration file of a PEFT adapter folder.
const AdapterConfigFile = "adapter_config.json"

// AdapterWeightFiles are the names an adapter's weights file may have, in the order
// engines look for them (vLLM: safetensors, then the PyTorch pickles).
var AdapterWeightFiles = []string{"adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt"}

// MaxAdapterRank bounds an adapter's rank r as ParseAdapterConfig reads it; engines take
// far less (vLLM at most 512).
const MaxAdapterRank = 1 << 16

// Adapter is what a LoRA adapter folder says about itself.
type Adapter struct {
	// Dir is the folder, cleaned (filepath.Clean), as given (not made absolute).
	Dir string
	// PeftType is peft_type, upper case: always "LORA" in an Adapter that was read.
	PeftType string
	// BaseModel is base_model_name_or_path: the hub id or folder the adapter was trained
	// on (never empty in an Adapter that was read).
	BaseModel string
	// Rank is r (≥ 1); Alpha is lora_alpha (the scaling numerator).
	Rank  int
	Alpha float64
	// TargetModules are target_modules given as a list of module names; TargetRegex is
	// target_modules given as one string (a regular expression over module names, PEFT's
	// other form). Exactly one of them is set.
	TargetModules []string
	TargetRegex   string
	// WeightsFile is the weights file found in Dir (one of AdapterWeightFiles).
	WeightsFile string
}

// ParseAdapterConfig reads the bytes of an adapter_config.json (name is the file's name
// for errors): peft_type must be LORA; base_model_name_or_path a non-empty string; r an
// integer 1..MaxAdapterRank; lora_alpha a number; target_modules a non-empty list of
// module names or a non-empty string (a regular expression). Other keys are ignored.
// Errors start with "model: <name>: " and name the key.
func ParseAdapterConfig(data []byte, name string) (Adapter, error) {
	fail := func(format string, args ...any) (Adapter, error) {
		return Adapter{}, fmt.Errorf("model: %s: "+format, append([]any{name}, args...)...)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return fail("not a valid adapter configuration: %v", err)
	}
	var a Adapter
	str := func(key string) (string, bool, error) {
		raw, ok := obj[key]
		if !ok || isNull(raw) {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", true, fmt.Errorf("%s: want a string, got %s", key, excerpt(raw))
		}
		return s, true, nil
	}
	peft, ok, err := str("peft_type")
	switch {
	case err != nil:
		return fail("%v", err)
	case !ok || peft == "":
		return fail("peft_type: missing (a PEFT LoRA adapter says \"LORA\")")
	case !strings.EqualFold(peft, "LORA"):
		return fail("peft_type %q: not a LoRA adapter (want LORA)", peft)
	}
	a.PeftType = "LORA"
	base, ok, err := str("base_model_name_or_path")
	switch {
	case err != nil:
		return fail("%v", err)
	case !ok || strings.TrimSpace(base) == "":
		return fail("base_model_name_or_path: missing: the adapter does not say which base model it adapts")
	}
	a.BaseModel = base
	raw, ok := obj["r"]
	if !ok || isNull(raw) {
		return fail("r: missing (the adapter's rank)")
	}
	r, err := parseInt(raw)
	switch {
	case err != nil:
		return fail("r: %v", err)
	case r < 1 || r > MaxAdapterRank:
		return fail("r %d: want a rank 1..%d", r, MaxAdapterRank)
	}
	a.Rank = int(r)
	raw, ok = obj["lora_alpha"]
	if !ok || isNull(raw) {
		return fail("lora_alpha: missing")
	}
	if err := json.Unmarshal(raw, &a.Alpha); err != nil {
		return fail("lora_alpha: want a number, got %s", excerpt(raw))
	}
	raw, ok = obj["target_modules"]
	if !ok || isNull(raw) {
		return fail("target_modules: missing")
	}
	if err := json.Unmarshal(raw, &a.TargetRegex); err == nil {
		if a.TargetRegex == "" {
			return fail("target_modules: an empty string")
		}
		return a, nil
	}
	if err := json.Unmarshal(raw, &a.TargetModules); err != nil {
		return fail("target_modules: want a list of module names or a regular expression, got %s", excerpt(raw))
	}
	if len(a.TargetModules) == 0 {
		return fail("target_modules: an empty list")
	}
	for i, m := range a.TargetModules {
		if m == "" {
			return fail("target_modules[%d]: an empty module name", i)
		}
	}
	return a, nil
}

// MaxAdapterConfigBytes bounds the adapter_config.json ReadAdapterConfig reads (PEFT
// writes about 1 KB).
const MaxAdapterConfigBytes = 1 << 20

// ReadAdapterConfig reads the adapter_config.json of adapter folder dir: a regular file
// (symbolic links followed) of at most MaxAdapterConfigBytes. The file is opened
// without blocking and checked before it is read, so a FIFO or a device there is
// refused at once (docs/reference.md §26.2). Errors start with "model: " and name the
// file; one that wraps fs.ErrNotExist when dir or the file does not exist.
func ReadAdapterConfig(dir string) ([]byte, error) {
	path := filepath.Join(dir, AdapterConfigFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("model: %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("model: %s is not a regular file (%s): not an adapter configuration", path, fileKind(fi.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxAdapterConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	if len(data) > MaxAdapterConfigBytes {
		return nil, fmt.Errorf("model: %s: larger than %d bytes: not an adapter configuration", path, MaxAdapterConfigBytes)
	}
	return data, nil
}

// fileKind names the kind of file mode m is, for an error saying it is not a regular
// file: "a folder", "a named pipe", "a device", "a socket", else "not a plain file".
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a plain file"
}

// ReadAdapter reads and checks the LoRA adapter folder dir: it must exist and be a
// folder, hold an adapter_config.json that ReadAdapterConfig reads and
// ParseAdapterConfig accepts, and a non-empty regular weights file (AdapterWeightFiles).
// The weights themselves are not read; no check blocks on a special file (a FIFO, a
// device). Errors start with "model: " and name the folder or the file and what is
// wrong with it.
func ReadAdapter(dir string) (Adapter, error) {
	if strings.TrimSpace(dir) == "" {
		return Adapter{}, errors.New("model: adapter: empty folder path")
	}
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Adapter{}, fmt.Errorf("model: adapter folder %s does not exist", dir)
	case err != nil:
		return Adapter{}, fmt.Errorf("model: adapter folder %s: %w", dir, err)
	case !fi.IsDir():
		return Adapter{}, fmt.Errorf("model: adapter %s is not a folder", dir)
	}
	path := filepath.Join(dir, AdapterConfigFile)
	data, err := ReadAdapterConfig(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Adapter{}, fmt.Errorf("model: adapter folder %s has no %s (not a PEFT adapter folder)", dir, AdapterConfigFile)
	case err != nil:
		return Adapter{}, err
	}
	a, err := ParseAdapterConfig(data, path)
	if err != nil {
		return Adapter{}, err
	}
	a.Dir = dir
	for _, name := range AdapterWeightFiles {
		wi, err := os.Stat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return Adapter{}, fmt.Errorf("model: adapter folder %s: %s: %w", dir, name, err)
		case !wi.Mode().IsRegular():
			return Adapter{}, fmt.Errorf("model: adapter folder %s: %s is not a regular file (%s)", dir, name, fileKind(wi.Mode()))
		case wi.Size() == 0:
			return Adapter{}, fmt.Errorf("model: adapter folder %s: %s is empty", dir, name)
		}
		a.WeightsFile = name
		return a, nil
	}
	return Adapter{}, fmt.Errorf("model: adapter folder %s has no weights file (%s)", dir, strings.Join(AdapterWeightFiles, ", "))
}

// BaseModel is a served base model as an adapter's base_model_name_or_path may name it
// (Adapter.CheckBase).
type BaseModel struct {
	// Served is the served model name (the card's model).
	Served string
	// Model is what the engine loads: a model folder (absolute and cleaned when Folder is
	// set) or a hub id; "" when unknown.
	Model  string
	Folder bool
	// NameOrPath is the model folder's config.json _name_or_path ("" when absent): the hub
	// id (or the folder) the checkpoint was saved from.
	NameOrPath string
}

// ReadBaseModel describes the base model served as served from model, what its engine
// loads (a folder or a hub id; "" when unknown). A folder is made absolute and its
// config.json's _name_or_path read when it has one. Errors: the folder's path cannot be
// made absolute, or its config.json cannot be read or is not JSON.
func ReadBaseModel(served, model string) (BaseModel, error) {
	b := BaseModel{Served: served, Model: model}
	fi, err := os.Stat(model)
	if model == "" || err != nil || !fi.IsDir() {
		return b, nil
	}
	abs, err := filepath.Abs(model)
	if err != nil {
		return BaseModel{}, fmt.Errorf("model: base model folder %s: %w", model, err)
	}
	b.Model, b.Folder = filepath.Clean(abs), true
	path := filepath.Join(model, ConfigFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return b, nil
	case err != nil:
		return BaseModel{}, fmt.Errorf("model: %s: %w", path, err)
	}
	var cfg struct {
		NameOrPath string `json:"_name_or_path"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return BaseModel{}, fmt.Errorf("model: %s: _name_or_path: %w", path, err)
	}
	b.NameOrPath = cfg.NameOrPath
	return b, nil
}

// HubIDs are the Hugging Face ids (lower case: the hub's ids are case-insensitive) that
// name b: those of its served name, its config.json _name_or_path and the folder or id
// its engine loads (HubID of each), without repeats.
func (b BaseModel) HubIDs() []string {
	var out []string
	for _, s := range []string{b.Served, b.NameOrPath, b.Model} {
		if id := HubID(s); id != "" && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// HubID is the Hugging Face id (lower case) that s names: s itself when it is an id
// ("org/name", or a bare "name"); for a path, the repository of a hub cache folder in it
// (".../models--Qwen--Qwen3-0.6B/snapshots/<rev>" is "qwen/qwen3-0.6b"), else its last
// two components (".../Qwen/Qwen3-0.6B" is "qwen/qwen3-0.6b"). "" for "".
func HubID(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	slashed := filepath.ToSlash(s)
	parts := strings.Split(strings.Trim(slashed, "/"), "/")
	for _, p := range parts {
		if rest, ok := strings.CutPrefix(p, "models--"); ok && rest != "" {
			return strings.ToLower(strings.ReplaceAll(rest, "--", "/"))
		}
	}
	isPath := strings.HasPrefix(slashed, "/") || strings.HasPrefix(slashed, ".") || strings.HasPrefix(slashed, "~") ||
		len(parts) > 2
	if !isPath {
		return strings.ToLower(strings.Join(parts, "/"))
	}
	var keep []string
	for _, p := range parts {
		switch p {
		case "", ".":
		case "..":
			if len(keep) > 0 {
				keep = keep[:len(keep)-1]
			}
		default:
			keep = append(keep, p)
		}
	}
	if len(keep) > 2 {
		keep = keep[len(keep)-2:]
	}
	return strings.ToLower(strings.Join(keep, "/"))
}

// CheckBase reports whether a adapts base model b: its base_model_name_or_path is b's
// served name, names one of b's hub ids (HubIDs; a path counts by the id it ends with),
// or, when absolute, is the folder b's engine loads (cleaned paths compared). Error:
// "model: adapter <dir> adapts <base>, not <what names b>".
func (a Adapter) CheckBase(b BaseModel) error {
	base := strings.TrimSpace(a.BaseModel)
	if base != "" && base == b.Served {
		return nil
	}
	if id := HubID(base); id != "" && slices.Contains(b.HubIDs(), id) {
		return nil
	}
	if b.Folder && filepath.IsAbs(base) && filepath.Clean(base) == b.Model {
		return nil
	}
	names := fmt.Sprintf("model %q", b.Served)
	if ids := b.HubIDs(); len(ids) > 0 {
		names += fmt.Sprintf(" (hub ids %s", strings.Join(ids, ", "))
		if b.Folder {
			names += ", folder " + b.Model
		}
		names += ")"
	}
	return fmt.Errorf("model: adapter %s adapts %q (base_model_name_or_path), not %s", a.Dir, a.BaseModel, names)
}

// CheckRank reports whether a's rank is at most maxRank (the engine's max_lora_rank).
func (a Adapter) CheckRank(maxRank int) error {
	if a.Rank > maxRank {
		return fmt.Errorf("model: adapter %s has rank %d, above the engine's max_lora_rank %d", a.Dir, a.Rank, maxRank)
	}
	return nil
}
