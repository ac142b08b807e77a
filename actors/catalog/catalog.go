// Package catalog is the Catalog grain: the list of served models and their model
// deployment cards, as announced by workers.
//
// Messages: Announce (a worker's card, actor ref and LoRA adapters, held and known, with a
// time-to-live), List. State: per model, per worker, the card, the worker actor's ref,
// its adapters and the expiry. Derived: the model list, one card per model, copied from
// one live worker's announcement with files_from set to that worker (so that the
// tokenizer digest and the worker that serves its files agree), then one entry per LoRA
// adapter a live worker holds or knows (docs/reference.md §26.3). Stored cards are
// never handed out or changed. Rebuilt after a move from the workers' next
// announcements (every heartbeat).
// Senders: workers (Announce), gateways (List).
package catalog

import (
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// Identity is the one Catalog grain's identity.
const Identity = "models"

type entry struct {
	card     *messages.ModelCard
	worker   *messages.ActorRef // nil from workers that do not say
	adapters []*messages.LoraAdapter
	known    []*messages.LoraAdapter // registered on the worker, not in its engine
	expires  time.Time
}

// Catalog implements messages.Catalog.
type Catalog struct {
	now    func() time.Time
	models map[string]map[string]entry // model -> worker id -> entry
}

// New returns an empty Catalog reading time from now.
func New(now func() time.Time) *Catalog {
	return &Catalog{now: now, models: map[string]map[string]entry{}}
}

// Kind returns the cluster kind hosting Catalog grains (never passivated).
func Kind() *cluster.Kind {
	return messages.NewCatalogKind(func() messages.Catalog { return New(time.Now) }, 0)
}

func (c *Catalog) Init(cluster.GrainContext)           {}
func (c *Catalog) Terminate(cluster.GrainContext)      {}
func (c *Catalog) ReceiveDefault(cluster.GrainContext) {}

// Announce records that a worker serves a model until ttl_ms from now. A ttl of 0 or
// less withdraws the worker.
func (c *Catalog) Announce(req *messages.AnnounceModel, _ cluster.GrainContext) (*messages.Ack, error) {
	if req.GetCard().GetModel() == "" || req.GetWorkerId() == "" {
		return &messages.Ack{}, nil
	}
	model := req.Card.Model
	if req.TtlMs <= 0 {
		delete(c.models[model], req.WorkerId)
		return &messages.Ack{}, nil
	}
	if c.models[model] == nil {
		c.models[model] = map[string]entry{}
	}
	c.models[model][req.WorkerId] = entry{card: req.Card, worker: req.Worker, adapters: req.Adapters,
		known: req.KnownAdapters, expires: c.now().Add(time.Duration(req.TtlMs) * time.Millisecond)}
	return &messages.Ack{}, nil
}

// List returns one card per model that has at least one unexpired worker, sorted by name:
// a copy of the card of the worker chosen by pick, with files_from set to that worker's
// actor ref (unset when it announced none). Then one entry per LoRA adapter those
// workers hold or know (adapterCards), sorted by adapter name, then base model.
func (c *Catalog) List(_ *messages.ListModelsRequest, _ cluster.GrainContext) (*messages.ModelList, error) {
	now := c.now()
	out := &messages.ModelList{}
	var adapters []*messages.ModelCard
	for model, workers := range c.models {
		for id, e := range workers {
			if now.After(e.expires) {
				delete(workers, id)
			}
		}
		if len(workers) == 0 {
			delete(c.models, model)
			continue
		}
		e := pick(workers)
		card := proto.Clone(e.card).(*messages.ModelCard)
		card.FilesFrom = nil
		if e.worker != nil {
			card.FilesFrom = proto.Clone(e.worker).(*messages.ActorRef)
		}
		out.Models = append(out.Models, card)
		adapters = append(adapters, adapterCards(card, workers)...)
	}
	sort.Slice(out.Models, func(i, j int) bool { return out.Models[i].Model < out.Models[j].Model })
	sort.Slice(adapters, func(i, j int) bool {
		a, b := adapters[i], adapters[j]
		return a.Model < b.Model || a.Model == b.Model && a.Lora.Parent < b.Lora.Parent
	})
	for _, a := range adapters {
		if _, base := c.models[a.Model]; !base { // a served base model's name is the model's
			out.Models = append(out.Models, a)
		}
	}
	return out, nil
}

// adapterCards returns one entry per LoRA adapter the live workers of base (its listed
// card) hold or know (a known adapter is served: a worker loads it again for a request):
// a copy of base with model = the adapter's name and lora = the adapter, its parent set
// to base's name. Workers with one adapter may differ on its path (each reports its own
// host's): the entry takes a pinned holder's, else an unpinned holder's, else a knowing
// worker's, the lowest worker id first; pinned is set when any holder pinned it.
func adapterCards(base *messages.ModelCard, workers map[string]entry) []*messages.ModelCard {
	ids := make([]string, 0, len(workers))
	for id := range workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	byName := map[string]*messages.LoraAdapter{}
	var names []string
	for pass := range 3 { // pinned holders, unpinned holders, knowing workers
		for _, id := range ids {
			list := workers[id].adapters
			if pass == 2 {
				list = workers[id].known
			}
			for _, a := range list {
				if a.GetName() == "" || pass < 2 && a.GetPinned() != (pass == 0) {
					continue
				}
				if byName[a.Name] == nil {
					if pass == 2 && a.GetPinned() { // never so from a worker: known adapters are unpinned
						a = proto.Clone(a).(*messages.LoraAdapter)
						a.Pinned = false
					}
					byName[a.Name] = a
					names = append(names, a.Name)
				}
			}
		}
	}
	out := make([]*messages.ModelCard, 0, len(names))
	for _, name := range names {
		card := proto.Clone(base).(*messages.ModelCard)
		card.Model = name
		card.Lora = proto.Clone(byName[name]).(*messages.LoraAdapter)
		card.Lora.Parent = base.Model
		out = append(out, card)
	}
	return out
}

// pick chooses the worker whose card a model is listed with: among those that announced
// an actor ref if any, the one announced last (latest expiry), then the lowest worker id,
// so that the choice does not depend on map order.
func pick(workers map[string]entry) entry {
	var best entry
	bestID := ""
	better := func(id string, e entry) bool {
		switch {
		case bestID == "":
			return true
		case (e.worker != nil) != (best.worker != nil):
			return e.worker != nil
		case !e.expires.Equal(best.expires):
			return e.expires.After(best.expires)
		}
		return id < bestID
	}
	for id, e := range workers {
		if better(id, e) {
			best, bestID = e, id
		}
	}
	return best
}
