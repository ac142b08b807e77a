package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// trtllm-serve's dialect: tensorrt_llm/serve/openai_server.py (routes, errors, abort on
// disconnect), openai_protocol.py (CompletionRequest, which forbids unknown fields, and
// the response models), postprocess_handlers.py (chunks, token_ids with
// "detokenize": false, the usage chunk), executor/result.py (finish and stop reasons,
// stop tokens trimmed from the output), the IterationStats JSON of
// cpp/tensorrt_llm/executor/jsonSerialization.cpp and the KV event JSON of
// tensorrt_llm/_utils.py (KVCacheEventSerializer).

// trtllmMaxIterStats is how many iteration stats are kept for GET /metrics
// (TensorRT-LLM's iter_stats_max_iterations default).
const trtllmMaxIterStats = 1000

// trtllmPriority is the retention priority TensorRT-LLM gives blocks by default.
const trtllmPriority = 35

// trtllmHandler serves POST /v1/completions, GET /health, GET /v1/models, GET /version,
// GET /metrics (iteration stats), POST /kv_cache_events and GET /prometheus/metrics:
// the mock engine's Prometheus families (MetricPinnedBlocks, the transfer counters),
// where trtllm-serve (1.0 and later, with return_perf_metrics) mounts its Prometheus
// exposition, since /metrics is the JSON iteration stats.
func (s *Server) trtllmHandler(trt *trtllmState) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.loopDone:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "LLM is unavailable. Please check the server logs for more details.")
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "turbine-mock"})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
			"id": s.opts.ServedModelName, "object": "model", "created": s.created, "owned_by": "tensorrt_llm"}}})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, trt.stats.drain(r.Context(), s.opts.PollWait))
	})
	mux.HandleFunc("POST /kv_cache_events", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, trt.events.drain(r.Context(), s.opts.PollWait))
	})
	mux.HandleFunc("GET "+TRTLLMPrometheusPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.metrics.WritePrometheus(w)
	})
	mux.HandleFunc("POST /v1/completions", s.handleTRTLLMCompletion)
	return mux
}

// TRTLLMPrometheusPath is where the trtllm dialect serves Prometheus metrics.
const TRTLLMPrometheusPath = "/prometheus/metrics"

// trtllmError answers ErrorResponse, as OpenAIServer.create_error_response.
func trtllmError(w http.ResponseWriter, status int, typ, format string, args ...any) {
	writeJSON(w, status, map[string]any{"object": "error", "message": fmt.Sprintf(format, args...), "type": typ,
		"param": nil, "code": status})
}

// trtllmValidationError answers a request validation failure: 400 {"error": "<text>"}.
func trtllmValidationError(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf(format, args...)})
}

// trtllmFields are CompletionRequest's fields; the model forbids others.
var trtllmFields = map[string]bool{"model": true, "prompt": true, "best_of": true, "echo": true,
	"frequency_penalty": true, "logit_bias": true, "logprobs": true, "max_tokens": true, "n": true,
	"presence_penalty": true, "seed": true, "stop": true, "stream": true, "stream_options": true, "suffix": true,
	"temperature": true, "top_p": true, "user": true, "lora_request": true, "prompt_ignore_length": true,
	"use_beam_search": true, "top_k": true, "top_p_min": true, "min_p": true, "repetition_penalty": true,
	"length_penalty": true, "early_stopping": true, "stop_token_ids": true, "include_stop_str_in_output": true,
	"ignore_eos": true, "min_tokens": true, "skip_special_tokens": true, "spaces_between_special_tokens": true,
	"truncate_prompt_tokens": true, "return_context_logits": true, "detokenize": true,
	"thinking_token_budget": true, "add_special_tokens": true, "response_format": true,
	"disaggregated_params": true, "priority": true, "conversation_params": true}

type trtllmCompletionReq struct {
	Model                  *string        `json:"model"`
	Prompt                 rawJSON        `json:"prompt"`
	MaxTokens              *int           `json:"max_tokens"`
	MinTokens              *int           `json:"min_tokens"`
	N                      *int           `json:"n"`
	Echo                   *bool          `json:"echo"`
	Logprobs               *int           `json:"logprobs"`
	Stop                   any            `json:"stop"`
	Stream                 *bool          `json:"stream"`
	StreamOptions          *streamOptions `json:"stream_options"`
	Seed                   *int64         `json:"seed"`
	Temperature            *float64       `json:"temperature"`
	TopP                   *float64       `json:"top_p"`
	IgnoreEOS              *bool          `json:"ignore_eos"`
	StopTokenIDs           []int64        `json:"stop_token_ids"`
	IncludeStopStrInOutput *bool          `json:"include_stop_str_in_output"`
	Detokenize             *bool          `json:"detokenize"`
	// ResponseFormat is the output constraint (structured.go).
	ResponseFormat *trtllmResponseFormat `json:"response_format"`
	// The sampling extras (sampling.go); priority is a float in [0, 1], higher first.
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	Priority          *float64           `json:"priority"`
	// LoraRequest names the LoRA adapter to run with, loaded first if need be (lora.go).
	LoraRequest json.RawMessage `json:"lora_request"`
}

// trtllmParsed is a validated completion request.
type trtllmParsed struct {
	req          mocker.Request
	model        string
	stream       bool
	includeUsage bool
	detokenize   bool
	keepStop     bool
	leg          trtllmLeg // disaggregated serving: disaggregated_params
	// lora is the adapter of lora_request, loaded with the request if need be.
	lora *mocker.Adapter
}

// parseTRTLLM validates a /v1/completions body. validation is true for failures the
// request model itself reports (400 {"error": ...}).
func (s *Server) parseTRTLLM(body []byte) (p *trtllmParsed, validation bool, msg string) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, true, "invalid JSON body: " + err.Error()
	}
	var unknown []string
	for k := range fields {
		if !trtllmFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, true, fmt.Sprintf("1 validation error for CompletionRequest\n%s\n  Extra inputs are not permitted", strings.Join(unknown, ", "))
	}
	var cr trtllmCompletionReq
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, true, "1 validation error for CompletionRequest\n" + err.Error()
	}
	stream := cr.Stream != nil && *cr.Stream
	switch {
	case cr.Model == nil:
		return nil, true, "1 validation error for CompletionRequest\nmodel\n  Field required"
	case !cr.Prompt.set:
		return nil, true, "1 validation error for CompletionRequest\nprompt\n  Field required"
	case cr.StreamOptions != nil && !stream:
		return nil, true, "1 validation error for CompletionRequest\n  Value error, Stream options can only be defined when stream is true."
	case cr.N != nil && *cr.N != 1:
		return nil, false, "n must be 1 for the mock engine."
	case cr.Echo != nil && *cr.Echo:
		return nil, false, "echo is not supported by the mock engine."
	case cr.Logprobs != nil && *cr.Logprobs > 0:
		return nil, false, "logprobs are not supported by the mock engine."
	case cr.Stop != nil && !emptyStop(cr.Stop):
		return nil, false, "stop strings are not supported by the mock engine; use stop_token_ids."
	case cr.Temperature != nil && (*cr.Temperature < 0 || math.IsNaN(*cr.Temperature)):
		return nil, false, fmt.Sprintf("temperature must be non-negative, got %v.", *cr.Temperature)
	case cr.TopP != nil && !(*cr.TopP > 0 && *cr.TopP <= 1):
		return nil, false, fmt.Sprintf("top_p must be in (0, 1], got %v.", *cr.TopP)
	}
	prompt, aerr := s.parsePrompt(cr.Prompt)
	if aerr != nil {
		return nil, false, aerr.msg
	}
	ctxLen := s.opts.Engine.MaxModelLen
	maxTokens := ctxLen - len(prompt)
	if cr.MaxTokens != nil {
		maxTokens = *cr.MaxTokens
	}
	minTokens := 0
	if cr.MinTokens != nil {
		minTokens = *cr.MinTokens
	}
	switch {
	case len(prompt) >= ctxLen:
		return nil, false, fmt.Sprintf("The sum of prompt length (%d) and query length (0) should not exceed max_num_tokens (%d)", len(prompt), ctxLen)
	case maxTokens < 1:
		return nil, false, fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTokens)
	case maxTokens > ctxLen-len(prompt):
		return nil, false, fmt.Sprintf("The sum of prompt length (%d) and max_tokens (%d) exceeds max_seq_len (%d)", len(prompt), maxTokens, ctxLen)
	case minTokens < 0 || minTokens > maxTokens:
		return nil, false, fmt.Sprintf("min_tokens must be in [0, max_tokens (%d)], got %d.", maxTokens, minTokens)
	}
	p = &trtllmParsed{model: *cr.Model, stream: stream, detokenize: cr.Detokenize == nil || *cr.Detokenize,
		keepStop: cr.IncludeStopStrInOutput != nil && *cr.IncludeStopStrInOutput}
	if so := cr.StreamOptions; so != nil {
		p.includeUsage = so.IncludeUsage == nil || *so.IncludeUsage
	}
	r := mocker.Request{ID: randomID(), Prompt: prompt, MaxTokens: maxTokens, MinTokens: minTokens}
	r.IgnoreEOS = cr.IgnoreEOS != nil && *cr.IgnoreEOS
	for _, t := range cr.StopTokenIDs {
		if t < 0 || t > math.MaxUint32 {
			return nil, false, fmt.Sprintf("stop token id %d out of range.", t)
		}
		r.StopTokenIDs = append(r.StopTokenIDs, uint32(t))
	}
	if cr.Seed != nil {
		r.Seed, r.HasSeed = uint64(*cr.Seed), true
	}
	if validation, msg = s.trtllmSampling(&cr, &r); msg != "" {
		return nil, validation, msg
	}
	if r.Structured, validation, msg = trtllmStructured(cr.ResponseFormat); msg != "" {
		return nil, validation, msg
	}
	if p.leg, msg = parseTRTLLMDisagg(fields["disaggregated_params"]); msg != "" {
		return nil, false, msg
	}
	if p.lora, msg = s.trtllmLora(cr.LoraRequest); msg != "" {
		return nil, false, msg
	}
	if p.lora != nil {
		r.LoraName = p.lora.Name
	}
	if p.leg.context {
		// A context leg computes the prompt and its first token, and keeps the blocks
		// (min_tokens 1: it always ends on its length limit).
		r.ID, r.MaxTokens, r.MinTokens, r.HoldBlocks = trtllmContextID(), 1, 1, true
	}
	r.Script = s.script(r.Prompt, r.Structured, s.seed(&r))
	p.req = r
	return p, false, ""
}

func (s *Server) handleTRTLLMCompletion(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		trtllmValidationError(w, "reading the request body: %v", err)
		return
	}
	p, validation, msg := s.parseTRTLLM(body)
	switch {
	case msg != "" && validation:
		trtllmValidationError(w, "%s", msg)
		return
	case msg != "":
		trtllmError(w, http.StatusBadRequest, "BadRequestError", "%s", msg)
		return
	}
	ctx := r.Context()
	if !s.pullTRTLLM(ctx, w, p) {
		return
	}
	st, err := s.submitWithLora(ctx, p.req, p.lora)
	if err != nil {
		if ctx.Err() == nil {
			trtllmError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		}
		return
	}
	g := &trtllmGen{s: s, p: p, id: "cmpl-" + p.req.ID, created: time.Now().Unix()}
	if p.stream {
		g.stream(ctx, w, st)
	} else {
		g.full(ctx, w, st)
	}
}

// trtllmGen builds one request's choices.
type trtllmGen struct {
	s         *Server
	p         *trtllmParsed
	id        string
	created   int64
	generated int // tokens returned (the stop token excluded)
	cached    int
}

type trtllmChoice struct {
	Index                   int      `json:"index"`
	Text                    string   `json:"text"`
	TokenIDs                []uint32 `json:"token_ids"`
	Logprobs                any      `json:"logprobs"`
	FinishReason            *string  `json:"finish_reason"`
	StopReason              *uint32  `json:"stop_reason"`
	AvgDecodedTokensPerIter *float64 `json:"avg_decoded_tokens_per_iter"`
	// DisaggregatedParams is set on the last chunk of a streamed context leg.
	DisaggregatedParams map[string]any `json:"disaggregated_params,omitempty"`
}

type trtllmUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"`
}

type trtllmChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []trtllmChoice `json:"choices"`
	Usage   *trtllmUsage   `json:"usage"`
}

// choice turns o into a choice: the stop token that ended the request is trimmed
// (EOS always; a stop_token_ids match unless include_stop_str_in_output).
func (g *trtllmGen) choice(o mocker.Output) trtllmChoice {
	ids := o.TokenIDs
	var c trtllmChoice
	if o.Finished {
		reason := string(o.FinishReason)
		c.FinishReason = &reason
		if o.FinishReason == mocker.FinishStop {
			if o.HasStopTokenID {
				t := o.StopTokenID
				c.StopReason = &t
			}
			if !(o.HasStopTokenID && g.p.keepStop) && len(ids) > 0 {
				ids = ids[:len(ids)-1]
			}
		}
	}
	g.generated += len(ids)
	g.cached = o.CachedTokens
	if g.p.detokenize {
		if len(ids) > 0 {
			c.Text = g.s.tok.Decode(ids)
		}
	} else {
		c.TokenIDs = append([]uint32{}, ids...)
	}
	return c
}

func (g *trtllmGen) usage() *trtllmUsage {
	n := len(g.p.req.Prompt)
	return &trtllmUsage{PromptTokens: n, TotalTokens: n + g.generated, CompletionTokens: g.generated,
		PromptTokensDetails: &promptTokensDetails{CachedTokens: g.cached}}
}

func (g *trtllmGen) full(ctx context.Context, w http.ResponseWriter, st *stream) {
	p := &parsed{req: g.p.req}
	var ids []uint32
	var text strings.Builder
	for {
		outs, err := g.s.next(ctx, p, st)
		if err != nil {
			if ctx.Err() == nil {
				trtllmError(w, http.StatusInternalServerError, "InternalServerError", "%v", err)
			}
			return
		}
		for _, o := range outs {
			c := g.choice(o)
			ids = append(ids, c.TokenIDs...)
			text.WriteString(c.Text)
			if !o.Finished {
				continue
			}
			c.Text = text.String()
			if !g.p.detokenize {
				c.TokenIDs = ids
			}
			var dp any
			m := g.s.trtllmDisaggParams(ctx, g.p, o)
			if m != nil {
				dp = m
			}
			answer := map[string]any{"id": g.id, "object": "text_completion", "created": g.created,
				"model": g.p.model, "choices": []any{map[string]any{"index": 0, "text": c.Text, "token_ids": c.TokenIDs,
					"logprobs": nil, "context_logits": nil, "finish_reason": c.FinishReason, "stop_reason": c.StopReason,
					"disaggregated_params": dp, "avg_decoded_tokens_per_iter": nil}},
				"usage": g.usage(), "prompt_token_ids": nil}
			if m != nil {
				if !writePrefillAnswer(ctx, w, answer) {
					g.s.clientGone(o.RequestID) // nobody will learn where the blocks are
				}
				return
			}
			writeJSON(w, http.StatusOK, answer)
			return
		}
	}
}

func (g *trtllmGen) stream(ctx context.Context, w http.ResponseWriter, st *stream) {
	sse := startSSE(w, "text/event-stream; charset=utf-8")
	send := sse.send
	p := &parsed{req: g.p.req}
	for {
		outs, err := g.s.next(ctx, p, st)
		if err != nil {
			// trtllm-serve re-raises inside the stream: the connection ends without [DONE].
			panic(http.ErrAbortHandler)
		}
		for _, o := range outs {
			c := g.choice(o)
			c.DisaggregatedParams = g.s.trtllmDisaggParams(ctx, g.p, o)
			chunk := trtllmChunk{ID: g.id, Object: "text_completion", Created: g.created, Model: g.p.model,
				Choices: []trtllmChoice{c}}
			if (c.DisaggregatedParams != nil && ctx.Err() != nil) || !send(chunk) {
				if c.DisaggregatedParams != nil {
					g.s.clientGone(o.RequestID) // nobody will learn where the blocks are
				}
				g.s.abort(g.p.req.ID)
				return
			}
			if !o.Finished {
				continue
			}
			if g.p.includeUsage {
				send(trtllmChunk{ID: g.id, Object: "text_completion", Created: g.created, Model: g.p.model,
					Choices: []trtllmChoice{}, Usage: g.usage()})
			}
			sse.done()
			return
		}
	}
}

// drainQueue is a bounded queue that HTTP handlers drain (trtllm-serve's stats and
// event queues): the oldest entries are dropped when it is full.
type drainQueue[T any] struct {
	mu     sync.Mutex
	max    int
	items  []T
	notify chan struct{}
}

func newDrainQueue[T any](max int) *drainQueue[T] {
	return &drainQueue[T]{max: max, notify: make(chan struct{}, 1)}
}

func (q *drainQueue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	if len(q.items) > q.max {
		q.items = q.items[len(q.items)-q.max:]
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// drain returns and removes every entry, waiting up to wait for one when there is
// none (never nil, so that it encodes as []).
func (q *drainQueue[T]) drain(ctx context.Context, wait time.Duration) []T {
	if out := q.take(); len(out) > 0 {
		return out
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-q.notify:
			if out := q.take(); len(out) > 0 {
				return out
			}
		case <-t.C:
			return q.take()
		case <-ctx.Done():
			return []T{}
		}
	}
}

func (q *drainQueue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.items
	q.items = nil
	if out == nil {
		out = []T{}
	}
	return out
}

// trtllmState records what the trtllm dialect serves besides completions: iteration
// stats and KV cache events. step runs on the engine loop; drains on HTTP handlers.
type trtllmState struct {
	cfg         mocker.Config
	windowSize  int
	stats       *drainQueue[trtllmIterStats]
	events      *drainQueue[trtllmKVEvent]
	recordKV    bool
	iter        int64
	nextEventID int64
}

func newTRTLLMState(opts Options, created int64) *trtllmState {
	t := &trtllmState{cfg: opts.Engine, windowSize: opts.Engine.MaxModelLen,
		stats: newDrainQueue[trtllmIterStats](trtllmMaxIterStats), recordKV: opts.EventBufferMaxSize > 0,
		events: newDrainQueue[trtllmKVEvent](max(opts.EventBufferMaxSize, 1))}
	if t.recordKV {
		t.pushEvent(map[string]any{"type": "created", "num_blocks_per_cache_level": []int{opts.Engine.NumGPUBlocks, 0}})
	}
	return t
}

// IterationStats JSON (keys sorted, as nlohmann::json writes them).
type trtllmIterStats struct {
	CPUMemUsage                     int64            `json:"cpuMemUsage"`
	GPUMemUsage                     int64            `json:"gpuMemUsage"`
	InflightBatchingStats           trtllmIFBStats   `json:"inflightBatchingStats"`
	Iter                            int64            `json:"iter"`
	IterLatencyMS                   float64          `json:"iterLatencyMS"`
	KVCacheStats                    trtllmCacheStats `json:"kvCacheStats"`
	MaxBatchSizeRuntime             int              `json:"maxBatchSizeRuntime"`
	MaxBatchSizeStatic              int              `json:"maxBatchSizeStatic"`
	MaxBatchSizeTunerRecommended    int              `json:"maxBatchSizeTunerRecommended"`
	MaxNumActiveRequests            int              `json:"maxNumActiveRequests"`
	NewActiveRequestsQueueLatencyMS float64          `json:"newActiveRequestsQueueLatencyMS"`
	NumActiveRequests               int              `json:"numActiveRequests"`
	NumCompletedRequests            int              `json:"numCompletedRequests"`
	NumNewActiveRequests            int              `json:"numNewActiveRequests"`
	NumQueuedRequests               int              `json:"numQueuedRequests"`
	PinnedMemUsage                  int64            `json:"pinnedMemUsage"`
	StaticBatchingStats             any              `json:"staticBatchingStats"`
	Timestamp                       string           `json:"timestamp"`
}

type trtllmIFBStats struct {
	AvgNumDecodedTokensPerIter float64 `json:"avgNumDecodedTokensPerIter"`
	MicroBatchID               int     `json:"microBatchId"`
	NumContextRequests         int     `json:"numContextRequests"`
	NumCtxTokens               int     `json:"numCtxTokens"`
	NumGenRequests             int     `json:"numGenRequests"`
	NumPausedRequests          int     `json:"numPausedRequests"`
	NumScheduledRequests       int     `json:"numScheduledRequests"`
}

type trtllmCacheStats struct {
	AllocNewBlocks   int64   `json:"allocNewBlocks"`
	AllocTotalBlocks int64   `json:"allocTotalBlocks"`
	CacheHitRate     float64 `json:"cacheHitRate"`
	FreeNumBlocks    int64   `json:"freeNumBlocks"`
	MaxNumBlocks     int64   `json:"maxNumBlocks"`
	MissedBlocks     int64   `json:"missedBlocks"`
	ReusedBlocks     int64   `json:"reusedBlocks"`
	TokensPerBlock   int64   `json:"tokensPerBlock"`
	UsedNumBlocks    int64   `json:"usedNumBlocks"`
}

// trtllmKVEvent is KVCacheEventSerializer's shape.
type trtllmKVEvent struct {
	EventID    int64 `json:"event_id"`
	Data       any   `json:"data"`
	WindowSize int   `json:"window_size"`
}

func (t *trtllmState) update(*mocker.Stats)           {}
func (t *trtllmState) finished(r mocker.FinishReason) {}

// step records one engine step: its iteration stats and (with an event buffer) its KV
// events. The block counters are derived from the engine's token counters.
func (t *trtllmState) step(res *mocker.StepResult, st *mocker.Stats) {
	t.iter++
	done := 0
	for _, o := range res.Outputs {
		if o.Finished {
			done++
		}
	}
	bs := int64(t.cfg.BlockSize)
	reused, missed := int64(st.PrefixHits)/bs, int64(st.PrefixQueries-st.PrefixHits)/bs
	hit := 0.0
	if st.PrefixQueries > 0 {
		hit = float64(st.PrefixHits) / float64(st.PrefixQueries)
	}
	used := int64(st.ActiveBlocks)
	t.stats.push(trtllmIterStats{
		Iter: t.iter, IterLatencyMS: float64(res.Duration) / float64(time.Millisecond),
		Timestamp:            res.End.UTC().Format("01-02-2006 15:04:05.000000"),
		NumActiveRequests:    st.Running,
		NumQueuedRequests:    st.Waiting,
		NumCompletedRequests: done,
		MaxNumActiveRequests: t.cfg.MaxNumSeqs, MaxBatchSizeStatic: t.cfg.MaxNumSeqs,
		MaxBatchSizeRuntime: t.cfg.MaxNumSeqs, MaxBatchSizeTunerRecommended: t.cfg.MaxNumSeqs,
		KVCacheStats: trtllmCacheStats{MaxNumBlocks: int64(t.cfg.NumGPUBlocks), UsedNumBlocks: used,
			FreeNumBlocks: int64(t.cfg.NumGPUBlocks) - used, TokensPerBlock: bs,
			AllocTotalBlocks: reused + missed, AllocNewBlocks: missed, ReusedBlocks: reused, MissedBlocks: missed,
			CacheHitRate: hit},
		InflightBatchingStats: trtllmIFBStats{NumScheduledRequests: len(res.Outputs),
			NumContextRequests: max(0, len(res.Outputs)-res.DecodeSeqs), NumGenRequests: res.DecodeSeqs,
			NumPausedRequests: len(res.Preempted), NumCtxTokens: res.PrefillTokens, AvgNumDecodedTokensPerIter: 1},
	})
}

// kvEvents records a step's KV events for /kv_cache_events (when recorded at all).
func (t *trtllmState) kvEvents(events []kv.Event) {
	if t.recordKV {
		for i := range events {
			t.kvEvent(&events[i])
		}
	}
}

// kvEvent records one engine event in TensorRT-LLM's JSON.
func (t *trtllmState) kvEvent(e *kv.Event) {
	switch e.Kind {
	case kv.BlockStored:
		var parent any
		if e.HasParent {
			parent = e.ParentHash
		}
		blocks := make([]any, len(e.EngineHashes))
		for i, h := range e.EngineHashes {
			toks := make([]map[string]any, 0, e.BlockSize)
			for _, id := range e.TokenIDs[i*e.BlockSize : (i+1)*e.BlockSize] {
				toks = append(toks, map[string]any{"type": "unique_token", "token_id": id, "token_extra_id": 0})
			}
			blocks[i] = map[string]any{"type": "stored_block", "block_hash": h, "tokens": toks,
				"cache_level": 0, "priority": trtllmPriority}
		}
		t.pushEvent(map[string]any{"type": "stored", "parent_hash": parent, "blocks": blocks})
	case kv.BlockRemoved:
		t.pushEvent(map[string]any{"type": "removed", "block_hashes": append([]uint64{}, e.EngineHashes...)})
	case kv.AllBlocksCleared:
		// TensorRT-LLM has no such event; a recreated cache is what says it.
		t.pushEvent(map[string]any{"type": "created", "num_blocks_per_cache_level": []int{t.cfg.NumGPUBlocks, 0}})
	}
}

func (t *trtllmState) pushEvent(data map[string]any) {
	t.events.push(trtllmKVEvent{EventID: t.nextEventID, Data: data, WindowSize: t.windowSize})
	t.nextEventID++
}
