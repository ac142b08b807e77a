package options

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/cmd/turbine/internal/cli"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/messages"
)

// TestLoraFlags parses --lora, --max-loras and --max-lora-rank (and TURBINE_LORA) as a
// subcommand does, validates, and checks what the workers get.
func TestLoraFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       string // TURBINE_LORA; "-" leaves it unset
		args      []string
		loras     string // NAME=PATH,... as parsed
		maxLoras  int    // MaxLorasOrDefault
		parseErr  string
		validErr  string
		wantRank  int
		maxLoraOK bool
	}{
		{name: "none", env: "-", maxLoras: 0, wantRank: 16},
		{name: "one: 4 slots", env: "-", args: []string{"--lora", "sql=/a/sql"}, loras: "sql=/a/sql", maxLoras: 4, wantRank: 16},
		{name: "repeated and comma-separated", env: "-", args: []string{"--lora", "a=/a", "--lora=b=/b, c=/c"},
			loras: "a=/a,b=/b,c=/c", maxLoras: 4, wantRank: 16},
		{name: "more than the default", env: "-", args: []string{"--lora", "a=/a,b=/b,c=/c,d=/d,e=/e"},
			loras: "a=/a,b=/b,c=/c,d=/d,e=/e", maxLoras: 5, wantRank: 16},
		{name: "slots given", env: "-", args: []string{"--lora", "a=/a", "--max-loras", "8", "--max-lora-rank", "64"},
			loras: "a=/a", maxLoras: 8, wantRank: 64},
		{name: "slots without --lora", env: "-", args: []string{"--max-loras", "2"}, maxLoras: 2, wantRank: 16},
		{name: "environment", env: "a=/a,b=/b", loras: "a=/a,b=/b", maxLoras: 4, wantRank: 16},
		{name: "command line wins", env: "a=/a", args: []string{"--lora", "b=/b"}, loras: "b=/b", maxLoras: 4, wantRank: 16},
		{name: "a path with '='", env: "-", args: []string{"--lora", "a=/x=y"}, loras: "a=/x=y", maxLoras: 4, wantRank: 16},
		{name: "no '='", env: "-", args: []string{"--lora", "sql"}, parseErr: `"sql": want NAME=PATH`},
		{name: "no name", env: "-", args: []string{"--lora", "=/a"}, parseErr: "the adapter's name is empty"},
		{name: "no path", env: "-", args: []string{"--lora", "a="}, parseErr: "the adapter's folder is empty"},
		{name: "a space in the name", env: "-", args: []string{"--lora", "a b=/a"}, parseErr: "holds spaces"},
		{name: "bad environment", env: "sql", parseErr: "TURBINE_LORA"},
		{name: "twice", env: "-", args: []string{"--lora", "a=/a", "--lora", "a=/b"}, loras: "a=/a,a=/b", maxLoras: 4,
			validErr: `--lora a=/b: adapter "a" given twice`},
		{name: "too few slots", env: "-", args: []string{"--lora", "a=/a,b=/b", "--max-loras", "1"}, loras: "a=/a,b=/b",
			maxLoras: 1, validErr: "--max-loras 1 cannot hold the 2 --lora adapters"},
		{name: "adapters off with --lora", env: "-", args: []string{"--lora", "a=/a", "--max-loras", "0"}, loras: "a=/a",
			validErr: "--max-loras 0 cannot hold the 1 --lora adapters"},
		{name: "negative slots", env: "-", args: []string{"--max-loras", "-1"}, maxLoras: -1, validErr: "--max-loras -1: want 0"},
		{name: "rank 0", env: "-", args: []string{"--max-lora-rank", "0"}, validErr: "--max-lora-rank 0: want 1..512"},
		{name: "rank too large", env: "-", args: []string{"--max-lora-rank", "1024"}, validErr: "--max-lora-rank 1024: want 1..512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "-" {
				t.Setenv(cli.EnvName("lora"), tc.env)
			}
			o := DefaultLora()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.Flags(fs)
			_, err := cli.ParseCommand(fs, tc.args)
			if tc.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
					t.Fatalf("parse error %v, want %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range o.Loras {
				got = append(got, a.Name+"="+a.Path)
			}
			if strings.Join(got, ",") != tc.loras || o.MaxLorasOrDefault() != tc.maxLoras {
				t.Errorf("parsed %v max %d, want %q max %d", got, o.MaxLorasOrDefault(), tc.loras, tc.maxLoras)
			}
			err = o.Validate()
			if tc.validErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.validErr) {
					t.Fatalf("validate: %v, want %q", err, tc.validErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg worker.Config
			o.SetWorker(&cfg, true)
			var spec launcher.Spec
			o.SetSpec(&spec)
			var mock launch.Config
			o.SetMocker(&mock)
			if cfg.MaxLoras != tc.maxLoras || cfg.MaxLoraRank != tc.wantRank || len(cfg.Loras) != len(o.Loras) ||
				spec.MaxLoras != tc.maxLoras || spec.MaxLoraRank != tc.wantRank ||
				mock.Params.Engine.MaxLoras != tc.maxLoras || mock.Params.Engine.MaxLoraRank != tc.wantRank {
				t.Errorf("worker %d/%d/%d, spec %d/%d, mock %d/%d; want %d slots, rank %d", cfg.MaxLoras, cfg.MaxLoraRank,
					len(cfg.Loras), spec.MaxLoras, spec.MaxLoraRank, mock.Params.Engine.MaxLoras, mock.Params.Engine.MaxLoraRank,
					tc.maxLoras, tc.wantRank)
			}
			for _, a := range cfg.Loras {
				if !a.Pinned {
					t.Errorf("adapter %v not pinned", a)
				}
			}
			var unpinned worker.Config
			o.SetWorker(&unpinned, false)
			if len(unpinned.Loras) != 0 || unpinned.MaxLoras != tc.maxLoras {
				t.Errorf("a worker of another model: %d adapters, %d slots", len(unpinned.Loras), unpinned.MaxLoras)
			}
		})
	}
}

// TestLoraCheckAdapters: a --lora whose folder is missing, not a LoRA adapter, of
// another base model or of a rank above --max-lora-rank fails the start, naming it.
func TestLoraCheckAdapters(t *testing.T) {
	dir := func(name string) string {
		return filepath.Join("..", "..", "..", "..", "model", "testdata", "adapters", name)
	}
	card := &messages.ModelCard{Model: "Qwen/Qwen3-0.6B", Tokenizer: "builtin:cl100k_base"}
	for _, tc := range []struct {
		name, lora string
		rank       int
		err        string
	}{
		{"good", "sql=" + dir("qwen3-sql"), 16, ""},
		{"good, rank 64 allowed", "big=" + dir("qwen3-rank64"), 64, ""},
		{"missing", "x=" + dir("nope"), 16, "does not exist"},
		{"not LoRA", "x=" + dir("bad-prefix-tuning"), 16, `peft_type "PREFIX_TUNING": not a LoRA adapter`},
		{"another base", "x=" + dir("llama-chat"), 16, `adapts "meta-llama/Llama-3.1-8B-Instruct"`},
		{"rank", "big=" + dir("qwen3-rank64"), 16, "has rank 64, above the engine's max_lora_rank 16"},
		{"the base model's name", "Qwen/Qwen3-0.6B=" + dir("qwen3-sql"), 16, "the adapter's name is the base model's served name"},
	} {
		o := DefaultLora()
		o.MaxLoraRank = tc.rank
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.Flags(fs)
		if err := fs.Parse([]string{"--lora", tc.lora}); err != nil {
			t.Fatal(err)
		}
		err := o.CheckAdapters(card, "")
		name, path, _ := strings.Cut(tc.lora, "=")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) ||
			!strings.HasPrefix(err.Error(), fmt.Sprintf("--lora %s=%s: ", name, path))):
			t.Errorf("%s: error %v, want --lora %s=%s: ...%q", tc.name, err, name, path, tc.err)
		}
	}
}
