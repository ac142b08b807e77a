package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// fakeLora is a backend serving base model "tiny" with LoRA adapters (and model "other"
// with an adapter "shared" of its own, when two is set), and a LoraAdmin whose answers
// the test sets.
type fakeLora struct {
	*fakeBackend
	mu      sync.Mutex
	loads   []LoraLoad
	unloads []LoraUnload
	result  *LoraResult // the answer of every load and unload
	err     error
}

func loraCard(base *messages.ModelCard, name, path string) *messages.ModelCard {
	c := proto.Clone(base).(*messages.ModelCard)
	c.Model, c.Lora = name, &messages.LoraAdapter{Name: name, Path: path, Parent: base.Model, Rank: 8, Pinned: true}
	return c
}

// newFakeLora serves tiny with adapters sql and chat (and, with two, model other with
// adapters shared and sql).
func newFakeLora(two bool, steps ...step) *fakeLora {
	b := newFakeBackend(steps...)
	tiny := b.cards[0]
	cards := []*messages.ModelCard{tiny}
	if two {
		other := &messages.ModelCard{Model: "other", Tokenizer: "fake", ContextLength: 128}
		cards = append(cards, other, loraCard(other, "shared", "/o/shared"), loraCard(other, "sql", "/o/sql"))
	}
	cards = append(cards, loraCard(tiny, "sql", "/adapters/sql"), loraCard(tiny, "chat", "/adapters/chat"))
	b.cards = cards
	return &fakeLora{fakeBackend: b, result: &LoraResult{Workers: []LoraWorker{{WorkerID: "w0"}, {WorkerID: "w1"}}}}
}

func (f *fakeLora) LoadLora(ctx context.Context, req LoraLoad) (*LoraResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads = append(f.loads, req)
	return f.result, f.err
}

func (f *fakeLora) UnloadLora(ctx context.Context, req LoraUnload) (*LoraResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unloads = append(f.unloads, req)
	return f.result, f.err
}

const (
	loadPath   = "/v1/load_lora_adapter"
	unloadPath = "/v1/unload_lora_adapter"
)

func workers(lines ...LoraWorker) *LoraResult { return &LoraResult{Workers: lines} }

func lw(id string, f messages.LoraFailure, err string) LoraWorker {
	return LoraWorker{WorkerID: id, Failure: f, Error: err}
}

const (
	ok      = messages.LoraFailure_LORA_OK
	invalid = messages.LoraFailure_LORA_INVALID
	noSlot  = messages.LoraFailure_LORA_NO_SLOT
	engine  = messages.LoraFailure_LORA_ENGINE
	missing = messages.LoraFailure_LORA_NOT_FOUND
)

// TestLoraLoadEndpoint runs POST /v1/load_lora_adapter against the fake: vLLM's request
// shape and success text, Turbine's model and workers, and each refusal in the OpenAI
// error shape.
func TestLoraLoadEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		two    bool // a second base model is served
		body   string
		result *LoraResult
		err    error
		// want: status, the body (exactly for 200s, a part of it for refusals), the error
		// code, the load the backend got (nil: none), the workers header.
		code    int
		body200 string
		errCode string
		errPart string
		load    *LoraLoad
		header  string
	}{
		{name: "loaded everywhere", body: `{"lora_name":"new","lora_path":"/a/new"}`, result: workers(lw("w0", ok, ""), lw("w1", ok, "")),
			code: 200, body200: "Success: LoRA adapter 'new' added successfully.", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true},
			header: "w0,w1"},
		{name: "model and workers", two: true, body: `{"lora_name":"new","lora_path":"/a/new","model":"other","workers":1}`,
			result: workers(lw("w3", ok, "")), code: 200, body200: "Success: LoRA adapter 'new' added successfully.",
			load: &LoraLoad{Model: "other", Name: "new", Path: "/a/new", Workers: 1, Unpinned: true}, header: "w3"},
		{name: "pinned false: as without it", body: `{"lora_name":"new","lora_path":"/a/new","pinned":false}`,
			result: workers(lw("w0", ok, "")), code: 200, body200: "Success: LoRA adapter 'new' added successfully.",
			load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}, header: "w0"},
		{name: "pinned true: a pinned load", body: `{"lora_name":"new","lora_path":"/a/new","pinned":true}`,
			result: workers(lw("w0", ok, "")), code: 200, body200: "Success: LoRA adapter 'new' added successfully.",
			load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new"}, header: "w0"},
		{name: "unknown fields ignored", body: `{"lora_name":"new","lora_path":"/a/new","load_inplace":false,"base_model_name":"x"}`,
			result: workers(lw("w0", ok, "")), code: 200, body200: "Success: LoRA adapter 'new' added successfully.",
			load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}, header: "w0"},
		{name: "partial", body: `{"lora_name":"new","lora_path":"/a/new"}`,
			result: workers(lw("w0", ok, ""), lw("w1", noSlot, "4 pinned adapters"), lw("w2", engine, "no answer in 1m0s")), code: 200,
			body200: "Success: LoRA adapter 'new' added successfully.\nLoaded on 1 of 3 workers; not on w1 (no_slot: 4 pinned adapters); w2 (engine: no answer in 1m0s).",
			load:    &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}, header: "w0"},
		{name: "already pinned: idempotent", body: `{"lora_name":"sql","lora_path":"/adapters/sql"}`,
			result: workers(LoraWorker{WorkerID: "w0", Held: true}), code: 200, body200: "Success: LoRA adapter 'sql' added successfully.",
			load: &LoraLoad{Model: "tiny", Name: "sql", Path: "/adapters/sql", Unpinned: true}, header: "w0"},
		{name: "invalid adapter", body: `{"lora_name":"new","lora_path":"/nope"}`,
			result: workers(lw("w0", invalid, "/nope: no such folder"), lw("w1", invalid, "/nope: no such folder")),
			code:   400, errCode: "invalid_value", errPart: "Invalid LoRA adapter 'new': /nope: no such folder", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/nope", Unpinned: true}},
		{name: "no slot anywhere", body: `{"lora_name":"new","lora_path":"/a/new"}`,
			result: workers(lw("w0", noSlot, "full"), lw("w1", noSlot, "full")),
			code:   503, errCode: "lora_no_slot", errPart: "never evicts", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}},
		{name: "engines failed", body: `{"lora_name":"new","lora_path":"/a/new"}`,
			result: workers(lw("w0", engine, "vllm: 500"), lw("w1", noSlot, "full")),
			code:   503, errCode: "lora_unavailable", errPart: "w0 (engine: vllm: 500)", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}},
		{name: "no worker", body: `{"lora_name":"new","lora_path":"/a/new"}`, result: workers(),
			code: 503, errCode: "no_live_workers", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}},
		{name: "loaded from another path", body: `{"lora_name":"sql","lora_path":"/b/sql"}`, err: fmt.Errorf("%w: w0 holds /adapters/sql", ErrLoraConflict),
			code: 400, errCode: "invalid_value", errPart: "The lora adapter 'sql' has already been loaded from another path",
			load: &LoraLoad{Model: "tiny", Name: "sql", Path: "/b/sql", Unpinned: true}},
		{name: "adapters off on every worker", body: `{"lora_name":"new","lora_path":"/a/new"}`, err: fmt.Errorf("%w: tiny", ErrLoraOff),
			code: 400, errCode: "invalid_value", errPart: "LoRA is not enabled on the workers of 'tiny': start them with --max-loras N",
			load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}},
		{name: "unknown base model (backend)", body: `{"lora_name":"new","lora_path":"/a/new"}`, err: fmt.Errorf("%w: tiny", ErrUnknownModel),
			code: 404, errCode: "model_not_found", load: &LoraLoad{Model: "tiny", Name: "new", Path: "/a/new", Unpinned: true}},

		{name: "no path", body: `{"lora_name":"new"}`, code: 400, errCode: "missing_required_parameter",
			errPart: "Both 'lora_name' and 'lora_path' must be provided."},
		{name: "no name", body: `{"lora_path":"/a"}`, code: 400, errCode: "missing_required_parameter"},
		{name: "not JSON", body: `{"lora_name":`, code: 400, errCode: "invalid_json"},
		{name: "name not a string", body: `{"lora_name":3,"lora_path":"/a"}`, code: 400, errCode: "invalid_type"},
		{name: "name with a space", body: `{"lora_name":"a b","lora_path":"/a"}`, code: 400, errCode: "invalid_value", errPart: "lora_name"},
		{name: "workers 0", body: `{"lora_name":"new","lora_path":"/a","workers":0}`, code: 400, errCode: "invalid_value", errPart: "workers"},
		{name: "workers not an integer", body: `{"lora_name":"new","lora_path":"/a","workers":1.5}`, code: 400, errCode: "invalid_type"},
		{name: "pinned not a boolean", body: `{"lora_name":"new","lora_path":"/a","pinned":"no"}`, code: 400, errCode: "invalid_type",
			errPart: "pinned"},
		{name: "load in place", body: `{"lora_name":"sql","lora_path":"/a","load_inplace":true}`, code: 400, errCode: "unsupported_parameter",
			errPart: "load_inplace"},
		{name: "a base model's name", body: `{"lora_name":"tiny","lora_path":"/a"}`, code: 400, errCode: "invalid_value",
			errPart: "conflicts with a served base model"},
		{name: "model names an adapter", body: `{"lora_name":"new","lora_path":"/a","model":"sql"}`, code: 400, errCode: "invalid_value",
			errPart: "'model' must name a base model"},
		{name: "unknown model", body: `{"lora_name":"new","lora_path":"/a","model":"nope"}`, code: 404, errCode: "model_not_found"},
		{name: "several models, none named", two: true, body: `{"lora_name":"new","lora_path":"/a"}`, code: 400,
			errCode: "missing_required_parameter", errPart: "'model'"},
		{name: "an adapter of another model", two: true, body: `{"lora_name":"shared","lora_path":"/a","model":"tiny"}`, code: 400,
			errCode: "invalid_value", errPart: "already been loaded for model `other`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeLora(tc.two)
			f.result, f.err = tc.result, tc.err
			s := newTestServer(t, f)
			rr := serve(s, http.MethodPost, loadPath, tc.body)
			if rr.Code != tc.code {
				t.Fatalf("%d %s, want %d", rr.Code, rr.Body, tc.code)
			}
			if tc.code == 200 {
				if rr.Body.String() != tc.body200 || !strings.HasPrefix(rr.Header().Get("Content-Type"), "text/plain") ||
					rr.Header().Get(LoraWorkersHeader) != tc.header {
					t.Errorf("answer %q (%s, workers %q), want %q (workers %q)", rr.Body, rr.Header().Get("Content-Type"),
						rr.Header().Get(LoraWorkersHeader), tc.body200, tc.header)
				}
			} else {
				var e errorBody
				if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil || e.Error.Code != tc.errCode || !strings.Contains(e.Error.Message, tc.errPart) {
					t.Errorf("error %s, want code %s with %q", rr.Body, tc.errCode, tc.errPart)
				}
			}
			switch {
			case tc.load == nil && len(f.loads) > 0:
				t.Errorf("the backend was asked %+v", f.loads)
			case tc.load != nil && (len(f.loads) != 1 || f.loads[0] != *tc.load):
				t.Errorf("loads %+v, want %+v", f.loads, *tc.load)
			}
		})
	}
}

// TestLoraUnloadEndpoint: POST /v1/unload_lora_adapter asks the backend to unload from
// the adapter's own base model; 404 as vLLM's when no worker holds it.
func TestLoraUnloadEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		two     bool
		body    string
		result  *LoraResult
		code    int
		text    string // the body of a 200, or a part of the refusal's message
		errCode string
		unload  *LoraUnload
	}{
		{"removed", false, `{"lora_name":"sql"}`, workers(lw("w0", ok, ""), lw("w1", ok, "")), 200,
			"Success: LoRA adapter 'sql' removed successfully.", "", &LoraUnload{Model: "tiny", Name: "sql"}},
		{"the adapter's own base model", true, `{"lora_name":"shared","lora_int_id":3}`, workers(lw("w5", ok, "")), 200,
			"Success: LoRA adapter 'shared' removed successfully.", "", &LoraUnload{Model: "other", Name: "shared"}},
		{"ambiguous without model", true, `{"lora_name":"sql"}`, nil, 400, "'model'", "missing_required_parameter", nil},
		{"model given", true, `{"lora_name":"sql","model":"other"}`, workers(lw("w5", ok, "")), 200,
			"Success: LoRA adapter 'sql' removed successfully.", "", &LoraUnload{Model: "other", Name: "sql"}},
		{"some still hold it", false, `{"lora_name":"sql"}`, workers(lw("w0", ok, ""), lw("w1", engine, "vllm: 500"), lw("w2", missing, "")), 200,
			"Success: LoRA adapter 'sql' removed successfully.\nStill held by w1 (engine: vllm: 500).", "", &LoraUnload{Model: "tiny", Name: "sql"}},
		{"nobody holds it", false, `{"lora_name":"gone"}`, workers(), 404, "The lora adapter 'gone' cannot be found.", "model_not_found",
			&LoraUnload{Model: "tiny", Name: "gone"}},
		{"every worker says not found", false, `{"lora_name":"sql"}`, workers(lw("w0", missing, "")), 404, "cannot be found", "model_not_found",
			&LoraUnload{Model: "tiny", Name: "sql"}},
		{"none could", false, `{"lora_name":"sql"}`, workers(lw("w0", engine, "no answer")), 503, "could not be unloaded", "lora_unavailable",
			&LoraUnload{Model: "tiny", Name: "sql"}},
		{"no name", false, `{}`, nil, 400, "'lora_name' must be provided.", "missing_required_parameter", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeLora(tc.two)
			f.result = tc.result
			s := newTestServer(t, f)
			rr := serve(s, http.MethodPost, unloadPath, tc.body)
			if rr.Code != tc.code {
				t.Fatalf("%d %s, want %d", rr.Code, rr.Body, tc.code)
			}
			if tc.code == 200 && rr.Body.String() != tc.text {
				t.Errorf("answer %q, want %q", rr.Body, tc.text)
			}
			if tc.code != 200 {
				var e errorBody
				if err := json.Unmarshal(rr.Body.Bytes(), &e); err != nil || e.Error.Code != tc.errCode || !strings.Contains(e.Error.Message, tc.text) {
					t.Errorf("error %s, want code %s with %q", rr.Body, tc.errCode, tc.text)
				}
			}
			if (tc.unload == nil) != (len(f.unloads) == 0) || tc.unload != nil && f.unloads[0] != *tc.unload {
				t.Errorf("unloads %+v, want %+v", f.unloads, tc.unload)
			}
		})
	}
}

// TestLoraRoutesNeedLoraAdmin: a backend without LoraAdmin has no adapter routes (404),
// and other methods than POST are 405.
func TestLoraRoutesNeedLoraAdmin(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	for _, path := range []string{loadPath, unloadPath} {
		if rr := serve(s, http.MethodPost, path, `{"lora_name":"a","lora_path":"/a"}`); rr.Code != 404 {
			t.Errorf("POST %s without LoraAdmin: %d %s, want 404", path, rr.Code, rr.Body)
		}
		if rr := serve(newTestServer(t, newFakeLora(false)), http.MethodGet, path, ""); rr.Code != 405 {
			t.Errorf("GET %s: %d, want 405", path, rr.Code)
		}
	}
}

// TestLoraRoutesAreAdmin: the adapter routes change what every worker holds, so they
// take the admin keys, as /admin/ does (adminDecision), and not the API keys.
func TestLoraRoutesAreAdmin(t *testing.T) {
	const body = `{"lora_name":"new","lora_path":"/a/new"}`
	api, admin := []string{testKeyOne}, []string{testAdminKey}
	for _, tc := range []struct {
		name              string
		apiKeys, adminKey []string
		remote, auth      string
		code              int
	}{
		{"open, loopback", nil, nil, "127.0.0.1:4000", "", 200},
		{"open, remote", nil, nil, "192.0.2.7:4000", "", 403},
		{"api keys only, api key", api, nil, "127.0.0.1:4000", "Bearer " + testKeyOne, 403},
		{"admin keys, api key", api, admin, "192.0.2.7:4000", "Bearer " + testKeyOne, 401},
		{"admin keys, admin key", api, admin, "192.0.2.7:4000", "Bearer " + testAdminKey, 200},
	} {
		for _, path := range []string{loadPath, unloadPath} {
			f := newFakeLora(false)
			f.result = workers(lw("w0", ok, ""))
			var log bytes.Buffer
			s := newAdminServer(t, f, &log, tc.apiKeys, tc.adminKey)
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			req.RemoteAddr, req.Host = tc.remote, "127.0.0.1:8000"
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rr := httptest.NewRecorder()
			s.ServeHTTP(rr, req)
			if rr.Code != tc.code {
				t.Errorf("%s: POST %s: %d %s, want %d", tc.name, path, rr.Code, rr.Body, tc.code)
			}
			if n := len(f.loads) + len(f.unloads); (n > 0) != (tc.code == 200) {
				t.Errorf("%s: POST %s reached the backend %d times", tc.name, path, n)
			}
		}
	}
}

// TestFindModel: a request's `model` names a base model, an adapter (vLLM's lora_name),
// or BASE:ADAPTER; an adapter of several base models must be named the second way.
func TestFindModel(t *testing.T) {
	f := newFakeLora(true)
	for _, tc := range []struct {
		name, want, parent string
		err                bool
	}{
		{"tiny", "tiny", "", false},
		{"chat", "chat", "tiny", false},
		{"tiny:chat", "chat", "tiny", false},
		{"other:sql", "sql", "other", false},
		{"tiny:sql", "sql", "tiny", false},
		{"sql", "", "", true},
		{"other:chat", "", "", false},
		{"nope", "", "", false},
		{"tiny:", "", "", false},
	} {
		c, aerr := findModel(f.cards, tc.name)
		switch {
		case tc.err != (aerr != nil):
			t.Errorf("%q: error %v", tc.name, aerr)
		case c.GetModel() != tc.want || c.GetLora().GetParent() != tc.parent:
			t.Errorf("%q: found %q of %q, want %q of %q", tc.name, c.GetModel(), c.GetLora().GetParent(), tc.want, tc.parent)
		}
	}
}

// TestLoraRequest: a chat request naming an adapter runs on its base model with the
// adapter (GenerateRequest.Model, SamplingParams.lora_name), answers under the adapter's
// name, and is counted under the base model with the adapter apart; an unknown adapter
// is a 404 as an unknown model; a request without `model` is the base model's when it
// is the only one served, adapters aside.
func TestLoraRequest(t *testing.T) {
	for _, tc := range []struct {
		model, wantModel, wantLora, answerModel string
	}{
		{`"model":"sql",`, "tiny", "sql", "sql"},
		{`"model":"tiny:chat",`, "tiny", "chat", "chat"},
		{`"model":"tiny",`, "tiny", "", "tiny"},
		{``, "tiny", "", "tiny"},
	} {
		f := newFakeLora(false, finish("Hi", "stop"))
		s := newTestServer(t, f)
		rr := serve(s, http.MethodPost, chatPath, `{`+tc.model+hiChat+`}`)
		if rr.Code != 200 {
			t.Fatalf("%s: %d %s", tc.model, rr.Code, rr.Body)
		}
		var body struct{ Model string }
		json.Unmarshal(rr.Body.Bytes(), &body)
		gens := f.generated()
		if len(gens) != 1 || gens[0].Model != tc.wantModel || gens[0].Sampling.GetLoraName() != tc.wantLora || body.Model != tc.answerModel {
			t.Errorf("%s: ran %v, answered as %q; want %s with adapter %q, answered as %q", tc.model, gens, body.Model,
				tc.wantModel, tc.wantLora, tc.answerModel)
		}
	}
	f := newFakeLora(false, finish("Hi", "stop"))
	s := newTestServer(t, f)
	for _, name := range []string{"nope", "tiny:nope"} {
		rr := serve(s, http.MethodPost, compPath, `{"model":"`+name+`","prompt":"x"}`)
		if rr.Code != 404 || !strings.Contains(rr.Body.String(), "model_not_found") {
			t.Errorf("unknown adapter %q: %d %s, want 404", name, rr.Code, rr.Body)
		}
	}
	e := newFakeEmbedder()
	e.cards = append(e.cards, loraCard(e.cards[3], "emb-lora", "/a/e"))
	if rr := serve(newTestServer(t, e), http.MethodPost, "/v1/embeddings", `{"model":"emb-lora","input":"x"}`); rr.Code != 400 ||
		len(e.embedCalls()) != 0 {
		t.Errorf("embeddings of an adapter: %d %s, want 400", rr.Code, rr.Body)
	}
	if rr := serve(s, http.MethodPost, "/tokenize", `{"model":"sql","prompt":"x"}`); rr.Code != 200 ||
		metricValue(s, `turbine_frontend_requests_total{model="tiny",endpoint="tokenize",request_type="unary",status="200"}`) != "1" {
		t.Errorf("/tokenize of an adapter: %d %s, not counted under its base model", rr.Code, rr.Body)
	}
	if got := metricValue(s, `turbine_frontend_requests_total{model="tiny",endpoint="completions",request_type="unary",status="404"}`); got != "" {
		t.Errorf("an unknown adapter counted under the base model: %s", got)
	}
}

// TestLoraUnknownRoute: the router's ROUTE_NO_ADAPTER (no worker holds the adapter any
// more) is a 404, as an unknown model, naming the adapter when the caller knows it.
func TestLoraUnknownRoute(t *testing.T) {
	err := RouteError(messages.RouteOutcome_ROUTE_NO_ADAPTER, "no live worker holds adapter sql")
	aerr := backendError("tiny", err)
	if aerr.Status() != 404 || aerr.Kind != KindModelNotFound || !errors.Is(err, ErrUnknownModel) {
		t.Errorf("ROUTE_NO_ADAPTER: %v (%d)", aerr, aerr.Status())
	}
	f := newFakeLora(false)
	f.genErr = UnknownAdapter("sql", "unloaded")
	s := newTestServer(t, f)
	rr := serve(s, http.MethodPost, chatPath, `{"model":"sql",`+hiChat+`}`)
	if rr.Code != 404 || !strings.Contains(rr.Body.String(), "The model `sql` does not exist.") {
		t.Errorf("%d %s, want 404 naming sql", rr.Code, rr.Body)
	}
}

// TestLoraModelsList: /v1/models lists each adapter as vLLM does: id = its name, parent
// = the base model, root = its path, max_model_len null; /v1/models/{id} finds one;
// /health lists the base models only.
func TestLoraModelsList(t *testing.T) {
	s := newTestServer(t, newFakeLora(false))
	rr := serve(s, http.MethodGet, "/v1/models", "")
	var list struct {
		Data []struct {
			ID, Root    string
			Parent      *string
			MaxModelLen *int `json:"max_model_len"`
		}
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &list); err != nil || len(list.Data) != 3 {
		t.Fatalf("%s", rr.Body)
	}
	base, sql := list.Data[0], list.Data[1]
	if base.ID != "tiny" || base.Parent != nil || base.MaxModelLen == nil {
		t.Errorf("base entry %+v", base)
	}
	if sql.ID != "sql" || sql.Parent == nil || *sql.Parent != "tiny" || sql.Root != "/adapters/sql" || sql.MaxModelLen != nil {
		t.Errorf("adapter entry %+v", sql)
	}
	if rr := serve(s, http.MethodGet, "/v1/models/chat", ""); rr.Code != 200 || !strings.Contains(rr.Body.String(), `"parent":"tiny"`) {
		t.Errorf("/v1/models/chat: %d %s", rr.Code, rr.Body)
	}
	if rr := serve(s, http.MethodGet, "/health", ""); !strings.Contains(rr.Body.String(), `"models":["tiny"]`) {
		t.Errorf("/health: %s", rr.Body)
	}
}

// TestLoraMetrics: requests naming an adapter are counted per adapter (requests, TTFT,
// prompt and cached tokens) under the base model; the adapter routes count their
// answers and placements; every family has its HELP text; adapter names past
// MaxLoraMetricLabels share LoraOtherLabel.
func TestLoraMetrics(t *testing.T) {
	f := newFakeLora(false, tokens("H"), finish("i", "stop"))
	f.result = workers(lw("w0", ok, ""), lw("w1", noSlot, "full"), LoraWorker{WorkerID: "w2", Held: true})
	s := newTestServer(t, f)
	if rr := serve(s, http.MethodPost, chatPath, `{"model":"sql",`+hiChat+`}`); rr.Code != 200 {
		t.Fatal(rr.Body)
	}
	serve(s, http.MethodPost, loadPath, `{"lora_name":"new","lora_path":"/a"}`)
	serve(s, http.MethodPost, loadPath, `{"lora_name":"new"}`)
	rr := serve(s, http.MethodGet, "/metrics", "")
	text := rr.Body.String()
	for _, want := range []string{
		`turbine_frontend_lora_requests_total{model="tiny",lora="sql",status="200"} 1`,
		`turbine_frontend_lora_time_to_first_token_seconds_count{model="tiny",lora="sql"} 1`,
		`turbine_frontend_lora_prompt_tokens_total{model="tiny",lora="sql"} 21`,
		`turbine_frontend_lora_cached_tokens_total{model="tiny",lora="sql"} 2`,
		`turbine_frontend_lora_loads_total{model="tiny",outcome="partial"} 1`,
		`turbine_frontend_lora_loads_total{model="",outcome="missing_required_parameter"} 1`,
		`turbine_frontend_lora_placements_total{model="tiny",outcome="ok"} 1`,
		`turbine_frontend_lora_placements_total{model="tiny",outcome="no_slot"} 1`,
		`turbine_frontend_requests_total{model="tiny",endpoint="chat_completions",request_type="unary",status="200"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, fam := range loraFamilies {
		if fam.name == metricLoraUnloads {
			continue // no unload ran
		}
		if !strings.Contains(text, "# HELP "+fam.name+" "+fam.help+"\n# TYPE "+fam.name+" "+fam.typ+"\n") {
			t.Errorf("/metrics lacks the HELP and TYPE of %s", fam.name)
		}
	}
	if strings.Contains(text, `model="sql"`) {
		t.Error("an adapter's name is a model label")
	}
	m := newLoraMetrics()
	for i := range MaxLoraMetricLabels {
		if got := m.label(fmt.Sprint("a", i)); got != fmt.Sprint("a", i) {
			t.Fatalf("adapter %d labelled %q", i, got)
		}
	}
	if got := m.label("one-too-many"); got != LoraOtherLabel {
		t.Errorf("adapter past the cap labelled %q", got)
	}
	if got := m.label("a3"); got != "a3" {
		t.Errorf("a labelled adapter after the cap: %q", got)
	}
}
