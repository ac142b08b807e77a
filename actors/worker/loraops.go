package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/internal/promlabel"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// The actor's side of LoRA adapters (docs/reference.md §26.2): LoadLora and UnloadLora
// from the frontends, loads on demand for requests that name an adapter the worker does
// not hold (a known one: from the folder it was loaded from before), and the pinned
// adapters a restarted engine is given again. Decisions are the loraTable's (lora.go);
// the folder checks and the engine calls run off the actor's goroutine and come back as
// the messages below.

// Metric families of the worker's adapters, on metrics' default set:
const (
	// counter {model,worker,kind}: adapters the engine loaded; kind "pinned" (LoadLora,
	// and the --lora adapters' first load), "unpinned" (LoadLora with pinned false),
	// "on_demand" (a request's load, a known adapter's included) or "restore" (a pinned
	// adapter loaded again into a restarted engine).
	metricLoraLoads = "turbine_worker_lora_loads_total"
	// counter {model,worker}: adapters unloaded (UnloadLora), known ones (forgotten)
	// included.
	metricLoraUnloads = "turbine_worker_lora_unloads_total"
	// counter {model,worker}: unpinned adapters unloaded to free a slot for another (they
	// stay known).
	metricLoraEvictions = "turbine_worker_lora_evictions_total"
	// counter {model,worker,reason}: loads that failed or were refused; reason "invalid"
	// (the folder, its base model or rank, a name taken, or the engine refused it),
	// "no_slot" or "engine" (the engine failed or is not ready).
	metricLoraLoadFailures = "turbine_worker_lora_load_failures_total"
	// histogram {model,worker}, seconds: an engine's adapter load call.
	metricLoraLoadSeconds = "turbine_worker_lora_load_seconds"
	// counter {model,worker}: loads for requests that waited for a slot (every slot held
	// a pinned adapter or one that running requests use).
	metricLoraSlotWaits = "turbine_worker_lora_slot_waits_total"
	// histogram {model,worker}, seconds: each such wait, until the load had its slot or
	// ended without one (its requests gone, the engine exited, an unload).
	metricLoraSlotWaitSeconds = "turbine_worker_lora_slot_wait_seconds"
)

// loraLoadBuckets are the upper bounds of the load and slot wait histograms: 5 ms ..
// 164 s.
var loraLoadBuckets = metrics.ExponentialBuckets(0.005, 2, 16)

// Internal messages: outcomes of the work done off the actor's goroutine.
type (
	// loraChecked: the folder check of entry name (generation gen) ended, or did not
	// end within Config.LoraCheckTimeout (stuck, err saying so).
	loraChecked struct {
		name    string
		gen     uint64
		adapter model.Adapter
		err     error
		stuck   bool
	}
	// loraLoaded: the engine calls of a load ended: victim's unload (when one was
	// evicted), then the load itself (not made when the victim's unload failed).
	loraLoaded struct {
		name      string
		gen       uint64
		victim    string
		victimErr error
		err       error
		took      time.Duration
	}
	// loraUnloaded: the engine's unload of entry name ended.
	loraUnloaded struct {
		name string
		gen  uint64
		err  error
	}
	// loraUnloadExpired: an unload's grace for the requests still using the adapter is
	// over.
	loraUnloadExpired struct {
		name string
		gen  uint64
	}
	// loraRestored: the pinned adapters of engine epoch were loaded into it (errs: those
	// that were not).
	loraRestored struct {
		epoch uint64
		errs  map[string]error
		took  map[string]time.Duration
	}
)

// errAdapterUnloaded is the cause of requests still using an adapter when its unload's
// grace is over: a migratable error chunk lets a worker that holds it complete them.
var errAdapterUnloaded = errors.New("worker: LoRA adapter unloaded")

// loraLoad is a load under way of one adapter (one per name at a time): the callers of
// LoadLora waiting for its reply, and done, which requests waiting for the adapter wait
// on. err is set before done closes (nil: loaded).
type loraLoad struct {
	gen     uint64
	epoch   uint64 // the engine it loads into
	kind    string // the loads metric's label
	done    chan struct{}
	err     *loraError
	replies []*actor.PID
	waiting time.Time // when it began to wait for a slot; zero: not waiting
}

// loraUnload is an unload under way: started once the engine was asked.
type loraUnload struct {
	gen     uint64
	started bool
	replies []*actor.PID
}

// CheckAdapter checks the LoRA adapter folder path before an engine sees it
// (docs/reference.md §26.2): it must read (model.ReadAdapter), adapt base
// (model.Adapter.CheckBase) and have a rank of at most maxRank. The error names what is
// wrong.
func CheckAdapter(path string, base model.BaseModel, maxRank int) (model.Adapter, error) {
	a, err := model.ReadAdapter(path)
	if err != nil {
		return model.Adapter{}, err
	}
	if err := a.CheckBase(base); err != nil {
		return model.Adapter{}, err
	}
	if err := a.CheckRank(maxRank); err != nil {
		return model.Adapter{}, err
	}
	return a, nil
}

// BaseModelOf is the base model that card serves, as adapters are checked against it:
// its served name, and modelPath, what its engine loads (a folder or a hub id); ""
// takes the card's tokenizer when that is a folder (a card read from a model folder
// names it there). Errors: model.ReadBaseModel's.
func BaseModelOf(card *messages.ModelCard, modelPath string) (model.BaseModel, error) {
	if modelPath == "" {
		if fi, err := os.Stat(card.GetTokenizer()); err == nil && fi.IsDir() {
			modelPath = card.GetTokenizer()
		}
	}
	return model.ReadBaseModel(card.GetModel(), modelPath)
}

// checkLoras checks Config's adapter settings and its pinned adapters' folders (the
// start refuses a bad one), and completes those adapters with their parent (the served
// model), base model and rank.
func checkLoras(cfg *Config) error {
	switch {
	case cfg.MaxLoras < 0:
		return fmt.Errorf("worker: max LoRA adapters %d < 0", cfg.MaxLoras)
	case cfg.MaxLoraRank < 0:
		return fmt.Errorf("worker: max LoRA rank %d < 0", cfg.MaxLoraRank)
	case len(cfg.Loras) > cfg.MaxLoras:
		return fmt.Errorf("worker: %d pinned LoRA adapters, but the worker holds at most %d (max LoRA adapters)", len(cfg.Loras), cfg.MaxLoras)
	}
	seen := map[string]bool{}
	checked := make([]*messages.LoraAdapter, 0, len(cfg.Loras))
	for _, a := range cfg.Loras {
		if err := checkLoraName(a.GetName(), cfg.Card.GetModel()); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		if seen[a.GetName()] {
			return fmt.Errorf("worker: LoRA adapter %q given twice", a.GetName())
		}
		seen[a.GetName()] = true
		ad, err := CheckAdapter(a.GetPath(), cfg.loraBase, cfg.MaxLoraRank)
		if err != nil {
			return fmt.Errorf("worker: LoRA adapter %q: %w", a.GetName(), err)
		}
		checked = append(checked, &messages.LoraAdapter{Name: a.GetName(), Path: a.GetPath(), Parent: cfg.Card.GetModel(),
			BaseModel: ad.BaseModel, Rank: int32(ad.Rank), Pinned: true})
	}
	cfg.Loras = checked
	return nil
}

// checkLoraName refuses a name that cannot be an adapter's: empty, the base model's
// served name, or holding spaces or control characters.
func checkLoraName(name, base string) error {
	switch {
	case name == "":
		return errors.New("lora_name: empty")
	case name == base:
		return fmt.Errorf("lora_name %q is the base model's served name", name)
	case strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return fmt.Errorf("lora_name %q holds spaces or control characters", name)
	}
	return nil
}

// maxLoras is how many adapters the worker may hold: Config.MaxLoras, or 0 while its
// engine's client cannot load adapters (engines.LoraLoader).
func (w *workerActor) maxLoras() int {
	if w.engine != nil {
		if _, ok := w.engine.(engines.LoraLoader); !ok {
			return 0
		}
	}
	return w.cfg.MaxLoras
}

// loraLoadMs is the mean of the engine's measured adapter loads (ms); 0: none yet.
func (w *workerActor) loraLoadMs() float64 {
	if w.loraLoadCount == 0 {
		return 0
	}
	return float64(w.loraLoadTotal.Nanoseconds()) / 1e6 / float64(w.loraLoadCount)
}

// loraReply is the LoraReply of an operation that ended with err (nil: done), with the
// adapters held now.
func (w *workerActor) loraReply(err *loraError) *messages.LoraReply {
	r := &messages.LoraReply{WorkerId: w.cfg.WorkerID, Adapters: w.loras.held(), MaxLoras: int32(w.maxLoras())}
	if err != nil {
		r.Failure, r.Error = err.failure, err.msg
	}
	return r
}

// respond sends reply to each of to (a nil PID is skipped).
func (w *workerActor) respond(to []*actor.PID, reply *messages.LoraReply) {
	for _, p := range to {
		if p != nil {
			w.sys.Root.Send(p, reply)
		}
	}
}

// loraRefusal checks what every adapter operation needs: adapters on, the worker not
// shutting down, its engine ready.
func (w *workerActor) loraRefusal() *loraError {
	switch {
	case w.maxLoras() == 0 && w.cfg.MaxLoras > 0:
		return loraErrorf(messages.LoraFailure_LORA_NO_SLOT, "worker %s: its engine cannot load LoRA adapters", w.cfg.WorkerID)
	case w.maxLoras() == 0:
		return loraErrorf(messages.LoraFailure_LORA_NO_SLOT, "worker %s serves no LoRA adapters (max LoRA adapters 0)", w.cfg.WorkerID)
	case w.draining || w.stopping:
		return loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s is shutting down", w.cfg.WorkerID)
	case !w.ready || w.engine == nil:
		return loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: engine not ready", w.cfg.WorkerID)
	}
	return nil
}

// loadLora answers m (an operator's load: pinned as m's adapter says) once the adapter
// is loaded, or at once when it is refused; a load that changed what the worker holds is
// registered with the Router grain (and announced) before the answer.
func (w *workerActor) loadLora(c actor.Context, m *messages.LoadLora) {
	sender := c.Sender()
	a := m.GetAdapter()
	err := w.loraRefusal()
	if err == nil {
		if e := checkLoraName(a.GetName(), w.cfg.Card.GetModel()); e != nil {
			err = loraErrorf(messages.LoraFailure_LORA_INVALID, "%v", e)
		} else if a.GetPath() == "" {
			err = loraErrorf(messages.LoraFailure_LORA_INVALID, "lora_path: empty")
		}
	}
	var l *loraLoad
	if err == nil {
		kind := "pinned"
		if !a.GetPinned() {
			kind = "unpinned"
		}
		l, err = w.startLoad(c, &messages.LoraAdapter{Name: a.GetName(), Path: a.GetPath(), Pinned: a.GetPinned()}, kind)
	}
	switch {
	case err != nil:
		w.loraFailed(a.GetName(), err)
		w.respond([]*actor.PID{sender}, w.loraReply(err))
	case l == nil: // held already: now pinned when the load pins
		reply := w.loraReply(nil)
		w.registerNow(func() { w.respond([]*actor.PID{sender}, reply) })
		w.wakeLoras(c.Self()) // the loads waiting for a slot fail once every slot is pinned
	default:
		l.replies = append(l.replies, sender)
	}
}

// startLoad starts loading a (name, path, pinned), or joins the load of it under way;
// nil, nil when the worker holds it already. A new load checks the folder first
// (loraChecked).
func (w *workerActor) startLoad(c actor.Context, a *messages.LoraAdapter, kind string) (*loraLoad, *loraError) {
	a.Parent = w.cfg.Card.GetModel()
	next, gen, err := w.loras.begin(a)
	switch {
	case err != nil:
		return nil, err
	case next == loraBeginHeld:
		return nil, nil
	case next == loraBeginJoin:
		if l := w.loraLoads[a.Name]; l != nil && l.gen == gen {
			return l, nil
		}
		return nil, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q: its load was lost", a.Name) // never: every check or load has its loraLoad
	}
	l := &loraLoad{gen: gen, epoch: w.epoch, kind: kind, done: make(chan struct{})}
	w.loraLoads[a.Name] = l
	self, name, path := c.Self(), a.Name, filepath.Clean(a.Path)
	go func() { w.sys.Root.Send(self, w.checkFolder(name, gen, path)) }()
	return l, nil
}

// checkFolder checks adapter folder path for entry name (generation gen), waiting at
// most Config.LoraCheckTimeout: a check that does not end by then (a file system that
// does not answer; the check itself never waits on a special file) is given up, stuck,
// and ends on its own later, unheard.
func (w *workerActor) checkFolder(name string, gen uint64, path string) loraChecked {
	done := make(chan loraChecked, 1)
	check, base, rank := w.cfg.checkAdapter, w.cfg.loraBase, w.cfg.MaxLoraRank
	go func() {
		ad, err := check(path, base, rank)
		done <- loraChecked{name: name, gen: gen, adapter: ad, err: err}
	}()
	timer := time.NewTimer(w.cfg.LoraCheckTimeout)
	defer timer.Stop()
	select {
	case out := <-done:
		return out
	case <-timer.C:
		return loraChecked{name: name, gen: gen, stuck: true,
			err: fmt.Errorf("the check of adapter folder %s did not finish within %v (its file system does not answer)", path, w.cfg.LoraCheckTimeout)}
	}
}

// onLoraChecked gives a checked adapter its slot (evicting one when none is free) and
// has the engine load it, or has it wait for a slot (wakeLoras); a bad folder ends the
// load, as does a check that did not end in time (LORA_ENGINE: the entry is dropped, so
// that the name is free again).
func (w *workerActor) onLoraChecked(c actor.Context, m loraChecked) {
	l := w.loraLoads[m.name]
	if l == nil || l.gen != m.gen {
		return // ended meanwhile (the engine exited)
	}
	if m.stuck {
		w.loras.drop(m.name, m.gen) // a known adapter stays known
		w.finishLoad(m.name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: %v", w.cfg.WorkerID, m.err))
		return
	}
	if m.err != nil {
		w.loras.reject(m.name, m.gen) // a known adapter whose folder no longer checks is forgotten
		w.finishLoad(m.name, l, loraErrorf(messages.LoraFailure_LORA_INVALID, "%v", m.err))
		return
	}
	loader, ok := w.engine.(engines.LoraLoader)
	if !ok || !w.ready || l.epoch != w.epoch {
		w.loras.drop(m.name, m.gen)
		w.finishLoad(m.name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: engine not ready", w.cfg.WorkerID))
		return
	}
	victim, wait, err := w.loras.reserve(m.name, m.gen, m.adapter)
	switch {
	case err != nil:
		w.finishLoad(m.name, l, err)
		return
	case wait:
		l.waiting = w.cfg.Now()
		w.counter(metricLoraSlotWaits).Inc()
		w.log.Debug().Str("adapter", m.name).Msg("LoRA adapter waits for a slot: every slot holds a pinned adapter or one in use")
		w.wakeLoras(c.Self()) // older waiting loads come first
		return
	}
	w.engineLoad(c.Self(), loader, m.name, m.gen, m.adapter.Dir, victim)
}

// engineLoad has the engine unload victim ("" none) then load name (generation gen)
// from path (loraLoaded, to self).
func (w *workerActor) engineLoad(self *actor.PID, loader engines.LoraLoader, name string, gen uint64, path, victim string) {
	timeout := w.cfg.LoraLoadTimeout
	go func() {
		out := loraLoaded{name: name, gen: gen, victim: victim}
		defer func() { w.sys.Root.Send(self, out) }()
		if victim != "" {
			ctx, cancel := context.WithTimeout(w.ctx, timeout)
			out.victimErr = loader.UnloadLora(ctx, victim)
			cancel()
			if out.victimErr != nil && !refusedByEngine(out.victimErr) {
				return
			}
		}
		ctx, cancel := context.WithTimeout(w.ctx, timeout)
		defer cancel()
		start := time.Now()
		out.err = loader.LoadLora(ctx, name, path)
		out.took = time.Since(start)
	}()
}

// wakeLoras settles the loads waiting for a slot (loraTable.wake) after anything that
// may have freed one or ended a wait: a load given its slot is loaded by the engine (its
// requests still wait for it), one given up or that no slot will ever take ends with
// its error (LORA_NO_SLOT: its requests, if any, fail as another worker may serve
// them). self is the worker's PID.
func (w *workerActor) wakeLoras(self *actor.PID) {
	for _, o := range w.loras.wake() {
		l := w.loraLoads[o.name]
		if l == nil || l.gen != o.gen {
			continue // never: every waiting entry has its load
		}
		w.waitEnded(l)
		if o.err != nil {
			w.finishLoad(o.name, l, o.err)
			continue
		}
		loader, ok := w.engine.(engines.LoraLoader)
		if !ok || l.epoch != w.epoch { // never: an exited engine's waiting loads ended with it
			if o.victim != "" {
				w.loras.evicted(o.victim, false)
			}
			w.loras.loaded(o.name, o.gen, false)
			w.finishLoad(o.name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: engine not ready", w.cfg.WorkerID))
			continue
		}
		w.log.Debug().Str("adapter", o.name).Str("evicting", o.victim).Msg("LoRA adapter has a slot after waiting")
		w.engineLoad(self, loader, o.name, o.gen, o.path, o.victim)
	}
}

// waitEnded records the end of l's wait for a slot, when it waited.
func (w *workerActor) waitEnded(l *loraLoad) {
	if l.waiting.IsZero() {
		return
	}
	waited := w.cfg.Now().Sub(l.waiting)
	l.waiting = time.Time{}
	metrics.GetOrCreatePrometheusHistogramExt(w.series(metricLoraSlotWaitSeconds), loraLoadBuckets).Update(max(waited, 0).Seconds())
}

// refusedByEngine reports whether err is the engine's refusal (an
// *engines.InvalidRequestError): of an unload, that it does not hold the adapter.
func refusedByEngine(err error) bool {
	var inv *engines.InvalidRequestError
	return errors.As(err, &inv)
}

// onLoraLoaded records the engine's load (and eviction) and ends the load; a slot
// that it freed (a failed load) or that is now free to evict (an adapter loaded for
// requests that have all ended) goes to the loads waiting for one.
func (w *workerActor) onLoraLoaded(m loraLoaded) {
	w.recordLoaded(m)
	w.wakeLoras(w.self)
}

// recordLoaded records the engine's load of m (and eviction) and ends the load.
func (w *workerActor) recordLoaded(m loraLoaded) {
	l := w.loraLoads[m.name]
	if l == nil || l.gen != m.gen {
		return
	}
	if m.victim != "" {
		gone := m.victimErr == nil || refusedByEngine(m.victimErr)
		vgen, back := w.loras.evicted(m.victim, gone)
		w.evictionEnded(m.victim, vgen, gone, back)
		if !gone {
			w.loras.loaded(m.name, m.gen, false)
			w.finishLoad(m.name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE,
				"worker %s: could not evict adapter %q to free a slot for %q: %v", w.cfg.WorkerID, m.victim, m.name, m.victimErr))
			return
		}
		w.counter(metricLoraEvictions).Inc()
		w.log.Info().Str("adapter", m.victim).Str("for", m.name).Msg("LoRA adapter evicted (least recently used); still known")
	}
	if m.err != nil {
		var err *loraError
		if refusedByEngine(m.err) {
			w.loras.reject(m.name, m.gen)
			msg, _ := embedFault(m.err)
			err = loraErrorf(messages.LoraFailure_LORA_INVALID, "the engine refused adapter %q: %s", m.name, msg)
		} else {
			w.loras.loaded(m.name, m.gen, false)
			err = loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: the engine could not load adapter %q: %v", w.cfg.WorkerID, m.name, m.err)
		}
		w.finishLoad(m.name, l, err)
		return
	}
	w.loras.loaded(m.name, m.gen, true)
	w.loadMeasured(l.kind, m.took)
	w.log.Info().Str("adapter", m.name).Str("kind", l.kind).Dur("took", m.took).Msg("LoRA adapter loaded")
	w.finishLoad(m.name, l, nil)
}

// evictionEnded settles the load that requests of victim (generation gen) that came
// during its eviction wait for, if any: back (out of the engine, still waited for), it
// is loaded again, its folder checked first (loraChecked), then a slot given as to any
// request's load; not gone (the engine still holds it), they go on with it; gone with
// none of them left, the load is not made (the adapter is known).
func (w *workerActor) evictionEnded(victim string, gen uint64, gone, back bool) {
	l := w.loraLoads[victim]
	if l == nil || l.gen != gen {
		if back { // never: the first request during the eviction made its load (useLora)
			w.loras.drop(victim, gen)
		}
		return
	}
	switch {
	case back:
		w.log.Debug().Str("adapter", victim).Msg("LoRA adapter evicted with requests waiting for it: loading it again")
		self, path := w.self, w.loras.entry(victim, gen).adapter.GetPath()
		go func() { w.sys.Root.Send(self, w.checkFolder(victim, gen, path)) }()
	case !gone:
		w.endLoad(victim, l, nil)
	default:
		w.endLoad(victim, l, loraErrorf(messages.LoraFailure_LORA_NO_SLOT,
			"adapter %q: the requests that waited for its eviction to end ended first", victim))
	}
}

// loadMeasured records one successful engine load of kind that took took.
func (w *workerActor) loadMeasured(kind string, took time.Duration) {
	w.loraLoadCount++
	w.loraLoadTotal += took
	w.counter(metricLoraLoads, "kind", kind).Inc()
	metrics.GetOrCreatePrometheusHistogramExt(w.series(metricLoraLoadSeconds), loraLoadBuckets).Update(took.Seconds())
}

// finishLoad ends load l of name with err (nil: loaded): the requests waiting for it go
// on (or fail), and its LoadLora callers are answered once the worker's adapters are
// registered.
func (w *workerActor) finishLoad(name string, l *loraLoad, err *loraError) {
	if err != nil {
		w.loraFailed(name, err)
	}
	w.endLoad(name, l, err)
}

// endLoad ends load l of name as finishLoad does, without counting a failure.
func (w *workerActor) endLoad(name string, l *loraLoad, err *loraError) {
	if w.loraLoads[name] == l {
		delete(w.loraLoads, name)
	}
	w.waitEnded(l)
	l.err = err
	close(l.done)
	reply, replies := w.loraReply(err), l.replies
	w.registerNow(func() { w.respond(replies, reply) })
}

// loraFailed logs and counts a load that failed or was refused.
func (w *workerActor) loraFailed(name string, err *loraError) {
	reason := "engine"
	switch err.failure {
	case messages.LoraFailure_LORA_INVALID:
		reason = "invalid"
	case messages.LoraFailure_LORA_NO_SLOT:
		reason = "no_slot"
	}
	w.counter(metricLoraLoadFailures, "reason", reason).Inc()
	w.log.Warn().Str("adapter", name).Str("reason", reason).Str("error", err.msg).Msg("LoRA adapter not loaded")
}

// unloadLora starts unloading adapter m.name: it takes no new request from now on (the
// Router grain is told at once), the engine unloads it once the requests using it
// ended (or their grace, Config.LoraUnloadGrace, is over: they are then handed back
// for migration), and m is answered once that is registered. A known adapter is
// forgotten at once (the engine does not hold it), whatever the engine's state; so is
// one whose load waits for a slot, whose requests then fail as another worker may serve
// them (LORA_ENGINE).
func (w *workerActor) unloadLora(c actor.Context, m *messages.UnloadLora) {
	sender, name := c.Sender(), m.GetName()
	if name != "" && w.loras.forget(name) {
		w.counter(metricLoraUnloads).Inc()
		w.log.Info().Str("adapter", name).Msg("known LoRA adapter unloaded (forgotten)")
		reply := w.loraReply(nil)
		w.registerNow(func() { w.respond([]*actor.PID{sender}, reply) })
		return
	}
	if gen, ok := w.loras.cancelWaiting(name); ok {
		w.counter(metricLoraUnloads).Inc()
		w.log.Info().Str("adapter", name).Msg("LoRA adapter unloaded while its load waited for a slot (forgotten)")
		if l := w.loraLoads[name]; l != nil && l.gen == gen {
			w.endLoad(name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE, "adapter %q was unloaded while it waited for a slot", name))
		}
		reply := w.loraReply(nil)
		w.registerNow(func() { w.respond([]*actor.PID{sender}, reply) })
		return
	}
	var err *loraError
	switch {
	case name == "":
		err = loraErrorf(messages.LoraFailure_LORA_INVALID, "lora_name: empty")
	case w.draining || w.stopping:
		err = loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s is shutting down", w.cfg.WorkerID)
	case !w.ready || w.engine == nil:
		err = loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: engine not ready", w.cfg.WorkerID)
	}
	if err == nil {
		if u := w.loraUnloads[name]; u != nil {
			u.replies = append(u.replies, sender)
			return
		}
	}
	var gen uint64
	var running int
	if err == nil {
		gen, running, err = w.loras.beginUnload(name)
	}
	if err != nil {
		w.respond([]*actor.PID{sender}, w.loraReply(err))
		return
	}
	u := &loraUnload{gen: gen, replies: []*actor.PID{sender}}
	w.loraUnloads[name] = u
	w.registerNow(nil)
	if running == 0 {
		w.engineUnload(c, name, u)
		return
	}
	w.log.Info().Str("adapter", name).Int("requests", running).Dur("grace", w.cfg.LoraUnloadGrace).
		Msg("unloading LoRA adapter once its requests end")
	self := c.Self()
	time.AfterFunc(w.cfg.LoraUnloadGrace, func() { w.sys.Root.Send(self, loraUnloadExpired{name: name, gen: gen}) })
}

// engineUnload has the engine unload name (loraUnloaded).
func (w *workerActor) engineUnload(c actor.Context, name string, u *loraUnload) {
	u.started = true
	loader, _ := w.engine.(engines.LoraLoader)
	self, gen, timeout := c.Self(), u.gen, w.cfg.LoraLoadTimeout
	go func() {
		out := loraUnloaded{name: name, gen: gen}
		if loader != nil {
			ctx, cancel := context.WithTimeout(w.ctx, timeout)
			out.err = loader.UnloadLora(ctx, name)
			cancel()
		}
		w.sys.Root.Send(self, out)
	}()
}

// onLoraUnloaded records the engine's unload and answers the UnloadLora callers once
// registered. An engine that says it does not hold the adapter unloaded it all the same.
// The slot freed (or the adapter held again, with no request) goes to the loads waiting
// for one.
func (w *workerActor) onLoraUnloaded(m loraUnloaded) {
	u := w.loraUnloads[m.name]
	if u == nil || u.gen != m.gen {
		return
	}
	defer w.wakeLoras(w.self)
	delete(w.loraUnloads, m.name)
	ok := m.err == nil || refusedByEngine(m.err)
	w.loras.unloaded(m.name, m.gen, ok)
	var err *loraError
	if ok {
		w.counter(metricLoraUnloads).Inc()
		w.log.Info().Str("adapter", m.name).Msg("LoRA adapter unloaded")
	} else {
		err = loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: the engine could not unload adapter %q: %v", w.cfg.WorkerID, m.name, m.err)
		w.log.Warn().Str("adapter", m.name).Err(m.err).Msg("LoRA adapter unload failed: still held")
	}
	reply, replies := w.loraReply(err), u.replies
	w.registerNow(func() { w.respond(replies, reply) })
}

// onLoraUnloadExpired hands back the requests still using an adapter whose unload's
// grace is over (a migratable error chunk each); the engine unloads it once they ended.
func (w *workerActor) onLoraUnloadExpired(m loraUnloadExpired) {
	u := w.loraUnloads[m.name]
	if u == nil || u.gen != m.gen || u.started {
		return
	}
	n := 0
	for _, r := range w.requests {
		if r.lora == m.name && r.loraGen == m.gen {
			r.cancel(errAdapterUnloaded)
			n++
		}
	}
	w.log.Warn().Str("adapter", m.name).Int("requests", n).Msg("LoRA adapter unload grace over: its requests handed back for migration")
}

// useLora counts request m's use of its adapter (sampling lora_name), starting a load on
// demand when the worker does not hold it: from the folder it knows it by (a known
// adapter, or one being evicted: loaded again once out), else from the folder the
// request names (lora_path).
// It returns the adapter's generation and the load to wait for (nil: held), or the text
// and fault of the error chunk that refuses the request: FAULT_INVALID_REQUEST when the
// adapter itself is bad, else FAULT_ENGINE_ERROR (another worker may serve it).
func (w *workerActor) useLora(c actor.Context, m *messages.Generate) (gen uint64, wait *loraLoad, msg string, fault messages.Fault) {
	name, path := m.GetSampling().GetLoraName(), m.GetSampling().GetLoraPath()
	if err := w.loraRefusal(); err != nil {
		return 0, nil, fmt.Sprintf("worker: adapter %q: %s", name, err.msg), messages.Fault_FAULT_ENGINE_ERROR
	}
	if gen, state, ok := w.loras.use(name); ok {
		l := w.loraLoads[name]
		switch {
		case state == loraHeld:
			return gen, nil, "", 0
		case state == loraEvicting:
			// Leaving the engine for another load: loaded again for its requests once
			// out (evictionEnded), as one load they all wait for.
			if l == nil || l.gen != gen {
				l = &loraLoad{gen: gen, epoch: w.epoch, kind: "on_demand", done: make(chan struct{})}
				w.loraLoads[name] = l
			}
			w.log.Debug().Str("adapter", name).Str("request_id", m.GetRequestId()).
				Msg("LoRA adapter request waits for its eviction to end, then its load")
			return gen, l, "", 0
		case l != nil && l.gen == gen:
			return gen, l, "", 0
		}
		w.loras.release(name, gen)
		return 0, nil, fmt.Sprintf("worker %s: adapter %q: its load was lost", w.cfg.WorkerID, name), messages.Fault_FAULT_ENGINE_ERROR
	}
	if known, ok := w.loras.knownPath(name); ok {
		path = known // the worker's own record: the folder it was loaded from
	}
	if path == "" {
		return 0, nil, fmt.Sprintf("worker %s does not hold adapter %q (and the request names no lora_path to load it from)",
			w.cfg.WorkerID, name), messages.Fault_FAULT_ENGINE_ERROR
	}
	if err := checkLoraName(name, w.cfg.Card.GetModel()); err != nil {
		return 0, nil, "worker: " + err.Error(), messages.Fault_FAULT_INVALID_REQUEST
	}
	l, err := w.startLoad(c, &messages.LoraAdapter{Name: name, Path: path}, "on_demand")
	if err != nil {
		w.loraFailed(name, err)
		return 0, nil, "worker: " + err.msg, loraFault(err)
	}
	gen, _, ok := w.loras.use(name)
	if !ok {
		return 0, nil, fmt.Sprintf("worker %s: adapter %q: its load was lost", w.cfg.WorkerID, name), messages.Fault_FAULT_ENGINE_ERROR
	}
	return gen, l, "", 0
}

// loraFault is the fault of a request whose adapter did not load because of err.
func loraFault(err *loraError) messages.Fault {
	if err.failure == messages.LoraFailure_LORA_INVALID {
		return messages.Fault_FAULT_INVALID_REQUEST
	}
	return messages.Fault_FAULT_ENGINE_ERROR
}

// awaitLora waits (on a request's goroutine) for load l of the request's adapter, at
// most timeout. ok: loaded. Otherwise msg and fault are the error chunk to send ("" when
// the request was cancelled by its caller: nothing is sent).
func awaitLora(ctx context.Context, l *loraLoad, name, workerID string, timeout time.Duration) (msg string, fault messages.Fault, ok bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-l.done:
		if l.err == nil {
			return "", 0, true
		}
		return "worker: " + l.err.msg, loraFault(l.err), false
	case <-ctx.Done():
		if cause := context.Cause(ctx); handedOver(cause) {
			return cause.Error(), messages.Fault_FAULT_ENGINE_ERROR, false
		}
		return "", 0, false
	case <-timer.C:
		return fmt.Sprintf("worker %s: adapter %q did not load within %v", workerID, name, timeout), messages.Fault_FAULT_ENGINE_ERROR, false
	}
}

// releaseLora ends a request's use of adapter name (generation gen); the last request
// of an adapter being unloaded lets the engine unload it; the last of an unpinned held
// adapter frees its slot for the loads waiting for one, and the last waiting for a load
// that waits for a slot gives that load up (wakeLoras).
func (w *workerActor) releaseLora(c actor.Context, name string, gen uint64) {
	if w.loras.release(name, gen) {
		if u := w.loraUnloads[name]; u != nil && u.gen == gen && !u.started {
			w.engineUnload(c, name, u)
		}
	}
	w.wakeLoras(c.Self())
}

// loraEngineLost forgets what an exited engine held (loraTable.engineLost: pinned
// adapters are loaded into the next engine, unpinned ones are known): loads under way
// fail, unloads under way are done (the engine took the adapter with it).
func (w *workerActor) loraEngineLost() {
	w.loras.engineLost()
	for name, l := range w.loraLoads {
		w.finishLoad(name, l, loraErrorf(messages.LoraFailure_LORA_ENGINE, "worker %s: the engine exited during the load", w.cfg.WorkerID))
	}
	for name, u := range w.loraUnloads {
		delete(w.loraUnloads, name)
		w.counter(metricLoraUnloads).Inc()
		reply, replies := w.loraReply(nil), u.replies
		w.registerNow(func() { w.respond(replies, reply) })
	}
}

// restoreLoras has a started engine (epoch) load the pinned adapters (a restarted
// engine lost them; at the first start, Config.Loras) before the worker reports ready
// (loraRestored). false: there are none, and the worker may report ready now.
func (w *workerActor) restoreLoras(c actor.Context, epoch uint64) bool {
	list := w.loras.restoring()
	if len(list) == 0 {
		return false
	}
	loader, ok := w.engine.(engines.LoraLoader)
	if !ok {
		w.log.Error().Int("adapters", len(list)).Msg("the engine cannot load LoRA adapters: pinned adapters dropped")
		for _, a := range list {
			w.loras.restored(a.Name, false)
		}
		return false
	}
	w.log.Info().Int("adapters", len(list)).Msg("loading the pinned LoRA adapters before serving")
	self, timeout := c.Self(), w.cfg.LoraLoadTimeout
	go func() {
		out := loraRestored{epoch: epoch, errs: map[string]error{}, took: map[string]time.Duration{}}
		for _, a := range list {
			ctx, cancel := context.WithTimeout(w.ctx, timeout)
			start := time.Now()
			if err := loader.LoadLora(ctx, a.Name, a.Path); err != nil {
				out.errs[a.Name] = err
			} else {
				out.took[a.Name] = time.Since(start)
			}
			cancel()
		}
		w.sys.Root.Send(self, out)
	}()
	return true
}

// onLoraRestored records the pinned adapters' loads into engine epoch, then reports
// the worker ready. An adapter that did not load is dropped (logged and counted).
func (w *workerActor) onLoraRestored(c actor.Context, m loraRestored) {
	if m.epoch != w.epoch || w.engine == nil {
		return // that engine is gone; the next one restores them
	}
	for _, a := range w.loras.restoring() {
		err, kind := m.errs[a.Name], "pinned"
		if w.loras.reloaded(a.Name) {
			kind = "restore"
		}
		w.loras.restored(a.Name, err == nil)
		if err != nil {
			w.counter(metricLoraLoadFailures, "reason", "engine").Inc()
			w.log.Error().Str("adapter", a.Name).Str("path", a.Path).Err(err).Msg("pinned LoRA adapter did not load: dropped")
			continue
		}
		w.loadMeasured(kind, m.took[a.Name])
	}
	w.engineUp(c, m.epoch)
}

// registerNow registers the worker with the Router grain at once (through the relay,
// after what it already queued) and announces it to the Catalog when ready, then runs
// then (nil: nothing), off the actor's goroutine: an adapter change reaches the router
// before whoever asked for it is answered. A heartbeat made before the change, still in
// flight, registers the change's adapters rather than its own (relay), and is followed
// by a fresh one (the Catalog's announcement).
func (w *workerActor) registerNow(then func()) {
	info := w.info()
	w.loraSeq++
	done := make(chan struct{})
	select {
	case w.relay.in <- relayRegister{info: info, seq: w.loraSeq, done: done}:
	default:
		close(done) // the relay is flooded: the next heartbeat tells the router
	}
	// A heartbeat in flight announces the adapters it saw: another one follows it.
	if w.hbBusy {
		w.hbAgain = true
	}
	go func() {
		select {
		case <-done:
		case <-w.ctx.Done():
			return
		}
		if w.cfg.Catalog != nil && info.Ready {
			w.announce(info)
		}
		if then != nil {
			then()
		}
	}()
}

// announce announces the worker's card and adapters to the Catalog grain (a ready
// worker's heartbeat, or an adapter change).
func (w *workerActor) announce(info *messages.WorkerInfo) {
	// Generous, so that a slow heartbeat never makes the model vanish for a moment.
	ttl := max(catalogTTLHeartbeats*w.cfg.Heartbeat, minCatalogTTL)
	if _, err := w.cfg.Catalog.Announce(&messages.AnnounceModel{Card: w.cfg.Card, WorkerId: w.cfg.WorkerID,
		TtlMs: ttl.Milliseconds(), Worker: info.Actor, Adapters: info.Adapters, KnownAdapters: info.KnownAdapters}); err != nil {
		w.log.Debug().Err(err).Msg("catalog announce failed")
	}
}

// series is the name of the worker's series of family with labels model, worker and kv
// (name, value pairs).
func (w *workerActor) series(family string, kv ...string) string {
	var b strings.Builder
	b.WriteString(family)
	b.WriteString(`{model="` + promlabel.Escape(w.cfg.Card.GetModel()) + `",worker="` + promlabel.Escape(w.cfg.WorkerID) + `"`)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(`,` + kv[i] + `="` + promlabel.Escape(kv[i+1]) + `"`)
	}
	b.WriteString("}")
	return b.String()
}

func (w *workerActor) counter(family string, kv ...string) *metrics.Counter {
	return metrics.GetOrCreateCounter(w.series(family, kv...))
}

// loraMetricsAtZero creates the adapter series of a worker that serves adapters, so that
// a scrape shows them before their first event.
func (w *workerActor) loraMetricsAtZero() {
	for _, kind := range []string{"pinned", "unpinned", "on_demand", "restore"} {
		w.counter(metricLoraLoads, "kind", kind)
	}
	for _, reason := range []string{"invalid", "no_slot", "engine"} {
		w.counter(metricLoraLoadFailures, "reason", reason)
	}
	w.counter(metricLoraUnloads)
	w.counter(metricLoraEvictions)
	w.counter(metricLoraSlotWaits)
	metrics.GetOrCreatePrometheusHistogramExt(w.series(metricLoraLoadSeconds), loraLoadBuckets)
	metrics.GetOrCreatePrometheusHistogramExt(w.series(metricLoraSlotWaitSeconds), loraLoadBuckets)
}
