package options

import "flag"

// LoraRouting is the frontend's flag for requests naming a LoRA adapter
// (docs/reference.md §26.3).
type LoraRouting struct {
	// LoraOnDemand lets such a request go to a worker that does not hold its adapter,
	// which loads it first (evicting its least recently used unpinned adapter when it has
	// no free slot); off, requests go only to workers holding it.
	LoraOnDemand bool
}

// DefaultLoraRouting returns the default: off, since a worker that loads an adapter on
// demand reads it from the path the holding workers registered, which then has to exist
// on every worker's host.
func DefaultLoraRouting() LoraRouting { return LoraRouting{} }

// Flags registers --lora-on-demand on fs.
func (o *LoraRouting) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.LoraOnDemand, "lora-on-demand", o.LoraOnDemand,
		"let a request naming a LoRA adapter go to a worker that does not hold it, which loads it first from the adapter's path (the path must exist on every worker's host); off: only workers holding it serve it")
}
