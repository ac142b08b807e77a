package frontend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// LoRA adapters an operator loads and unloads (gateway.LoraAdmin; docs/reference.md
// §26.3): the model's Router grain says which workers there are, with their adapters and
// slots (Stats); placeLora chooses; LoadLora and UnloadLora go to the worker actors as
// requests with a timeout (Config.LoraTimeout), all at once, answered with LoraReply.

var _ gateway.LoraAdmin = (*Backend)(nil)

// DefaultLoraTimeout is Config.LoraTimeout's default: how long one worker may take to
// check, load (evicting an unpinned adapter first when it must) or unload an adapter.
const DefaultLoraTimeout = time.Minute

// loraOverlayTTL is how long this frontend lists an adapter it just loaded before the
// catalog does (or hides one it just unloaded everywhere while the catalog still lists
// it): the workers' next announcements (every heartbeat, a second by default) bring the
// catalog up to date well within it.
const loraOverlayTTL = 10 * time.Second

// LoadLora places req's adapter on workers of req.Model (placeLora) and sends each chosen
// worker LoadLora (loadOn). Errors: gateway.ErrUnknownModel (wrapped),
// gateway.ErrNoWorkers (wrapped: the Router grain did not answer, or no worker of the
// model is ready), gateway.ErrLoraConflict (wrapped).
func (b *Backend) LoadLora(ctx context.Context, req gateway.LoraLoad) (*gateway.LoraResult, error) {
	st, err := b.loraStats(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	res, err := loadOn(ctx, b.workerAsker(), st, req)
	if err != nil {
		return nil, err
	}
	for _, w := range res.Workers {
		if w.Failure == messages.LoraFailure_LORA_OK {
			b.noteLora(req.Model, &messages.LoraAdapter{Name: req.Name, Path: req.Path, Parent: req.Model, Pinned: !req.Unpinned}, true)
			break
		}
	}
	return res, nil
}

// UnloadLora sends UnloadLora to every worker of req.Model that holds or knows the
// adapter, then to the other workers that may be loading it (unloadEverywhere). Errors:
// gateway.ErrUnknownModel (wrapped), gateway.ErrNoWorkers (wrapped: the Router grain did
// not answer).
func (b *Backend) UnloadLora(ctx context.Context, req gateway.LoraUnload) (*gateway.LoraResult, error) {
	st, err := b.loraStats(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	res := unloadEverywhere(ctx, b.workerAsker(), st, req)
	gone := len(res.Workers) > 0
	for _, w := range res.Workers {
		gone = gone && (w.Failure == messages.LoraFailure_LORA_OK || w.Failure == messages.LoraFailure_LORA_NOT_FOUND)
	}
	if gone {
		b.noteLora(req.Model, &messages.LoraAdapter{Name: req.Name, Parent: req.Model}, false)
	}
	return res, nil
}

// loraStats checks that model is served and asks its Router grain for its workers.
func (b *Backend) loraStats(ctx context.Context, model string) (*messages.RouterStats, error) {
	if err := b.knownModel(ctx, model); err != nil {
		return nil, err
	}
	st, err := b.routerStats(model)
	if err != nil {
		// The grain is overloaded or moving: nothing is known to be wrong, retry.
		return nil, fmt.Errorf("%w: %w", gateway.ErrNoWorkers, err)
	}
	return st, nil
}

// loadOn places req's adapter on the workers of st (placeLora) and sends LoadLora (the
// adapter pinned unless req.Unpinned, its parent req.Model) through ask to the workers
// chosen and to those the placement is short of (NoSlot): a worker checks the folder
// before its slots, so a bad folder is refused as such even where no slot is free, and a
// slot freed since the router's stats is used. It reports one line per worker concerned:
// there already (Held: pinned, or for an unpinned load held or known), or its answer.
// Errors: gateway.ErrLoraConflict (wrapped), gateway.ErrNoWorkers (wrapped: no ready
// worker).
func loadOn(ctx context.Context, ask workerAsker, st *messages.RouterStats, req gateway.LoraLoad) (*gateway.LoraResult, error) {
	p := placeLora(loraWorkers(st, req.Name), req.Path, req.Workers, req.Unpinned)
	if p.Conflict != "" {
		return nil, fmt.Errorf("%w: worker %s holds %q from %q", gateway.ErrLoraConflict, p.Conflict, req.Name, p.ConflictPath)
	}
	if len(p.Send)+len(p.Held)+len(p.NoSlot) == 0 {
		return nil, fmt.Errorf("%w: %q has no ready worker to place adapter %q on", gateway.ErrNoWorkers, req.Model, req.Name)
	}
	if loraOff(st) {
		return nil, fmt.Errorf("%w: %q", gateway.ErrLoraOff, req.Model)
	}
	res := &gateway.LoraResult{}
	for _, id := range p.Held {
		res.Workers = append(res.Workers, gateway.LoraWorker{WorkerID: id, Held: true})
	}
	adapter := &messages.LoraAdapter{Name: req.Name, Path: req.Path, Parent: req.Model, Pinned: !req.Unpinned}
	res.Workers = append(res.Workers, askWorkers(ctx, ask, st, append(p.Send, p.NoSlot...), func() proto.Message {
		return &messages.LoadLora{Adapter: proto.Clone(adapter).(*messages.LoraAdapter)}
	})...)
	return res, nil
}

// unloadOn sends UnloadLora through ask to every worker of st that holds or knows req's
// adapter (WorkerStats.adapters, known_adapters), ready or not (a worker whose engine
// restarts would load its pinned adapters again), and reports their answers; none when
// no worker has it.
func unloadOn(ctx context.Context, ask workerAsker, st *messages.RouterStats, req gateway.LoraUnload) *gateway.LoraResult {
	var holders []string
	for _, w := range loraWorkers(st, req.Name) {
		if w.Has != nil {
			holders = append(holders, w.ID)
		}
	}
	return &gateway.LoraResult{Workers: askWorkers(ctx, ask, st, holders, func() proto.Message {
		return &messages.UnloadLora{Name: req.Name}
	})}
}

// loraProbeTimeout bounds the answer of a worker that unloadEverywhere asks without the
// router's stats listing the adapter there: it answers at once, from its own table.
const loraProbeTimeout = 5 * time.Second

// unloadEverywhere unloads req's adapter from the workers that hold or know it
// (unloadOn), then asks every other ready worker of st with adapter slots (and an
// address), each at most loraProbeTimeout: the router's stats list an adapter only once
// a worker has loaded it, so a load under way (an operator's, or a request's on demand)
// is found only so (docs/reference.md §26.3). Such a worker answers LORA_ENGINE (still
// loading: unload it once it is loaded), or LORA_OK when it held the adapter after all
// or forgot a load that waited for a slot; those lines follow the holders'. The workers
// with nothing to unload (LORA_NOT_FOUND) or that did not answer in time are left out:
// an adapter no worker has yields no line.
func unloadEverywhere(ctx context.Context, ask workerAsker, st *messages.RouterStats, req gateway.LoraUnload) *gateway.LoraResult {
	res := unloadOn(ctx, ask, st, req)
	asked := map[string]bool{}
	for _, w := range res.Workers {
		asked[w.WorkerID] = true
	}
	var others []string
	for _, w := range st.GetWorkers() {
		if w.GetReady() && w.GetMaxLoras() > 0 && w.GetActor() != nil && !asked[w.GetWorkerId()] {
			others = append(others, w.GetWorkerId())
		}
	}
	if len(others) == 0 {
		return res
	}
	pctx, cancel := context.WithTimeout(ctx, loraProbeTimeout)
	defer cancel()
	replied := func(ctx context.Context, pid *actor.PID, msg proto.Message) (*messages.LoraReply, error) {
		r, err := ask(ctx, pid, msg)
		if err != nil {
			r = &messages.LoraReply{Failure: messages.LoraFailure_LORA_NOT_FOUND} // no answer: nothing known there
		}
		return r, nil
	}
	for _, line := range askWorkers(pctx, replied, st, others, func() proto.Message { return &messages.UnloadLora{Name: req.Name} }) {
		if line.Failure != messages.LoraFailure_LORA_NOT_FOUND {
			res.Workers = append(res.Workers, line)
		}
	}
	return res
}

// workerAsker sends one LoadLora or UnloadLora to a worker actor and returns its
// LoraReply.
type workerAsker func(ctx context.Context, pid *actor.PID, msg proto.Message) (*messages.LoraReply, error)

// askWorkers sends msg() to each worker of ids (their actors from st) through ask, all
// at once, and returns one line per worker, in the order of ids: its answer, or
// LORA_ENGINE saying why there was none.
func askWorkers(ctx context.Context, ask workerAsker, st *messages.RouterStats, ids []string, msg func() proto.Message) []gateway.LoraWorker {
	refs := map[string]*messages.ActorRef{}
	for _, w := range st.GetWorkers() {
		refs[w.WorkerId] = w.Actor
	}
	out := make([]gateway.LoraWorker, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		out[i] = gateway.LoraWorker{WorkerID: id}
		ref := refs[id]
		if ref == nil {
			out[i].Failure, out[i].Error = messages.LoraFailure_LORA_ENGINE, "the router knows no address for the worker"
			continue
		}
		wg.Add(1)
		go func(line *gateway.LoraWorker) {
			defer wg.Done()
			reply, err := ask(ctx, actor.NewPID(ref.Address, ref.Id), msg())
			if err != nil {
				line.Failure, line.Error = messages.LoraFailure_LORA_ENGINE, err.Error()
				return
			}
			line.Failure, line.Error = reply.GetFailure(), reply.GetError()
		}(&out[i])
	}
	wg.Wait()
	return out
}

// workerAsker is the Backend's: through its current member's actor system, waiting at
// most Config.LoraTimeout.
func (b *Backend) workerAsker() workerAsker {
	return func(ctx context.Context, pid *actor.PID, msg proto.Message) (*messages.LoraReply, error) {
		sys := b.actorSystem()
		if sys == nil {
			return nil, errors.New("no actor system to reach the worker from")
		}
		return askWorker(ctx, sys.Root, pid, msg, b.cfg.LoraTimeout)
	}
}

// askWorker sends msg to a worker actor from root and waits for its LoraReply. Errors: no
// answer within timeout, ctx ended first, another answer.
func askWorker(ctx context.Context, root *actor.RootContext, pid *actor.PID, msg proto.Message, timeout time.Duration) (*messages.LoraReply, error) {
	f := root.RequestFuture(pid, msg, timeout)
	done := make(chan struct{})
	var res any
	var err error
	go func() {
		res, err = f.Result()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("the request ended before the worker answered: %w", ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("no answer within %v: %w", timeout, err)
	}
	reply, ok := res.(*messages.LoraReply)
	if !ok {
		return nil, fmt.Errorf("the worker answered %T, not LoraReply", res)
	}
	return reply, nil
}

// loraNote is an adapter this frontend loaded (or unloaded everywhere) that the catalog
// may not list (or may still list) yet.
type loraNote struct {
	card   *messages.ModelCard // the adapter's entry (loaded), or nil (unloaded)
	expiry time.Time
}

type loraKey struct{ model, name string }

// noteLora remembers, for loraOverlayTTL, that adapter (its name and its base model,
// parent) was loaded (listed from now on by Models, from its base model's card) or
// unloaded from every worker that held it (no longer listed), and drops the cached
// model list so that the next Models call asks the catalog.
func (b *Backend) noteLora(parent string, adapter *messages.LoraAdapter, loaded bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.loraNotes == nil {
		b.loraNotes = map[loraKey]loraNote{}
	}
	n := loraNote{expiry: time.Now().Add(loraOverlayTTL)}
	if loaded {
		for _, c := range b.models {
			if c.GetModel() == parent && c.GetLora() == nil {
				n.card = proto.Clone(c).(*messages.ModelCard)
				n.card.Model, n.card.Lora = adapter.Name, proto.Clone(adapter).(*messages.LoraAdapter)
			}
		}
		if n.card == nil {
			return // the base model left the list meanwhile
		}
	}
	b.loraNotes[loraKey{parent, adapter.Name}] = n
	b.modelsAt = time.Time{}
}

// withLoraNotes returns list (the catalog's) with the adapters this frontend loaded or
// unloaded a moment ago as they are now: added when the catalog does not list them yet,
// left out while it still lists them. A note the catalog agrees with, or older than
// loraOverlayTTL, is forgotten. The caller holds b.mu.
func (b *Backend) withLoraNotes(list []*messages.ModelCard, now time.Time) []*messages.ModelCard {
	if len(b.loraNotes) == 0 {
		return list
	}
	listed := map[loraKey]bool{}
	for _, c := range list {
		if a := c.GetLora(); a != nil {
			listed[loraKey{a.GetParent(), c.GetModel()}] = true
		}
	}
	for k, n := range b.loraNotes {
		if now.After(n.expiry) || listed[k] == (n.card != nil) {
			delete(b.loraNotes, k)
		}
	}
	if len(b.loraNotes) == 0 {
		return list
	}
	out := make([]*messages.ModelCard, 0, len(list)+len(b.loraNotes))
	for _, c := range list {
		if a := c.GetLora(); a != nil {
			if n, ok := b.loraNotes[loraKey{a.GetParent(), c.GetModel()}]; ok && n.card == nil {
				continue
			}
		}
		out = append(out, c)
	}
	var added []*messages.ModelCard
	for _, n := range b.loraNotes {
		if n.card != nil {
			added = append(added, n.card)
		}
	}
	slices.SortFunc(added, func(x, y *messages.ModelCard) int {
		return cmp.Or(cmp.Compare(x.GetModel(), y.GetModel()), cmp.Compare(x.GetLora().GetParent(), y.GetLora().GetParent()))
	})
	return append(out, added...)
}

// loraOff reports whether no ready worker of st has adapter slots (max_loras 0: its
// engine was started without adapters), so that a load can only fail.
func loraOff(st *messages.RouterStats) bool {
	for _, w := range st.GetWorkers() {
		if w.GetReady() && w.GetMaxLoras() > 0 {
			return false
		}
	}
	return true
}
