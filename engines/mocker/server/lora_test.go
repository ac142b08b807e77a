package server

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tinylib/msgp/msgp"

	"github.com/turbine-llm/turbine/engines/kvevents"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// adapterDirs writes adapter folders under a temporary folder: each name with
// adapter_config.json of that rank; "noconfig" without the file, "badconfig" with one that
// is not JSON. It returns the folders by name.
func adapterDirs(t *testing.T, ranks map[string]int) map[string]string {
	t.Helper()
	root := t.TempDir()
	out := map[string]string{}
	write := func(name, config string) {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if config != "" {
			if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out[name] = dir
	}
	for name, r := range ranks {
		write(name, fmt.Sprintf(`{"base_model_name_or_path":"Qwen/Qwen3-8B","peft_type":"LORA","r":%d,"lora_alpha":16}`, r))
	}
	write("noconfig", "")
	write("badconfig", "{not json")
	out["missing"] = filepath.Join(root, "missing")
	return out
}

func loraOptions(t *testing.T, maxLoras int) Options {
	o := testOptions(t)
	o.Engine.MaxLoras, o.Engine.MaxLoraRank, o.Engine.LoraLoadMillis = maxLoras, 16, 100 // 1 ms at speed-up 100
	return o
}

// loraCall posts a load ("load") or unload body and returns the status and the body.
func loraCall(t *testing.T, url, op, name, path string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"lora_name":%q,"lora_path":%q}`, name, path)
	if op == "unload" {
		body = fmt.Sprintf(`{"lora_name":%q}`, name)
	}
	resp, b := postJSON(t, url+"/v1/"+op+"_lora_adapter", body)
	return resp.StatusCode, string(b)
}

// TestVLLMLoadUnloadLora: vLLM's load and unload answers, in order, on an engine with two
// slots: successes are a sentence, refusals vLLM's error object with its status and type.
func TestVLLMLoadUnloadLora(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8, "b": 16, "c": 8, "big": 32})
	_, hs := startServer(t, loraOptions(t, 2))
	steps := []struct {
		op, name, path string
		status         int
		want           string // the sentence, or the error's type and message
	}{
		{"load", "a", dirs["a"], 200, "Success: LoRA adapter 'a' added successfully."},
		{"load", "a", dirs["b"], 400, "InvalidUserInput: The lora adapter 'a' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True."},
		{"load", "x", dirs["missing"], 404, "NotFoundError: Loading lora x failed: No adapter found for " + dirs["missing"]},
		{"load", "x", dirs["noconfig"], 404, "NotFoundError: Loading lora x failed: No adapter found for " + dirs["noconfig"]},
		{"load", "x", dirs["badconfig"], 400, "BadRequestError: Loading lora x failed: invalid adapter_config.json in " + dirs["badconfig"]},
		{"load", "big", dirs["big"], 400, "BadRequestError: LoRA rank 32 is greater than max_lora_rank 16."},
		{"load", "x", "", 400, "InvalidUserInput: Both 'lora_name' and 'lora_path' must be provided."},
		{"load", "b", dirs["b"], 200, "Success: LoRA adapter 'b' added successfully."},
		{"load", "c", dirs["c"], 503, "ServiceUnavailableError: LoRA adapter 'c' not loaded: all 2 adapter slots (--max-loras) hold adapters; unload one first."},
		{"unload", "z", "", 404, "NotFoundError: The lora adapter 'z' cannot be found."},
		{"unload", "", "", 400, "InvalidUserInput: 'lora_name' needs to be provided to unload a LoRA adapter."},
		{"unload", "b", "", 200, "Success: LoRA adapter 'b' removed successfully."},
		{"load", "c", dirs["c"], 200, "Success: LoRA adapter 'c' added successfully."},
	}
	for i, st := range steps {
		status, body := loraCall(t, hs.URL, st.op, st.name, st.path)
		got := body
		if status != 200 {
			var e errorResponse
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != status {
				t.Fatalf("step %d: %d %s: not vLLM's error object", i, status, body)
			}
			got = e.Error.Type + ": " + e.Error.Message
			if st.status == 400 && strings.HasPrefix(st.want, "BadRequestError: Loading lora x failed: invalid") {
				got = got[:min(len(got), len(st.want))]
			}
		}
		if status != st.status || got != st.want {
			t.Fatalf("step %d: %s %s: %d %q\nwant %d %q", i, st.op, st.name, status, got, st.status, st.want)
		}
	}
}

// TestVLLMLoraOff: without --max-loras the load is refused as vLLM refuses it without
// --enable-lora, and /metrics has no adapter series.
func TestVLLMLoraOff(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8})
	_, hs := startServer(t, testOptions(t))
	status, body := loraCall(t, hs.URL, "load", "a", dirs["a"])
	if status != 400 || !strings.Contains(body, `"message":"LoRA is not enabled. Use --enable-lora to enable LoRA."`) ||
		!strings.Contains(body, `"type":"BadRequestError"`) {
		t.Fatalf("load with adapters off: %d %s", status, body)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	if strings.Contains(b, "lora") {
		t.Fatalf("adapter metrics with adapters off:\n%s", b)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loraCompletion runs a completion of model (omitted when "") and returns its status,
// its model field and its token ids.
func loraCompletion(t *testing.T, url, model string) (int, string, []uint32) {
	t.Helper()
	m := ""
	if model != "" {
		m = fmt.Sprintf(`"model":%q,`, model)
	}
	resp, b := post(t, url, fmt.Sprintf(`{%s"prompt":%s,"max_tokens":8,"ignore_eos":true,"seed":3,"return_token_ids":true}`,
		m, jsonIDs(promptIDs(40))))
	if resp.StatusCode != 200 {
		return resp.StatusCode, string(b), nil
	}
	d := decodeMap(t, b)
	return 200, d["model"].(string), ids(d["choices"].([]any)[0].(map[string]any)["token_ids"])
}

// TestVLLMLoraRequests: /v1/models lists the adapters as vLLM does; a completion naming
// an adapter runs with it (its output differs from the base model's and the other
// adapter's, the same adapter answers the same) and answers under its name; an unloaded
// adapter is vLLM's 404; /metrics has vLLM's adapter gauge and the loads counter.
func TestVLLMLoraRequests(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8, "b": 4})
	_, hs := startServer(t, loraOptions(t, 2))
	for _, n := range []string{"a", "b"} {
		if status, body := loraCall(t, hs.URL, "load", n, dirs[n]); status != 200 {
			t.Fatalf("load %s: %d %s", n, status, body)
		}
	}
	resp, err := http.Get(hs.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID          string  `json:"id"`
			Root        string  `json:"root"`
			Parent      *string `json:"parent"`
			MaxModelLen *int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(readAll(t, resp)), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list.Data {
		parent, maxLen := "null", "null"
		if m.Parent != nil {
			parent = *m.Parent
		}
		if m.MaxModelLen != nil {
			maxLen = fmt.Sprint(*m.MaxModelLen)
		}
		got = append(got, fmt.Sprintf("%s root=%s parent=%s max_model_len=%s", m.ID, m.Root, parent, maxLen))
	}
	want := []string{"turbine-mock root=builtin:cl100k_base parent=null max_model_len=2048",
		"a root=" + dirs["a"] + " parent=turbine-mock max_model_len=null",
		"b root=" + dirs["b"] + " parent=turbine-mock max_model_len=null"}
	if !slices.Equal(got, want) {
		t.Fatalf("models\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	outs := map[string][]uint32{}
	for _, model := range []string{"", "turbine-mock", "a", "b", "a"} {
		status, name, toks := loraCompletion(t, hs.URL, model)
		wantName := model
		if model == "" {
			wantName = "turbine-mock"
		}
		if status != 200 || name != wantName {
			t.Fatalf("model %q: %d %s", model, status, name)
		}
		if prev, ok := outs[wantName]; ok && !slices.Equal(prev, toks) {
			t.Fatalf("model %q answered %v, then %v", model, prev, toks)
		}
		outs[wantName] = toks
	}
	if slices.Equal(outs["turbine-mock"], outs["a"]) || slices.Equal(outs["a"], outs["b"]) || slices.Equal(outs["turbine-mock"], outs["b"]) {
		t.Fatalf("adapters answer as the base model or as each other: %v", outs)
	}
	if status, body := loraCall(t, hs.URL, "unload", "a", ""); status != 200 {
		t.Fatalf("unload a: %d %s", status, body)
	}
	status, body, _ := loraCompletion(t, hs.URL, "a")
	if status != 404 || !strings.Contains(body, "The model `a` does not exist.") {
		t.Fatalf("unloaded adapter: %d %s", status, body)
	}
	resp, err = http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText := readAll(t, resp)
	for _, want := range []string{
		`vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} `,
		`turbine_mocker_lora_loads_total{model_name="turbine-mock"} 2`,
		`turbine_mocker_lora_unloads_total{model_name="turbine-mock"} 1`,
	} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metricsText)
		}
	}
}

// TestLoraLoadStallsTheEngine: a load is answered once its modelled time has passed, and
// a request sent while the engine loads gets no token before then.
func TestLoraLoadStallsTheEngine(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8})
	o := loraOptions(t, 1)
	o.Engine.LoraLoadMillis = 30000 // 300 ms at speed-up 100
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	stalled := make(chan time.Time, 1)
	s.testHook = func(_ context.Context, at string) {
		if at == hookLoraStall {
			stalled <- time.Now()
		}
	}
	s.Start()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	const d = 300 * time.Millisecond
	loaded := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		resp, err := http.Post(hs.URL+"/v1/load_lora_adapter", "application/json",
			strings.NewReader(fmt.Sprintf(`{"lora_name":"a","lora_path":%q}`, dirs["a"])))
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("load: %v %v", resp, err)
		}
		if err == nil {
			resp.Body.Close()
		}
		loaded <- time.Since(start)
	}()
	var began time.Time
	select {
	case began = <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine never began the load")
	}
	if status, _, _ := loraCompletion(t, hs.URL, ""); status != 200 {
		t.Fatalf("completion during the load: %d", status)
	}
	if took := time.Since(began); took < d {
		t.Fatalf("a completion sent while the engine loads finished %v after the load began, before its %v", took, d)
	}
	if took := <-loaded; took < d {
		t.Fatalf("the load was answered after %v, before its modelled %v", took, d)
	}
}

// TestSGLangLora: SGLang's load and unload answers (LoRAUpdateOutput, 400 on failure) and
// /generate's lora_path.
func TestSGLangLora(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8, "b": 8})
	o := loraOptions(t, 1)
	o.Dialect = DialectSGLang
	_, hs := startServer(t, o)
	call := func(op, name, path string) (int, string) {
		resp, b := postJSON(t, hs.URL+"/"+op+"_lora_adapter", fmt.Sprintf(`{"lora_name":%q,"lora_path":%q}`, name, path))
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		op, name, path string
		status         int
		want           string
	}{
		{"load", "a", dirs["a"], 200, `{"success":true,"error_message":null,"loaded_adapters":{"a":"` + dirs["a"] + `"}}`},
		{"load", "b", dirs["b"], 400, `{"success":false,"error_message":"Cannot load LoRA adapter b at path ` + dirs["b"] +
			`. Maximum number of loaded LoRA adapters is 1. Unload an adapter first.","loaded_adapters":{"a":"` + dirs["a"] + `"}}`},
		{"unload", "z", "", 400, `{"success":false,"error_message":"LoRA adapter z is not loaded.","loaded_adapters":{"a":"` + dirs["a"] + `"}}`},
	}
	for i, st := range steps {
		if status, body := call(st.op, st.name, st.path); status != st.status || body != st.want {
			t.Fatalf("step %d: %d %s\nwant %d %s", i, status, body, st.status, st.want)
		}
	}
	gen := func(lora string) (int, string) {
		l := ""
		if lora != "" {
			l = fmt.Sprintf(`"lora_path":%q,`, lora)
		}
		resp, b := postJSON(t, hs.URL+"/generate", fmt.Sprintf(`{%s"input_ids":%s,"sampling_params":{"max_new_tokens":8,"ignore_eos":true,"sampling_seed":3}}`,
			l, jsonIDs(promptIDs(40))))
		if resp.StatusCode != 200 {
			return resp.StatusCode, string(b)
		}
		return 200, fmt.Sprint(decodeMap(t, b)["output_ids"])
	}
	_, base := gen("")
	status, withA := gen("a")
	if status != 200 || withA == base {
		t.Fatalf("adapter a: %d %s (base %s)", status, withA, base)
	}
	if status, body := gen("b"); status != 400 || !strings.Contains(body, "The following requested LoRA adapters are not loaded: b") {
		t.Fatalf("adapter not loaded: %d %s", status, body)
	}
}

// TestTRTLLMLoraOnDemand: trtllm-serve's lora_request loads the adapter with the request,
// evicting the least recently used idle adapter when every slot holds one.
func TestTRTLLMLoraOnDemand(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8, "b": 8})
	o := loraOptions(t, 1)
	o.Dialect = DialectTRTLLM
	s, hs := startServer(t, o)
	gen := func(lora, path string) (int, string) {
		l := ""
		if lora != "" {
			l = fmt.Sprintf(`"lora_request":{"lora_name":%q,"lora_int_id":7,"lora_path":%q},`, lora, path)
		}
		resp, b := postJSON(t, hs.URL+"/v1/completions", fmt.Sprintf(`{"model":"turbine-mock",%s"prompt":%s,"max_tokens":8,"ignore_eos":true,"seed":3,"detokenize":false}`,
			l, jsonIDs(promptIDs(40))))
		if resp.StatusCode != 200 {
			return resp.StatusCode, string(b)
		}
		return 200, fmt.Sprint(decodeMap(t, b)["choices"].([]any)[0].(map[string]any)["token_ids"])
	}
	_, base := gen("", "")
	for i, st := range []struct {
		lora           string
		loads, unloads uint64
		loaded         string
	}{{"a", 1, 0, "a"}, {"a", 1, 0, "a"}, {"b", 2, 1, "b"}, {"a", 3, 2, "a"}} {
		status, out := gen(st.lora, dirs[st.lora])
		ls := s.Stats()
		loaded := loadedNames(s)
		if status != 200 || out == base || ls.LoraLoads != st.loads || ls.LoraUnloads != st.unloads || loaded != st.loaded {
			t.Fatalf("step %d (%s): %d %s, %d loads, %d unloads, loaded %q; want %d, %d, %q (base %s)",
				i, st.lora, status, out, ls.LoraLoads, ls.LoraUnloads, loaded, st.loads, st.unloads, st.loaded, base)
		}
	}
	if status, body := gen("c", dirs["missing"]); status != 400 || !strings.Contains(body, "no adapter found") {
		t.Fatalf("missing adapter: %d %s", status, body)
	}
}

// loadedNames lists the loaded adapters' names, comma-separated (the handlers' snapshot).
func loadedNames(s *Server) string {
	var names []string
	for _, a := range *s.lora.adapters.Load() {
		names = append(names, a.Name)
	}
	return strings.Join(names, ",")
}

// TestLoraParamsRoundTrip: with adapters on, Args renders the adapter settings and Flags
// reads them back; with adapters off they are left out.
func TestLoraParamsRoundTrip(t *testing.T) {
	on := DefaultParams()
	on.Engine.MaxLoras, on.Engine.MaxLoraRank, on.Engine.LoraLoadMillis = 4, 64, 12.5
	args := on.Args()
	got := parseParams(t, args)
	if got != on || !slices.Contains(args, "--max-loras") {
		t.Fatalf("Args %q parsed as %+v", args, got.Engine)
	}
	off := DefaultParams()
	off.Engine.MaxLoraRank = 64
	if args := off.Args(); slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "lora") }) {
		t.Fatalf("adapters off, Args %q", args)
	}
	if d := DefaultParams().Engine; d.MaxLoras != 0 || d.MaxLoraRank != mocker.DefaultMaxLoraRank || d.LoraLoadMillis != mocker.DefaultLoraLoadMillis {
		t.Fatalf("defaults %+v", d)
	}
}

func parseParams(t *testing.T, args []string) Params {
	t.Helper()
	got := DefaultParams()
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	got.Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return got
}

// TestKVEventsCarryLoraName: the BlockStored events of an adapter's request carry its
// name in vLLM's lora_name slot (the eighth element), read by an independent msgpack
// decoder, and the router's hashes of those tokens under that name differ from the base
// model's.
func TestKVEventsCarryLoraName(t *testing.T) {
	dirs := adapterDirs(t, map[string]int{"a": 8})
	opts := loraOptions(t, 1)
	var err error
	opts.KVEvents, err = kvevents.ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	s, hs := startServer(t, opts)
	if status, body := loraCall(t, hs.URL, "load", "a", dirs["a"]); status != 200 {
		t.Fatalf("load: %d %s", status, body)
	}
	ep, _ := kvevents.ConsumerEndpoint(s.KVEventsEndpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := subscribeKVEvents(t, ep)
	// A subscription takes effect asynchronously: send distinct prompts until a batch
	// arrives, then the adapter's request.
	for i := 0; ; i++ {
		post(t, hs.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":1}`, jsonIDs(promptIDs(16+i))))
		got := false
		select {
		case <-msgs:
			got = true
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no KV event message received")
		}
		if got {
			break
		}
	}
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(60000 + i)
	}
	post(t, hs.URL, fmt.Sprintf(`{"model":"a","prompt":%s,"max_tokens":1}`, jsonIDs(prompt)))
	for {
		var m zmq4.Msg
		select {
		case m = <-msgs:
		case <-ctx.Done():
			t.Fatal("BlockStored of the adapter's prompt not received")
		}
		tree, _, err := msgp.ReadIntfBytes(m.Frames[2])
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range tree.([]any)[1].([]any) {
			e := normalize(ev).([]any)
			if e[0] != "BlockStored" || len(e[3].([]any)) != 32 || e[3].([]any)[0] != uint64(60000) {
				continue
			}
			if len(e) < 8 || e[7] != "a" {
				t.Fatalf("the adapter's BlockStored %#v: want lora_name \"a\"", e)
			}
			_, b, err := kvevents.DecodeMessage(m.Frames)
			if err != nil {
				t.Fatal(err)
			}
			for _, dev := range b.Events {
				if dev.Kind == kv.BlockStored && dev.LoraName == "a" {
					if slices.Equal(kv.SequenceHashes(dev.TokenIDs, dev.BlockSize, dev.LoraName),
						kv.SequenceHashes(dev.TokenIDs, dev.BlockSize, "")) {
						t.Fatal("the adapter's blocks hash as the base model's")
					}
					return
				}
			}
			t.Fatal("package decoder lost the adapter's name")
		}
	}
}
