package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoraName(t *testing.T) {
	for _, tc := range []struct {
		k, n int
		want string
	}{
		{0, 1, "lora-00"},
		{7, 64, "lora-07"},
		{63, 64, "lora-63"},
		{99, 100, "lora-99"},
		{7, 101, "lora-007"},
		{12, 1000, "lora-012"},
		{1234, 100000, "lora-01234"},
	} {
		if got := LoraName(tc.k, tc.n); got != tc.want {
			t.Errorf("LoraName(%d, %d) = %q, want %q", tc.k, tc.n, got, tc.want)
		}
	}
}

func TestLoraSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		spec LoraSpec
		want string // "" for valid
	}{
		{LoraSpec{}, ""},
		{LoraSpec{Adapters: 64, Zipf: 1}, ""},
		{LoraSpec{Adapters: 64, Zipf: 0, BaseFraction: 1}, ""},
		{LoraSpec{Adapters: -1}, "LoRA adapters"},
		{LoraSpec{Adapters: MaxLoraAdapters + 1}, "LoRA adapters"},
		{LoraSpec{Adapters: 4, Zipf: -0.5}, "popularity exponent"},
		{LoraSpec{Adapters: 4, Zipf: math.NaN()}, "popularity exponent"},
		{LoraSpec{Adapters: 4, Zipf: MaxLoraZipf + 1}, "popularity exponent"},
		{LoraSpec{Adapters: 4, BaseFraction: 1.5}, "base-model fraction"},
		{LoraSpec{Adapters: 4, BaseFraction: math.NaN()}, "base-model fraction"},
		{LoraSpec{BaseFraction: 0.5}, "without LoRA adapters"},
	} {
		err := tc.spec.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.spec, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one naming %q", tc.spec, err, tc.want)
		}
	}
}

// TestSyntheticLoraPopularity: adapter k is named with probability ∝ 1/(k+1)^s, and a
// base fraction of the requests name none (each figure within 5 standard errors of
// its expectation, for 20,000 seeded draws).
func TestSyntheticLoraPopularity(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name     string
		adapters int
		zipf     float64
		base     float64
	}{
		{"zipf 1 over 64", 64, 1, 0},
		{"uniform over 8", 8, 0, 0},
		{"zipf 1.5 over 16 with a base fraction", 16, 1.5, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := SyntheticSpec{ISL: FixedLength(64), OSL: FixedLength(4), Rate: 10, Requests: n, BlockTokens: 16, Seed: 3,
				Lora: LoraSpec{Adapters: tc.adapters, Zipf: tc.zipf, BaseFraction: tc.base}}
			reqs, err := spec.Generate()
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, r := range reqs {
				counts[r.Lora]++
			}
			var h float64
			for k := range tc.adapters {
				h += math.Pow(float64(k+1), -tc.zipf)
			}
			check := func(what string, got int, p float64) {
				t.Helper()
				se := math.Sqrt(p * (1 - p) / n)
				if f := float64(got) / n; math.Abs(f-p) > 5*se+1e-12 {
					t.Errorf("%s: fraction %.4f, want %.4f ± %.4f", what, f, p, 5*se)
				}
			}
			check("base model", counts[""], tc.base)
			for _, k := range []int{0, 1, tc.adapters / 2, tc.adapters - 1} {
				check(LoraName(k, tc.adapters), counts[LoraName(k, tc.adapters)], (1-tc.base)*math.Pow(float64(k+1), -tc.zipf)/h)
			}
			if len(counts) > tc.adapters+1 {
				t.Errorf("%d distinct names, want at most %d adapters and the base model", len(counts), tc.adapters)
			}
		})
	}
}

// TestSyntheticLoraKeepsTheWorkload: adapters are drawn from a stream of their own: the
// same spec with and without them draws the same arrivals, lengths, groups and hash ids,
// and the same seed the same adapters.
func TestSyntheticLoraKeepsTheWorkload(t *testing.T) {
	spec := SyntheticSpec{ISL: mustLength(t, "uniform:600:1200"), OSL: mustLength(t, "normal:64:16"), Rate: 5, Requests: 200,
		PrefixGroups: 3, PrefixTokens: 500, BlockTokens: 64, Seed: 11}
	plain, err := spec.Generate()
	if err != nil {
		t.Fatal(err)
	}
	spec.Lora = LoraSpec{Adapters: 64, Zipf: 1}
	with, err := spec.Generate()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := spec.Generate()
	g, err := spec.Generator()
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		a, b := plain[i], with[i]
		if b.Lora == "" {
			t.Fatalf("request %d names no adapter", i)
		}
		if again[i].Lora != b.Lora {
			t.Fatalf("request %d: adapter %q, then %q from the same seed", i, b.Lora, again[i].Lora)
		}
		if gr := g.Next(); gr.Lora != b.Lora {
			t.Fatalf("request %d: the generator draws %q, Generate %q", i, gr.Lora, b.Lora)
		}
		b.Lora = ""
		if a.Arrival != b.Arrival || a.InputLength != b.InputLength || a.OutputLength != b.OutputLength ||
			a.PrefixID != b.PrefixID || !slices.Equal(a.HashIDs, b.HashIDs) {
			t.Fatalf("request %d differs beyond its adapter: %+v and %+v", i, a, with[i])
		}
	}
}

func TestAssignLoras(t *testing.T) {
	reqs := make([]Request, 500)
	for i := range reqs {
		reqs[i] = Request{Arrival: time.Duration(i) * time.Millisecond, InputLength: 10, OutputLength: 1, HashIDs: []int64{int64(i)}}
	}
	spec := LoraSpec{Adapters: 4, Zipf: 1, BaseFraction: 0.1}
	if err := AssignLoras(reqs, spec, 7); err != nil {
		t.Fatal(err)
	}
	again := slices.Clone(reqs)
	if err := AssignLoras(again, spec, 7); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i, r := range reqs {
		counts[r.Lora]++
		if again[i].Lora != r.Lora || r.HashIDs[0] != int64(i) || r.InputLength != 10 {
			t.Fatalf("request %d: %+v, then %+v", i, r, again[i])
		}
	}
	if counts[""] == 0 || counts["lora-00"] <= counts["lora-03"] || len(counts) != 5 {
		t.Fatalf("adapters %v: want the base model, lora-00 more than lora-03, 4 adapters", counts)
	}
	if err := AssignLoras(reqs, LoraSpec{Adapters: 4, Zipf: -1}, 7); err == nil {
		t.Fatal("AssignLoras took a negative exponent")
	}
}

// TestCeilingLora: requests with the same hash ids under different adapters (or an
// adapter and the base model) share no KV, so no ceiling counts one as the other's hit.
func TestCeilingLora(t *testing.T) {
	const bt = 16
	req := func(lora string, ids ...int64) Request {
		return Request{InputLength: len(ids) * bt, OutputLength: 1, HashIDs: ids, Lora: lora}
	}
	prefixed := func(lora string, id int64) Request {
		return Request{InputLength: 2 * bt, OutputLength: 1, HashIDs: []int64{id, id + 100}, PrefixTokens: 20, PrefixID: 7, Lora: lora}
	}
	for _, tc := range []struct {
		name   string
		reqs   []Request
		tokens int64 // Ceiling's hit tokens
		blocks int   // CeilingBlocks's hit blocks
	}{
		{"same adapter", []Request{req("a", 1, 2), req("a", 1, 2, 3)}, 2 * bt, 2},
		{"two adapters", []Request{req("a", 1, 2), req("b", 1, 2, 3)}, 0, 0},
		{"adapter then base", []Request{req("a", 1, 2), req("", 1, 2, 3)}, 0, 0},
		{"base, adapter, base", []Request{req("", 1, 2), req("a", 1, 2), req("", 1, 2, 3)}, 2 * bt, 2},
		{"a prefix remainder under two adapters", []Request{prefixed("a", 1), prefixed("b", 1)}, 0, 0},
		{"a prefix remainder under one adapter", []Request{prefixed("a", 1), prefixed("a", 1)}, 2*bt - 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var total int64
			var blocks int
			for _, r := range tc.reqs {
				total += int64(r.InputLength)
				blocks += len(r.HashIDs)
			}
			if got, want := Ceiling(tc.reqs, bt), float64(tc.tokens)/float64(total); got != want {
				t.Errorf("Ceiling %v, want %v", got, want)
			}
			if got, want := CeilingBlocks(tc.reqs), float64(tc.blocks)/float64(blocks); got != want {
				t.Errorf("CeilingBlocks %v, want %v", got, want)
			}
			// A pooled cache that holds everything reaches the infinite cache's figure.
			if got, want := CeilingPooled(tc.reqs, bt, 1<<20), Ceiling(tc.reqs, bt); got != want {
				t.Errorf("CeilingPooled %v, want Ceiling's %v", got, want)
			}
		})
	}
}

// TestSummarizeLora: the summary's lora part covers the requests that named an adapter
// alone, and survives WriteSummary and ReadSummary; a workload without adapters has
// none.
func TestSummarizeLora(t *testing.T) {
	res := []Result{
		{TTFT: 10 * time.Millisecond, E2E: 20 * time.Millisecond, InputLength: 100, PromptTokens: 100, CachedTokens: 50, CachedKnown: true},
		{TTFT: 30 * time.Millisecond, E2E: 40 * time.Millisecond, InputLength: 100, PromptTokens: 100, CachedTokens: 20, CachedKnown: true, Lora: "lora-00"},
		{TTFT: 50 * time.Millisecond, E2E: 60 * time.Millisecond, InputLength: 100, PromptTokens: 100, CachedTokens: 0, CachedKnown: true, Lora: "lora-01"},
		{E2E: 5 * time.Millisecond, InputLength: 100, Error: ErrTimeout, Lora: "lora-00"},
	}
	s := Summarize(Outcome{Results: res, Duration: time.Second})
	l := s.Lora
	if l == nil || l.Requests != 3 || l.Succeeded != 2 || l.Adapters != 2 || l.TTFT.Count != 2 || l.TTFT.Min != 30 || l.TTFT.Max != 50 {
		t.Fatalf("lora summary %+v: want 3 requests, 2 ok, 2 adapters, TTFT 30 to 50 ms", l)
	}
	if l.PrefixCacheHitRate == nil || *l.PrefixCacheHitRate != 0.1 {
		t.Fatalf("lora hit rate %v, want 0.1 (20 of 200 tokens)", l.PrefixCacheHitRate)
	}
	l.Engines = &LoraEngines{Loads: 5, LoadsPerMinute: 300, Unplanned: 1, Evictions: 3, Hits: 1, Misses: 2, HitRate: 1.0 / 3, WaitedForSlot: 1}
	var buf bytes.Buffer
	if err := WriteSummary(&buf, s); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSummary(bytes.NewReader(buf.Bytes()), "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if back.Lora == nil || back.Lora.Engines == nil || *back.Lora.Engines != *l.Engines || back.Lora.Requests != 3 {
		t.Fatalf("read back %+v", back.Lora)
	}
	var csvBuf bytes.Buffer
	if err := WriteCSV(&csvBuf, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&csvBuf).ReadAll()
	if err != nil || len(rows) != 5 || rows[0][len(rows[0])-1] != "lora" || rows[1][11] != "" || rows[2][11] != "lora-00" || rows[4][11] != "lora-00" {
		t.Fatalf("requests.csv %v (%v): want a lora column naming each request's adapter", rows, err)
	}
	if Summarize(Outcome{Results: res[:1], Duration: time.Second}).Lora != nil {
		t.Fatal("a run without adapter requests has a lora summary")
	}
	for _, tc := range []struct {
		name string
		edit func(*LoraSummary)
	}{
		{"more adapter requests than requests", func(l *LoraSummary) { l.Requests = 9 }},
		{"no adapters", func(l *LoraSummary) { l.Adapters = 0 }},
		{"ttft count", func(l *LoraSummary) { l.Succeeded = 1 }},
		{"unplanned above loads", func(l *LoraSummary) { l.Engines.Unplanned = 6 }},
		{"hit rate", func(l *LoraSummary) { l.Engines.HitRate = 2 }},
		{"more slot waits than misses", func(l *LoraSummary) { l.Engines.WaitedForSlot = 3 }},
	} {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		bad := *back.Lora
		e := *bad.Engines
		bad.Engines = &e
		tc.edit(&bad)
		m["lora"] = bad
		data, _ := json.Marshal(m)
		if _, err := ReadSummary(bytes.NewReader(data), "s.json"); err == nil || !strings.Contains(err.Error(), "lora") {
			t.Errorf("%s: ReadSummary error %v, want one naming lora", tc.name, err)
		}
	}
}

// TestRunSendsAdapterAsModel: a request naming an adapter is sent with the adapter as
// its model (how an OpenAI-compatible server is asked for one), others with the
// client's model; both endpoints; the results name the adapter.
func TestRunSendsAdapterAsModel(t *testing.T) {
	for _, endpoint := range []string{EndpointCompletions, EndpointChat} {
		t.Run(endpoint, func(t *testing.T) {
			var mu sync.Mutex
			var models []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var b struct {
					Model     string `json:"model"`
					MaxTokens int    `json:"max_tokens"`
				}
				if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				models = append(models, b.Model)
				mu.Unlock()
				w.Header().Set("Content-Type", "text/event-stream")
				frame := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s) }
				if endpoint == EndpointChat {
					frame(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}`)
				} else {
					frame(`{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`)
				}
				frame(`{"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":1}}`)
				frame("[DONE]")
			}))
			defer srv.Close()
			reqs := []Request{
				{InputLength: 16, OutputLength: 1, HashIDs: []int64{1}, Lora: "lora-03"},
				{Arrival: time.Millisecond, InputLength: 16, OutputLength: 1, HashIDs: []int64{2}},
			}
			r := &Runner{Client: &Client{URL: srv.URL, Model: "base", Clock: newTickClock(time.Millisecond), Endpoint: endpoint},
				Concurrency: 1, BlockTokens: 16}
			out := r.Run(context.Background(), reqs)
			for i, res := range out.Results {
				if res.Error != "" {
					t.Fatalf("request %d: %s %s", i, res.Error, res.Detail)
				}
			}
			if !slices.Equal(models, []string{"lora-03", "base"}) {
				t.Fatalf("models sent %q, want lora-03 then base", models)
			}
			if out.Results[0].Lora != "lora-03" || out.Results[1].Lora != "" {
				t.Fatalf("results name adapters %q and %q", out.Results[0].Lora, out.Results[1].Lora)
			}
		})
	}
}
