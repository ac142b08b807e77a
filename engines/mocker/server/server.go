// Package server runs the mock engine core (engines/mocker) as an engine process that
// speaks one engine's HTTP dialect (Options.Dialect; each dialect is a plugin behind the
// Dialect interface, dialect.go):
//
//   - vllm (default): the OpenAI completions endpoint in vLLM's dialect, /health,
//     /v1/models, Prometheus /metrics with vLLM's metric names (engines/vllm).
//   - sglang: SGLang's native /generate, /abort_request, /health, /health_generate,
//     /get_model_info and /metrics with SGLang's names (engines/sglang).
//   - trtllm: trtllm-serve's /v1/completions (token ids with "detokenize": false),
//     /health, /v1/models, /version, JSON iteration stats on GET /metrics and KV cache
//     events on POST /kv_cache_events (engines/trtllm).
//
// KV events go over ZeroMQ in vLLM's wire format when configured (SGLang publishes the
// same layout). The core runs in one goroutine on the real clock; every step's outputs
// and events are released when the step's modelled duration has passed.
//
// Disaggregated serving (disagg.go): every dialect serves prefill and decode legs in its
// engine's own parameters (vLLM's kv_transfer_params, TensorRT-LLM's
// disaggregated_params, SGLang's bootstrap fields), and the KV blocks move between mock
// engines over a real TCP connection (engines/mocker/kvtransfer), paced at a bandwidth.
//
// Structured outputs (structured.go): each dialect reads an output constraint in its
// engine's fields (vLLM's structured_outputs, SGLang's json_schema/regex/ebnf,
// trtllm-serve's response_format) into mocker.Request.Structured.
//
// LoRA adapters (lora.go): with --max-loras slots, each dialect loads and unloads
// adapters as its engine does (vLLM's /v1/load_lora_adapter, SGLang's
// /load_lora_adapter, trtllm-serve's lora_request on demand), a load stalling the engine
// for its modelled time, and a request naming an adapter runs with it.
//
// Model families (persona.go): with Options.ToolCallParser or ReasoningParser, and for
// any request with such a constraint, the answer is planned from the decoded prompt by
// engines/mocker/persona (thinking, tool calls, an instance of the constraint) and
// generated token by token with the usual timing (mocker.Request.Script).
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvbmtier"
	"github.com/turbine-llm/turbine/model"
)

// Options configures a Server: the engine's parameters (Params, validated by New) and
// what a process gives the engine besides them.
type Options struct {
	Params
	// ServedModelName is the model id served and checked in requests.
	ServedModelName string
	// ModelRoot is reported as the model's root in /v1/models (the model path or
	// tokenizer source); ServedModelName when empty.
	ModelRoot string
	// Model supplies the tokenizer (string prompts, output text, ordinary words) and EOS
	// ids. Required.
	Model *model.Model
	// KVEvents configures event publishing (disabled when not Enabled), read as the
	// dialect's engine reads its --kv-events-config (SGLang's has no enable flag).
	KVEvents kvevents.Config
	// Logger receives the server's logs (zerolog.Nop() when zero).
	Logger zerolog.Logger
	// ShutdownGrace bounds how long Run waits for in-flight requests on shutdown
	// (default 5 s); requests still running then are aborted.
	ShutdownGrace time.Duration
	// PollWait (trtllm dialect) bounds how long GET /metrics and POST /kv_cache_events
	// wait for a first entry when none is queued (default 2 s, as trtllm-serve).
	PollWait time.Duration
}

// Server is a running mock engine. Create with New, serve with Run or Handler + Start.
type Server struct {
	opts    Options
	eng     *mocker.Engine
	tok     model.Tokenizer
	pub     *kvevents.Publisher
	log     zerolog.Logger
	metrics *metrics.Set
	surface surface // the dialect's
	xfer    *transfer
	cmds    chan command
	stats   atomic.Pointer[mocker.Stats]
	lora    loraSurface    // LoRA adapters (lora.go)
	kvbm    *kvbmtier.Tier // the node's KV block manager (kvbm.go), or nil
	// tierMetrics are the lower KV tiers' metrics (kvbm.go).
	tierMetrics tierMetrics
	created     int64
	loopDone    chan struct{}
	startOnce   sync.Once
	stopLoop    context.CancelFunc
	loopCtx     context.Context
	// testHook, when set (by tests), runs at points of a request (hookPrefillFinished,
	// hookPrefillPinned) with the request's context.
	testHook func(ctx context.Context, point string)
}

// New builds the engine, the vocabulary and, when enabled, the KV event publisher.
// Errors name the invalid option.
func New(opts Options) (*Server, error) {
	if opts.Model == nil || opts.Model.Tokenizer == nil {
		return nil, errors.New("server: a model with a tokenizer is required")
	}
	if opts.ServedModelName == "" {
		return nil, errors.New("server: --served-model-name must not be empty")
	}
	if opts.ModelRoot == "" {
		opts.ModelRoot = opts.ServedModelName
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 5 * time.Second
	}
	if opts.Dialect == "" {
		opts.Dialect = DialectVLLM
	}
	dialect, err := dialects.lookup(opts.Dialect)
	if err != nil {
		return nil, err
	}
	if opts.EventBufferMaxSize < 0 {
		return nil, fmt.Errorf("server: event buffer size %d must not be negative", opts.EventBufferMaxSize)
	}
	if opts.PollWait <= 0 {
		opts.PollWait = 2 * time.Second
	}
	if err := checkParsers(opts); err != nil {
		return nil, err
	}
	role, err := ParseRole(string(opts.Role))
	if err != nil {
		return nil, err
	}
	opts.Role = role
	if err := opts.KVTransfer.resolve(); err != nil {
		return nil, err
	}
	if err := dialect.check(&opts); err != nil {
		return nil, err
	}
	if err := checkRunner(&opts); err != nil {
		return nil, err
	}
	opts.KVEvents = dialect.kvEvents(opts.KVEvents)
	vocab, err := mocker.BuildVocab(opts.Model.Tokenizer, opts.Model.EOSTokenIDs)
	if err != nil {
		return nil, err
	}
	opts.Engine.KVBytesPerToken = opts.KVTransfer.BytesPerToken
	kvbmTier, err := dialKvbm(&opts)
	if err != nil {
		return nil, err
	}
	eng, err := mocker.New(opts.Engine, vocab)
	if err != nil {
		closeKvbm(kvbmTier)
		return nil, err
	}
	s := &Server{
		opts:     opts,
		eng:      eng,
		tok:      opts.Model.Tokenizer,
		log:      opts.Logger,
		metrics:  metrics.NewSet(),
		cmds:     make(chan command, 64),
		created:  time.Now().Unix(),
		loopDone: make(chan struct{}),
		kvbm:     kvbmTier,
	}
	st := eng.Stats()
	s.stats.Store(&st)
	s.lora.init(s)
	if opts.KVEvents.Enabled() {
		if !opts.Engine.EnablePrefixCaching {
			closeKvbm(kvbmTier)
			return nil, errors.New("server: --kv-events-config needs prefix caching (--enable-prefix-caching)")
		}
		s.pub, err = kvevents.NewPublisher(opts.KVEvents, 0)
		if err != nil {
			closeKvbm(kvbmTier)
			return nil, err
		}
	}
	if err := s.startTransfer(); err != nil {
		if s.pub != nil {
			_ = s.pub.Close()
		}
		closeKvbm(kvbmTier)
		return nil, err
	}
	if kvbmTier != nil {
		s.tierMetrics = newTierMetrics(s.metrics, opts.ServedModelName, kvbmTier)
	}
	s.surface = dialect.bind(s)
	s.loopCtx, s.stopLoop = context.WithCancel(context.Background())
	return s, nil
}

// KVEventsEndpoint is the publisher's endpoint (port resolved when bound), "" when
// events are disabled.
func (s *Server) KVEventsEndpoint() string {
	if s.pub == nil {
		return ""
	}
	return s.pub.Endpoint()
}

// Stats returns the engine's latest stats (updated after every step and every applied
// abort).
func (s *Server) Stats() mocker.Stats { return *s.stats.Load() }

// Metrics returns the server's metric set (written by /metrics).
func (s *Server) Metrics() *metrics.Set { return s.metrics }

// Start starts the engine loop and the KV transfer port (Run does it too). Safe to call
// more than once.
func (s *Server) Start() {
	s.startOnce.Do(func() {
		go s.loop(s.loopCtx)
		go func() { s.xfer.served <- s.xfer.srv.Serve(s.xfer.l) }()
	})
}

// Close stops the KV transfer port (transfers under way end), the engine loop (in-flight
// requests end with an error) and the event publisher.
func (s *Server) Close() error {
	s.Start()
	_ = s.xfer.srv.Close()
	if err := <-s.xfer.served; err != nil {
		s.log.Warn().Err(err).Msg("KV transfer port failed")
	}
	s.xfer.served <- nil // a second Close does not wait
	s.stopLoop()
	<-s.loopDone
	closeKvbm(s.kvbm)
	if s.pub != nil {
		return s.pub.Close()
	}
	return nil
}

// Run serves HTTP on l until ctx ends, then shuts down gracefully: it stops accepting,
// waits up to ShutdownGrace for in-flight requests, and closes the engine. ready, when
// not nil, is called once serving has begun.
func (s *Server) Run(ctx context.Context, l net.Listener, ready func()) error {
	s.Start()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	if ready != nil {
		ready()
	}
	var err error
	select {
	case err = <-errc:
		err = fmt.Errorf("server: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
		if serr := hs.Shutdown(sctx); serr != nil {
			s.log.Warn().Err(serr).Msg("in-flight requests did not finish within the grace period; aborting them")
		}
		cancel()
	}
	_ = hs.Close()
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// command is sent from request handlers to the engine loop.
type command struct {
	add   *mocker.Request
	st    *stream
	errc  chan error
	abort string
	// abortAll aborts every request that has a stream.
	abortAll bool
	// release frees the pinned blocks of a finished prefill leg.
	release string
	// aborted, when not nil, is closed once the abort was applied and the stats updated.
	aborted chan struct{}
	// ensureLora, with add, is the LoRA adapter to load before the request is added if
	// the engine does not hold it (trtllm dialect, lora.go).
	ensureLora *mocker.Adapter
	// lora loads or unloads a LoRA adapter (lora.go).
	lora *loraOp
}

// stream carries one request's outputs from the loop to its handler. The queue is
// unbounded so that the loop never waits for a slow client.
type stream struct {
	mu     sync.Mutex
	queue  []mocker.Output
	closed error // set when the engine stopped before the request finished
	notify chan struct{}
}

func newStream() *stream { return &stream{notify: make(chan struct{}, 1)} }

func (st *stream) push(o mocker.Output) {
	st.mu.Lock()
	st.queue = append(st.queue, o)
	st.mu.Unlock()
	st.signal()
}

func (st *stream) fail(err error) {
	st.mu.Lock()
	st.closed = err
	st.mu.Unlock()
	st.signal()
}

func (st *stream) signal() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// take returns the queued outputs, or the error that ended the stream.
func (st *stream) take() ([]mocker.Output, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	q := st.queue
	st.queue = nil
	if len(q) == 0 && st.closed != nil {
		return nil, st.closed
	}
	return q, nil
}

var (
	errEngineStopped = errors.New("the engine is shutting down")
	// errAborted ends the stream of a request aborted by another request (SGLang's
	// /abort_request).
	errAborted = errors.New("the request was aborted")
)

// submit queues r in the engine and returns its stream.
func (s *Server) submit(ctx context.Context, r mocker.Request) (*stream, error) {
	return s.submitWithLora(ctx, r, nil)
}

// submitWithLora is submit that first loads lora, the adapter r names, when the engine
// does not hold it (nil: the adapter must be loaded; lora.go).
func (s *Server) submitWithLora(ctx context.Context, r mocker.Request, lora *mocker.Adapter) (*stream, error) {
	st := newStream()
	c := command{add: &r, st: st, errc: make(chan error, 1), ensureLora: lora}
	select {
	case s.cmds <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.loopDone:
		return nil, errEngineStopped
	}
	select {
	case err := <-c.errc:
		return st, err
	case <-s.loopDone:
		return nil, errEngineStopped
	}
}

// abort removes a request from the engine (its blocks are freed); its stream, if still
// read, ends with errAborted. It does not wait.
func (s *Server) abort(id string) {
	select {
	case s.cmds <- command{abort: id}:
	case <-s.loopDone:
	}
}

// abortWait is abort that returns once the engine applied it (or ctx ended).
func (s *Server) abortWait(ctx context.Context, id string) {
	s.applyWait(ctx, command{abort: id, aborted: make(chan struct{})})
}

// abortAllWait aborts every request being streamed or awaited, and returns once the
// engine applied it (or ctx ended).
func (s *Server) abortAllWait(ctx context.Context) {
	s.applyWait(ctx, command{abortAll: true, aborted: make(chan struct{})})
}

func (s *Server) applyWait(ctx context.Context, c command) {
	select {
	case s.cmds <- c:
	case <-s.loopDone:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-c.aborted:
	case <-s.loopDone:
	case <-ctx.Done():
	}
}

// publishEvents publishes a step's KV events, stamped with its end, on the ZeroMQ
// publisher and the dialect's own surface (TensorRT-LLM's /kv_cache_events).
func (s *Server) publishEvents(res *mocker.StepResult) {
	if len(res.Events) == 0 {
		return
	}
	if s.pub != nil {
		if err := s.pub.Publish(res.End, res.Events); err != nil {
			s.log.Error().Err(err).Msg("publishing KV events failed")
		}
	}
	s.surface.kvEvents(res.Events)
}

// loop owns the engine: it applies commands, steps, waits for each step's modelled
// duration, then publishes the step's KV events and hands out its outputs.
func (s *Server) loop(ctx context.Context) {
	defer close(s.loopDone)
	streams := map[string]*stream{}
	defer func() {
		for _, st := range streams {
			st.fail(errEngineStopped)
		}
	}()
	apply := func(c command) {
		if c.lora != nil {
			s.applyLora(ctx, c.lora)
			return
		}
		if c.add != nil {
			err := s.checkLora(ctx, c.add, c.ensureLora)
			if err == nil {
				err = s.eng.Add(*c.add)
			}
			if err == nil {
				streams[c.add.ID] = c.st
			}
			c.errc <- err
			return
		}
		if c.release != "" {
			s.eng.Release(c.release)
			s.publishStats()
			if c.aborted != nil {
				close(c.aborted)
			}
			return
		}
		ids := []string{c.abort}
		if c.abortAll {
			ids = ids[:0]
			for id := range streams {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			if s.eng.Abort(id) {
				s.log.Debug().Str("request_id", id).Msg("request aborted")
			}
			if st := streams[id]; st != nil {
				st.fail(errAborted)
				delete(streams, id)
			}
		}
		if c.aborted != nil {
			s.publishStats()
			close(c.aborted)
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if !s.eng.HasWork() {
			s.publishStats()
			select {
			case c := <-s.cmds:
				apply(c)
			case <-ctx.Done():
				return
			}
		}
	drain:
		for {
			select {
			case c := <-s.cmds:
				apply(c)
			default:
				break drain
			}
		}
		if !s.eng.HasWork() {
			continue
		}
		res := s.eng.Step(time.Now())
		if res.Idle {
			// Nothing fits, or only lower-tier loads are in flight: step again on a
			// command, or when the first load ends (res.WakeAt). A step that admitted a
			// load allocated its blocks, evicting cached ones: its events go out now.
			s.publishEvents(&res)
			s.publishStats()
			var loaded <-chan time.Time
			if !res.WakeAt.IsZero() {
				timer.Reset(max(time.Until(res.WakeAt), 0))
				loaded = timer.C
			}
			select {
			case c := <-s.cmds:
				apply(c)
			case <-loaded:
			case <-ctx.Done():
				timer.Stop()
				return
			}
			timer.Stop() // no stale tick stays (Go 1.23 timers)
			continue
		}
		if d := time.Until(res.End); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
		s.publishEvents(&res)
		// Counters first, so a client that got its last token sees them updated.
		st := s.publishStats()
		s.surface.step(&res, &st)
		for _, o := range res.Outputs {
			if o.Finished {
				s.surface.finished(o.FinishReason)
			}
		}
		for _, o := range res.Outputs {
			st := streams[o.RequestID]
			if st == nil {
				continue
			}
			st.push(o)
			if o.Finished {
				delete(streams, o.RequestID)
			}
		}
	}
}

func (s *Server) publishStats() mocker.Stats {
	st := s.eng.Stats()
	s.stats.Store(&st)
	s.surface.update(&st)
	s.lora.update(&st)
	s.tierMetrics.update(&st, s.kvbm)
	return st
}
