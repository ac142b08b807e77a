package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// adapterDir is a fixture adapter folder (testdata/adapters/<name>).
func adapterDir(name string) string { return filepath.Join("testdata", "adapters", name) }

// TestReadAdapter: the fixture folders read into their figures, and every bad one is
// refused with an error naming the folder or file and what is wrong.
func TestReadAdapter(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		want    Adapter
		wantErr []string // substrings of the error; nil: no error
	}{
		{dir: "qwen3-sql", want: Adapter{PeftType: "LORA", BaseModel: "Qwen/Qwen3-0.6B", Rank: 8, Alpha: 16,
			TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}, WeightsFile: "adapter_model.safetensors"}},
		{dir: "opt-regex", want: Adapter{PeftType: "LORA", BaseModel: "facebook/opt-125m", Rank: 4, Alpha: 8,
			TargetRegex: `.*\.(q_proj|v_proj)$`, WeightsFile: "adapter_model.bin"}},
		{dir: "qwen3-rank64", want: Adapter{PeftType: "LORA", BaseModel: "Qwen/Qwen3-0.6B", Rank: 64, Alpha: 128,
			TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}, WeightsFile: "adapter_model.safetensors"}},
		{dir: "does-not-exist", wantErr: []string{"model: adapter folder testdata/adapters/does-not-exist does not exist"}},
		{dir: "qwen3-sql/adapter_config.json", wantErr: []string{"is not a folder"}},
		{dir: "bad-no-config", wantErr: []string{"bad-no-config has no adapter_config.json (not a PEFT adapter folder)"}},
		{dir: "bad-no-weights", wantErr: []string{"bad-no-weights has no weights file (adapter_model.safetensors, adapter_model.bin"}},
		{dir: "bad-empty-weights", wantErr: []string{"adapter_model.safetensors is empty"}},
		{dir: "bad-prefix-tuning", wantErr: []string{"bad-prefix-tuning/adapter_config.json", `peft_type "PREFIX_TUNING": not a LoRA adapter`}},
		{dir: "bad-no-base", wantErr: []string{"base_model_name_or_path: missing"}},
		{dir: "bad-malformed", wantErr: []string{"bad-malformed/adapter_config.json: not a valid adapter configuration"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			got, err := ReadAdapter(adapterDir(tc.dir))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("read %+v, want an error", got)
				}
				for _, s := range append(tc.wantErr, "model: ") {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Dir = adapterDir(tc.dir)
			if got.Dir != tc.want.Dir || got.PeftType != tc.want.PeftType || got.BaseModel != tc.want.BaseModel ||
				got.Rank != tc.want.Rank || got.Alpha != tc.want.Alpha || !slices.Equal(got.TargetModules, tc.want.TargetModules) ||
				got.TargetRegex != tc.want.TargetRegex || got.WeightsFile != tc.want.WeightsFile {
				t.Errorf("read %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := ReadAdapter("  "); err == nil || !strings.Contains(err.Error(), "empty folder path") {
		t.Errorf("empty path: %v", err)
	}
}

// TestParseAdapterConfig: each key's rule, one case each.
func TestParseAdapterConfig(t *testing.T) {
	const ok = `"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":["q_proj"]`
	for _, tc := range []struct {
		name, json, err string
	}{
		{"complete", `{` + ok + `}`, ""},
		{"lower-case peft_type", `{"peft_type":"lora","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":"q"}`, ""},
		{"r as 8.0", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8.0,"lora_alpha":16.5,"target_modules":"q"}`, ""},
		{"not an object", `[1]`, "not a valid adapter configuration"},
		{"null", `null`, "not a JSON object"},
		{"no peft_type", `{"base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":["q"]}`, "peft_type: missing"},
		{"peft_type a number", `{"peft_type":1}`, "peft_type: want a string, got 1"},
		{"IA3", `{"peft_type":"IA3"}`, `peft_type "IA3": not a LoRA adapter`},
		{"empty base", `{"peft_type":"LORA","base_model_name_or_path":" ","r":8}`, "base_model_name_or_path: missing"},
		{"no r", `{"peft_type":"LORA","base_model_name_or_path":"b","lora_alpha":16}`, "r: missing"},
		{"r a string", `{"peft_type":"LORA","base_model_name_or_path":"b","r":"8"}`, `r: want an integer, got "8"`},
		{"r 0", `{"peft_type":"LORA","base_model_name_or_path":"b","r":0}`, "r 0: want a rank 1..65536"},
		{"r 8.5", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8.5}`, "r: want an integer"},
		{"no alpha", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"target_modules":["q"]}`, "lora_alpha: missing"},
		{"alpha a string", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":"x"}`, "lora_alpha: want a number"},
		{"no targets", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16}`, "target_modules: missing"},
		{"empty targets", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":[]}`, "an empty list"},
		{"empty regex", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":""}`, "an empty string"},
		{"empty target name", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":["q",""]}`, "target_modules[1]: an empty module name"},
		{"targets an object", `{"peft_type":"LORA","base_model_name_or_path":"b","r":8,"lora_alpha":16,"target_modules":{}}`, "want a list of module names or a regular expression"},
	} {
		_, err := ParseAdapterConfig([]byte(tc.json), "a/adapter_config.json")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		case err != nil && !strings.HasPrefix(err.Error(), "model: a/adapter_config.json: "):
			t.Errorf("%s: error %q lacks the prefix and file name", tc.name, err)
		}
	}
}

// FuzzParseAdapterConfig: any input is refused with an error that names the file, or
// gives an adapter that satisfies what ReadAdapter's callers rely on; nothing panics.
func FuzzParseAdapterConfig(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "adapters", "*", AdapterConfigFile))
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{"", "{}", "null", "[]", `{"peft_type":"LORA"}`, `{"r":1e400}`, `{"r":-1}`,
		`{"peft_type":"LORA","base_model_name_or_path":"b","r":9007199254740993,"lora_alpha":1,"target_modules":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAdapterConfig(data, "fuzz/adapter_config.json")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "model: fuzz/adapter_config.json: ") {
				t.Fatalf("error without the prefix and file name: %v", err)
			}
			return
		}
		switch {
		case a.PeftType != "LORA":
			t.Fatalf("peft_type %q accepted", a.PeftType)
		case strings.TrimSpace(a.BaseModel) == "":
			t.Fatal("an adapter without a base model accepted")
		case a.Rank < 1 || a.Rank > MaxAdapterRank:
			t.Fatalf("rank %d accepted", a.Rank)
		case (a.TargetRegex == "") == (len(a.TargetModules) == 0):
			t.Fatalf("target modules %q and regex %q: want exactly one", a.TargetModules, a.TargetRegex)
		}
	})
}

// TestHubID: ids, paths ending in an org/name pair and hub cache folders.
func TestHubID(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"Qwen/Qwen3-0.6B":            "qwen/qwen3-0.6b",
		"gpt2":                       "gpt2",
		"/models/Qwen/Qwen3-0.6B":    "qwen/qwen3-0.6b",
		"/models/Qwen/Qwen3-0.6B/":   "qwen/qwen3-0.6b",
		"./Qwen3-0.6B":               "qwen3-0.6b",
		"/data/a/../Qwen/Qwen3-0.6B": "qwen/qwen3-0.6b",
		"ckpt/Qwen/Qwen3-0.6B":       "qwen/qwen3-0.6b",
		"/qwen3":                     "qwen3",
		"~/hf/models--Qwen--Qwen3-0.6B/snapshots/abc": "qwen/qwen3-0.6b",
		"/hub/models--gpt2/snapshots/abc":             "gpt2",
	} {
		if got := HubID(in); got != want {
			t.Errorf("HubID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCheckBase: an adapter adapts the served model when its base_model_name_or_path is
// the served name, a hub id of the model (from the served name, config.json's
// _name_or_path or the folder's path), or the model folder itself; never another model.
func TestCheckBase(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join("testdata", "opt-125m"))
	if err != nil {
		t.Fatal(err)
	}
	optFolder, err := ReadBaseModel("opt", filepath.Join("testdata", "opt-125m"))
	if err != nil {
		t.Fatal(err)
	}
	if !optFolder.Folder || optFolder.Model != abs || optFolder.NameOrPath != "facebook/opt-125m" {
		t.Fatalf("ReadBaseModel: %+v", optFolder)
	}
	byHub := BaseModel{Served: "Qwen/Qwen3-0.6B", Model: "Qwen/Qwen3-0.6B"}
	qwenFolder := BaseModel{Served: "qwen", Model: "/models/Qwen/Qwen3-0.6B", Folder: true}
	for _, tc := range []struct {
		name string
		base string
		b    BaseModel
		ok   bool
	}{
		{"served name", "my-model", BaseModel{Served: "my-model"}, true},
		{"hub id served", "Qwen/Qwen3-0.6B", byHub, true},
		{"hub id, other case", "qwen/QWEN3-0.6B", byHub, true},
		{"hub id from _name_or_path", "facebook/opt-125m", optFolder, true},
		{"the model folder", abs, optFolder, true},
		{"the model folder, not clean", abs + "/./", optFolder, true},
		{"hub id the folder ends with", "Qwen/Qwen3-0.6B", qwenFolder, true},
		{"a local copy of the hub id", "/data/ckpt/Qwen/Qwen3-0.6B", byHub, true},
		{"hub cache snapshot", "/root/.cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/c18", byHub, true},
		{"another model", "meta-llama/Llama-3.1-8B-Instruct", byHub, false},
		{"another size", "Qwen/Qwen3-8B", qwenFolder, false},
		{"another folder", "/models/opt-350m", optFolder, false},
		{"a folder of another name", "../elsewhere/opt-125m", BaseModel{Served: "x", Model: abs, Folder: true}, false},
		{"the served name of another model", "my-model", BaseModel{Served: "my-model-2"}, false},
	} {
		err := Adapter{Dir: "a", BaseModel: tc.base}.CheckBase(tc.b)
		if tc.ok != (err == nil) {
			t.Errorf("%s: base %q against %+v: %v", tc.name, tc.base, tc.b, err)
		}
		if err != nil && !strings.Contains(err.Error(), `adapts "`+tc.base+`" (base_model_name_or_path), not model "`+tc.b.Served+`"`) {
			t.Errorf("%s: error %q does not name both models", tc.name, err)
		}
	}
	// The fixtures, against a Qwen3-0.6B served under another name from a hub id.
	qwen := BaseModel{Served: "sql-bot", Model: "Qwen/Qwen3-0.6B"}
	for dir, ok := range map[string]bool{"qwen3-sql": true, "qwen3-hub-cache": true, "qwen3-local-base": true,
		"llama-chat": false, "opt-regex": false} {
		a, err := ReadAdapter(adapterDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.CheckBase(qwen); ok != (err == nil) {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

func TestCheckRank(t *testing.T) {
	a := Adapter{Dir: "a", Rank: 64}
	if err := a.CheckRank(64); err != nil {
		t.Error(err)
	}
	if err := a.CheckRank(16); err == nil || err.Error() != "model: adapter a has rank 64, above the engine's max_lora_rank 16" {
		t.Errorf("rank 64 against 16: %v", err)
	}
}
