package kvbm

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/kv"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

// Props returns the props of the block manager actor over m (spawn it as ActorName). The
// actor publishes m's inventory to Config.Routers from Started and closes m when it stops.
func (m *Manager) Props() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &kvbmActor{m: m, routers: m.cfg.Routers, owns: true} })
}

// MemberProps returns the props of an actor that publishes m's inventory to routers (nil:
// Config.Routers) and answers its status, and leaves m open when it stops: m outlives the
// cluster member (docs/reference.md §10), one such actor on each member in turn. The
// inventory's numbering is m's, so a router sees one epoch go on across members.
func (m *Manager) MemberProps(routers func(model string) RouterClient) *actor.Props {
	if routers == nil {
		routers = m.cfg.Routers
	}
	return actor.PropsFromProducer(func() actor.Actor { return &kvbmActor{m: m, routers: routers} })
}

type kvbmActor struct {
	m       *Manager
	routers func(model string) RouterClient
	owns    bool // the actor closes m when it stops
	pub     *publisher
	cancel  context.CancelFunc
	done    chan struct{}
}

func (a *kvbmActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start()
	case *messages.KvbmStatusRequest:
		ctx.Respond(a.m.Status(a.pub.models()))
	case *actor.Stopping:
		a.stop()
		if !a.owns {
			return
		}
		if err := a.m.Close(); err != nil {
			a.m.cfg.Logger.Warn().Err(err).Msg("kvbm: closing the store")
		}
	case *actor.Restarting:
		a.stop()
	default:
		_ = msg
	}
}

func (a *kvbmActor) start() {
	if a.pub != nil {
		return
	}
	cfg := a.m.cfg
	a.pub = &publisher{st: a.m.st, jan: a.m.jan, routers: a.routers, log: cfg.Logger.With().Str("node", cfg.NodeID).Logger(),
		inv: a.m.inv, stepMu: &a.m.pubMu, fail: &a.m.pubFail}
	a.m.pubMu.Lock()
	a.m.inv.Overflowed() // a publisher's first batches are snapshots: its routers may be new
	a.pub.published = a.m.inv.Models()
	a.m.pubMu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		a.pub.run(ctx, cfg.PublishInterval)
	}()
}

func (a *kvbmActor) stop() {
	if a.cancel != nil {
		a.cancel()
		<-a.done
		a.cancel = nil
	}
}

// publisher drains the store's changes every interval and publishes them to the models'
// Router grains. It uses the Manager's Inventory (numbering) under stepMu, held for a
// whole step, so each model's batches leave in order even if a member's publisher has not
// yet stopped when the next one starts; no other lock is held across a grain call.
type publisher struct {
	st      *store.Store
	jan     *store.Janitor // the fs:// janitor, nil without one: its files are disk-tier blocks
	routers func(model string) RouterClient
	log     zerolog.Logger
	inv     *Inventory
	stepMu  *sync.Mutex

	mu        sync.Mutex
	published []string // Inventory.Models after the latest step (read by the actor)

	buf []store.Change
	// fail is the Manager's: a failure a lost member's publisher logged is followed by
	// the next member's "published again".
	fail    *publishFailures
	foreign int
}

func (p *publisher) models() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

func (p *publisher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.step(ctx)
		}
	}
}

// step drains the store once and sends the batches the Inventory makes of it; nothing
// once ctx is done (a stopped publisher whose ticker fired as it stopped must not take
// the next member's snapshot for its own dead routers).
func (p *publisher) step(ctx context.Context) {
	p.stepMu.Lock()
	defer p.stepMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	changes, overflowed := p.st.Changes(p.buf[:0])
	if p.jan != nil {
		var janOver bool
		changes, janOver = p.jan.Changes(changes)
		overflowed = overflowed || janOver
	}
	p.buf = changes[:0]
	if overflowed {
		p.inv.Overflowed()
	}
	var snap Grouped
	if p.inv.WantsSnapshot() {
		var blocks []Block
		add := func(key string, tier kv.Tier) { blocks = append(blocks, Block{Key: key, Tier: tier}) }
		p.st.Snapshot(add)
		if p.jan != nil {
			p.jan.Snapshot(add)
		}
		snap = SnapshotOf(blocks)
	}
	g := Group(changes)
	p.foreign += g.Foreign
	batches := p.inv.Step(g, snap)
	p.mu.Lock()
	p.published = p.inv.Models()
	p.mu.Unlock()
	if p.routers == nil {
		return
	}
	failed := map[string]bool{}
	for _, b := range batches {
		if failed[b.Model] {
			continue // its router missed a batch: it gets a snapshot next
		}
		ack, err := p.routers(b.Model).PublishInventory(b)
		switch {
		case err != nil:
			failed[b.Model] = true
			p.inv.NeedSnapshot(b.Model)
			p.logFailure(b.Model, err)
		case ack.GetNeedDump():
			failed[b.Model] = true
			p.inv.NeedSnapshot(b.Model)
		}
	}
	if len(failed) == 0 && !p.fail.since.IsZero() {
		p.log.Info().Dur("failed_for", time.Since(p.fail.since).Round(time.Second)).Msg("kvbm inventory published again")
		p.fail.since = time.Time{}
	}
}

// publishFailures is when publishing started failing (zero: it is not failing) and when
// that was last logged; guarded by the Manager's step lock.
type publishFailures struct{ since, lastLog time.Time }

// logFailure logs a failed publication once when failures start, then once a minute.
func (p *publisher) logFailure(model string, err error) {
	now := time.Now()
	if p.fail.since.IsZero() {
		p.fail.since = now
	} else if now.Sub(p.fail.lastLog) < time.Minute {
		return
	}
	p.fail.lastLog = now
	p.log.Warn().Err(err).Str("model", model).Msg("kvbm inventory not published (no Router grain reachable?): a snapshot follows once one is")
}
