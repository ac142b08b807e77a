package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/cors"
)

// Endpoint labels (metrics, logs).
const (
	endpointChat        = "chat_completions"
	endpointCompletions = "completions"
	endpointResponses   = "responses"
	endpointMessages    = "messages"
)

// Server is the OpenAI-compatible HTTP API of a frontend member. It implements
// http.Handler with these routes:
//
//	POST /v1/chat/completions   chat completions, streaming (SSE) or not
//	POST /v1/completions        completions (one prompt: text or token ids)
//	POST /v1/responses          OpenAI Responses API, stateless, streaming (named events) or not
//	POST /v1/embeddings         embeddings of an embedding model (a Backend that is an Embedder)
//	POST /v1/messages           Anthropic Messages API, streaming (named events) or not
//	POST /v1/messages/count_tokens  the prompt's length in tokens, as Anthropic counts it
//	POST /tokenize              a prompt's or a chat's token ids, as vLLM's (tokenize.go)
//	POST /detokenize            the text of token ids, as vLLM's (tokenize.go)
//	GET  /v1/models             models with at least one live worker
//	GET  /v1/models/{id}        one model (404 when unknown)
//	GET  /health                200 when a model has a live worker, else 503 (also while draining)
//	GET  /live                  200 while the process serves HTTP
//	GET  /metrics               Prometheus text of the frontend's metrics (and the process's default set)
//	GET  /admin/busy_thresholds?model=M   the model's busy thresholds and busy workers
//	POST /admin/busy_thresholds  change them ({"model", "kv_usage", "prefill_tokens"})
//	GET  /admin/planner?model=M   the model's planner and its latest decision, explained (planner.go)
//	POST /admin/planner  change its targets ({"model", "ttft_target_ms", "itl_target_ms", "gpu_budget"})
//	GET  /admin/kvbm  every node's KV block manager: tiers, hit rates, offload/onboard (kvbm.go)
//	POST /v1/load_lora_adapter    place a LoRA adapter on workers, as vLLM's (lora.go)
//	POST /v1/unload_lora_adapter  remove it from every worker holding it
//
// The admin routes exist when the Backend implements BusyAdmin (and PlannerAdmin for
// /admin/planner, KvbmAdmin for /admin/kvbm); the LoRA adapter routes when it implements LoraAdmin, and they are
// admin routes too (adminAccess).
//
// Config.APIKeys guard /v1/, /tokenize and /detokenize, and Config.AdminAPIKeys /admin/
// (their docs give the rules; adminDecision decides). A key is presented as
// "Authorization: Bearer <key>" or, as Anthropic's clients send it, "x-api-key: <key>";
// a missing or wrong key gets 401 with the API's error body (code "invalid_api_key") and
// WWW-Authenticate: Bearer, a refused admin request 403 (code "admin_forbidden").
// Without keys /v1/ is not authenticated: put the port behind the operator's network
// policy.
//
// Every response carries X-Request-Id (the client's when usable, else a new one);
// generation responses carry X-Turbine-Worker, the id of the worker that served them,
// and, when the Backend's stream is a DisaggStream, X-Turbine-Disagg (the disaggregation
// decision) and X-Turbine-Prefill-Worker (the prefill leg's worker, "remote" only): the
// outcome for a non-streaming answer, the first routing for a stream (whose finishing
// chunk's `turbine` object names the outcome).
type Server struct {
	cfg     Config
	cors    *cors.Cors // Config.CORS's handler; nil: none
	backend Backend
	opts    options
	metrics *frontendMetrics
	mux     *http.ServeMux
	// keyDigests are the SHA-256 digests of Config.APIKeys (nil: no authentication).
	keyDigests [][sha256.Size]byte
	// adminDigests are those of Config.AdminAPIKeys (nil: see adminDecision).
	adminDigests [][sha256.Size]byte

	draining atomic.Bool
	active   *activity // generation requests from arrival to the end of their answer
	queue    *queue    // nil when Config.QueueDepth is 0
	slots    *slots    // nil when Config.MaxConcurrentRequests is 0
	// ignored holds the unknown request field names already logged (sampling.go).
	ignored ignoredFields
}

// New returns a Server over backend. It fails only on an invalid Config.
func New(cfg Config, backend Backend, opts ...Option) (*Server, error) {
	if backend == nil {
		return nil, errors.New("gateway: New needs a Backend")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{cfg: cfg, backend: backend, opts: o, metrics: newFrontendMetrics(cfg.Observer), mux: http.NewServeMux(),
		active: newActivity()}
	if cfg.QueueDepth > 0 {
		s.queue = newQueue(cfg.QueueDepth)
	}
	s.slots = newSlots(cfg.MaxConcurrentRequests, func() {
		if s.queue != nil {
			s.queue.notifyHeads()
		}
	})
	for _, k := range cfg.APIKeys {
		s.keyDigests = append(s.keyDigests, sha256.Sum256([]byte(k)))
	}
	for _, k := range cfg.AdminAPIKeys {
		s.adminDigests = append(s.adminDigests, sha256.Sum256([]byte(k)))
	}
	if cfg.CORS != nil {
		if s.cors, err = cfg.CORS.handler(); err != nil {
			return nil, err
		}
	}
	s.routes()
	return s, nil
}

// Metrics returns the set the server records into (the one /metrics writes).
func (s *Server) Metrics() *metrics.Set { return s.metrics.set }

func (s *Server) routes() {
	s.mux.Handle("/v1/chat/completions", only(http.MethodPost, s.handleChat))
	s.mux.Handle("/v1/completions", only(http.MethodPost, s.handleCompletions))
	s.mux.Handle("/v1/responses", only(http.MethodPost, s.handleResponses))
	s.mux.Handle("/v1/embeddings", only(http.MethodPost, s.handleEmbeddings))
	s.mux.Handle("/v1/messages", anthropicOnly(s.handleMessages))
	s.mux.Handle("/v1/messages/count_tokens", anthropicOnly(s.handleCountTokens))
	s.mux.Handle("/tokenize", only(http.MethodPost, s.handleTokenize))
	s.mux.Handle("/detokenize", only(http.MethodPost, s.handleDetokenize))
	s.mux.Handle("/v1/models", only(http.MethodGet, s.handleModels))
	s.mux.Handle("/v1/models/{id...}", only(http.MethodGet, s.handleModel))
	s.mux.Handle("/health", only(http.MethodGet, s.handleHealth))
	s.mux.Handle("/ping", methods(s.handleHealth, http.MethodGet, http.MethodPost)) // vLLM's alias of /health
	s.mux.Handle("/version", only(http.MethodGet, s.handleVersion))
	s.mux.Handle("/live", only(http.MethodGet, s.handleLive))
	s.mux.Handle("/metrics", only(http.MethodGet, s.handleMetrics))
	s.mux.HandleFunc("/admin/busy_thresholds", s.handleBusyThresholds)
	s.mux.HandleFunc("/admin/planner", s.handlePlanner)
	s.mux.HandleFunc("/admin/kvbm", s.handleKvbm)
	s.mux.Handle("/v1/load_lora_adapter", only(http.MethodPost, s.handleLoadLora))
	s.mux.Handle("/v1/unload_lora_adapter", only(http.MethodPost, s.handleUnloadLora))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		aerr := newError(KindRouteNotFound, "", "Invalid URL (%s %s).", clipName(r.Method), clipName(r.URL.Path))
		if anthropicPath(r.URL.Path) {
			writeAnthropicError(w, aerr, 0)
			return
		}
		writeError(w, aerr, 0)
	})
}

// anthropicPath reports whether path is under Anthropic's Messages API (/v1/messages and
// below), whose errors, 404 and 401 included, are in Anthropic's shape.
func anthropicPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

// only answers other methods with an OpenAI-shaped 405.
func only(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use %s).", clipName(r.Method), clipName(r.URL.Path), method), 0)
			return
		}
		h(w, r)
	})
}

type requestIDKey struct{}

// ServeHTTP assigns the request id, puts every write of the answer under
// Config.StreamWriteTimeout, checks the API key (Config.APIKeys; Config.AdminAPIKeys
// under /admin/ and on the LoRA adapter routes, which change what every worker holds)
// and dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	if !validRequestID(id) {
		id = s.cfg.NewRequestID()
	}
	w = withWriteDeadlines(w, s.cfg.StreamWriteTimeout)
	w.Header().Set("X-Request-Id", id)
	if anthropicPath(r.URL.Path) {
		w.Header().Set("Request-Id", id) // where Anthropic's SDKs read it (err.requestID)
	}
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
	if s.applyCORS(w, r) {
		return // a preflight: answered without authentication, as browsers send none
	}
	if adminPath(r.URL.Path) {
		if aerr := s.adminAccess(r); aerr != nil {
			if aerr.Kind == KindUnauthorized {
				w.Header().Set("WWW-Authenticate", "Bearer")
			}
			writeError(w, aerr, 0)
			return
		}
	} else if len(s.keyDigests) > 0 && authRequired(r.URL.Path) && !s.authorized(r) {
		s.unauthorized(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// authRequired reports whether a request to path (the decoded URL path) needs an API
// key: the OpenAI API (/v1/) and /tokenize, /detokenize; the admin routes (/admin/) have
// their own keys (adminAccess). An escaped form (/%761/models) decodes to the same path;
// one not in canonical form (/health/../admin/…) is not served but redirected to its
// canonical form, which is checked when the client follows.
func authRequired(path string) bool {
	return strings.HasPrefix(path, "/v1/") || path == "/tokenize" || path == "/detokenize"
}

// authorized reports whether r presents one of the API keys (presentsKey), or presents
// it as Anthropic's clients do (presentsAPIKeyHeader).
func (s *Server) authorized(r *http.Request) bool {
	return presentsKey(r, s.keyDigests) || presentsAPIKeyHeader(r, s.keyDigests)
}

// presentsKey reports whether r presents one of the keys whose SHA-256 digests are
// digests as "Authorization: Bearer <key>" (the scheme's case does not matter, RFC
// 7235). The key is compared through its digest with every key's, in constant time
// (crypto/subtle), so the time taken tells neither which key matched nor their lengths.
// A request with several Authorization headers is refused: which one a proxy on the way
// checked cannot be known.
func presentsKey(r *http.Request, digests [][sha256.Size]byte) bool {
	auth := r.Header.Values("Authorization")
	if len(auth) != 1 {
		return false
	}
	scheme, token, ok := strings.Cut(auth[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return false
	}
	d := sha256.Sum256([]byte(token))
	match := 0
	for i := range digests {
		match |= subtle.ConstantTimeCompare(d[:], digests[i][:])
	}
	return match == 1
}

// unauthorized answers 401 with WWW-Authenticate: Bearer. A refused generation request
// is counted and logged like its other failures (its endpoint, status 401, no model);
// the presented key is never logged.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	aerr := newError(KindUnauthorized, "", "Incorrect API key provided.")
	endpoint := ""
	switch r.URL.Path {
	case "/v1/chat/completions":
		endpoint = endpointChat
	case "/v1/completions":
		endpoint = endpointCompletions
	case "/v1/responses":
		endpoint = endpointResponses
	case "/v1/messages":
		endpoint = endpointMessages
	case "/v1/embeddings":
		endpoint = endpointEmbeddings
	case "/tokenize":
		endpoint = endpointTokenize
	case "/detokenize":
		endpoint = endpointDetokenize
	}
	if endpoint != "" {
		rec := s.begin(r, endpoint)
		rec.fail(aerr)
		defer s.end(rec)
	}
	w.Header().Set("WWW-Authenticate", "Bearer")
	if anthropicPath(r.URL.Path) {
		writeAnthropicError(w, aerr, 0)
		return
	}
	writeError(w, aerr, 0)
}

// validRequestID accepts 1..MaxRequestIDLength bytes of letters, digits and "-_.:".
func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

// readBody reads the body up to the configured limit (Config.MaxBodyBytes), decoding a
// gzip or deflate Content-Encoding; the limit bounds the body as received and decoded
// (decodeEncodedBody). Errors: KindUnsupportedEncoding (with Accept-Encoding set on w),
// KindBodyTooLarge, KindInvalidEncoding, KindInvalidJSON (the body could not be read).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	limit := s.cfg.MaxBodyBytes
	tooLarge := func() *APIError {
		return newError(KindBodyTooLarge, "", "The request body is larger than the limit of %d bytes.", limit)
	}
	coding, aerr := contentCoding(r.Header.Values("Content-Encoding"))
	if aerr != nil {
		w.Header().Set("Accept-Encoding", acceptedEncodings)
		return nil, aerr
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	raw := http.MaxBytesReader(unwrapDeadlines(w), r.Body, limit)
	if coding != "" {
		return decodeEncodedBody(coding, raw, limit)
	}
	// With a Content-Length the body is read into one buffer of that size (plus one byte
	// to see the end), not grown by doubling.
	body, err := readAllSized(raw, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, newError(KindInvalidJSON, "", "The request body could not be read: %v.", err)
	}
	return body, nil
}

// readAllSized is io.ReadAll starting from a buffer of size bytes (plus one) when size
// is known (> 0).
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // more than announced: let append grow it
		}
	}
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handleAPI(w, r, chatAPI, func(ctx context.Context, rec *requestRecord, body []byte) (*prepared, *APIError) {
		req, aerr := parseChatRequest(body)
		if aerr != nil {
			return nil, aerr
		}
		rec.stream = req.Stream
		useBodyRequestID(w, r, rec, req.RequestID)
		return s.prepareChat(ctx, rec.id, req)
	})
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.handleAPI(w, r, completionsAPI, func(ctx context.Context, rec *requestRecord, body []byte) (*prepared, *APIError) {
		req, aerr := parseCompletionRequest(body)
		if aerr != nil {
			return nil, aerr
		}
		rec.stream = req.Stream
		useBodyRequestID(w, r, rec, req.RequestID)
		return s.prepareCompletion(ctx, rec.id, req)
	})
}

// handleAPI runs the steps every generation API shares: read, parse and prepare (by
// prepare, which translates the API's body into a prepared request), then run on the
// Backend, answering in a's shape (errors too).
func (s *Server) handleAPI(w http.ResponseWriter, r *http.Request, a api,
	prepare func(context.Context, *requestRecord, []byte) (*prepared, *APIError)) {
	s.active.begin()
	defer s.active.end()
	rec := s.begin(r, a.endpoint())
	defer s.end(rec)
	r = rec.traced(r) // the request's spans are gateway.receive's children (trace.go)
	if s.draining.Load() {
		aerr := draining()
		rec.fail(aerr)
		a.writeError(w, aerr, s.cfg.RetryAfter)
		return
	}
	t, aerr := s.admitRequest()
	if aerr != nil {
		rec.fail(aerr)
		a.writeError(w, aerr, s.cfg.RetryAfter)
		return
	}
	rec.ticket = t
	defer t.release()
	body, aerr := s.readBody(w, r)
	if aerr == nil {
		var p *prepared
		sp := startPreprocess(r.Context())
		p, aerr = prepare(r.Context(), rec, body)
		endPreprocess(sp, p, aerr)
		if aerr == nil {
			p.api = a
			p.setSession(sessionID(r.Header.Get(SessionHeader), p.common.User))
			s.generate(w, r, rec, p)
			return
		}
	}
	rec.fail(aerr)
	a.writeError(w, aerr, s.cfg.RetryAfter)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	anth := anthropicClient(r)
	cards, err := s.backend.Models(r.Context())
	if err != nil {
		writeAPIError(w, anth, backendError("", err), s.cfg.RetryAfter)
		return
	}
	if anth {
		ids := make([]string, len(cards))
		for i, c := range cards {
			ids[i] = c.GetModel()
		}
		q := r.URL.Query()
		page, aerr := anthropicModelsPage(ids, q.Get("limit"), q.Get("after_id"), q.Get("before_id"), s.cfg.Now())
		if aerr != nil {
			writeAnthropicError(w, aerr, 0)
			return
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	list := modelList{Object: "list", Data: []modelInfo{}}
	created := s.cfg.Now().Unix()
	for _, c := range cards {
		list.Data = append(list.Data, modelInfoOf(c, created, s.cfg.OwnedBy))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	anth := anthropicClient(r)
	card, aerr := s.lookupModel(r.Context(), id)
	if aerr != nil {
		writeAPIError(w, anth, aerr, s.cfg.RetryAfter)
		return
	}
	if anth {
		writeJSON(w, http.StatusOK, anthropicModelOf(card.GetModel(), s.cfg.Now()))
		return
	}
	writeJSON(w, http.StatusOK, modelInfoOf(card, s.cfg.Now().Unix(), s.cfg.OwnedBy))
}

// writeAPIError writes e in Anthropic's shape for an Anthropic client, else OpenAI's.
func writeAPIError(w http.ResponseWriter, anthropic bool, e *APIError, retryAfter time.Duration) {
	if anthropic {
		writeAnthropicError(w, e, retryAfter)
		return
	}
	writeError(w, e, retryAfter)
}

// healthBody is /health's answer.
type healthBody struct {
	Status string   `json:"status"` // "healthy", "unhealthy" or "draining"
	Models []string `json:"models"` // models with at least one live worker
	Error  string   `json:"error,omitempty"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, healthBody{Status: "draining", Models: []string{}})
		return
	}
	cards, err := s.backend.Models(r.Context())
	body := healthBody{Status: "healthy", Models: []string{}}
	for _, c := range cards {
		if isBase(c) { // LoRA adapters are served by their base models' workers
			body.Models = append(body.Models, c.GetModel())
		}
	}
	status := http.StatusOK
	if err != nil || len(body.Models) == 0 {
		body.Status, status = "unhealthy", http.StatusServiceUnavailable
		if err != nil {
			body.Error = err.Error()
		}
	}
	writeJSON(w, status, body)
}

func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.set.WritePrometheus(w)
	s.metrics.lora.write(w)
	if mw, ok := s.backend.(MetricsWriter); ok {
		mw.WritePrometheus(r.Context(), w)
	}
	// The process's default set: what actors in this process record there, e.g. the
	// models workers started by `turbine serve` refused (turbine_worker_model_refused_total),
	// and the process's own figures (go_goroutines, process_open_fds,
	// process_resident_memory_bytes, …), as `turbine node` and `turbine epp` expose them.
	metrics.WritePrometheus(w, true)
	metrics.WriteFDMetrics(w)
}

// writeJSON answers v as JSON with status. It returns the write's error (the client is
// gone, or stopped reading for Config.StreamWriteTimeout).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		writeError(w, &APIError{Kind: KindInternal, Message: "The response could not be encoded.", Cause: err}, 0)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}
