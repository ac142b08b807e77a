package vllm

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/engines/internal/enginetest"
	"github.com/turbine-llm/turbine/engines/mocker/server"
	"github.com/turbine-llm/turbine/messages"
)

// TestLoraBodies: a request's LoRA adapter is the completion's model (golden bodies in
// testdata/lora_bodies.golden; go test -update rewrites them).
func TestLoraBodies(t *testing.T) {
	enginetest.GoldenBodiesOf(t, "lora_bodies.golden", enginetest.LoraCases(), func(s *messages.SamplingParams) ([]byte, error) {
		r, err := requestFrom("m", "r1", []uint32{1, 2, 3}, s)
		if err != nil {
			return nil, err
		}
		return completionBody(r)
	})
}

// recorder is a fake vLLM that records each request as "METHOD PATH BODY" and answers
// with the status and body of answer.
type recorder struct {
	mu     sync.Mutex
	lines  []string
	status int
	answer string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.lines = append(r.lines, fmt.Sprintf("%s %s %s %s", req.Method, req.URL.Path, req.Header.Get("Content-Type"), b))
	status, answer := r.status, r.answer
	r.mu.Unlock()
	w.WriteHeader(status)
	_, _ = io.WriteString(w, answer)
}

func fakeVLLM(t *testing.T, status int, answer string) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{status: status, answer: answer}
	hs := httptest.NewServer(rec)
	t.Cleanup(hs.Close)
	c, err := New(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

// TestLoraRequestBodies: the load and unload requests, against testdata/lora_requests.golden
// (go test -update rewrites it).
func TestLoraRequestBodies(t *testing.T) {
	c, rec := fakeVLLM(t, 200, "Success: LoRA adapter 'sql-lora' added successfully.")
	ctx := enginetest.Ctx(t)
	if err := c.LoadLora(ctx, "sql-lora", "/adapters/sql lora"); err != nil {
		t.Fatal(err)
	}
	if err := c.UnloadLora(ctx, "sql-lora"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.lines, "\n") + "\n"
	path := filepath.Join("testdata", "lora_requests.golden")
	if *enginetest.UpdateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("requests\n%s\nwant (%s)\n%s", got, path, want)
	}
	if err := c.LoadLora(ctx, "", "/p"); err == nil {
		t.Fatal("a load without a name was sent")
	}
	if err := c.UnloadLora(ctx, ""); err == nil {
		t.Fatal("an unload without a name was sent")
	}
}

// TestLoraRefusals: vLLM's 4xx answers to a load or unload are refusals of the adapter
// (*engines.InvalidRequestError with vLLM's message); FastAPI's 404 for a route vLLM does
// not serve (runtime LoRA updating off) and 5xx answers are engine errors.
func TestLoraRefusals(t *testing.T) {
	vllmErr := func(status int, typ, msg string) string {
		return fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":%d}}`, msg, typ, status)
	}
	cases := []struct {
		name        string
		status      int
		answer      string
		wantRefusal bool
		wantText    string // the refusal's message, or a part of the error
	}{
		{"already loaded", 400, vllmErr(400, "InvalidUserInput", "The lora adapter 'a' has already been loaded."), true,
			"The lora adapter 'a' has already been loaded."},
		{"adapters off", 400, vllmErr(400, "BadRequestError", "LoRA is not enabled. Use --enable-lora to enable LoRA."), true,
			"LoRA is not enabled. Use --enable-lora to enable LoRA."},
		{"no adapter in the folder", 404, vllmErr(404, "NotFoundError", "Loading lora a failed: No adapter found for /x"), true,
			"Loading lora a failed: No adapter found for /x"},
		{"a pydantic refusal", 422, `{"detail":[{"loc":["body","lora_path"],"msg":"Field required"}]}`, true,
			"[map[loc:[body lora_path] msg:Field required]]"},
		{"no runtime LoRA routes", 404, `{"detail":"Not Found"}`, false, "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"},
		{"the mock engine's slots are full", 503, vllmErr(503, "ServiceUnavailableError", "all 2 adapter slots hold adapters"), false,
			"engine answered 503 ServiceUnavailableError: all 2 adapter slots hold adapters"},
		{"engine failure", 500, vllmErr(500, "InternalServerError", "boom"), false, "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fakeVLLM(t, tc.status, tc.answer)
			for _, op := range []func() error{
				func() error { return c.LoadLora(enginetest.Ctx(t), "a", "/x") },
				func() error { return c.UnloadLora(enginetest.Ctx(t), "a") },
			} {
				err := op()
				var inv *engines.InvalidRequestError
				var ve *Error
				refused := errors.As(err, &inv)
				switch {
				case err == nil || refused != tc.wantRefusal || !errors.As(err, &ve) || ve.Status != tc.status:
					t.Fatalf("error %v (refusal %v), want refusal %v of status %d", err, refused, tc.wantRefusal, tc.status)
				case refused && (inv.Message != tc.wantText || inv.Status != tc.status):
					t.Fatalf("refusal %d %q, want %d %q", inv.Status, inv.Message, tc.status, tc.wantText)
				case !refused && !strings.Contains(err.Error(), tc.wantText):
					t.Fatalf("error %q lacks %q", err, tc.wantText)
				}
			}
		})
	}
}

// TestLoraAgainstMockEngine drives the adapter through the mock engine's vLLM dialect:
// loads, requests under each adapter (outputs differ from the base model's and from each
// other), refusals, and an unloaded adapter's requests refused by the engine.
func TestLoraAgainstMockEngine(t *testing.T) {
	_, url := enginetest.StartLoraMock(t, server.DialectVLLM, 2)
	e := mockEngine(url)
	l, ok := e.(engines.LoraLoader)
	if !ok {
		t.Fatalf("%T is no engines.LoraLoader", e)
	}
	ctx := enginetest.Ctx(t)
	dirA, dirB := enginetest.AdapterDir(t, 8), enginetest.AdapterDir(t, 16)
	for name, dir := range map[string]string{"a": dirA, "b": dirB} {
		if err := l.LoadLora(ctx, name, dir); err != nil {
			t.Fatal(err)
		}
	}
	outs := map[string][]uint32{}
	for _, lora := range []string{"", "a", "b"} {
		got, err := enginetest.GenerateIDs(ctx, e, lora)
		if err != nil || len(got) != 8 {
			t.Fatalf("adapter %q: %v %v", lora, got, err)
		}
		outs[lora] = got
	}
	if slices.Equal(outs[""], outs["a"]) || slices.Equal(outs["a"], outs["b"]) || slices.Equal(outs[""], outs["b"]) {
		t.Fatalf("adapters answer alike: %v", outs)
	}
	var inv *engines.InvalidRequestError
	if err := l.LoadLora(ctx, "a", dirA); !errors.As(err, &inv) || inv.Status != 400 || !strings.Contains(inv.Message, "already been loaded") {
		t.Fatalf("a second load of a: %v", err)
	}
	if err := l.LoadLora(ctx, "c", filepath.Join(dirA, "nothing")); !errors.As(err, &inv) || inv.Status != 404 {
		t.Fatalf("a load of a missing folder: %v", err)
	}
	if err := l.UnloadLora(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var ve *Error
	if _, err := enginetest.GenerateIDs(ctx, e, "a"); !errors.As(err, &ve) || ve.Status != 404 || errors.As(err, &inv) {
		t.Fatalf("a request with an unloaded adapter: %v (an engine error, not the client's)", err)
	}
	if err := l.UnloadLora(ctx, "a"); !errors.As(err, &inv) || inv.Status != 404 {
		t.Fatalf("a second unload of a: %v", err)
	}
}

// TestLoraDisaggregatedLegs: both legs of a disaggregated request run with its adapter,
// so the decode leg's output is the adapter's aggregated output, not the base model's.
func TestLoraDisaggregatedLegs(t *testing.T) {
	start := func(role server.Role) string {
		cfg := enginetest.MockConfig(1000, 5)
		cfg.MaxLoras, cfg.MaxLoraRank = 1, 16
		_, url := enginetest.StartMock(t, server.Options{Params: server.Params{Engine: cfg, Role: role,
			KVTransfer: server.KVTransferOptions{BytesPerToken: 512}}}, nil)
		return url
	}
	pre, dec := mockEngine(start(server.RolePrefill)), mockEngine(start(server.RoleDecode))
	ctx := enginetest.Ctx(t)
	dir := enginetest.AdapterDir(t, 8)
	for _, e := range []engines.Engine{pre, dec} {
		if err := e.(engines.LoraLoader).LoadLora(ctx, "a", dir); err != nil {
			t.Fatal(err)
		}
	}
	prompt := disaggPrompt()
	sampling := func(lora string, leg messages.Leg, params string) *messages.SamplingParams {
		s := &messages.SamplingParams{MaxTokens: 12, IgnoreEos: true, LoraName: lora}
		if leg != messages.Leg_LEG_AGGREGATED {
			s.Disagg = &messages.DisaggParams{Leg: leg, KvTransferParams: params}
		}
		return s
	}
	base, err := collect(t, dec, "base", prompt, sampling("", messages.Leg_LEG_AGGREGATED, ""))
	if err != nil {
		t.Fatal(err)
	}
	agg, err := collect(t, dec, "agg", prompt, sampling("a", messages.Leg_LEG_AGGREGATED, ""))
	if err != nil {
		t.Fatal(err)
	}
	first, err := collect(t, pre, "r1", prompt, sampling("a", messages.Leg_LEG_PREFILL, ""))
	if err != nil || len(first) != 1 || first[0].KVTransferParams == "" {
		t.Fatalf("prefill leg %+v %v", first, err)
	}
	legs, err := collect(t, dec, "r1", prompt, sampling("a", messages.Leg_LEG_DECODE, first[0].KVTransferParams))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tokensOf(legs), tokensOf(agg); !slices.Equal(got, want) || slices.Equal(want, tokensOf(base)) ||
		first[0].TokenIDs[0] != want[0] {
		t.Fatalf("legs %v (prefill's first token %d), want the adapter's %v, not the base model's %v",
			got, first[0].TokenIDs[0], want, tokensOf(base))
	}
}
