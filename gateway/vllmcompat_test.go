package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// TestModelOmitted runs generation and embeddings requests that name no model (field
// absent, null or "") through the whole handler, with one, several and no models
// served: with one they are answered for it (the answer names it, the Backend gets it),
// otherwise refused as /tokenize refuses them. The answers are kept in
// testdata/vllmcompat/model_omitted.golden.
func TestModelOmitted(t *testing.T) {
	const (
		msgs = `"messages":[{"role":"user","content":"hi"}]`
		emb  = "/v1/embeddings"
	)
	type served int
	const (
		one served = iota
		several
		none
	)
	cases := []struct {
		name   string
		served served
		path   string
		body   string
	}{
		{"chat, absent, one served", one, chatPath, `{` + msgs + `}`},
		{"chat, null, one served", one, chatPath, `{"model":null,` + msgs + `}`},
		{"chat, empty, one served", one, chatPath, `{"model":"",` + msgs + `}`},
		{"chat stream, absent, one served", one, chatPath, `{"stream":true,` + msgs + `}`},
		{"chat, absent, several served", several, chatPath, `{` + msgs + `}`},
		{"chat, absent, none served", none, chatPath, `{` + msgs + `}`},
		{"chat, named, one served", one, chatPath, `{"model":"tiny",` + msgs + `}`},
		{"chat, unknown, one served", one, chatPath, `{"model":"nope",` + msgs + `}`},
		{"chat, a number", one, chatPath, `{"model":7,` + msgs + `}`},
		{"completions, absent, one served", one, compPath, `{"prompt":"hi"}`},
		{"completions, null, one served", one, compPath, `{"model":null,"prompt":"hi"}`},
		{"completions batch, absent, one served", one, compPath, `{"prompt":["a","b"]}`},
		{"completions, absent, several served", several, compPath, `{"prompt":"hi"}`},
		{"completions, absent, none served", none, compPath, `{"prompt":"hi"}`},
		{"responses, absent, one served", one, responsesPath, `{"input":"hi"}`},
		{"responses, null, one served", one, responsesPath, `{"model":null,"input":"hi"}`},
		{"responses, absent, several served", several, responsesPath, `{"input":"hi"}`},
		{"embeddings, absent, one served", one, emb, `{"input":"hi"}`},
		{"embeddings, null, one served", one, emb, `{"model":null,"input":"hi"}`},
		{"embeddings, empty, one served", one, emb, `{"model":"","input":"hi"}`},
		{"embeddings, absent, several served", several, emb, `{"input":"hi"}`},
		{"embeddings, absent, none served", none, emb, `{"input":"hi"}`},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeEmbedder()
			b.steps = []step{finish("ok", "stop")}
			want := "tiny" // the model one served is
			if c.path == emb {
				want = "embed"
			}
			switch c.served {
			case one:
				for _, card := range b.cards {
					if card.GetModel() == want {
						b.cards = []*messages.ModelCard{card}
					}
				}
			case none:
				b.cards = nil
			}
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			answered := c.served == one && !strings.Contains(c.body, `"model":7`) && !strings.Contains(c.body, `"nope"`)
			if answered {
				if rr.Code != http.StatusOK || !strings.Contains(rr.Body.String(), `"model":"`+want+`"`) {
					t.Errorf("%d %s; want 200 naming model %q", rr.Code, rr.Body, want)
				}
				for i, g := range b.generated() {
					if g.Model != want {
						t.Errorf("Backend request %d for model %q; want %q", i, g.Model, want)
					}
				}
				for i, e := range b.embedCalls() {
					if e.model != want {
						t.Errorf("Embed %d for model %q; want %q", i, e.model, want)
					}
				}
			} else if rr.Code == http.StatusOK {
				t.Errorf("answered %s; want a refusal", rr.Body)
			}
			fmt.Fprintf(&out, "### %s\nPOST %s %s\n--> %d %s", c.name, c.path, c.body, rr.Code, rr.Body.String())
			if !strings.HasSuffix(rr.Body.String(), "\n") {
				out.WriteString("\n")
			}
		})
	}
	checkGolden(t, "vllmcompat/model_omitted.golden", []byte(out.String()))
}

// TestVersionAndPing checks vLLM's GET /version and GET or POST /ping: /version names the
// build's version, /ping answers as /health does (with one, then no model served), both
// without an API key, and other methods get 405.
func TestVersionAndPing(t *testing.T) {
	b := newFakeBackend()
	s, err := New(Config{Now: func() time.Time { return testTime }, APIKeys: []string{testKeyOne}}, b, fakeOptions(fakePreprocessor{})...)
	if err != nil {
		t.Fatal(err)
	}
	rr := serve(s, http.MethodGet, "/version", "")
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &v); rr.Code != http.StatusOK || err != nil || v.Version != turbineVersion() || v.Version == "" ||
		rr.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET /version: %d %s (%v); want version %q", rr.Code, rr.Body, err, turbineVersion())
	}
	for _, cards := range [][]*messages.ModelCard{b.cards[:1], nil} {
		b.cards = cards
		health := serve(s, http.MethodGet, "/health", "")
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			rr := serve(s, method, "/ping", "")
			if rr.Code != health.Code || rr.Body.String() != health.Body.String() {
				t.Errorf("%s /ping with %d models: %d %s; want /health's %d %s", method, len(cards), rr.Code, rr.Body, health.Code, health.Body)
			}
		}
	}
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPost, "/version", "GET"},
		{http.MethodPut, "/ping", "GET, POST"},
		{http.MethodDelete, "/ping", "GET, POST"},
	} {
		rr := serve(s, c.method, c.path, "")
		if rr.Code != http.StatusMethodNotAllowed || rr.Header().Get("Allow") != c.allow || !strings.Contains(rr.Body.String(), `"code":"method_not_allowed"`) {
			t.Errorf("%s %s: %d Allow %q %s; want 405 Allow %q", c.method, c.path, rr.Code, rr.Header().Get("Allow"), rr.Body, c.allow)
		}
	}
}

// TestBuildVersion checks the version /version reports for each kind of build.
func TestBuildVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if modified != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return s
	}
	const rev = "33e42eb0123456789abcdef0123456789abcdef0"
	cases := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"release", &debug.BuildInfo{Main: debug.Module{Path: "github.com/turbine-llm/turbine", Version: "v1.4.0"}}, true, "v1.4.0"},
		{"stamped from git", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260102030405-33e42eb01234+dirty"}, Settings: vcs(rev, "true")}, true,
			"v0.0.0-20260102030405-33e42eb01234+dirty"},
		{"devel with revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, true, "devel+33e42eb01234"},
		{"devel with modified revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, true, "devel+33e42eb01234.dirty"},
		{"devel with short revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc", "")}, true, "devel+abc"},
		{"devel without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel"},
		{"test binary", &debug.BuildInfo{}, true, "devel"},
		{"no build info", nil, false, "devel"},
	}
	for _, c := range cases {
		if got := versionOf(c.info, c.ok); got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}

// TestModelEntries checks the /v1/models entries' vLLM fields: root (the model folder,
// else the served name), parent null, max_model_len (null when unknown) and vLLM's
// default permission, whose id is the same in every listing.
func TestModelEntries(t *testing.T) {
	perm := func(model string) string {
		return `[{"id":"` + defaultPermission(model, 0).ID + `","object":"model_permission","created":1767323045,"allow_create_engine":false,` +
			`"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,` +
			`"organization":"*","group":null,"is_blocking":false}]`
	}
	cases := []struct {
		name string
		card *messages.ModelCard
		want string
	}{
		{"model folder", &messages.ModelCard{Model: "qwen3", Tokenizer: "/models/Qwen3-8B", ContextLength: 40960},
			`{"id":"qwen3","object":"model","created":1767323045,"owned_by":"turbine","root":"/models/Qwen3-8B","parent":null,"max_model_len":40960,"permission":` + perm("qwen3") + `}`},
		{"builtin tokenizer", &messages.ModelCard{Model: "turbine-mock", Tokenizer: "builtin:cl100k_base", ContextLength: 32768},
			`{"id":"turbine-mock","object":"model","created":1767323045,"owned_by":"turbine","root":"turbine-mock","parent":null,"max_model_len":32768,"permission":` + perm("turbine-mock") + `}`},
		{"no tokenizer, no context length", &messages.ModelCard{Model: "m"},
			`{"id":"m","object":"model","created":1767323045,"owned_by":"turbine","root":"m","parent":null,"max_model_len":null,"permission":` + perm("m") + `}`},
		{"parsers", &messages.ModelCard{Model: "q", Tokenizer: "/m/q", ContextLength: 8, ToolCallParser: "hermes", ReasoningParser: "qwen3", ParserSource: "detected"},
			`{"id":"q","object":"model","created":1767323045,"owned_by":"turbine","root":"/m/q","parent":null,"max_model_len":8,"permission":` + perm("q") +
				`,"tool_call_parser":"hermes","reasoning_parser":"qwen3","parser_source":"detected"}`},
	}
	for _, c := range cases {
		b := newFakeBackend()
		b.cards = []*messages.ModelCard{c.card}
		s := newTestServer(t, b)
		rr := serve(s, http.MethodGet, "/v1/models", "")
		if want := `{"object":"list","data":[` + c.want + "]}\n"; rr.Code != http.StatusOK || rr.Body.String() != want {
			t.Errorf("%s: GET /v1/models: %d %s; want %s", c.name, rr.Code, rr.Body, want)
		}
		rr = serve(s, http.MethodGet, "/v1/models/"+c.card.Model, "")
		if rr.Code != http.StatusOK || rr.Body.String() != c.want+"\n" {
			t.Errorf("%s: GET /v1/models/%s: %d %s; want %s", c.name, c.card.Model, rr.Code, rr.Body, c.want)
		}
	}
	if a, b := defaultPermission("a", 1), defaultPermission("b", 1); a.ID == b.ID || len(a.ID) != len("modelperm-")+32 || a != defaultPermission("a", 1) {
		t.Errorf("permission ids %q, %q: want distinct, stable, modelperm- and 32 hex digits", a.ID, b.ID)
	}
}
