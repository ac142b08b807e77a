package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/messages"
)

// recordingObserver keeps every measurement it is given, in order.
type recordingObserver struct {
	mu     sync.Mutex
	events []string
}

func (o *recordingObserver) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf(format, args...))
}

func (o *recordingObserver) ObserveTTFT(model string, d time.Duration) { o.add("ttft %s %v", model, d) }
func (o *recordingObserver) ObserveITL(model string, gap time.Duration, n int) {
	o.add("itl %s %v×%d", model, gap, n)
}
func (o *recordingObserver) ObserveQueue(model string, d time.Duration) {
	o.add("queue %s %v", model, d)
}
func (o *recordingObserver) ObserveRequest(model string, prompt, completion int) {
	o.add("request %s %d→%d", model, prompt, completion)
}

func (o *recordingObserver) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

// slowRouting is a Backend whose Generate takes d of the test clock (routing, or a wait
// for a worker), then runs the inner backend's.
type slowRouting struct {
	*fakeBackend
	clk *testClock
	d   time.Duration
}

func (b slowRouting) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	b.clk.advance(b.d)()
	return b.fakeBackend.Generate(ctx, req)
}

// The Observer gets each generation's queue wait, TTFT, inter-token gaps (per chunk, with
// its token count) and, once it ended, its prompt and completion tokens — streamed or
// not; a request that failed before any token gives nothing but what it measured.
func TestObserverMeasurements(t *testing.T) {
	for _, tc := range []struct {
		name, body string
	}{
		{"stream", `{"model":"tiny","stream":true,` + hiChat + `}`},
		{"unary", `{"model":"tiny",` + hiChat + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{now: testTime}
			inner := newFakeBackend(
				step{before: clk.advance(200 * time.Millisecond), chunk: tokens("H").chunk},
				step{before: clk.advance(30 * time.Millisecond), chunk: finish("ey!", "stop").chunk},
			)
			obs := &recordingObserver{}
			s, err := New(Config{Now: clk.Now, Observer: obs}, slowRouting{inner, clk, 50 * time.Millisecond},
				fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
			if err != nil {
				t.Fatal(err)
			}
			if rr := serve(s, http.MethodPost, chatPath, tc.body); rr.Code != 200 {
				t.Fatal(rr.Body.String())
			}
			prompt := len(inner.generated()[0].TokenIDs)
			want := []string{"queue tiny 50ms", "ttft tiny 250ms", "itl tiny 30ms×3", fmt.Sprintf("request tiny %d→4", prompt)}
			if got := obs.got(); !slices.Equal(got, want) {
				t.Errorf("observed %q, want %q", got, want)
			}
		})
	}
}

// A request refused before it ran (unknown model, a backend error) is not observed; one
// whose engine failed after its first token gives its latencies but no ended request.
func TestObserverSkipsFailures(t *testing.T) {
	clk := &testClock{now: testTime}
	obs := &recordingObserver{}
	b := newFakeBackend(
		step{before: clk.advance(100 * time.Millisecond), chunk: tokens("H").chunk},
		step{chunk: &messages.TokenChunk{FinishReason: "error", Error: "engine died"}},
	)
	s, err := New(Config{Now: clk.Now, Observer: obs}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	if rr := serve(s, http.MethodPost, chatPath, `{"model":"nope",`+hiChat+`}`); rr.Code != 404 {
		t.Fatalf("unknown model: %d %s", rr.Code, rr.Body.String())
	}
	if got := obs.got(); len(got) != 0 {
		t.Fatalf("an unknown model was observed: %q", got)
	}
	rr := serve(s, http.MethodPost, chatPath, `{"model":"tiny",`+hiChat+`}`)
	if rr.Code < 500 {
		t.Fatalf("engine failure: %d %s", rr.Code, rr.Body.String())
	}
	want := []string{"queue tiny 0s", "ttft tiny 100ms"}
	if got := obs.got(); !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// fakePlanner is a PlannerAdmin over the fake backend: "tiny" has a planner, other
// models are unknown; noPlanner makes every call fail as with no planner in the cluster.
type fakePlanner struct {
	*fakeBackend
	noPlanner bool
	st        PlannerStatus
	set       []PlannerTargets
}

func (p *fakePlanner) check(model string) error {
	switch {
	case p.noPlanner:
		return fmt.Errorf("%w: no member hosts it", ErrNoPlanner)
	case model == "org/big-model":
		return errors.New("error request: future: timeout")
	case model != "tiny":
		return fmt.Errorf("%w: %q", ErrUnknownModel, model)
	}
	return nil
}

func (p *fakePlanner) PlannerStatus(_ context.Context, model string) (*PlannerStatus, error) {
	if err := p.check(model); err != nil {
		return nil, err
	}
	st := p.st
	st.Model = model
	return &st, nil
}

func (p *fakePlanner) SetPlannerTargets(_ context.Context, model string, t PlannerTargets) (*PlannerStatus, error) {
	if err := p.check(model); err != nil {
		return nil, err
	}
	if t.GPUBudget == 3 {
		return nil, fmt.Errorf("%w: planner: gpu budget 3 is below the minimum workers' 4 GPUs", ErrPlannerRefused)
	}
	p.set = append(p.set, t)
	if t.TTFTTargetMs > 0 {
		p.st.TTFTTarget = t.TTFTTargetMs
	}
	if t.ITLTargetMs > 0 {
		p.st.ITLTarget = t.ITLTargetMs
	}
	if t.GPUBudget > 0 {
		p.st.GPUBudget = t.GPUBudget
	}
	return p.PlannerStatus(context.Background(), model)
}

func TestAdminPlanner(t *testing.T) {
	base := PlannerStatus{Mode: "load", Connector: "local", Predictor: "constant", TTFTTarget: 500, ITLTarget: 50,
		GPUBudget: 8, MinWorkers: 1, Decisions: 3, At: PlannerTime(testTime), Frontends: 1, Requests: 40,
		Terms:  []PlannerTerm{{Name: "kv_usage_max", Value: 0.9}},
		Pools:  []PlannerPool{{Pool: "aggregated", Ready: 1, Starting: 1, Wanted: 2, Target: 2, GPUsPerEngine: 1}},
		Clamps: []string{}, Reason: "every worker over 0.8 KV usage"}
	for _, tc := range []struct {
		name, method, path, body string
		noPlanner                bool
		code                     int
		want                     []string // parts of the body
		set                      int      // targets that reached the planner
	}{
		{"get", "GET", "/admin/planner?model=tiny", "", false, 200, []string{
			`"model":"tiny","mode":"load","connector":"local","predictor":"constant","ttft_target_ms":500,"itl_target_ms":50,"gpu_budget":8,"min_workers":1,"decisions":3,"at":"2026-01-02T03:04:05Z"`,
			`"pools":[{"pool":"aggregated","ready":1,"starting":1,"stopping":0,"wanted":2,"target":2,"gpus_per_engine":1}]`,
			`"terms":[{"name":"kv_usage_max","value":0.9}]`, `"reason":"every worker over 0.8 KV usage"`}, 0},
		{"get without model, several served", "GET", "/admin/planner", "", false, 400, []string{`"param":"model"`}, 0},
		{"get unknown model", "GET", "/admin/planner?model=nope", "", false, 404, []string{`"code":"model_not_found"`}, 0},
		{"no planner", "GET", "/admin/planner?model=tiny", "", true, 503, []string{`"code":"planner_unavailable"`, "turbine planner"}, 0},
		{"planner silent", "GET", "/admin/planner?model=org/big-model", "", false, 502, []string{`"code":"backend_unavailable"`, `The planner of model \"org/big-model\" did not answer`}, 0},
		{"set", "POST", "/admin/planner", `{"model":"tiny","ttft_target_ms":300,"gpu_budget":4}`, false, 200, []string{
			`"ttft_target_ms":300,"itl_target_ms":50,"gpu_budget":4`}, 1},
		{"set one", "POST", "/admin/planner", `{"model":"tiny","itl_target_ms":20.5}`, false, 200, []string{`"itl_target_ms":20.5`}, 1},
		{"set nothing", "POST", "/admin/planner", `{"model":"tiny"}`, false, 400, []string{`"code":"missing_required_parameter"`}, 0},
		{"set without model", "POST", "/admin/planner", `{"ttft_target_ms":300}`, false, 400, []string{`"param":"model"`}, 0},
		{"negative target", "POST", "/admin/planner", `{"model":"tiny","ttft_target_ms":-1}`, false, 400, []string{`"param":"ttft_target_ms"`}, 0},
		{"huge target", "POST", "/admin/planner", `{"model":"tiny","itl_target_ms":1e300}`, false, 400, []string{`"param":"itl_target_ms"`}, 0},
		{"negative budget", "POST", "/admin/planner", `{"model":"tiny","gpu_budget":-2}`, false, 400, []string{`"param":"gpu_budget"`}, 0},
		{"fractional budget", "POST", "/admin/planner", `{"model":"tiny","gpu_budget":2.5}`, false, 400, []string{`"code":"invalid_type"`, `"param":"gpu_budget"`}, 0},
		{"budget a string", "POST", "/admin/planner", `{"model":"tiny","gpu_budget":"4"}`, false, 400, []string{`"code":"invalid_type"`, `"param":"gpu_budget"`}, 0},
		{"target a string", "POST", "/admin/planner", `{"model":"tiny","ttft_target_ms":"300"}`, false, 400, []string{`"code":"invalid_type"`, `"param":"ttft_target_ms"`}, 0},
		{"model a number", "POST", "/admin/planner", `{"model":7,"gpu_budget":4}`, false, 400, []string{`"code":"invalid_type"`, `"param":"model"`}, 0},
		{"unknown field", "POST", "/admin/planner", `{"model":"tiny","gpu_budgett":4,"ttft_target_ms":300}`, false, 400, []string{`"param":"gpu_budgett"`, "gpu_budgett"}, 0},
		{"not an object", "POST", "/admin/planner", `[1]`, false, 400, []string{`"code":"invalid_json"`}, 0},
		{"not json", "POST", "/admin/planner", `{"model":`, false, 400, []string{`"code":"invalid_json"`}, 0},
		{"refused by the planner", "POST", "/admin/planner", `{"model":"tiny","gpu_budget":3}`, false, 400, []string{
			`"code":"invalid_value"`, `"param":"gpu_budget"`, "The planner refused the targets: planner: gpu budget 3"}, 0},
		{"set unknown model", "POST", "/admin/planner", `{"model":"nope","gpu_budget":4}`, false, 404, []string{`"code":"model_not_found"`}, 0},
		{"set, no planner", "POST", "/admin/planner", `{"model":"tiny","gpu_budget":4}`, true, 503, []string{`"code":"planner_unavailable"`}, 0},
		{"delete", "DELETE", "/admin/planner?model=tiny", "", false, 405, []string{`"code":"method_not_allowed"`}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakePlanner{fakeBackend: newFakeBackend(), noPlanner: tc.noPlanner, st: base}
			rr := serve(newTestServer(t, p), tc.method, tc.path, tc.body)
			if rr.Code != tc.code {
				t.Fatalf("%d %s, want %d", rr.Code, rr.Body.String(), tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(rr.Body.String(), w) {
					t.Errorf("body %s\nlacks %s", rr.Body.String(), w)
				}
			}
			for _, internal := range []string{"Go struct", "json: ", "PlannerTargets", "unmarshal"} {
				if strings.Contains(rr.Body.String(), internal) {
					t.Errorf("body %s\nspeaks of Go internals (%s)", rr.Body.String(), internal)
				}
			}
			if len(p.set) != tc.set {
				t.Errorf("%d targets reached the planner, want %d", len(p.set), tc.set)
			}
			if tc.code == 200 {
				var st PlannerStatus
				if err := json.Unmarshal(rr.Body.Bytes(), &st); err != nil {
					t.Fatalf("answer is no PlannerStatus: %v", err)
				}
			}
		})
	}
}

// With one base model served (its LoRA adapters aside), GET /admin/planner answers for
// it without ?model=.
func TestAdminPlannerOnlyModel(t *testing.T) {
	p := &fakePlanner{fakeBackend: newFakeBackend()}
	p.cards = []*messages.ModelCard{{Model: "tiny", Tokenizer: "fake"},
		{Model: "sql", Tokenizer: "fake", Lora: &messages.LoraAdapter{Name: "sql"}}}
	rr := serve(newTestServer(t, p), "GET", "/admin/planner", "")
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), `"model":"tiny"`) {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
}

// /admin/planner is an admin route: remote clients without an admin key are refused, and
// a backend that cannot reach a planner has no such route.
func TestAdminPlannerAccess(t *testing.T) {
	p := &fakePlanner{fakeBackend: newFakeBackend()}
	s := newTestServer(t, p)
	req, _ := http.NewRequest("POST", "/admin/planner", strings.NewReader(`{"model":"tiny","gpu_budget":4}`))
	req.RemoteAddr = "192.0.2.7:40000"
	rr := newRecorder()
	s.ServeHTTP(rr, req)
	if rr.Code != 403 || len(p.set) != 0 {
		t.Fatalf("remote client: %d %s, %d targets set", rr.Code, rr.Body.String(), len(p.set))
	}
	rr = serve(newTestServer(t, newFakeBackend()), "GET", "/admin/planner?model=tiny", "")
	if rr.Code != 404 || !strings.Contains(rr.Body.String(), "no planner") {
		t.Fatalf("backend without a planner: %d %s", rr.Code, rr.Body.String())
	}
}

// FuzzPlannerTargets: any body is either refused with a catalogue error or gives targets
// within their bounds, for a named model, with something to change.
func FuzzPlannerTargets(f *testing.F) {
	for _, seed := range []string{`{"model":"tiny","ttft_target_ms":300}`, `{"model":"tiny","gpu_budget":4,"itl_target_ms":20.5}`,
		`{"model":"tiny","gpu_budget":-1}`, `{"model":"","ttft_target_ms":1}`, `{"model":"m","ttft_target_ms":1e309}`, `[]`, `{`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tg, aerr := decodePlannerTargets(body)
		if aerr != nil {
			if tg != nil {
				t.Fatal("both targets and an error")
			}
			if aerr.Status() != http.StatusBadRequest {
				t.Fatalf("refused with %d: %v", aerr.Status(), aerr)
			}
			return
		}
		switch {
		case tg.Model == "":
			t.Fatal("accepted without a model")
		case tg.TTFTTargetMs == 0 && tg.ITLTargetMs == 0 && tg.GPUBudget == 0:
			t.Fatal("accepted with nothing to change")
		case !(tg.TTFTTargetMs >= 0 && tg.TTFTTargetMs <= MaxPlannerTargetMs) || !(tg.ITLTargetMs >= 0 && tg.ITLTargetMs <= MaxPlannerTargetMs):
			t.Fatalf("targets out of bounds: %+v", tg)
		case tg.GPUBudget < 0 || tg.GPUBudget > MaxPlannerGPUBudget:
			t.Fatalf("budget out of bounds: %+v", tg)
		}
	})
}

// The log line of a change says the targets now in force: a field the request left
// out (0: keep) is logged at the planner's value, not as 0.
func TestAdminPlannerLogsTargetsInForce(t *testing.T) {
	var logs bytes.Buffer
	p := &fakePlanner{fakeBackend: newFakeBackend(), st: PlannerStatus{Mode: "load", TTFTTarget: 500, ITLTarget: 50, GPUBudget: 8}}
	s, err := New(Config{Now: func() time.Time { return testTime }, Logger: zerolog.New(&logs)}, p, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
	if err != nil {
		t.Fatal(err)
	}
	if rr := serve(s, "POST", "/admin/planner", `{"model":"tiny","itl_target_ms":20.5}`); rr.Code != 200 {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	want := `"model":"tiny","ttft_target_ms":500,"itl_target_ms":20.5,"gpu_budget":8,"message":"planner targets changed"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("logs %s\nlack %s", logs.String(), want)
	}
}
