package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// LoRA adapters end to end (docs/reference.md §26): adapters loaded and unloaded through
// the API or pinned by `--lora`, listed in /v1/models, served by name to the OpenAI SDK,
// kept across a migration, and bad input refused in the OpenAI error shape. The adapter
// folders are fixtures under testdata/lora/: sql, poetry and legal adapt the served
// model (turbine-mock), llama-chat adapts another base model, rank64 is above the
// default --max-lora-rank 16. The mock engine mixes the adapter's name into its
// generation seed, so each adapter answers a prompt with a text of its own, the same on
// every engine.

// loraDir is the absolute path of the adapter fixture testdata/lora/name (the workers
// read it on their own host, from their own working directory).
func loraDir(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "lora", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadLora posts POST /v1/load_lora_adapter with vLLM's body and returns the status, the
// body and the X-Turbine-Lora-Workers header.
func (s *server) loadLora(t *testing.T, name, path string) (int, string, string) {
	t.Helper()
	return s.loraRoute(t, "/v1/load_lora_adapter", map[string]any{"lora_name": name, "lora_path": path})
}

// loraRoute posts body to an adapter route; see loadLora.
func (s *server) loraRoute(t *testing.T, route string, body any) (int, string, string) {
	t.Helper()
	status, text, workers, err := s.tryLoraRoute(route, body)
	if err != nil {
		t.Fatal(err)
	}
	return status, text, workers
}

// tryLoraRoute is loraRoute for any goroutine: it returns the failure to post.
func (s *server) tryLoraRoute(route string, body any) (int, string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, route, body)
	if err != nil {
		return 0, "", "", fmt.Errorf("POST %s: %w", route, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", fmt.Errorf("POST %s: %w", route, err)
	}
	return resp.StatusCode, string(b), resp.Header.Get("X-Turbine-Lora-Workers"), nil
}

// mustLoadLora loads adapter name from path and expects vLLM's success text, held by the
// workers named in want (comma-separated, sorted).
func (s *server) mustLoadLora(t *testing.T, name, path, want string) {
	t.Helper()
	status, body, header := s.loadLora(t, name, path)
	if status != http.StatusOK || body != fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", name) {
		t.Fatalf("load %s: status %d: %q", name, status, body)
	}
	workers := strings.Split(header, ",")
	slices.Sort(workers)
	if strings.Join(workers, ",") != want {
		t.Fatalf("load %s: held by %q, want %q", name, header, want)
	}
}

// apiErr is an OpenAI error object, as the body of a refused request.
type apiErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// wantAPIError checks that a refusal is an OpenAI error object, {"error": {"message",
// "type", "param", "code"}} and nothing else, with status, code and param ("" for null),
// and a message that contains each of mention.
func wantAPIError(t *testing.T, what string, status int, body string, wantStatus int, code, param string, mention ...string) {
	t.Helper()
	var outer map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("%s: status %d, body %q: not an OpenAI error object", what, status, body)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &fields); err != nil || len(fields) != 4 {
		t.Fatalf("%s: error object %s: want exactly message, type, param, code", what, outer["error"])
	}
	var e apiErr
	if err := json.Unmarshal(outer["error"], &e); err != nil {
		t.Fatalf("%s: error object %s: %v", what, outer["error"], err)
	}
	gotParam := ""
	if e.Param != nil {
		gotParam = *e.Param
	}
	wantType := "invalid_request_error"
	if wantStatus >= 500 {
		wantType = "server_error"
	}
	if status != wantStatus || e.Code != code || gotParam != param || e.Type != wantType || e.Message == "" {
		t.Fatalf("%s: status %d, error %+v (param %q); want status %d, code %q, param %q, type %q",
			what, status, e, gotParam, wantStatus, code, param, wantType)
	}
	for _, m := range mention {
		if !strings.Contains(e.Message, m) {
			t.Fatalf("%s: message %q does not mention %q", what, e.Message, m)
		}
	}
}

// listedModel is one entry of /v1/models with vLLM's fields.
type listedModel struct {
	ID     string  `json:"id"`
	Root   string  `json:"root"`
	Parent *string `json:"parent"`
}

// listModels lists /v1/models with the OpenAI SDK, keyed by id, with each entry's root
// and parent read from its JSON (fields the SDK does not model).
func listModels(t *testing.T, s *server) map[string]listedModel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := sdk(s)
	page, err := cl.Models.List(ctx)
	if err != nil {
		t.Fatalf("list models: %v", err)
	}
	out := map[string]listedModel{}
	for _, m := range page.Data {
		var e listedModel
		if err := json.Unmarshal([]byte(m.RawJSON()), &e); err != nil {
			t.Fatalf("model %s: %v", m.ID, err)
		}
		out[e.ID] = e
	}
	return out
}

// wantAdapters checks that /v1/models lists the base model and exactly the adapters of
// want (name → folder), each with parent the base model and root its folder.
func wantAdapters(t *testing.T, s *server, want map[string]string) {
	t.Helper()
	got := listModels(t, s)
	if base, ok := got[model]; !ok || base.Parent != nil {
		t.Fatalf("/v1/models: base model %s missing or with a parent: %+v", model, got)
	}
	if len(got) != 1+len(want) {
		t.Fatalf("/v1/models lists %d models, want %s and the adapters %v: %+v", len(got), model, want, got)
	}
	for name, path := range want {
		e, ok := got[name]
		if !ok || e.Parent == nil || *e.Parent != model || e.Root != path {
			t.Fatalf("/v1/models: adapter %s is %+v, want parent %s and root %s", name, e, model, path)
		}
	}
}

// adapterText streams one chat completion of model name with the OpenAI SDK (seeded, 24
// tokens) and returns its text; the chunks must name the model as asked.
func adapterText(t *testing.T, s *server, name, prompt string) string {
	t.Helper()
	return answeredAs(t, s, name, name, prompt)
}

// answeredAs is adapterText for a request naming model name whose chunks name model as.
func answeredAs(t *testing.T, s *server, name, as, prompt string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := sdk(s)
	stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     name,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(24),
		Seed:      openai.Int(11),
	}, option.WithJSONSet("ignore_eos", true))
	var text strings.Builder
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		if ch.Model != as {
			t.Fatalf("stream of %s: a chunk names model %q, want %q", name, ch.Model, as)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream of %s: %v", name, err)
	}
	if text.Len() == 0 || finish != "length" {
		t.Fatalf("stream of %s: text %q, finish %q; want 24 tokens", name, text.String(), finish)
	}
	return text.String()
}

// wantNotFound sends a chat completion naming model name with the OpenAI SDK and expects
// the 404 of an unknown model, naming it.
func wantNotFound(t *testing.T, s *server, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := sdk(s)
	_, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     name,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		MaxTokens: openai.Int(2),
	})
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("request for %s: %v, want a 404 API error", name, err)
	}
	if ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" || ae.Param != "model" ||
		ae.Type != "invalid_request_error" || !strings.Contains(ae.Message, "`"+name+"`") {
		t.Fatalf("request for %s: status %d, error %s; want 404 model_not_found naming it", name, ae.StatusCode, ae.RawJSON())
	}
}

// sdkStream is what the OpenAI SDK's client saw of one streaming completion.
type sdkStream struct {
	worker     string // X-Turbine-Worker: the worker it started on
	model      string // the chunks' model
	text       string
	finish     string
	completion int64
	err        error
}

// streamAdapter streams a completion of maxTokens tokens (ignore_eos, seeded) from model
// name with the OpenAI SDK; first, when not nil, is called once with the worker the
// stream started on when its first text arrives, before the stream is read further.
func streamAdapter(ctx context.Context, s *server, name, prompt string, maxTokens int, first func(worker string)) sdkStream {
	var raw *http.Response
	cl := sdk(s)
	st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         openai.CompletionNewParamsModel(name),
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:     openai.Int(int64(maxTokens)),
		Seed:          openai.Int(1234),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("ignore_eos", true), option.WithResponseInto(&raw))
	var r sdkStream
	if raw != nil {
		r.worker = raw.Header.Get("X-Turbine-Worker")
	}
	var text strings.Builder
	for st.Next() {
		ch := st.Current()
		if ch.Model != "" && r.model == "" {
			r.model = ch.Model
		}
		for _, c := range ch.Choices {
			if c.Text != "" && text.Len() == 0 && first != nil {
				first(r.worker)
			}
			text.WriteString(c.Text)
			if c.FinishReason != "" {
				r.finish = string(c.FinishReason)
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			r.completion = ch.Usage.CompletionTokens
		}
	}
	r.err, r.text = st.Err(), text.String()
	return r
}

// whole checks that a stream of maxTokens from adapter name ran to its end.
func (r sdkStream) whole(name string, maxTokens int) error {
	if r.err != nil || r.finish != "length" || r.completion != int64(maxTokens) || r.model != name {
		return fmt.Errorf("stream of %s: finish %q, %d tokens, model %q, error %v; want length, %d tokens, model %s",
			name, r.finish, r.completion, r.model, r.err, maxTokens, name)
	}
	return nil
}

// logged reports whether s logged a JSON line with message msg whose string fields
// include each of fields (name, value pairs).
func (s *server) logged(msg string, fields ...string) bool {
	for _, line := range strings.Split(s.Logs(), "\n") {
		if !strings.Contains(line, `"`+msg+`"`) {
			continue // decoding every line is slow on a loaded machine
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["message"] != msg {
			continue
		}
		ok := true
		for i := 0; i+1 < len(fields); i += 2 {
			ok = ok && rec[fields[i]] == fields[i+1]
		}
		if ok {
			return true
		}
	}
	return false
}

// TestE2ELoraServe: through `turbine serve` with two workers of two adapter slots each,
// two adapters loaded at run time are listed in /v1/models and served by name to the
// OpenAI SDK, each with its own deterministic text; unloading one mid-stream lets the
// stream finish whole, and the adapter is a 404 afterwards.
func TestE2ELoraServe(t *testing.T) {
	s := startServe(t, 2, "--max-loras", "2", "--speedup-ratio", "2")
	sql, poetry, legal := loraDir(t, "sql"), loraDir(t, "poetry"), loraDir(t, "legal")
	const prompt = "Describe the river in one line."

	// Before any load, an adapter is an unknown model.
	wantNotFound(t, s, "sql")
	wantAdapters(t, s, nil)

	s.mustLoadLora(t, "sql", sql, "w0,w1")
	s.mustLoadLora(t, "poetry", poetry, "w0,w1")
	wantAdapters(t, s, map[string]string{"sql": sql, "poetry": poetry})

	// Each adapter answers with a text of its own, neither the base model's nor the other
	// adapter's, and the same text again (whichever worker serves it).
	texts := map[string][]string{}
	for _, name := range []string{model, "sql", "poetry", model, "sql", "poetry"} {
		texts[name] = append(texts[name], adapterText(t, s, name, prompt))
	}
	for name, got := range texts {
		if got[0] != got[1] {
			t.Fatalf("%s answered the same request differently: %q, then %q", name, got[0], got[1])
		}
	}
	if texts["sql"][0] == texts[model][0] || texts["poetry"][0] == texts[model][0] || texts["sql"][0] == texts["poetry"][0] {
		t.Fatalf("outputs do not tell the adapters apart: base %q, sql %q, poetry %q",
			texts[model][0], texts["sql"][0], texts["poetry"][0])
	}
	// The BASE:ADAPTER form names the same adapter (the answer names the adapter).
	if got := answeredAs(t, s, model+":poetry", "poetry", prompt); got != texts["poetry"][0] {
		t.Fatalf("%s:poetry answered %q, poetry %q", model, got, texts["poetry"][0])
	}
	// Each adapter's requests are counted under its name (and the base model).
	if got := s.counterBy(t, "turbine_frontend_lora_requests_total", "lora"); got["sql"] != 2 || got["poetry"] != 3 || len(got) != 2 {
		t.Fatalf("turbine_frontend_lora_requests_total by adapter: %v, want sql 2 and poetry 3", got)
	}

	// Unload poetry while a stream of it runs: the stream finishes whole, new requests are
	// refused from the unload's start, and once the unload is answered poetry is gone.
	const maxTokens = 1200 // about 4.5 s at --speedup-ratio 2: the unload lands mid-stream
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := make(chan string, 1)
	streamed := make(chan sdkStream, 1)
	go func() {
		streamed <- streamAdapter(ctx, s, "poetry", longText("delta", 20), maxTokens, func(w string) { started <- w })
	}()
	var on string
	select {
	case on = <-started:
	case r := <-streamed:
		t.Fatalf("the poetry stream ended before any text: %+v", r)
	}
	type answer struct {
		status int
		body   string
		err    error
	}
	unloaded := make(chan answer, 1)
	go func() {
		status, body, _, err := s.tryLoraRoute("/v1/unload_lora_adapter", map[string]any{"lora_name": "poetry"})
		unloaded <- answer{status, body, err}
	}()
	// The worker serving the stream waits for it before its engine lets the adapter go.
	s.waitFor(30*time.Second, "the unload to wait for the running stream", func() bool {
		return s.logged("unloading LoRA adapter once its requests end", "worker", on, "adapter", "poetry")
	})
	// No new request from then on (the router hears of it a moment later: poll).
	s.waitFor(30*time.Second, "requests naming poetry refused during its unload", func() bool {
		status, body := s.post(t, "/v1/completions", map[string]any{"model": "poetry", "prompt": "hi", "max_tokens": 1})
		switch status {
		case http.StatusOK:
			return false
		case http.StatusNotFound:
			return true
		}
		t.Fatalf("a request naming poetry during its unload: status %d: %s", status, body)
		return false
	})
	r := <-streamed
	if err := r.whole("poetry", maxTokens); err != nil {
		t.Fatal(err)
	}
	if a := <-unloaded; a.err != nil || a.status != http.StatusOK || a.body != "Success: LoRA adapter 'poetry' removed successfully." {
		t.Fatalf("unload poetry: status %d: %q (%v)", a.status, a.body, a.err)
	}
	wantNotFound(t, s, "poetry")
	wantNotFound(t, s, model+":poetry")
	wantAdapters(t, s, map[string]string{"sql": sql})
	if got := adapterText(t, s, "sql", prompt); got != texts["sql"][0] {
		t.Fatalf("sql after poetry's unload answered %q, before %q", got, texts["sql"][0])
	}
	// The unload freed a slot on every worker: a third adapter now fits.
	s.mustLoadLora(t, "legal", legal, "w0,w1")
	wantAdapters(t, s, map[string]string{"sql": sql, "legal": legal})
	if got := adapterText(t, s, "legal", prompt); got == texts["sql"][0] || got == texts[model][0] || got == texts["poetry"][0] {
		t.Fatalf("legal answered %q, like another model", got)
	}
	s.waitIdle(t)
}

// TestE2ELoraBadInput: bad adapter requests through `turbine serve` (one worker, one
// adapter slot) are refused in the OpenAI error shape, with the status the docs give,
// and leave nothing loaded behind.
func TestE2ELoraBadInput(t *testing.T) {
	s := startServe(t, 1, "--max-loras", "1", "--speedup-ratio", "50")
	sql := loraDir(t, "sql")

	// Requests naming adapters nothing holds: 404 model_not_found, naming the model.
	for _, name := range []string{"sql", "no-such-adapter", model + ":no-such-adapter"} {
		wantNotFound(t, s, name)
	}

	// Folders the worker refuses: 400 invalid_value on lora_path, with the reason.
	missing := filepath.Join(t.TempDir(), "no-such-adapter")
	for _, tc := range []struct {
		what, name, path string
		mention          []string
	}{
		{"an adapter of another base model", "llama", loraDir(t, "llama-chat"),
			[]string{"meta-llama/Llama-3.1-8B-Instruct", model}},
		{"a folder that does not exist", "ghost", missing, []string{missing, "does not exist"}},
		{"a rank above --max-lora-rank", "wide", loraDir(t, "rank64"), []string{"rank 64", "max_lora_rank 16"}},
		{"a folder that is no adapter", "plain", t.TempDir(), []string{"adapter_config.json"}},
	} {
		status, body, _ := s.loadLora(t, tc.name, tc.path)
		wantAPIError(t, tc.what, status, body, http.StatusBadRequest, "invalid_value", "lora_path", tc.mention...)
	}

	// Malformed bodies: 400 before any worker is asked.
	for _, tc := range []struct {
		what, route, body, code, param string
	}{
		{"not JSON", "load", `{"lora_name":`, "invalid_json", ""},
		{"an array", "load", `["sql"]`, "invalid_json", ""},
		{"no path", "load", `{"lora_name":"sql"}`, "missing_required_parameter", ""},
		{"no name", "load", `{"lora_path":"` + sql + `"}`, "missing_required_parameter", ""},
		{"a name that is a number", "load", `{"lora_name":7,"lora_path":"` + sql + `"}`, "invalid_type", "lora_name"},
		{"a name with a space", "load", `{"lora_name":"my sql","lora_path":"` + sql + `"}`, "invalid_value", "lora_name"},
		{"the base model's name", "load", `{"lora_name":"` + model + `","lora_path":"` + sql + `"}`, "invalid_value", "lora_name"},
		{"load_inplace", "load", `{"lora_name":"sql","lora_path":"` + sql + `","load_inplace":true}`, "unsupported_parameter", "load_inplace"},
		{"workers 0", "load", `{"lora_name":"sql","lora_path":"` + sql + `","workers":0}`, "invalid_value", "workers"},
		{"an unknown base model", "load", `{"lora_name":"sql","lora_path":"` + sql + `","model":"no-such-base"}`, "model_not_found", "model"},
		{"an unload without a name", "unload", `{}`, "missing_required_parameter", "lora_name"},
		{"an unload of a name as a number", "unload", `{"lora_name":1}`, "invalid_type", "lora_name"},
	} {
		status, body := s.postRaw(t, "/v1/"+tc.route+"_lora_adapter", tc.body)
		want := http.StatusBadRequest
		if tc.code == "model_not_found" {
			want = http.StatusNotFound
		}
		wantAPIError(t, tc.what, status, body, want, tc.code, tc.param)
	}
	// Unloading what nothing holds: vLLM's 404.
	status, body, _ := s.loraRoute(t, "/v1/unload_lora_adapter", map[string]any{"lora_name": "sql"})
	wantAPIError(t, "an unload of an adapter nothing holds", status, body, http.StatusNotFound, "model_not_found", "lora_name", "'sql'")

	// Nothing of the above was loaded.
	wantAdapters(t, s, nil)

	// The one slot taken by a pinned adapter, a second adapter finds none: the documented
	// 503, with Retry-After; the same name from another folder is a 400.
	if status, body, workers := s.loraRoute(t, "/v1/load_lora_adapter", map[string]any{"lora_name": "sql",
		"lora_path": sql, "pinned": true}); status != http.StatusOK || workers != "w0" {
		t.Fatalf("pinned load of sql: %d %s (workers %q)", status, body, workers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.postJSON(ctx, "/v1/load_lora_adapter", map[string]any{"lora_name": "poetry", "lora_path": loraDir(t, "poetry")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantAPIError(t, "a load past every worker's --max-loras", resp.StatusCode, string(b), http.StatusServiceUnavailable,
		"lora_no_slot", "", "'poetry'")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("a load past every worker's --max-loras: no Retry-After")
	}
	status, body, _ = s.loadLora(t, "sql", loraDir(t, "legal"))
	wantAPIError(t, "the name of a loaded adapter from another folder", status, body, http.StatusBadRequest,
		"invalid_value", "lora_name", "'sql'")
	// Loading the same adapter again is accepted (it holds already).
	s.mustLoadLora(t, "sql", sql, "w0")
	wantAdapters(t, s, map[string]string{"sql": sql})
	adapterText(t, s, "sql", "still serving?")
	// An adapter name is not a base model of an adapter route.
	status, body, _ = s.loraRoute(t, "/v1/load_lora_adapter", map[string]any{"lora_name": "poetry",
		"lora_path": loraDir(t, "poetry"), "model": "sql"})
	wantAPIError(t, "an adapter as the base model", status, body, http.StatusBadRequest, "invalid_value", "model", "`sql`")
}

// postRaw posts a raw JSON body to path and returns the status and the answer.
func (s *server) postRaw(t *testing.T, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// frontendWith starts a frontend of the cluster with extra flags.
func (c *localCluster) frontendWith(name string, extra ...string) *server {
	c.t.Helper()
	args := append([]string{"frontend", "--port", "0"}, c.clusterArgs()...)
	return startTurbine(c.t, name, "turbine frontend serving", append(args, extra...)...)
}

// TestE2ELoraCluster: on a Consul cluster, nodes started with `--lora sql=PATH` serve the
// adapter through any frontend; kill -9 of the node streaming it moves the stream to the
// other node holding it (a frontend without --lora-on-demand), then, the last holder
// killed, to a node that loads it on demand (a frontend with --lora-on-demand), the
// client's stream each time ending with exactly the text of an undisturbed run.
func TestE2ELoraCluster(t *testing.T) {
	c := newLocalCluster(t)
	sql := loraDir(t, "sql")
	strict := c.frontend("frontend")
	demand := c.frontendWith("frontend-on-demand", "--lora-on-demand")
	nodes := map[string]*server{}
	for _, id := range []string{"node-1", "node-2"} {
		nodes[id] = c.node(id, 1, "--speedup-ratio", "2", "--lora", "sql="+sql)
	}
	// node-3 holds no adapter, with slots to load one.
	nodes["node-3"] = c.node("node-3", 1, "--speedup-ratio", "2", "--max-loras", "2")
	for _, fe := range []*server{strict, demand} {
		fe.waitReady(model, 3)
		fe.waitFor(30*time.Second, "sql in /v1/models", func() bool { _, ok := listModels(t, fe)["sql"]; return ok })
		wantAdapters(t, fe, map[string]string{"sql": sql})
	}

	const maxTokens = 1200 // about 4.5 s at --speedup-ratio 2: the kill lands mid-stream
	prompt := longText("ferry", 30)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := streamAdapter(ctx, strict, "sql", prompt, maxTokens, nil)
	if err := base.whole("sql", maxTokens); err != nil {
		t.Fatalf("undisturbed: %v", err)
	}
	if base.worker == "" || strings.HasPrefix(base.worker, "node-3") {
		t.Fatalf("undisturbed stream started on %q, not on a node holding sql", base.worker)
	}
	if plain := streamAdapter(ctx, strict, model, prompt, 24, nil); strings.HasPrefix(base.text, plain.text) {
		t.Fatalf("the base model's stream %q begins the adapter's %q", plain.text, base.text)
	}

	// killMidStream streams sql through fe and kills the node it starts on at its first
	// text; it returns that node's id once the stream ended (text as the undisturbed run).
	killMidStream := func(fe *server, what string) string {
		t.Helper()
		before := metricSum(fe, "turbine_frontend_migrations_total")
		var killed string
		r := streamAdapter(ctx, fe, "sql", prompt, maxTokens, func(w string) {
			killed = w[:strings.LastIndexByte(w, '-')]
			if n := nodes[killed]; n != nil {
				n.kill()
			}
		})
		if nodes[killed] == nil {
			t.Fatalf("%s: the stream started on %q, no node of this test", what, killed)
		}
		if err := r.whole("sql", maxTokens); err != nil {
			t.Fatalf("%s (%s killed): %v", what, killed, err)
		}
		if r.text != base.text {
			t.Fatalf("%s (%s killed): text differs from the undisturbed run (%d vs %d bytes)", what, killed, len(r.text), len(base.text))
		}
		if after := metricSum(fe, "turbine_frontend_migrations_total"); after <= before {
			t.Fatalf("%s (%s killed): migrations %v → %v: the kill did not land mid-stream", what, killed, before, after)
		}
		for _, fe := range []*server{strict, demand} {
			fe.waitFor(30*time.Second, killed+"'s worker to leave routing", func() bool { return len(workersOn(fe, killed)) == 0 })
		}
		return killed
	}

	// Without --lora-on-demand only holders serve sql: the stream moves to the other one.
	first := killMidStream(strict, "to the other holder")
	if first == "node-3" {
		t.Fatalf("the stream of sql started on node-3, which does not hold it")
	}
	if nodes["node-3"].logged("LoRA adapter loaded", "adapter", "sql") {
		t.Fatal("node-3 loaded sql for a frontend without --lora-on-demand")
	}

	// The last holder killed mid-stream: with --lora-on-demand the stream moves to node-3,
	// which loads sql from the folder the holders reported.
	holder := "node-1"
	if first == "node-1" {
		holder = "node-2"
	}
	if second := killMidStream(demand, "to a node that loads it"); second != holder {
		t.Fatalf("the stream of sql started on %s, not on %s, the node holding it", second, holder)
	}
	if !nodes["node-3"].logged("LoRA adapter loaded", "adapter", "sql", "kind", "on_demand") {
		t.Fatalf("node-3 did not load sql on demand:\n%s", nodes["node-3"].Logs())
	}
	// node-3 holds sql now, as an adapter of its own: every frontend lists it and serves
	// it there, the frontend without --lora-on-demand too.
	for _, fe := range []*server{strict, demand} {
		fe.waitFor(30*time.Second, "sql in /v1/models, held by node-3", func() bool { _, ok := listModels(t, fe)["sql"]; return ok })
		wantAdapters(t, fe, map[string]string{"sql": sql})
		r := streamAdapter(ctx, fe, "sql", prompt, 24, nil)
		if err := r.whole("sql", 24); err != nil {
			t.Fatalf("%s, after the holders died: %v", fe.name, err)
		}
		if !strings.HasPrefix(r.worker, "node-3") || !strings.HasPrefix(base.text, r.text) {
			t.Fatalf("%s, after the holders died: %q from %s, want the undisturbed text's beginning from node-3", fe.name, r.text, r.worker)
		}
	}
}
