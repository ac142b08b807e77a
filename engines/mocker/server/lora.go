package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/model"
)

// LoRA adapters (docs/reference.md §26.1). The engine core holds the adapters
// (mocker.Engine.LoadLora): at most --max-loras, each of rank at most --max-lora-rank,
// and a load stalls the engine loop for --lora-load-ms (divided by --speedup-ratio)
// before it is answered, as vLLM's engine core loads an adapter between two steps. Each
// dialect serves them as its engine does:
//
//   - vllm: POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
//     /v1/unload_lora_adapter {"lora_name"}, answered 200 with a sentence or an error
//     object (vLLM's statuses); /v1/models lists each adapter (id = name, root = path,
//     parent = the base model); a completion whose model is an adapter runs with it;
//     /metrics has vllm:lora_requests_info.
//   - sglang: POST /load_lora_adapter and /unload_lora_adapter answered with SGLang's
//     LoRAUpdateOutput ({"success", "error_message", "loaded_adapters"}, 400 on failure);
//     /generate's lora_path names the adapter.
//   - trtllm: no load API; a completion's lora_request {"lora_name", "lora_int_id",
//     "lora_path"} loads the adapter first when the engine does not hold it, evicting the
//     least recently used adapter no request uses when every slot holds one.
//
// Every dialect counts the loads and unloads done in turbine_mocker_lora_loads_total and
// turbine_mocker_lora_unloads_total (with adapters on).

// Mock-only metrics of the adapter model.
const (
	MetricLoraLoads   = "turbine_mocker_lora_loads_total"
	MetricLoraUnloads = "turbine_mocker_lora_unloads_total"
	// MetricLoraInfo is vLLM's adapter gauge (vllm/v1/metrics/loggers.py): labels
	// max_lora, running_lora_adapters and waiting_lora_adapters (the names of the
	// adapters with running and waiting requests, comma-separated), value the Unix time
	// of the engine step it describes. vLLM keeps one series per label set ever seen (a
	// reader takes the newest); the mock engine writes the latest only.
	MetricLoraInfo = "vllm:lora_requests_info"
)

// loraSurface is the server's side of the adapters: a snapshot of those the engine holds
// (for the HTTP handlers, which run beside the engine loop) and the metrics.
type loraSurface struct {
	maxLoras int
	adapters atomic.Pointer[[]mocker.Adapter]
	info     atomic.Pointer[loraInfo] // the latest step's vllm:lora_requests_info
	loads    *metrics.Counter         // nil with adapters off
	unloads  *metrics.Counter
}

type loraInfo struct {
	running, waiting string
	at               time.Time
}

func (l *loraSurface) init(s *Server) {
	l.maxLoras = s.opts.Engine.MaxLoras
	none := []mocker.Adapter{}
	l.adapters.Store(&none)
	l.info.Store(&loraInfo{at: time.Now()})
	if l.maxLoras > 0 {
		labels := fmt.Sprintf(`{model_name=%s}`, strconv.Quote(s.opts.ServedModelName))
		l.loads = s.metrics.NewCounter(MetricLoraLoads + labels)
		l.unloads = s.metrics.NewCounter(MetricLoraUnloads + labels)
	}
}

// update copies the engine's adapter counters and requests (the loop calls it with
// every stats update).
func (l *loraSurface) update(st *mocker.Stats) {
	if l.loads == nil {
		return
	}
	l.loads.Set(st.LoraLoads)
	l.unloads.Set(st.LoraUnloads)
	var running, waiting []string
	for _, r := range st.LoraRequests {
		if r.Running > 0 {
			running = append(running, r.Name)
		}
		if r.Waiting > 0 {
			waiting = append(waiting, r.Name)
		}
	}
	l.info.Store(&loraInfo{running: strings.Join(running, ","), waiting: strings.Join(waiting, ","), at: time.Now()})
}

// writeInfo writes vllm:lora_requests_info (with adapters on), as vLLM does only with
// --enable-lora.
func (l *loraSurface) writeInfo(w io.Writer) {
	if l.loads == nil {
		return
	}
	in := l.info.Load()
	fmt.Fprintf(w, "# HELP %s Running stats on lora requests.\n# TYPE %s gauge\n", MetricLoraInfo, MetricLoraInfo)
	fmt.Fprintf(w, "%s{max_lora=%q,running_lora_adapters=%q,waiting_lora_adapters=%q} %s\n", MetricLoraInfo,
		strconv.Itoa(l.maxLoras), in.running, in.waiting,
		strconv.FormatFloat(float64(in.at.UnixNano())/1e9, 'g', -1, 64))
}

// find returns the loaded adapter named name.
func (l *loraSurface) find(name string) (mocker.Adapter, bool) {
	for _, a := range *l.adapters.Load() {
		if a.Name == name {
			return a, true
		}
	}
	return mocker.Adapter{}, false
}

// loraOp is a load or unload for the engine loop.
type loraOp struct {
	load   *mocker.Adapter // the adapter to load, or nil
	unload string          // the adapter to unload
	done   chan loraResult
}

type loraResult struct {
	adapter mocker.Adapter // the adapter loaded
	err     error          // the engine's refusal (mocker.ErrLora...)
}

// errUnknownLora refuses a request naming an adapter the engine does not hold.
var errUnknownLora = errors.New("LoRA adapter not loaded")

// callLora has the engine loop apply op and returns its result. Errors: ctx's, or
// errEngineStopped.
func (s *Server) callLora(ctx context.Context, op *loraOp) (loraResult, error) {
	op.done = make(chan loraResult, 1)
	select {
	case s.cmds <- command{lora: op}:
	case <-ctx.Done():
		return loraResult{}, ctx.Err()
	case <-s.loopDone:
		return loraResult{}, errEngineStopped
	}
	select {
	case r := <-op.done:
		return r, nil
	case <-s.loopDone:
		return loraResult{}, errEngineStopped
	}
}

// applyLora runs op in the engine loop: a load stalls the loop for its modelled time
// before it is answered (nothing is computed meanwhile).
func (s *Server) applyLora(ctx context.Context, op *loraOp) {
	var res loraResult
	if op.load != nil {
		var d time.Duration
		res.adapter, d, res.err = s.eng.LoadLora(*op.load)
		if res.err == nil {
			s.log.Info().Str("lora_name", res.adapter.Name).Str("lora_path", res.adapter.Path).Int("lora_int_id", res.adapter.ID).
				Dur("load_time", d).Msg("LoRA adapter loaded")
			s.stall(ctx, d)
		}
	} else if res.err = s.eng.UnloadLora(op.unload); res.err == nil {
		s.log.Info().Str("lora_name", op.unload).Msg("LoRA adapter unloaded")
	}
	s.publishLoras()
	op.done <- res
}

// checkLora, in the engine loop, checks that the adapter request r names is loaded;
// with ensure (trtllm dialect), it loads it first when it is not, evicting the least
// recently used adapter no request uses when every slot holds one. Errors:
// errUnknownLora, or the load's refusal.
func (s *Server) checkLora(ctx context.Context, r *mocker.Request, ensure *mocker.Adapter) error {
	if r.LoraName == "" {
		return nil
	}
	if _, ok := s.eng.Lora(r.LoraName); ok {
		return nil
	}
	if ensure == nil {
		return fmt.Errorf("%w: %q", errUnknownLora, r.LoraName)
	}
	cfg := s.eng.Config()
	rankOK := ensure.Rank >= 1 && ensure.Rank <= cfg.MaxLoraRankOrDefault()
	if n := len(s.eng.Loras()); rankOK && cfg.MaxLoras > 0 && n >= cfg.MaxLoras {
		if idle, ok := s.eng.IdleLora(); ok {
			_ = s.eng.UnloadLora(idle.Name)
			s.log.Info().Str("lora_name", idle.Name).Str("for", ensure.Name).Msg("LoRA adapter evicted")
		}
	}
	a, d, err := s.eng.LoadLora(*ensure)
	s.publishLoras()
	if err != nil {
		return err
	}
	s.log.Info().Str("lora_name", a.Name).Str("lora_path", a.Path).Dur("load_time", d).Msg("LoRA adapter loaded for a request")
	s.stall(ctx, d)
	return nil
}

// hookLoraStall is the point at which a test hook (Server.testHook) runs when the engine
// loop begins to stall for an adapter load.
const hookLoraStall = "lora-stall"

// stall blocks the engine loop for d (a modelled adapter load), or until ctx ends.
func (s *Server) stall(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	s.hook(ctx, hookLoraStall)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// publishLoras stores the engine's adapters for the handlers and updates the stats.
func (s *Server) publishLoras() {
	list := s.eng.Loras()
	s.lora.adapters.Store(&list)
	s.publishStats()
}

// adapterConfig is what the mock engine reads of an adapter folder's adapter_config.json
// (PEFT's LoraConfig).
type adapterConfig struct {
	Rank      int
	BaseModel string
}

// Errors of readAdapter.
var (
	// errNoAdapter: the folder, or its adapter_config.json, does not exist (or cannot be
	// opened).
	errNoAdapter = errors.New("no adapter found")
	// errBadAdapter: adapter_config.json cannot be read as an adapter's.
	errBadAdapter = errors.New("invalid adapter_config.json")
)

// readAdapter reads the adapter folder path's adapter_config.json (the mock engine has
// no weights to read) as the worker's check reads it (model.ReadAdapterConfig: a regular
// file of at most 1 MiB, opened without blocking; docs/reference.md §26.1), its rank r
// an integral number (8 or 8.0, as Python's PEFT takes either). Errors: errNoAdapter,
// errBadAdapter (not a regular file, too large, not JSON, no positive integer r), each
// wrapped.
func readAdapter(path string) (adapterConfig, error) {
	b, err := model.ReadAdapterConfig(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return adapterConfig{}, fmt.Errorf("%w for %s: %w", errNoAdapter, path, err)
	case err != nil:
		return adapterConfig{}, fmt.Errorf("%w in %s: %w", errBadAdapter, path, err)
	}
	var raw struct {
		Rank      *float64 `json:"r"`
		BaseModel string   `json:"base_model_name_or_path"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return adapterConfig{}, fmt.Errorf("%w in %s: %w", errBadAdapter, path, err)
	}
	r := 0.0
	if raw.Rank != nil {
		r = *raw.Rank
	}
	switch {
	case r != math.Trunc(r):
		return adapterConfig{}, fmt.Errorf("%w in %s: r %v: want an integer", errBadAdapter, path, r)
	case r < 1:
		return adapterConfig{}, fmt.Errorf("%w in %s: rank r %v, want a positive integer", errBadAdapter, path, r)
	case r > math.MaxInt32:
		return adapterConfig{}, fmt.Errorf("%w in %s: rank r %v, want at most %d", errBadAdapter, path, r, math.MaxInt32)
	}
	return adapterConfig{Rank: int(r), BaseModel: raw.BaseModel}, nil
}

// ---- vLLM's dialect ----

// vllmLoadRequest is vLLM's LoadLoRAAdapterRequest (and UnloadLoRAAdapterRequest, which
// has lora_name only).
type vllmLoadRequest struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path"`
}

// vllmLoraBody decodes a load or unload body; a body that is not such JSON is vLLM's
// 400 for a request it cannot validate.
func vllmLoraBody(w http.ResponseWriter, r *http.Request) (vllmLoadRequest, bool) {
	var req vllmLoadRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, badRequest("", "invalid JSON body: %v", err))
		return req, false
	}
	return req, true
}

func invalidUserInput(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "InvalidUserInput", msg: fmt.Sprintf(format, args...)}
}

// handleVLLMLoadLora serves POST /v1/load_lora_adapter with vLLM's checks, answers and
// statuses (vllm/entrypoints/openai/models/serving.py, the worker's LoRA manager), and
// one of the mock engine's own: a load past --max-loras is 503 (vLLM would take it and
// evict its least recently used adapter from its cache).
func (s *Server) handleVLLMLoadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := vllmLoraBody(w, r)
	if !ok {
		return
	}
	name, path := req.LoraName, req.LoraPath
	if name == "" || path == "" {
		writeError(w, invalidUserInput("Both 'lora_name' and 'lora_path' must be provided."))
		return
	}
	if _, loaded := s.lora.find(name); loaded {
		writeError(w, invalidUserInput("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", name))
		return
	}
	if s.lora.maxLoras == 0 {
		writeError(w, badRequest("", "LoRA is not enabled. Use --enable-lora to enable LoRA."))
		return
	}
	cfg, err := readAdapter(path)
	switch {
	case errors.Is(err, errNoAdapter):
		writeError(w, &apiError{status: http.StatusNotFound, typ: "NotFoundError",
			msg: fmt.Sprintf("Loading lora %s failed: No adapter found for %s", name, path)})
		return
	case err != nil:
		writeError(w, badRequest("", "Loading lora %s failed: %v", name, err))
		return
	}
	res, err := s.callLora(r.Context(), &loraOp{load: &mocker.Adapter{Name: name, Path: path, Rank: cfg.Rank}})
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()})
		}
		return
	case errors.Is(res.err, mocker.ErrLoraRank):
		writeError(w, badRequest("", "LoRA rank %d is greater than max_lora_rank %d.", cfg.Rank, s.opts.Engine.MaxLoraRankOrDefault()))
		return
	case errors.Is(res.err, mocker.ErrLoraLoaded):
		writeError(w, invalidUserInput("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", name))
		return
	case errors.Is(res.err, mocker.ErrLoraSlots):
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError",
			msg: fmt.Sprintf("LoRA adapter '%s' not loaded: all %d adapter slots (--max-loras) hold adapters; unload one first.", name, s.lora.maxLoras)})
		return
	case res.err != nil:
		writeError(w, badRequest("", "%v", res.err))
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", name)
}

// handleVLLMUnloadLora serves POST /v1/unload_lora_adapter as vLLM: requests already
// running with the adapter finish with it.
func (s *Server) handleVLLMUnloadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := vllmLoraBody(w, r)
	if !ok {
		return
	}
	if req.LoraName == "" {
		writeError(w, invalidUserInput("'lora_name' needs to be provided to unload a LoRA adapter."))
		return
	}
	notFound := &apiError{status: http.StatusNotFound, typ: "NotFoundError",
		msg: fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoraName)}
	if _, loaded := s.lora.find(req.LoraName); !loaded {
		writeError(w, notFound)
		return
	}
	res, err := s.callLora(r.Context(), &loraOp{unload: req.LoraName})
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()})
		}
		return
	case res.err != nil:
		writeError(w, notFound)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoraName)
}

// loraCards are the adapters' /v1/models entries, as vLLM lists them: id the name, root
// the path, parent the base model, no max_model_len.
func (s *Server) loraCards() []modelCard {
	var out []modelCard
	for _, a := range *s.lora.adapters.Load() {
		parent := s.opts.ServedModelName
		out = append(out, modelCard{ID: a.Name, Object: "model", Created: s.created, OwnedBy: "vllm", Root: a.Path,
			Parent: &parent, Permission: []modelPermission{{ID: "modelperm-" + randomID(), Object: "model_permission",
				Created: s.created, AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}}})
	}
	return out
}

// ---- SGLang's dialect ----

// sglangLoraRequest is SGLang's LoadLoRAAdapterReqInput (UnloadLoRAAdapterReqInput has
// lora_name only).
type sglangLoraRequest struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path"`
	Pinned   bool   `json:"pinned"`
}

// sglangLoraOutput is SGLang's LoRAUpdateOutput.
type sglangLoraOutput struct {
	Success        bool              `json:"success"`
	ErrorMessage   *string           `json:"error_message"`
	LoadedAdapters map[string]string `json:"loaded_adapters"`
}

// sglangLoraAnswer answers a load or unload: 200 on success, else 400 with the message.
func (s *Server) sglangLoraAnswer(w http.ResponseWriter, msg string) {
	out := sglangLoraOutput{Success: msg == "", LoadedAdapters: map[string]string{}}
	for _, a := range *s.lora.adapters.Load() {
		out.LoadedAdapters[a.Name] = a.Path
	}
	status := http.StatusOK
	if msg != "" {
		out.ErrorMessage, status = &msg, http.StatusBadRequest
	}
	writeJSON(w, status, out)
}

func (s *Server) sglangLoraBody(w http.ResponseWriter, r *http.Request) (sglangLoraRequest, bool) {
	var req sglangLoraRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.LoraName == "" {
		sglangValidationError(w, fmt.Sprintf("invalid LoRA adapter request (lora_name is required): %v", err))
		return req, false
	}
	return req, true
}

// handleSGLangLoadLora serves POST /load_lora_adapter as SGLang's tokenizer manager:
// every refusal is 400 with success false and the message (a load past --max-loras as
// SGLang's --max-loaded-loras refuses one).
func (s *Server) handleSGLangLoadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := s.sglangLoraBody(w, r)
	if !ok {
		return
	}
	if s.lora.maxLoras == 0 {
		s.sglangLoraAnswer(w, "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
		return
	}
	cfg, err := readAdapter(req.LoraPath)
	if err != nil {
		s.sglangLoraAnswer(w, fmt.Sprintf("Failed to load LoRA adapter %s: %v", req.LoraName, err))
		return
	}
	res, err := s.callLora(r.Context(), &loraOp{load: &mocker.Adapter{Name: req.LoraName, Path: req.LoraPath, Rank: cfg.Rank}})
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			sglangError(w, http.StatusServiceUnavailable, "%v", err)
		}
		return
	case errors.Is(res.err, mocker.ErrLoraSlots):
		s.sglangLoraAnswer(w, fmt.Sprintf("Cannot load LoRA adapter %s at path %s. Maximum number of loaded LoRA adapters is %d. Unload an adapter first.",
			req.LoraName, req.LoraPath, s.lora.maxLoras))
		return
	case errors.Is(res.err, mocker.ErrLoraLoaded):
		s.sglangLoraAnswer(w, fmt.Sprintf("LoRA adapter %s is already loaded.", req.LoraName))
		return
	case errors.Is(res.err, mocker.ErrLoraRank):
		s.sglangLoraAnswer(w, fmt.Sprintf("LoRA adapter %s with rank %d is incompatible with the current LoRA memory pool configuration (--max-lora-rank %d).",
			req.LoraName, cfg.Rank, s.opts.Engine.MaxLoraRankOrDefault()))
		return
	case res.err != nil:
		s.sglangLoraAnswer(w, res.err.Error())
		return
	}
	s.sglangLoraAnswer(w, "")
}

// handleSGLangUnloadLora serves POST /unload_lora_adapter.
func (s *Server) handleSGLangUnloadLora(w http.ResponseWriter, r *http.Request) {
	req, ok := s.sglangLoraBody(w, r)
	if !ok {
		return
	}
	res, err := s.callLora(r.Context(), &loraOp{unload: req.LoraName})
	switch {
	case err != nil:
		if r.Context().Err() == nil {
			sglangError(w, http.StatusServiceUnavailable, "%v", err)
		}
		return
	case res.err != nil:
		s.sglangLoraAnswer(w, fmt.Sprintf("LoRA adapter %s is not loaded.", req.LoraName))
		return
	}
	s.sglangLoraAnswer(w, "")
}

// sglangLoraName reads GenerateReqInput.lora_path: an adapter's name (or a list of one
// name, or null). Errors: another shape, or an adapter the engine does not hold.
func (s *Server) sglangLoraName(raw json.RawMessage) (string, string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		var list []*string
		if err := json.Unmarshal(raw, &list); err != nil || len(list) != 1 {
			return "", "lora_path must be an adapter's name, or a list of one (batches are not supported by the mock engine)."
		}
		if list[0] != nil {
			name = *list[0]
		}
	}
	if name == "" {
		return "", ""
	}
	if _, ok := s.lora.find(name); !ok {
		return "", fmt.Sprintf("The following requested LoRA adapters are not loaded: %s", name)
	}
	return name, ""
}

// ---- trtllm-serve's dialect ----

// trtllmLoraRequest is TensorRT-LLM's LoRARequest (tensorrt_llm/executor/request.py) as
// a completion carries it.
type trtllmLoraRequest struct {
	LoraName  string `json:"lora_name"`
	LoraIntID *int   `json:"lora_int_id"`
	LoraPath  string `json:"lora_path"`
}

// trtllmLora reads a completion's lora_request into the adapter to run with (loaded on
// demand from its path). Errors: a malformed one, adapters off, an adapter folder that
// cannot be read.
func (s *Server) trtllmLora(raw json.RawMessage) (*mocker.Adapter, string) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, ""
	}
	var lr trtllmLoraRequest
	if err := json.Unmarshal(raw, &lr); err != nil || lr.LoraName == "" || lr.LoraIntID == nil {
		return nil, "lora_request needs lora_name and lora_int_id"
	}
	if s.lora.maxLoras == 0 {
		return nil, "LoRA is not enabled: the engine was started without lora_config."
	}
	a := &mocker.Adapter{Name: lr.LoraName, Path: lr.LoraPath}
	if loaded, ok := s.lora.find(lr.LoraName); ok {
		return &loaded, ""
	}
	cfg, err := readAdapter(lr.LoraPath)
	if err != nil {
		return nil, fmt.Sprintf("LoRA adapter %s: %v", lr.LoraName, err)
	}
	a.Rank = cfg.Rank
	return a, ""
}
