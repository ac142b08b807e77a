package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rs/cors"
)

// CORS is the API's cross-origin policy for browser clients, as vLLM's --allowed-origins,
// --allowed-methods, --allowed-headers and --allow-credentials (docs/reference.md §5.1):
// "*" in AllowedOrigins or AllowedHeaders allows any; "*" in AllowedMethods allows
// HEAD, GET, POST, PUT, PATCH and DELETE. The admin routes (/admin/, the LoRA load and
// unload routes) never answer cross-origin: a page in an operator's browser must not
// reach what loopback clients may do; nor does /metrics, open without a key, whose
// model, adapter and worker names and traffic no web page needs to read.
type CORS struct {
	AllowedOrigins   []string
	AllowedMethods   []string
	AllowedHeaders   []string
	AllowCredentials bool
}

// DefaultCORS is vLLM's default: any origin, method and header, no credentials.
func DefaultCORS() *CORS {
	return &CORS{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"*"}, AllowedHeaders: []string{"*"}}
}

// anyMethod is what "*" in AllowedMethods stands for.
var anyMethod = []string{http.MethodHead, http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// handler builds the policy's handler. Errors: credentials with any origin (browsers
// refuse "*" with credentials, and echoing every origin would hand them to any page).
func (c *CORS) handler() (*cors.Cors, error) {
	methods := c.AllowedMethods
	if slices.Contains(methods, "*") {
		methods = anyMethod
	}
	if c.AllowCredentials && slices.Contains(c.AllowedOrigins, "*") {
		return nil, fmt.Errorf("gateway: CORS credentials with any origin (\"*\"): name the origins")
	}
	upper := make([]string, len(methods))
	for i, m := range methods {
		upper[i] = strings.ToUpper(m)
	}
	return cors.New(cors.Options{AllowedOrigins: c.AllowedOrigins, AllowedMethods: upper,
		AllowedHeaders: c.AllowedHeaders, AllowCredentials: c.AllowCredentials,
		ExposedHeaders: []string{"X-Request-Id", "Request-Id", "Retry-After"}}), nil
}

// adminPath reports whether path is one of the admin routes (their own access rules).
func adminPath(path string) bool {
	return strings.HasPrefix(path, "/admin/") || path == "/v1/load_lora_adapter" || path == "/v1/unload_lora_adapter"
}

// applyCORS adds the policy's headers to r's answer (not for the admin routes and
// /metrics); a preflight (OPTIONS with Access-Control-Request-Method) is answered here,
// before any API key is asked for (browsers send none with it), and done reports it.
func (s *Server) applyCORS(w http.ResponseWriter, r *http.Request) (done bool) {
	if s.cors == nil || adminPath(r.URL.Path) || r.URL.Path == "/metrics" {
		return false
	}
	s.cors.HandlerFunc(w, r)
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}
