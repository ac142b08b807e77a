package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/engines/mocker/kvtransfer"
)

// SGLang's dialect: the native API of python/sglang/srt/entrypoints/http_server.py, the
// request shapes of managers/io_struct.py (GenerateReqInput, AbortReq) and
// sampling/sampling_params.py, the output of the tokenizer manager's output processor
// and the finish reasons of managers/schedule_batch.py.

// sglangDefaultMaxNewTokens is SamplingParams.max_new_tokens's default.
const sglangDefaultMaxNewTokens = 128

// sglangHandler serves POST|PUT /generate, POST /abort_request, GET /health,
// GET /health_generate, GET /get_model_info and GET /metrics.
func (s *Server) sglangHandler() http.Handler {
	mux := http.NewServeMux()
	health := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.loopDone:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}
	mux.HandleFunc("GET /health", health)
	mux.HandleFunc("GET /health_generate", health)
	mux.HandleFunc("GET /get_model_info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, sglangModelInfo{ModelPath: s.opts.ModelRoot, TokenizerPath: s.opts.ModelRoot,
			IsGeneration: !s.pooling(), WeightVersion: "default"})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.metrics.WritePrometheus(w)
	})
	mux.HandleFunc("POST /generate", s.generating("Generate", s.handleSGLangGenerate))
	mux.HandleFunc("PUT /generate", s.generating("Generate", s.handleSGLangGenerate))
	mux.HandleFunc("POST /v1/embeddings", s.handleSGLangEmbeddings)
	mux.HandleFunc("POST /abort_request", s.handleSGLangAbort)
	mux.HandleFunc("POST /load_lora_adapter", s.handleSGLangLoadLora)
	mux.HandleFunc("POST /unload_lora_adapter", s.handleSGLangUnloadLora)
	return mux
}

type sglangModelInfo struct {
	ModelPath               string `json:"model_path"`
	TokenizerPath           string `json:"tokenizer_path"`
	IsGeneration            bool   `json:"is_generation"`
	PreferredSamplingParams any    `json:"preferred_sampling_params"`
	WeightVersion           string `json:"weight_version"`
}

// sglangError answers {"error": {"message": ...}}, as SGLang's _create_error_response.
func sglangError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": fmt.Sprintf(format, args...)}})
}

// sglangValidationError answers SGLang's request-validation shape (ErrorResponse).
func sglangValidationError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": msg, "type": "Bad Request",
		"param": nil, "code": http.StatusBadRequest})
}

type sglangGenerateReq struct {
	Text           *string                    `json:"text"`
	InputIDs       json.RawMessage            `json:"input_ids"`
	SamplingParams map[string]json.RawMessage `json:"sampling_params"`
	RID            *string                    `json:"rid"`
	Stream         bool                       `json:"stream"`
	// Logprobs (sglang_logprobs.go).
	ReturnLogprob        bool `json:"return_logprob"`
	TopLogprobsNum       *int `json:"top_logprobs_num"`
	LogprobStartLen      *int `json:"logprob_start_len"`
	ReturnTextInLogprobs bool `json:"return_text_in_logprobs"`
	// Priority (higher first, SGLang's default) and CacheSalt (sampling.go).
	Priority  *int    `json:"priority"`
	CacheSalt *string `json:"cache_salt"`
	// LoraPath names the LoRA adapter the request runs with (lora.go).
	LoraPath json.RawMessage `json:"lora_path"`
}

// sglangSampling is what the mock engine honours of SamplingParams.
type sglangSampling struct {
	MaxNewTokens *int     `json:"max_new_tokens"`
	MinNewTokens *int     `json:"min_new_tokens"`
	Temperature  *float64 `json:"temperature"`
	TopP         *float64 `json:"top_p"`
	TopK         *int     `json:"top_k"`
	StopTokenIDs []int64  `json:"stop_token_ids"`
	IgnoreEOS    *bool    `json:"ignore_eos"`
	SamplingSeed *int64   `json:"sampling_seed"`
	N            *int     `json:"n"`
	Stop         any      `json:"stop"`
	// The output constraint (structured.go).
	JSONSchema    *string `json:"json_schema"`
	Regex         *string `json:"regex"`
	EBNF          *string `json:"ebnf"`
	StructuralTag *string `json:"structural_tag"`
	// The sampling extras (sampling.go).
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
}

// sglangSamplingKeys are SamplingParams's API fields; others are refused, as Python
// refuses unknown keyword arguments.
var sglangSamplingKeys = map[string]bool{"max_new_tokens": true, "stop": true, "stop_token_ids": true,
	"stop_regex": true, "temperature": true, "top_p": true, "top_k": true, "min_p": true,
	"frequency_penalty": true, "presence_penalty": true, "repetition_penalty": true, "min_new_tokens": true,
	"n": true, "json_schema": true, "regex": true, "ebnf": true, "structural_tag": true, "ignore_eos": true,
	"skip_special_tokens": true, "spaces_between_special_tokens": true, "no_stop_trim": true,
	"custom_params": true, "stream_interval": true, "logit_bias": true, "sampling_seed": true}

// parseSGLang validates a /generate body into an engine request.
func (s *Server) parseSGLang(body []byte) (r mocker.Request, stream bool, maxNew int, msg string) {
	r, stream, maxNew, _, msg = s.parseSGLangLogprobs(body)
	return r, stream, maxNew, msg
}

// parseSGLangLogprobs is parseSGLang that also returns the request's logprob fields.
func (s *Server) parseSGLangLogprobs(body []byte) (r mocker.Request, stream bool, maxNew int, lr sglangLogprobReq, msg string) {
	r, stream, maxNew, msg = s.parseSGLangBody(body, &lr)
	return r, stream, maxNew, lr, msg
}

// parseSGLangBody is parseSGLang, with the logprob fields read into lr.
func (s *Server) parseSGLangBody(body []byte, lr *sglangLogprobReq) (r mocker.Request, stream bool, maxNew int, msg string) {
	var g sglangGenerateReq
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&g); err != nil {
		return r, false, 0, "invalid JSON body: " + err.Error()
	}
	prompt, msg := s.sglangPrompt(&g)
	if msg != "" {
		return r, false, 0, msg
	}
	var sp sglangSampling
	for k := range g.SamplingParams {
		if !sglangSamplingKeys[k] {
			return r, false, 0, fmt.Sprintf("SamplingParams.__init__() got an unexpected keyword argument '%s'", k)
		}
	}
	raw, _ := json.Marshal(g.SamplingParams)
	if err := json.Unmarshal(raw, &sp); err != nil {
		return r, false, 0, "invalid sampling_params: " + err.Error()
	}
	maxNew = sglangDefaultMaxNewTokens
	if sp.MaxNewTokens != nil {
		maxNew = *sp.MaxNewTokens
	}
	minNew := 0
	if sp.MinNewTokens != nil {
		minNew = *sp.MinNewTokens
	}
	ctxLen := s.opts.Engine.MaxModelLen
	switch {
	case sp.Temperature != nil && (*sp.Temperature < 0 || math.IsNaN(*sp.Temperature)):
		return r, false, 0, fmt.Sprintf("temperature must be a non-negative finite number, got %v.", *sp.Temperature)
	case sp.TopP != nil && !(*sp.TopP > 0 && *sp.TopP <= 1):
		return r, false, 0, fmt.Sprintf("top_p must be in (0, 1], got %v.", *sp.TopP)
	case sp.TopK != nil && *sp.TopK < 1 && *sp.TopK != -1:
		return r, false, 0, fmt.Sprintf("top_k must be -1 (disable) or at least 1, got %d.", *sp.TopK)
	case maxNew < 1:
		return r, false, 0, fmt.Sprintf("max_new_tokens must be at least 1 for the mock engine, got %d.", maxNew)
	case minNew < 0 || minNew > maxNew:
		return r, false, 0, fmt.Sprintf("min_new_tokens must be in [0, max_new_tokens(%d)], got %d.", maxNew, minNew)
	case sp.N != nil && *sp.N != 1:
		return r, false, 0, "n must be 1 for the mock engine."
	case sp.Stop != nil && !emptyStop(sp.Stop):
		return r, false, 0, "stop strings are not supported by the mock engine; use stop_token_ids."
	case len(prompt) >= ctxLen:
		return r, false, 0, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", len(prompt), ctxLen)
	case maxNew > ctxLen-len(prompt):
		return r, false, 0, fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion.",
			ctxLen, len(prompt)+maxNew, len(prompt), maxNew)
	}
	r = mocker.Request{Prompt: prompt, MaxTokens: maxNew, MinTokens: minNew}
	if g.RID != nil && *g.RID != "" {
		r.ID = *g.RID
	} else {
		r.ID = randomID()
	}
	r.IgnoreEOS = sp.IgnoreEOS != nil && *sp.IgnoreEOS
	for _, t := range sp.StopTokenIDs {
		if t < 0 || t > math.MaxUint32 {
			return r, false, 0, fmt.Sprintf("stop token id %d out of range.", t)
		}
		r.StopTokenIDs = append(r.StopTokenIDs, uint32(t))
	}
	if sp.SamplingSeed != nil {
		r.Seed, r.HasSeed = uint64(*sp.SamplingSeed), true
	}
	if msg = s.sglangSampling(&g, &sp, &r); msg != "" {
		return r, false, 0, msg
	}
	if r.Structured, msg = sglangStructured(sp); msg != "" {
		return r, false, 0, msg
	}
	if *lr, msg = s.sglangLogprobs(&g, &r); msg != "" {
		return r, false, 0, msg
	}
	if r.LoraName, msg = s.sglangLoraName(g.LoraPath); msg != "" {
		return r, false, 0, msg
	}
	r.Script = s.script(r.Prompt, r.Structured, s.seed(&r))
	return r, g.Stream, maxNew, ""
}

func emptyStop(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	}
	return false
}

// sglangPrompt reads text or input_ids (exactly one; batches are refused).
func (s *Server) sglangPrompt(g *sglangGenerateReq) ([]uint32, string) {
	hasIDs := len(g.InputIDs) > 0 && string(g.InputIDs) != "null"
	if (g.Text == nil) == !hasIDs {
		return nil, "Either text, input_ids or input_embeds should be provided."
	}
	if g.Text != nil {
		if *g.Text == "" {
			return nil, "text must not be empty."
		}
		return s.tok.Encode(*g.Text), ""
	}
	var ids []int64
	if err := json.Unmarshal(g.InputIDs, &ids); err != nil {
		return nil, "input_ids must be a list of token ids (batches are not supported by the mock engine)."
	}
	if len(ids) == 0 {
		return nil, "input_ids must not be empty."
	}
	vocab := int64(s.tok.VocabSize())
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Sprintf("Token id %d is out of vocabulary.", id)
		}
		out[i] = uint32(id)
	}
	return out, ""
}

func (s *Server) handleSGLangGenerate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		sglangValidationError(w, "reading the request body: "+err.Error())
		return
	}
	req, stream, maxNew, lr, msg := s.parseSGLangLogprobs(body)
	if msg != "" {
		sglangError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	leg, msg := s.parseSGLangDisagg(body)
	if msg != "" {
		sglangError(w, http.StatusBadRequest, "%s", msg)
		return
	}
	if leg.prefill {
		// The prefill leg computes the prompt and one token, and keeps the blocks
		// (min_new_tokens 1: it always ends on its length limit).
		req.MaxTokens, req.MinTokens, req.HoldBlocks, maxNew = 1, 1, true, 1
	}
	ctx := r.Context()
	if !s.pullSGLang(ctx, w, leg, &req) {
		return
	}
	st, err := s.submit(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, errEngineStopped):
			sglangError(w, http.StatusServiceUnavailable, "%v", err)
		case errors.Is(err, mocker.ErrDuplicateID):
			sglangError(w, http.StatusBadRequest, "Duplicate request id %s.", req.ID)
		case errors.Is(err, errUnknownLora): // unloaded since the request was read
			sglangError(w, http.StatusBadRequest, "The following requested LoRA adapters are not loaded: %s", req.LoraName)
		case ctx.Err() == nil:
			sglangError(w, http.StatusBadRequest, "%v", err)
		}
		return
	}
	g := &sglangGen{s: s, req: req, maxNew: maxNew, start: time.Now(), incremental: s.opts.IncrementalStreamingOutput && stream, leg: leg,
		lp: sglangLogprobState{req: lr}}
	if stream {
		g.stream(ctx, w, st)
	} else {
		g.full(ctx, w, st)
	}
}

// sglangGen builds one request's output dicts.
type sglangGen struct {
	s           *Server
	req         mocker.Request
	maxNew      int
	start       time.Time
	incremental bool
	text        strings.Builder
	ids         []uint32
	cached      int
	leg         sglangLeg
	lp          sglangLogprobState
}

// finished pins a prefill leg's blocks under its room when it ends.
func (g *sglangGen) finished(ctx context.Context, o mocker.Output) {
	if g.leg.prefill {
		g.s.prefillDone(ctx, kvtransfer.RoomKey(g.leg.room), o, len(g.req.Prompt), true)
	}
}

type sglangMeta struct {
	ID               string   `json:"id"`
	FinishReason     any      `json:"finish_reason"`
	PromptTokens     int      `json:"prompt_tokens"`
	WeightVersion    string   `json:"weight_version"`
	CompletionTokens int      `json:"completion_tokens"`
	CachedTokens     int      `json:"cached_tokens"`
	E2ELatency       *float64 `json:"e2e_latency,omitempty"`
	// With return_logprob (sglang_logprobs.go).
	// An empty list is written as [] (a non-nil interface); an unset member is left out.
	InputTokenLogprobs  any `json:"input_token_logprobs,omitempty"`
	OutputTokenLogprobs any `json:"output_token_logprobs,omitempty"`
	InputTopLogprobs    any `json:"input_top_logprobs,omitempty"`
	OutputTopLogprobs   any `json:"output_top_logprobs,omitempty"`
}

type sglangOut struct {
	Text      string     `json:"text"`
	OutputIDs []uint32   `json:"output_ids"`
	Meta      sglangMeta `json:"meta_info"`
}

// sglangFinish is a finish reason object (FINISH_MATCHED_TOKEN, FINISH_LENGTH,
// FINISH_ABORT to_json).
type sglangFinish struct {
	Type       string  `json:"type"`
	Matched    *uint32 `json:"matched,omitempty"`
	Length     *int    `json:"length,omitempty"`
	Message    *string `json:"message,omitempty"`
	StatusCode any     `json:"status_code,omitempty"`
	ErrType    any     `json:"err_type,omitempty"`
}

// out adds o (nil for an abort) to the request's output and returns the dict to send.
func (g *sglangGen) out(o *mocker.Output) sglangOut {
	var delta []uint32
	deltaText := ""
	meta := sglangMeta{ID: g.req.ID, PromptTokens: len(g.req.Prompt), WeightVersion: "default"}
	if o != nil {
		delta = o.TokenIDs
		deltaText = g.s.text(*o)
		g.cached = o.CachedTokens
		g.ids = append(g.ids, o.TokenIDs...)
		g.text.WriteString(deltaText)
		g.lp.add(o)
	}
	g.lp.fill(g.s, &meta)
	meta.CompletionTokens, meta.CachedTokens = len(g.ids), g.cached
	switch {
	case o == nil:
		msg := "Abort in waiting queue or running: aborted by /abort_request."
		meta.FinishReason = sglangFinish{Type: "abort", Message: &msg, StatusCode: json.RawMessage("null"), ErrType: json.RawMessage("null")}
	case o.Finished && o.FinishReason == mocker.FinishStop:
		last := o.TokenIDs[len(o.TokenIDs)-1]
		meta.FinishReason = sglangFinish{Type: "stop", Matched: &last}
	case o.Finished:
		n := g.maxNew
		meta.FinishReason = sglangFinish{Type: "length", Length: &n}
	}
	if meta.FinishReason != nil {
		e2e := time.Since(g.start).Seconds()
		meta.E2ELatency = &e2e
	}
	if g.incremental {
		if delta == nil {
			delta = []uint32{}
		}
		return sglangOut{Text: deltaText, OutputIDs: delta, Meta: meta}
	}
	return sglangOut{Text: g.text.String(), OutputIDs: g.ids, Meta: meta}
}

func (g *sglangGen) full(ctx context.Context, w http.ResponseWriter, st *stream) {
	p := &parsed{req: g.req}
	for {
		outs, err := g.s.next(ctx, p, st)
		switch {
		case errors.Is(err, errAborted):
			sglangError(w, http.StatusBadRequest, "Abort in waiting queue or running: aborted by /abort_request.")
			return
		case err != nil:
			if ctx.Err() == nil {
				sglangError(w, http.StatusServiceUnavailable, "%v", err)
			}
			return
		}
		for i := range outs {
			d := g.out(&outs[i])
			if outs[i].Finished {
				g.finished(ctx, outs[i])
				writeJSON(w, http.StatusOK, d)
				return
			}
		}
	}
}

func (g *sglangGen) stream(ctx context.Context, w http.ResponseWriter, st *stream) {
	sse := startSSE(w, "text/event-stream")
	send, done := sse.send, sse.done
	p := &parsed{req: g.req}
	for {
		outs, err := g.s.next(ctx, p, st)
		switch {
		case errors.Is(err, errAborted):
			send(g.out(nil))
			done()
			return
		case err != nil:
			if ctx.Err() == nil {
				send(map[string]any{"error": map[string]string{"message": err.Error()}})
				done()
			}
			return
		}
		for i := range outs {
			if outs[i].Finished {
				// Pinned before the last chunk goes out: the decode leg is already
				// waiting for the room, whether or not this client reads on.
				g.finished(ctx, outs[i])
			}
			if !send(g.out(&outs[i])) {
				if !(outs[i].Finished && g.leg.prefill) { // a pinned room waits for its reader
					g.s.abort(g.req.ID)
				}
				return
			}
			if outs[i].Finished {
				done()
				return
			}
		}
	}
}

func (s *Server) handleSGLangAbort(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		sglangValidationError(w, "reading the request body: "+err.Error())
		return
	}
	var a struct {
		RID      *string `json:"rid"`
		AbortAll bool    `json:"abort_all"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		sglangValidationError(w, "invalid JSON body: "+err.Error())
		return
	}
	switch {
	case a.AbortAll:
		s.abortAllWait(r.Context())
	case a.RID != nil && *a.RID != "":
		s.xfer.srv.UnpinRequest(*a.RID) // a prefill leg's pinned room, if any
		s.abortWait(r.Context(), *a.RID)
	}
	w.WriteHeader(http.StatusOK)
}

// sglangMetrics exports the engine's stats under SGLang's scheduler gauge names
// (python/sglang/srt/metrics/collector.py), labelled as a unified engine on rank 0.
type sglangMetrics struct {
	prompt, generation *metrics.Counter
}

// SGLang metric names served by the sglang dialect.
const (
	SGLangRunning          = "sglang:num_running_reqs"
	SGLangQueued           = "sglang:num_queue_reqs"
	SGLangTokenUsage       = "sglang:token_usage"
	SGLangUsedTokens       = "sglang:num_used_tokens"
	SGLangMaxTotalTokens   = "sglang:max_total_num_tokens"
	SGLangCacheHitRate     = "sglang:cache_hit_rate"
	SGLangPromptTokens     = "sglang:prompt_tokens_total"
	SGLangGenerationTokens = "sglang:generation_tokens_total"
)

func newSGLangMetrics(set *metrics.Set, model string, cfg mocker.Config, stats func() *mocker.Stats) *sglangMetrics {
	labels := fmt.Sprintf(`engine_type="unified",model_name=%q,tp_rank="0",pp_rank="0"`, model)
	name := func(n string) string { return n + "{" + labels + "}" }
	bs := float64(cfg.BlockSize)
	set.NewGauge(name(SGLangRunning), func() float64 { return float64(stats().Running) })
	set.NewGauge(name(SGLangQueued), func() float64 { return float64(stats().Waiting) })
	set.NewGauge(name(SGLangTokenUsage), func() float64 { return stats().KVUsage })
	set.NewGauge(name(SGLangUsedTokens), func() float64 { return float64(stats().ActiveBlocks) * bs })
	set.NewGauge(name(SGLangMaxTotalTokens), func() float64 { return float64(cfg.NumGPUBlocks) * bs })
	set.NewGauge(name(SGLangCacheHitRate), func() float64 {
		st := stats()
		if st.PrefixQueries == 0 {
			return 0
		}
		return float64(st.PrefixHits) / float64(st.PrefixQueries)
	})
	tl := fmt.Sprintf(`{model_name=%q}`, model)
	return &sglangMetrics{
		prompt:     set.NewCounter(SGLangPromptTokens + tl),
		generation: set.NewCounter(SGLangGenerationTokens + tl),
	}
}

func (m *sglangMetrics) update(st *mocker.Stats) {
	m.prompt.Set(st.PromptTokens)
	m.generation.Set(st.GenerationTokens)
}

func (m *sglangMetrics) finished(mocker.FinishReason) {}
