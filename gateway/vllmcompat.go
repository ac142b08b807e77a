package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/turbine-llm/turbine/messages"
)

// What `vllm serve` answers besides the OpenAI API, so that clients and health checks
// written for it work unchanged (docs/reference.md §5.1): GET /version, GET and POST
// /ping, and vLLM's fields of the /v1/models entries. The optional `model` of requests
// is Server.resolveModel.

// versionBody is GET /version's answer.
type versionBody struct {
	Version string `json:"version"` // turbineVersion
}

// handleVersion answers GET /version with {"version": turbineVersion()} (vLLM answers
// its own version there).
func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, versionBody{Version: turbineVersion()})
}

// turbineVersion is the running binary's version, from its build info (versionOf).
var turbineVersion = sync.OnceValue(func() string { return versionOf(debug.ReadBuildInfo()) })

// versionOf is the version of a build whose info is info (ok false: none, as
// debug.ReadBuildInfo returns): the main module's version when the build knows it (a
// release, or the version the go command stamps from the git checkout); else "devel",
// with "+" and the first 12 hex digits of the commit when the build recorded it, and
// ".dirty" when the checkout had changes.
func versionOf(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel+" + rev[:min(len(rev), 12)]
	if dirty {
		v += ".dirty"
	}
	return v
}

// methods serves h for the listed methods (GET also answering HEAD, as only does) and
// answers others with an OpenAI-shaped 405 listing them in Allow.
func methods(h http.HandlerFunc, allowed ...string) http.Handler {
	list := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		if !slices.Contains(allowed, m) {
			w.Header().Set("Allow", list)
			writeError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use %s).",
				clipName(r.Method), clipName(r.URL.Path), strings.Join(allowed, " or ")), 0)
			return
		}
		h(w, r)
	})
}

// modelPermission is vLLM's ModelPermission, the one entry of a /v1/models entry's
// `permission`, with vLLM's default values.
type modelPermission struct {
	ID                 string  `json:"id"`     // "modelperm-" and 32 hex digits
	Object             string  `json:"object"` // "model_permission"
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"` // "*"
	Group              *string `json:"group"`        // null
	IsBlocking         bool    `json:"is_blocking"`
}

// defaultPermission is the permission of model as vLLM lists it. vLLM draws the id at
// random on every listing; Turbine derives it from the model's name, so that it is the
// same on every frontend and every listing.
func defaultPermission(model string, created int64) modelPermission {
	sum := sha256.Sum256([]byte("modelperm:" + model))
	return modelPermission{ID: "modelperm-" + hex.EncodeToString(sum[:16]), Object: "model_permission", Created: created,
		AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}
}

// modelRoot is a /v1/models entry's `root`: what the model was loaded from, as vLLM
// gives its model path there — the model folder (the card's tokenizer folder), or the
// served name when the model has a builtin tokenizer.
func modelRoot(card *messages.ModelCard) string {
	if t := card.GetTokenizer(); t != "" && !strings.HasPrefix(t, "builtin:") {
		return t
	}
	return card.GetModel()
}
