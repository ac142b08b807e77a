package options

import (
	"flag"
	"fmt"
	"strings"

	"github.com/turbine-llm/turbine/actors/worker"
	"github.com/turbine-llm/turbine/engines/launcher"
	"github.com/turbine-llm/turbine/engines/mocker/launch"
	"github.com/turbine-llm/turbine/messages"
)

// LoRA adapter slot defaults of the workers (docs/reference.md §26.2).
const (
	// DefaultMaxLorasWithLora is --max-loras when --lora is given without it: the
	// adapters given plus room for a few loaded at run time, and at least as many as
	// the --lora adapters.
	DefaultMaxLorasWithLora = 4
	// DefaultMaxLoraRank is --max-lora-rank: vLLM's --max-lora-rank default.
	DefaultMaxLoraRank = worker.DefaultMaxLoraRank
	// MaxMaxLoras and MaxMaxLoraRank bound the flags (vLLM's largest rank is 512).
	MaxMaxLoras    = 1024
	MaxMaxLoraRank = 512
)

// LoraAdapterFlag is one --lora NAME=PATH.
type LoraAdapterFlag struct{ Name, Path string }

// Lora are the workers' LoRA adapter flags of turbine node and turbine serve
// (docs/reference.md §26.2): the adapters loaded and pinned on every worker once its
// engine is ready, how many adapters a worker holds, and the largest rank its engine
// takes.
type Lora struct {
	Loras []LoraAdapterFlag
	// MaxLoras is --max-loras as given; MaxLorasSet says whether it was (flag or
	// environment). MaxLorasOrDefault is what the workers get.
	MaxLoras    int
	MaxLorasSet bool
	MaxLoraRank int
}

// DefaultLora returns the defaults: no adapter, adapters off, rank 16.
func DefaultLora() Lora { return Lora{MaxLoraRank: DefaultMaxLoraRank} }

// Flags registers --lora, --max-loras and --max-lora-rank on fs.
func (o *Lora) Flags(fs *flag.FlagSet) {
	fs.Var(&loraList{loras: &o.Loras, fs: fs}, "lora",
		"a LoRA adapter `NAME=PATH` loaded and pinned on every worker of the model once its engine is ready (repeatable, or comma-separated: TURBINE_LORA=a=/p,b=/q); the folder is checked at start (adapter_config.json, its base model, its rank)")
	IntVarTracked(fs, &o.MaxLoras, &o.MaxLorasSet, "max-loras",
		fmt.Sprintf("LoRA adapters each worker's engine holds at once (0: adapters off; not given: %d with --lora, or as many as --lora names when more, else 0)", DefaultMaxLorasWithLora))
	fs.IntVar(&o.MaxLoraRank, "max-lora-rank", o.MaxLoraRank,
		fmt.Sprintf("largest LoRA adapter rank the engines take (1..%d; vLLM takes 1, 8, 16, 32, 64, 128, 256, 320 or 512)", MaxMaxLoraRank))
}

// MaxLorasOrDefault is the adapters each worker holds: --max-loras when given, else
// DefaultMaxLorasWithLora (or the number of --lora adapters when larger) with --lora,
// else 0 (off).
func (o *Lora) MaxLorasOrDefault() int {
	switch {
	case o.MaxLorasSet:
		return o.MaxLoras
	case len(o.Loras) > 0:
		return max(DefaultMaxLorasWithLora, len(o.Loras))
	}
	return 0
}

// Validate checks the flags alone (the folders are checked against the model by
// CheckAdapters); errors name the flag.
func (o *Lora) Validate() error {
	switch {
	case o.MaxLoras < 0 || o.MaxLoras > MaxMaxLoras:
		return fmt.Errorf("--max-loras %d: want 0 (adapters off) .. %d", o.MaxLoras, MaxMaxLoras)
	case o.MaxLoraRank < 1 || o.MaxLoraRank > MaxMaxLoraRank:
		return fmt.Errorf("--max-lora-rank %d: want 1..%d", o.MaxLoraRank, MaxMaxLoraRank)
	case o.MaxLorasSet && len(o.Loras) > o.MaxLoras:
		return fmt.Errorf("--max-loras %d cannot hold the %d --lora adapters", o.MaxLoras, len(o.Loras))
	}
	seen := map[string]bool{}
	for _, a := range o.Loras {
		if seen[a.Name] {
			return fmt.Errorf("--lora %s=%s: adapter %q given twice", a.Name, a.Path, a.Name)
		}
		seen[a.Name] = true
	}
	return nil
}

// CheckAdapters checks every --lora folder as the workers will (worker.CheckAdapter)
// against the model card serves, whose engines load modelPath (a folder or a hub id;
// "" the card's tokenizer folder): so that a bad adapter fails the start, not each
// worker. Errors name the --lora and what is wrong.
func (o *Lora) CheckAdapters(card *messages.ModelCard, modelPath string) error {
	if len(o.Loras) == 0 {
		return nil
	}
	base, err := worker.BaseModelOf(card, modelPath)
	if err != nil {
		return fmt.Errorf("--lora: %w", err)
	}
	for _, a := range o.Loras {
		if a.Name == card.GetModel() {
			return fmt.Errorf("--lora %s=%s: the adapter's name is the base model's served name", a.Name, a.Path)
		}
		if _, err := worker.CheckAdapter(a.Path, base, o.MaxLoraRank); err != nil {
			return fmt.Errorf("--lora %s=%s: %w", a.Name, a.Path, err)
		}
	}
	return nil
}

// Adapters are the --lora adapters as a worker's configuration takes them
// (worker.Config.Loras).
func (o *Lora) Adapters() []*messages.LoraAdapter {
	var out []*messages.LoraAdapter
	for _, a := range o.Loras {
		out = append(out, &messages.LoraAdapter{Name: a.Name, Path: a.Path, Pinned: true})
	}
	return out
}

// SetWorker sets a worker configuration's adapter settings: the slots, the rank, and
// the --lora adapters when pinned (the workers of the model they were checked against).
func (o *Lora) SetWorker(cfg *worker.Config, pinned bool) {
	cfg.MaxLoras, cfg.MaxLoraRank = o.MaxLorasOrDefault(), o.MaxLoraRank
	if pinned {
		cfg.Loras = o.Adapters()
	}
}

// SetSpec sets a real engine's adapter slots and rank (its launcher starts it with
// LoRA enabled when MaxLoras > 0).
func (o *Lora) SetSpec(spec *launcher.Spec) {
	spec.MaxLoras, spec.MaxLoraRank = o.MaxLorasOrDefault(), o.MaxLoraRank
}

// SetMocker sets a mock engine's adapter slots and rank.
func (o *Lora) SetMocker(cfg *launch.Config) {
	cfg.Params.Engine.MaxLoras, cfg.Params.Engine.MaxLoraRank = o.MaxLorasOrDefault(), o.MaxLoraRank
}

// loraList is the value of --lora: NAME=PATH items, comma-separated, the flag
// repeatable. The command line wins over the environment: the adapters of TURBINE_LORA
// are replaced by those of the first --lora, and further --lora flags add theirs.
type loraList struct {
	loras *[]LoraAdapterFlag
	fs    *flag.FlagSet // Parsed tells the environment's Set from the command line's
	from  int           // where the items held came from: 0 the default, 1 the environment, 2 the command line
}

func (v *loraList) String() string {
	if v == nil || v.loras == nil {
		return ""
	}
	var parts []string
	for _, a := range *v.loras {
		parts = append(parts, a.Name+"="+a.Path)
	}
	return strings.Join(parts, ",")
}

func (v *loraList) Set(s string) error {
	from := 1
	if v.fs.Parsed() {
		from = 2
	}
	if from != v.from {
		*v.loras, v.from = nil, from
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		name, path, ok := strings.Cut(item, "=")
		name, path = strings.TrimSpace(name), strings.TrimSpace(path)
		switch {
		case !ok:
			return fmt.Errorf("%q: want NAME=PATH (the adapter's served name and its folder)", item)
		case name == "":
			return fmt.Errorf("%q: the adapter's name is empty", item)
		case path == "":
			return fmt.Errorf("%q: the adapter's folder is empty", item)
		case strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			return fmt.Errorf("%q: the adapter's name holds spaces or control characters", item)
		}
		*v.loras = append(*v.loras, LoraAdapterFlag{Name: name, Path: path})
	}
	return nil
}
