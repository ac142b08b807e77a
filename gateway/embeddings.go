package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"

	"github.com/turbine-llm/turbine/messages"
)

// endpointEmbeddings labels POST /v1/embeddings in metrics and logs.
const endpointEmbeddings = "embeddings"

// maxEmbedParallel bounds the inputs of one embeddings request that are on workers at
// once; the others wait for one of them to finish.
const maxEmbedParallel = 32

// Embedder is implemented by backends that serve embedding models (ModelCard.runner
// RUNNER_POOLING): POST /v1/embeddings is answered 404 without one.
type Embedder interface {
	// Embed routes one tokenized input of model to a worker by load (no KV reuse) and
	// returns its embedding: a unit-norm vector of the model's embedding size, or of
	// dimensions elements when dimensions > 0 (Matryoshka truncation, renormalised), and
	// the input's token count. An engine failure is an Embedding with error set, its
	// fault FAULT_INVALID_REQUEST when the engine refused the input itself.
	// Errors: those of Backend.Generate (ErrUnknownModel, ErrNoWorkers, ErrAllBusy,
	// RouteError's), ctx.Err(), or a transport error.
	Embed(ctx context.Context, model, requestID string, tokens []uint32, dimensions int) (*messages.Embedding, error)
}

// embeddingRequest is a validated POST /v1/embeddings body (docs/reference.md §23).
type embeddingRequest struct {
	Model  string
	Inputs []embeddingInput
	// Base64 is encoding_format "base64": each vector as little-endian float32 bytes.
	Base64 bool
	// Dimensions is the Matryoshka truncation asked for; 0 when absent.
	Dimensions int64
	// Truncate is truncate_prompt_tokens: nil absent, -1 the context length, else k > 0:
	// keep each input's last k tokens.
	Truncate *int64
	// AddSpecialTokens (default true) tokenizes text inputs with the model's special
	// tokens (BOS, EOS, as its tokenizer's post-processor adds them).
	AddSpecialTokens bool
}

// embeddingInput is one input: text, or token ids.
type embeddingInput struct {
	text  string
	ids   []uint32
	isIDs bool
}

// parseEmbeddingRequest validates an embeddings body: input is a string, an array of
// strings, an array of token ids or an array of arrays of token ids (a mixed array is
// refused); encoding_format "float" (default) or "base64"; dimensions ≥ 1; vLLM's
// truncate_prompt_tokens (≥ -1) and add_special_tokens. user and unknown fields are
// ignored.
func parseEmbeddingRequest(body []byte) (*embeddingRequest, *APIError) {
	o, aerr := parseBody(body)
	if aerr != nil {
		return nil, aerr
	}
	req := &embeddingRequest{AddSpecialTokens: true}
	req.Model, _ = o.str("model") // optional: "" is the one model served (Server.resolveModel)
	parseEmbeddingInput(o, req)
	if v, ok := o.str("encoding_format"); ok {
		switch v {
		case "float":
		case "base64":
			req.Base64 = true
		default:
			o.fail(newError(KindInvalidValue, "encoding_format", "Invalid 'encoding_format': %q; expected \"float\" or \"base64\".", clipName(v)))
		}
	}
	if v, ok := o.integer("dimensions"); ok {
		if v < 1 {
			o.fail(newError(KindInvalidValue, "dimensions", "Dimensions must be greater than 0 (got %d).", v))
		}
		req.Dimensions = v
	}
	if v, ok := o.integer("truncate_prompt_tokens"); ok {
		if v < -1 || v == 0 {
			o.fail(newError(KindInvalidValue, "truncate_prompt_tokens", "Invalid 'truncate_prompt_tokens': %d; expected -1 (the context length) or a positive number of tokens.", v))
		}
		req.Truncate = &v
	}
	if v, ok := o.boolean("add_special_tokens"); ok {
		req.AddSpecialTokens = v
	}
	if o.err != nil {
		return nil, o.err
	}
	return req, nil
}

// parseEmbeddingInput reads input into req.Inputs.
func parseEmbeddingInput(o *object, req *embeddingRequest) {
	if o.err != nil {
		return
	}
	v, ok := o.value("input")
	if !ok {
		o.fail(newError(KindMissingParameter, "input", "Missing required parameter: 'input'."))
		return
	}
	switch v := v.(type) {
	case string:
		req.Inputs = []embeddingInput{{text: v}}
		return
	case idArray:
		if len(v) == 0 {
			o.fail(newError(KindInvalidValue, "input", "Invalid 'input': empty array."))
			return
		}
		req.Inputs = []embeddingInput{{ids: v, isIDs: true}}
		return
	case []any:
	default:
		o.fail(typeError("input", "a string or an array", kindOf(v)))
		return
	}
	items := v.([]any)
	if len(items) == 0 {
		o.fail(newError(KindInvalidValue, "input", "Invalid 'input': empty array."))
		return
	}
	first := kindOf(items[0])
	for i, it := range items {
		if k := kindOf(it); k != first {
			o.fail(newError(KindInvalidType, indexParam("input", i),
				"Invalid type for '%s': the items of 'input' must all be strings, all token ids or all arrays of token ids; item 0 is %s, this one %s.",
				indexParam("input", i), first, k))
			return
		}
	}
	switch first {
	case kindNumber:
		ids, aerr := tokenIDs(items, "input")
		o.fail(aerr)
		req.Inputs = []embeddingInput{{ids: ids, isIDs: true}}
	case kindString:
		for _, it := range items {
			req.Inputs = append(req.Inputs, embeddingInput{text: it.(string)})
		}
	case kindArray:
		for i, it := range items {
			p := indexParam("input", i)
			ids, aerr := tokenIDs(it, p)
			if aerr != nil {
				o.fail(aerr)
				return
			}
			if len(ids) == 0 {
				o.fail(newError(KindInvalidValue, p, "Invalid '%s': empty array.", p))
				return
			}
			req.Inputs = append(req.Inputs, embeddingInput{ids: ids, isIDs: true})
		}
	default:
		o.fail(typeError("input[0]", "a string, a token id or an array of token ids", first))
	}
}

// checkRunner refuses a request for an endpoint of the other kind of model: generation
// endpoints (api "Chat Completions", "Completions", ...) on a pooling model, and the
// Embeddings API on a generating one, as vLLM does (400, docs/reference.md §23).
func checkRunner(card *messages.ModelCard, embeddings bool, api string) *APIError {
	pooling := card.GetRunner() == messages.Runner_RUNNER_POOLING
	switch {
	case embeddings && !pooling:
		return newError(KindInvalidValue, "model", "The model does not support Embeddings API: %q is served as a generating model (--runner generate).", clipName(card.GetModel()))
	case !embeddings && pooling:
		return newError(KindInvalidValue, "model", "The model does not support %s API: %q is served as an embedding model (--runner pooling).", api, clipName(card.GetModel()))
	}
	return nil
}

// checkDimensions checks a request's dimensions against the model's Matryoshka
// support, with vLLM's messages.
func checkDimensions(card *messages.ModelCard, dims int64) *APIError {
	if dims == 0 {
		return nil
	}
	if !card.GetIsMatryoshka() {
		return newError(KindInvalidValue, "dimensions", "Model %q does not support matryoshka representation, changing output dimensions will lead to poor results.", clipName(card.GetModel()))
	}
	if allowed := card.GetMatryoshkaDimensions(); len(allowed) > 0 && !slices.Contains(allowed, int32(min(dims, math.MaxInt32))) {
		return newError(KindInvalidValue, "dimensions", "Model %q only supports %v matryoshka dimensions, use other output dimensions will lead to poor results.", clipName(card.GetModel()), allowed)
	}
	return nil
}

// tokenizeEmbeddingInputs tokenizes (or checks against the vocabulary) each input,
// applies truncate_prompt_tokens (keeping the last tokens, as vLLM truncates from the
// left) and checks each against the context length ctxLen (0: unknown).
func tokenizeEmbeddingInputs(req *embeddingRequest, pre Preprocessor, ctxLen int) ([][]uint32, *APIError) {
	tok := pre.Tokenizer()
	vocab := tok.VocabSize()
	if t := req.Truncate; t != nil && ctxLen > 0 && *t > int64(ctxLen) {
		return nil, newError(KindInvalidValue, "truncate_prompt_tokens",
			"truncate_prompt_tokens value (%d) is greater than max_model_len (%d). Please, select a smaller truncation size.", *t, ctxLen)
	}
	out := make([][]uint32, len(req.Inputs))
	for i, in := range req.Inputs {
		p := "input"
		if len(req.Inputs) > 1 {
			p = indexParam("input", i)
		}
		ids := in.ids
		if in.isIDs {
			for j, id := range ids {
				if int(id) >= vocab {
					return nil, newError(KindInvalidValue, p, "Token id %d at %s is out of vocabulary (size %d).", id, indexParam(p, j), vocab)
				}
			}
		} else if req.AddSpecialTokens {
			ids = pre.EncodePrompt(in.text)
		} else {
			ids = tok.Encode(in.text)
		}
		if t := req.Truncate; t != nil {
			keep := int(*t)
			if keep < 0 {
				keep = ctxLen
			}
			if keep > 0 && len(ids) > keep {
				ids = ids[len(ids)-keep:]
			}
		}
		if len(ids) == 0 {
			return nil, newError(KindInvalidValue, p, "Invalid '%s': the input has no tokens.", p)
		}
		if ctxLen > 0 && len(ids) > ctxLen {
			return nil, newError(KindContextLengthExceeded, p,
				"This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
				ctxLen, len(ids))
		}
		out[i] = ids
	}
	return out, nil
}

// Metric families of the embeddings endpoint (docs/reference.md §11 naming; requests
// are counted in turbine_frontend_requests_total{endpoint="embeddings"}).
const (
	metricEmbeddingInputs = "turbine_frontend_embedding_inputs_total" // counter {model}: inputs embedded
	metricEmbeddingTokens = "turbine_frontend_embedding_tokens_total" // counter {model}: their prompt tokens
)

// embedded counts one answered embeddings request of n inputs and tokens prompt tokens.
func (m *frontendMetrics) embedded(model string, n, tokens int) {
	m.set.GetOrCreateCounter(name(metricEmbeddingInputs, "model", model)).Add(n)
	m.set.GetOrCreateCounter(name(metricEmbeddingTokens, "model", model)).Add(tokens)
}

// embeddingData is one entry of the answer's data: the vector as numbers, or as the
// base64 of its little-endian float32 bytes.
type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// embeddingUsage is the answer's usage (vLLM's UsageInfo: completion_tokens is 0).
type embeddingUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// embeddingResponse is POST /v1/embeddings' answer (OpenAI's shape, with vLLM's id and
// created).
type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   embeddingUsage  `json:"usage"`
}

// encodeBase64Floats is the base64 of v as little-endian IEEE-754 float32s, as OpenAI
// and vLLM encode encoding_format "base64".
func encodeBase64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// handleEmbeddings serves POST /v1/embeddings (docs/reference.md §23): each input is
// tokenized here, checked against the context length and embedded on its own (inputs
// may go to different workers, at most maxEmbedParallel at once); the answer lists them
// in input order, with X-Turbine-Worker naming the worker of the first input (of the
// failed input when an engine failed one). It is admitted as a generation is: refused
// while the server drains, holding one of Config.MaxConcurrentRequests while it runs,
// waiting in its model's queue (Config.QueueDepth) for a slot or for a worker when every
// one is busy, and bounded by Config.RequestTimeout. Errors: 404 when the Backend serves
// no embeddings, 400 for bad input, a generating model, unsupported dimensions, an input
// longer than the context, or an input the engine refused (its message, param the
// input), 504 past the request timeout, the Backend's and the queue's errors as for
// generation, 500 engine_error when an engine failed an input.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	emb, ok := s.backend.(Embedder)
	if !ok {
		writeError(w, newError(KindRouteNotFound, "", "Invalid URL (%s %s).", clipName(r.Method), clipName(r.URL.Path)), 0)
		return
	}
	s.active.begin()
	defer s.active.end()
	rec := s.begin(r, endpointEmbeddings)
	defer s.end(rec)
	fail := func(aerr *APIError) {
		rec.fail(aerr)
		writeError(w, aerr, s.cfg.RetryAfter)
	}
	if s.draining.Load() {
		fail(draining())
		return
	}
	t, aerr := s.admitRequest()
	if aerr != nil {
		fail(aerr)
		return
	}
	rec.ticket = t
	defer t.release()
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		fail(aerr)
		return
	}
	req, aerr := parseEmbeddingRequest(body)
	if aerr != nil {
		fail(aerr)
		return
	}
	ctx := r.Context()
	if s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errRequestTimeout)
		defer cancel()
	}
	resp, aerr := s.embed(ctx, rec, emb, req)
	setOutcomeHeaders(w.Header(), rec.worker, DisaggInfo{})
	if aerr != nil {
		fail(aerr)
		return
	}
	_ = writeJSON(w, http.StatusOK, resp)
}

// embed prepares req for its model and runs its inputs on the Backend once admitted
// (rec.ticket), setting rec.worker to the worker of the first input (of the input that
// failed, when one did).
func (s *Server) embed(ctx context.Context, rec *requestRecord, emb Embedder, req *embeddingRequest) (*embeddingResponse, *APIError) {
	card, aerr := s.resolveModel(ctx, req.Model)
	if aerr != nil {
		return nil, aerr
	}
	req.Model = card.GetModel()
	rec.model, _ = servedNames(card)
	if !isBase(card) {
		return nil, newError(KindUnsupported, "model", "LoRA adapters serve generation only: `%s` cannot answer the Embeddings API.",
			clipName(card.GetModel()))
	}
	if aerr := checkRunner(card, true, ""); aerr != nil {
		return nil, aerr
	}
	if aerr := checkDimensions(card, req.Dimensions); aerr != nil {
		return nil, aerr
	}
	pre, aerr := s.loadModel(card)
	if aerr != nil {
		return nil, aerr
	}
	ctxLen := int(card.GetContextLength())
	if ctxLen <= 0 {
		ctxLen = pre.ContextLength()
	}
	inputs, aerr := tokenizeEmbeddingInputs(req, pre, ctxLen)
	if aerr != nil {
		return nil, aerr
	}
	run := &embedRun{emb: emb, model: card.GetModel(), requestID: rec.id, inputs: inputs, dims: int(req.Dimensions),
		out: make([]*messages.Embedding, len(inputs))}
	ran := false
	err := s.admitted(ctx, run.model, rec.ticket, s.newPlace(run.model, rec.ticket), func() error {
		ran = true
		return run.try(ctx)
	})
	if ran {
		s.released(run.model) // its inputs' load left their workers: the model's queue may go on
	}
	rec.worker = run.failedOn
	if err != nil {
		return nil, s.embedError(ctx, run.model, err)
	}
	out := run.out
	rec.worker = out[0].GetWorkerId()
	resp := &embeddingResponse{ID: "embd-" + rec.id, Object: "list", Created: s.cfg.Now().Unix(), Model: card.GetModel(),
		Data: make([]embeddingData, len(out))}
	for i, e := range out {
		var v any = e.GetVector()
		if req.Base64 {
			v = encodeBase64Floats(e.GetVector())
		}
		resp.Data[i] = embeddingData{Object: "embedding", Index: i, Embedding: v}
		n := int(e.GetPromptTokens())
		if n <= 0 {
			n = len(inputs[i])
		}
		resp.Usage.PromptTokens += n
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	s.metrics.embedded(rec.model, len(out), resp.Usage.PromptTokens)
	return resp, nil
}

// embedRun is one request's inputs on the Backend. What each input got is kept across
// the tries of a request that waits in its model's queue (admitted), so that a try
// embeds only the inputs still missing.
type embedRun struct {
	emb              Embedder
	model, requestID string
	inputs           [][]uint32
	dims             int
	// out holds each input's embedding once it has one.
	out []*messages.Embedding
	// failedOn is the worker of the input whose engine failed it ("" when none did).
	failedOn string
}

// try embeds each input out lacks, in parallel (at most maxEmbedParallel at once). The
// first failure cancels the inputs still running and is the try's error: an *APIError
// when an engine failed an input (embeddingFailure), else the Embed error (ErrAllBusy
// makes the request wait in the queue, when it is on, and try again).
func (r *embedRun) try(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	setErr := func(err error, worker string) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first, r.failedOn = err, worker
			cancel(err)
		}
	}
	sem := make(chan struct{}, maxEmbedParallel)
	for i, ids := range r.inputs {
		if r.out[i] != nil {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id := r.requestID
			if len(r.inputs) > 1 {
				id = fmt.Sprintf("%s-%d", r.requestID, i)
			}
			e, err := r.emb.Embed(ctx, r.model, id, ids, r.dims)
			switch {
			case err != nil:
				setErr(err, "")
			case e.GetError() != "":
				setErr(embeddingFailure(r.model, i, len(r.inputs), e), e.GetWorkerId())
			default:
				r.out[i] = e // each goroutine writes its own element; wg.Wait orders the reads
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// maxEngineMessageBytes bounds the engine's message an answer repeats.
const maxEngineMessageBytes = 1024

// embeddingFailure is the error of input i (of n) of model that its worker answered
// with e, an Embedding whose error is set: the engine's refusal of the input
// (FAULT_INVALID_REQUEST) is a 400 invalid_value carrying the engine's message, param
// the input; any other failure a 500 engine_error whose message does not repeat the
// engine's (it names internal addresses: it goes to the log).
func embeddingFailure(model string, i, n int, e *messages.Embedding) *APIError {
	cause := fmt.Errorf("worker %s: %s", e.GetWorkerId(), e.GetError())
	if e.GetFault() == messages.Fault_FAULT_INVALID_REQUEST {
		p := "input"
		if n > 1 {
			p = indexParam("input", i)
		}
		return &APIError{Kind: KindInvalidValue, Param: p, Message: clipEngineMessage(e.GetError()), Cause: cause}
	}
	return &APIError{Kind: KindEngineError, Message: fmt.Sprintf("The engine failed to embed input %d of model %q.", i, clipName(model)),
		Cause: cause}
}

// embedError maps the error of an embeddings request that ctx bounds: 504 when it ran
// past Config.RequestTimeout, client_closed when its client went away, else as
// backendError (an engine's failure, the queue's and the Backend's errors).
func (s *Server) embedError(ctx context.Context, model string, err error) *APIError {
	if aerr := timedOut(ctx, s.cfg.RequestTimeout); aerr != nil {
		aerr.Cause = err
		return aerr
	}
	if ctx.Err() != nil {
		e := newError(KindClientClosed, "", "The client closed the connection.")
		e.Cause = err
		return e
	}
	return backendError(model, err)
}
