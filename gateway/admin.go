package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// BusyAdmin is implemented by backends whose routers' busy thresholds (docs/reference.md §4) can
// be read and changed at run time; the server then serves /admin/busy_thresholds.
type BusyAdmin interface {
	// SetBusyThresholds changes the thresholds of model's router; nil fields stay as
	// they are, 0 turns a test off. Errors: ErrUnknownModel (wrapped) or a transport error.
	SetBusyThresholds(ctx context.Context, model string, t BusyUpdate) error
	// BusyStatus returns model's thresholds and which of its workers are busy now.
	// Errors: ErrUnknownModel (wrapped) or a transport error.
	BusyStatus(ctx context.Context, model string) (*BusyStatus, error)
}

// BusyUpdate is the body of POST /admin/busy_thresholds.
type BusyUpdate struct {
	Model string `json:"model"`
	// KVUsage: a worker is busy when its active KV blocks / total blocks exceed this
	// fraction (0 < x; 0 turns the test off). Absent: unchanged.
	KVUsage *float64 `json:"kv_usage,omitempty"`
	// PrefillTokens: a worker is busy when its active prefill tokens exceed this many
	// (0 turns the test off). Absent: unchanged.
	PrefillTokens *int64 `json:"prefill_tokens,omitempty"`
}

// BusyStatus is the answer of GET (and POST) /admin/busy_thresholds.
type BusyStatus struct {
	Model string `json:"model"`
	// KVUsage and PrefillTokens are the thresholds in force (0: that test is off).
	KVUsage       float64 `json:"kv_usage"`
	PrefillTokens int64   `json:"prefill_tokens"`
	// Workers lists the model's workers as its router sees them.
	Workers []BusyWorker `json:"workers"`
}

// BusyWorker is one worker's line of BusyStatus.
type BusyWorker struct {
	WorkerID            string  `json:"worker_id"`
	Ready               bool    `json:"ready"`
	Busy                bool    `json:"busy"`
	ActiveBlocks        int64   `json:"active_blocks"`
	ActivePrefillTokens int64   `json:"active_prefill_tokens"`
	EngineKVUsage       float64 `json:"engine_kv_usage"`
}

// handleBusyThresholds serves GET /admin/busy_thresholds?model=M (the thresholds and
// the workers' busy flags; M may be left out when one model is served) and POST /admin/busy_thresholds with a BusyUpdate body (then
// answers as GET does).
func (s *Server) handleBusyThresholds(w http.ResponseWriter, r *http.Request) {
	admin, ok := s.backend.(BusyAdmin)
	if !ok {
		writeError(w, newError(KindRouteNotFound, "", "This server's backend has no busy thresholds."), 0)
		return
	}
	model := r.URL.Query().Get("model")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if model == "" {
			if model, ok = s.onlyModel(r.Context()); !ok {
				writeError(w, newError(KindMissingParameter, "model", "The query parameter `model` is required when more than one model is served."), 0)
				return
			}
		}
	case http.MethodPost:
		u, aerr := s.parseBusyUpdate(w, r)
		if aerr != nil {
			writeError(w, aerr, 0)
			return
		}
		if err := admin.SetBusyThresholds(r.Context(), u.Model, *u); err != nil {
			writeError(w, adminError(u.Model, err), s.cfg.RetryAfter)
			return
		}
		s.cfg.Logger.Info().Str("model", u.Model).Any("kv_usage", u.KVUsage).Any("prefill_tokens", u.PrefillTokens).
			Msg("busy thresholds changed")
		model = u.Model
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use GET or POST).", clipName(r.Method), r.URL.Path), 0)
		return
	}
	st, err := admin.BusyStatus(r.Context(), model)
	if err != nil {
		writeError(w, adminError(model, err), s.cfg.RetryAfter)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// parseBusyUpdate reads and checks a BusyUpdate body.
func (s *Server) parseBusyUpdate(w http.ResponseWriter, r *http.Request) (*BusyUpdate, *APIError) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		return nil, aerr
	}
	var u BusyUpdate
	if err := json.Unmarshal(body, &u); err != nil {
		return nil, newError(KindInvalidJSON, "", "The body is not a busy thresholds object: %v.", err)
	}
	switch {
	case u.Model == "":
		return nil, newError(KindMissingParameter, "model", "`model` is required.")
	case u.KVUsage == nil && u.PrefillTokens == nil:
		return nil, newError(KindMissingParameter, "kv_usage", "Give `kv_usage`, `prefill_tokens` or both.")
	case u.KVUsage != nil && (math.IsNaN(*u.KVUsage) || *u.KVUsage < 0 || *u.KVUsage > 1):
		return nil, newError(KindInvalidValue, "kv_usage", "`kv_usage` must be a fraction from 0 to 1 (0 turns the test off), got %v.", *u.KVUsage)
	case u.PrefillTokens != nil && *u.PrefillTokens < 0:
		return nil, newError(KindInvalidValue, "prefill_tokens", "`prefill_tokens` must be ≥ 0 (0 turns the test off), got %d.", *u.PrefillTokens)
	}
	return &u, nil
}

// adminError maps a BusyAdmin error to the catalogue.
func adminError(model string, err error) *APIError {
	if errors.Is(err, ErrUnknownModel) {
		e := modelNotFound(model)
		e.Cause = err
		return e
	}
	return backendError(model, err)
}

// Who may use the admin routes (Config.AdminAPIKeys): they change how every request is
// routed, so they are never opened by the ordinary API keys.

// adminAccess answers whether r may reach /admin/ (nil) or the error to refuse it with.
func (s *Server) adminAccess(r *http.Request) *APIError {
	if crossOrigin(r) {
		return newError(KindAdminForbidden, "", "The admin routes refuse requests a browser sends for another site's page (the request's Origin or Sec-Fetch-Site header): call them from a command line or a program, not from a web page.")
	}
	presented := len(s.adminDigests) > 0 && presentsKey(r, s.adminDigests)
	return adminDecision(len(s.adminDigests) > 0, len(s.keyDigests) > 0, presented, loopbackClient(r))
}

// adminDecision is the admin routes' policy: with admin keys, a request presenting one
// of them is served from anywhere, any other gets 401 (KindUnauthorized); with API keys
// but no admin key, every request gets 403 (KindAdminForbidden): the operator asked for
// authentication and no key was made for these routes; with no key at all, loopback
// clients are served (the default listener is 127.0.0.1) and others get 403.
func adminDecision(haveAdminKeys, haveAPIKeys, adminKeyPresented, loopback bool) *APIError {
	switch {
	case haveAdminKeys && adminKeyPresented:
		return nil
	case haveAdminKeys:
		return newError(KindUnauthorized, "", "Incorrect admin API key provided: the admin routes take the server's admin keys (--admin-api-key), not its API keys.")
	case haveAPIKeys:
		return newError(KindAdminForbidden, "", "The admin routes are off: this server requires API keys but has no admin key; start it with --admin-api-key to use them.")
	case !loopback:
		return newError(KindAdminForbidden, "", "The admin routes answer only clients on this machine (from a loopback address, not through a proxy, naming the server as localhost or a loopback address) while the server has no admin key; start it with --admin-api-key to use them from elsewhere.")
	}
	return nil
}

// crossOrigin reports whether a browser sent r for a page of another origin: its
// Sec-Fetch-Site is neither "same-origin" nor "none" (typed or bookmarked), or, from a
// browser without that header, its Origin is not r's own (http or https, r.Host). Such
// a request needs no preflight when it is a form's or a plain-text POST, so CORS alone
// does not keep a page from driving the admin routes of a server on its visitor's
// machine, which trust loopback clients (docs/reference.md §5.1). Programs send
// neither header.
func crossOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site != "same-origin" && site != "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	return origin != "http://"+r.Host && origin != "https://"+r.Host
}

// proxyHeaders mark a request relayed by a proxy: its loopback peer address is the
// proxy's, not the client's.
var proxyHeaders = [...]string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"}

// loopbackClient reports whether r came from a loopback address (127.0.0.0/8, ::1, or
// an IPv4-mapped loopback address) without any proxy header: a reverse proxy on the same
// machine connects from loopback on behalf of remote clients.
func loopbackClient(r *http.Request) bool {
	for _, h := range proxyHeaders {
		if _, ok := r.Header[h]; ok {
			return false
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback() && loopbackHost(r.Host)
}

// loopbackHost reports whether host (a Host header, with or without its port) names this
// machine: "localhost" or a loopback address. A page whose own name an attacker's DNS
// now points at 127.0.0.1 (DNS rebinding) sends its name there, and its requests are
// same-origin to the browser; they must not pass for a local client's.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
