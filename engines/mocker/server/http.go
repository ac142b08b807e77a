package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/messages"
)

// maxBodyBytes bounds a request body (32 MiB).
const maxBodyBytes = 32 << 20

// defaultMaxTokens is vLLM's default max_tokens for /v1/completions.
const defaultMaxTokens = 16

// Handler returns the HTTP API of the server's dialect (see the package documentation).
func (s *Server) Handler() http.Handler { return s.surface.handler() }

// vllmHandler serves POST /v1/completions, GET /health, GET /v1/models and GET /metrics
// in vLLM's dialect.
func (s *Server) vllmHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.metrics.WritePrometheus(w)
		s.lora.writeInfo(w)
	})
	mux.HandleFunc("POST /v1/completions", s.generating("Completions", s.handleCompletions))
	mux.HandleFunc("POST /v1/embeddings", s.handleVLLMEmbeddings)
	mux.HandleFunc("POST /v1/load_lora_adapter", s.handleVLLMLoadLora)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.handleVLLMUnloadLora)
	return mux
}

// handleModels lists the served model, then each LoRA adapter the engine holds (lora.go).
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	maxLen := s.opts.Engine.MaxModelLen
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: append([]modelCard{{
		ID: s.opts.ServedModelName, Object: "model", Created: s.created, OwnedBy: "vllm",
		Root: s.opts.ModelRoot, MaxModelLen: &maxLen,
		Permission: []modelPermission{{
			ID: "modelperm-" + randomID(), Object: "model_permission", Created: s.created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}},
	}}, s.loraCards()...)})
}

// apiError is an error answered in vLLM's error shape.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", param: param, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	info := errorInfo{Message: e.msg, Type: e.typ, Code: e.status}
	if e.param != "" {
		info.Param = &e.param
	}
	writeJSON(w, e.status, errorResponse{Error: info})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// parsed is a validated completion request.
type parsed struct {
	req            mocker.Request
	stream         bool
	includeUsage   bool
	continuous     bool
	returnTokenIDs bool
	tokensAsIDs    bool    // return_tokens_as_token_ids (logprobs.go)
	leg            vllmLeg // disaggregated serving: kv_transfer_params
}

func (s *Server) parseCompletion(body []byte) (*parsed, *apiError) {
	var cr completionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&cr); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return nil, badRequest("", "invalid JSON body: data after the object")
	}
	var lora string // the LoRA adapter the model field names (lora.go)
	if cr.Model != nil && *cr.Model != s.opts.ServedModelName {
		if _, ok := s.lora.find(*cr.Model); !ok {
			return nil, &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "model",
				msg: fmt.Sprintf("The model `%s` does not exist.", *cr.Model)}
		}
		lora = *cr.Model
	}
	stream := cr.Stream != nil && *cr.Stream
	switch {
	case cr.StreamOptions != nil && !stream:
		return nil, badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
	case cr.N != nil && *cr.N != 1:
		return nil, badRequest("n", "n must be 1 for the mock engine, got %d.", *cr.N)
	case cr.Echo != nil && *cr.Echo:
		return nil, badRequest("echo", "echo is not supported by the mock engine.")
	case cr.Temperature != nil && (*cr.Temperature < 0 || math.IsNaN(*cr.Temperature)):
		return nil, badRequest("temperature", "temperature must be non-negative, got %v.", *cr.Temperature)
	case cr.TopP != nil && !(*cr.TopP > 0 && *cr.TopP <= 1):
		return nil, badRequest("top_p", "top_p must be in (0, 1], got %v.", *cr.TopP)
	}
	if cr.Stop.set && !cr.Stop.isNull() {
		v := strings.TrimSpace(string(cr.Stop.raw))
		if v != `""` && v != "[]" {
			return nil, badRequest("stop", "stop strings are not supported by the mock engine; use stop_token_ids.")
		}
	}
	prompt, aerr := s.parsePrompt(cr.Prompt)
	if aerr != nil {
		return nil, aerr
	}
	maxLen := s.opts.Engine.MaxModelLen
	if len(prompt) >= maxLen {
		return nil, badRequest("prompt", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", maxLen, len(prompt))
	}
	maxTokens := defaultMaxTokens
	switch {
	case cr.MaxTokens.isNull():
		maxTokens = maxLen - len(prompt)
	case cr.MaxTokens.set:
		if err := json.Unmarshal(cr.MaxTokens.raw, &maxTokens); err != nil {
			return nil, badRequest("max_tokens", "max_tokens must be an integer: %v", err)
		}
		if maxTokens < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", maxTokens)
		}
	}
	if maxTokens > maxLen-len(prompt) { // written so that a huge max_tokens cannot overflow
		return nil, badRequest("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, len(prompt)+maxTokens, len(prompt), maxTokens)
	}
	p := &parsed{stream: stream, returnTokenIDs: cr.ReturnTokenIDs != nil && *cr.ReturnTokenIDs}
	if so := cr.StreamOptions; so != nil {
		p.includeUsage = so.IncludeUsage == nil || *so.IncludeUsage // vLLM's default is true
		p.continuous = so.ContinuousUsageStats != nil && *so.ContinuousUsageStats
	}
	r := mocker.Request{ID: randomID(), Prompt: prompt, MaxTokens: maxTokens, LoraName: lora}
	if aerr := logprobOptions(cr.Logprobs, cr.PromptLogprobs, stream, &r); aerr != nil {
		return nil, aerr
	}
	p.tokensAsIDs = cr.ReturnTokensAsTokenIDs != nil && *cr.ReturnTokensAsTokenIDs
	if p.leg, aerr = s.parseKVTransferParams(cr.KVTransferParams, len(prompt)); aerr != nil {
		return nil, aerr
	}
	r.HoldBlocks = p.leg.prefill
	if r.Structured, aerr = vllmStructured(cr.StructuredOutputs); aerr != nil {
		return nil, aerr
	}
	if cr.MinTokens != nil {
		switch {
		case *cr.MinTokens < 0:
			return nil, badRequest("min_tokens", "min_tokens must be greater than or equal to 0, got %d.", *cr.MinTokens)
		case *cr.MinTokens > maxTokens:
			return nil, badRequest("min_tokens", "min_tokens must be less than or equal to max_tokens=%d, got %d.", maxTokens, *cr.MinTokens)
		}
		r.MinTokens = *cr.MinTokens
	}
	r.IgnoreEOS = cr.IgnoreEOS != nil && *cr.IgnoreEOS
	for _, t := range cr.StopTokenIDs {
		if t < 0 || t > math.MaxUint32 {
			return nil, badRequest("stop_token_ids", "stop token id %d out of range.", t)
		}
		r.StopTokenIDs = append(r.StopTokenIDs, uint32(t))
	}
	if cr.Seed != nil {
		r.Seed, r.HasSeed = uint64(*cr.Seed), true
	}
	if aerr := s.vllmSampling(&cr, &r); aerr != nil {
		return nil, aerr
	}
	r.Script = s.script(r.Prompt, r.Structured, s.seed(&r))
	p.req = r
	return p, nil
}

// parsePrompt accepts an array of token ids or a string (tokenized), and a batch of one
// of those; anything else is a 400.
func (s *Server) parsePrompt(raw rawJSON) ([]uint32, *apiError) {
	empty := badRequest("prompt", "Either prompt or prompt_embeds must be provided and non-empty.")
	if !raw.set || raw.isNull() {
		return nil, empty
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw.raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, badRequest("prompt", "invalid prompt: %v", err)
	}
	if list, ok := v.([]any); ok && len(list) == 1 {
		switch list[0].(type) {
		case string, []any:
			v = list[0] // a batch of one prompt
		}
	}
	var ids []uint32
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil, empty
		}
		ids = s.tok.Encode(x)
	case []any:
		vocab := s.tok.VocabSize()
		for i, e := range x {
			n, ok := e.(json.Number)
			if !ok {
				if _, nested := e.([]any); nested || isString(e) {
					return nil, badRequest("prompt", "batched prompts are not supported by the mock engine; send one prompt per request.")
				}
				return nil, badRequest("prompt", "prompt[%d] must be a token id (an integer), got %s.", i, jsonKind(e))
			}
			id, err := n.Int64()
			if err != nil {
				return nil, badRequest("prompt", "prompt[%d] must be a token id (an integer), got %s.", i, n)
			}
			if id < 0 || id >= int64(vocab) {
				return nil, badRequest("prompt", "Token id %d is out of vocabulary", id)
			}
			ids = append(ids, uint32(id))
		}
	default:
		return nil, badRequest("prompt", "prompt must be a string or an array of token ids, got %s.", jsonKind(v))
	}
	if len(ids) == 0 {
		return nil, empty
	}
	return ids, nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, badRequest("", "reading the request body: %v", err))
		return
	}
	p, aerr := s.parseCompletion(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	id := "cmpl-" + p.req.ID
	if h := r.Header.Get("X-Request-Id"); h != "" {
		id = "cmpl-" + h
	}
	ctx := r.Context()
	if !s.pullVLLM(ctx, w, p) {
		return
	}
	st, err := s.submit(ctx, p.req)
	if err != nil {
		if errors.Is(err, errEngineStopped) {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()})
		} else if errors.Is(err, errUnknownLora) { // unloaded since the request was read
			writeError(w, &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "model",
				msg: fmt.Sprintf("The model `%s` does not exist.", p.req.LoraName)})
		} else if ctx.Err() == nil {
			writeError(w, badRequest("", "%v", err))
		}
		return
	}
	s.log.Debug().Str("request_id", id).Int("prompt_tokens", len(p.req.Prompt)).Int("max_tokens", p.req.MaxTokens).
		Bool("stream", p.stream).Msg("request added")
	created := time.Now().Unix()
	if p.stream {
		s.streamCompletion(ctx, w, p, st, id, created)
	} else {
		s.fullCompletion(ctx, w, p, st, id, created)
	}
}

// modelOf is the model a completion answers as: its LoRA adapter's name, as vLLM's
// answers name the adapter, else the served model.
func (s *Server) modelOf(r *mocker.Request) string {
	if r.LoraName != "" {
		return r.LoraName
	}
	return s.opts.ServedModelName
}

// next waits for the request's next outputs. A closed connection aborts the request in
// the engine (its blocks are freed), as vLLM does.
func (s *Server) next(ctx context.Context, p *parsed, st *stream) ([]mocker.Output, error) {
	for {
		outs, err := st.take()
		if len(outs) > 0 || err != nil {
			return outs, err
		}
		select {
		case <-st.notify:
		case <-ctx.Done():
			s.abort(p.req.ID)
			return nil, ctx.Err()
		}
	}
}

// text decodes the generated ids of o, leaving out the stop token (EOS or a
// stop_token_ids id) that ended the request, as vLLM does.
func (s *Server) text(o mocker.Output) string {
	ids := o.TokenIDs
	if o.Finished && o.FinishReason == mocker.FinishStop && len(ids) > 0 {
		ids = ids[:len(ids)-1]
	}
	if len(ids) == 0 {
		return ""
	}
	return s.tok.Decode(ids)
}

func usageOf(last mocker.Output, completion int) usageInfo {
	return usageInfo{
		PromptTokens: last.PromptTokens, CompletionTokens: completion, TotalTokens: last.PromptTokens + completion,
		PromptTokensDetails: &promptTokensDetails{CachedTokens: last.CachedTokens},
	}
}

func finishFields(o mocker.Output) (*string, *uint32) {
	if !o.Finished {
		return nil, nil
	}
	reason := string(o.FinishReason)
	var stop *uint32
	if o.HasStopTokenID {
		t := o.StopTokenID
		stop = &t
	}
	return &reason, stop
}

func (s *Server) fullCompletion(ctx context.Context, w http.ResponseWriter, p *parsed, st *stream, id string, created int64) {
	var text strings.Builder
	var ids []uint32
	var lps, promptLps []*messages.TokenLogprob
	for {
		outs, err := s.next(ctx, p, st)
		if err != nil {
			if ctx.Err() == nil {
				writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()})
			}
			return
		}
		for _, o := range outs {
			text.WriteString(s.text(o))
			ids = append(ids, o.TokenIDs...)
			lps = append(lps, o.Logprobs...)
			if o.PromptLogprobs != nil {
				promptLps = o.PromptLogprobs
			}
			if !o.Finished {
				continue
			}
			reason, stop := finishFields(o)
			choice := completionChoice{Text: text.String(), FinishReason: reason, StopReason: stop}
			if p.returnTokenIDs {
				choice.TokenIDs, choice.PromptTokenIDs = ids, p.req.Prompt
			}
			if p.req.Logprobs != nil {
				choice.Logprobs = s.completionLogprobsOf(ids, lps, *p.req.Logprobs, p.tokensAsIDs, 0)
			}
			if p.req.PromptLogprobs != nil {
				choice.PromptLogprobs = promptLogprobList(promptLps).render(s)
			}
			resp := completionResponse{
				ID: id, Object: "text_completion", Created: created, Model: s.modelOf(&p.req),
				Choices: []completionChoice{choice}, Usage: usageOf(o, len(ids)),
			}
			if kp := s.prefillParams(ctx, p, o); kp != nil {
				resp.KVTransferParams = kp
				if !writePrefillAnswer(ctx, w, resp) {
					s.clientGone(o.RequestID) // nobody will learn where the blocks are
				}
				return
			}
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
}

func (s *Server) streamCompletion(ctx context.Context, w http.ResponseWriter, p *parsed, st *stream, id string, created int64) {
	w.Header().Set("Cache-Control", "no-cache")
	sse := startSSE(w, "text/event-stream; charset=utf-8")
	send, done := sse.send, sse.done
	completion := 0
	textLen := 0 // characters streamed so far (the next chunk's first text_offset)
	first := true
	for {
		outs, err := s.next(ctx, p, st)
		if err != nil {
			if ctx.Err() == nil {
				send(errorResponse{Error: errorInfo{Message: err.Error(), Type: "InternalServerError", Code: http.StatusInternalServerError}})
				done()
			}
			return
		}
		for _, o := range outs {
			completion += len(o.TokenIDs)
			reason, stop := finishFields(o)
			choice := streamChoice{Text: s.text(o), FinishReason: reason, StopReason: stop}
			if p.req.Logprobs != nil {
				choice.Logprobs = s.completionLogprobsOf(o.TokenIDs, o.Logprobs, *p.req.Logprobs, p.tokensAsIDs, textLen)
			}
			textLen += utf8.RuneCountInString(choice.Text)
			if p.returnTokenIDs {
				choice.TokenIDs = o.TokenIDs
				if first {
					choice.PromptTokenIDs = p.req.Prompt
				}
			}
			first = false
			chunk := streamChunk{ID: id, Object: "text_completion", Created: created, Model: s.modelOf(&p.req),
				Choices: []streamChoice{choice}}
			if p.continuous {
				u := usageOf(o, completion)
				u.PromptTokensDetails = nil
				chunk.Usage = &u
			}
			chunk.KVTransferParams = s.prefillParams(ctx, p, o)
			if (chunk.KVTransferParams != nil && ctx.Err() != nil) || !send(chunk) {
				if chunk.KVTransferParams != nil {
					s.clientGone(o.RequestID) // nobody will learn where the blocks are
				}
				s.abort(p.req.ID)
				return
			}
			if o.Finished {
				if p.includeUsage {
					send(usageChunk{ID: id, Object: "text_completion", Created: created, Model: s.modelOf(&p.req),
						Choices: []streamChoice{}, Usage: usageOf(o, completion)})
				}
				done()
				return
			}
		}
	}
}
