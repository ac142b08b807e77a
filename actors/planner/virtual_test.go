package planner

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/turbine-llm/turbine/planner"
)

func readRecords(t *testing.T, path string) []VirtualRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []VirtualRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r VirtualRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func TestVirtualFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.jsonl")
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	v, err := NewVirtual(VirtualConfig{File: path, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if f, _ := v.Fleet(ctx, "m"); len(f.Ready) != 0 {
		t.Fatalf("fleet before a decision: %v", f)
	}
	d := core.Decision{At: at, Target: map[core.Pool]int{core.PoolPrefill: 2, core.PoolDecode: 3},
		Wanted: map[core.Pool]int{core.PoolPrefill: 2, core.PoolDecode: 5}, Clamps: []string{"decode: 5 → 3: GPU budget 5"}}
	if err := v.WriteDecision(ctx, "m", d); err != nil {
		t.Fatal(err)
	}
	if err := v.Scale(ctx, "other", map[core.Pool]int{core.PoolAggregated: 1}); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, path)
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if !r.Time.Equal(at) || r.Model != "m" || r.Targets["prefill"] != 2 || r.Targets["decode"] != 3 || r.Wanted["decode"] != 5 ||
		len(r.Clamps) != 1 || r.Held {
		t.Fatalf("record %+v", r)
	}
	if recs[1].Model != "other" || recs[1].Targets["aggregated"] != 1 || !recs[1].Time.Equal(at) {
		t.Fatalf("record %+v", recs[1])
	}
	f, _ := v.Fleet(ctx, "m")
	if f.Ready[core.PoolDecode] != 3 || f.Ready[core.PoolPrefill] != 2 || f.Starting[core.PoolDecode] != 0 {
		t.Fatalf("fleet after the decision: %v", f)
	}
	if err := v.Scale(ctx, "m", map[core.Pool]int{core.PoolDecode: 1}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("write after Close: %v", err)
	}
}

func TestVirtualWebhook(t *testing.T) {
	var mu sync.Mutex
	var bodies []VirtualRecord
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		if fail {
			http.Error(w, "planner off", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var rec VirtualRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		bodies = append(bodies, rec)
	}))
	defer srv.Close()
	v, err := NewVirtual(VirtualConfig{WebhookURL: srv.URL + "/scale"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := core.Decision{At: time.Unix(100, 0), Target: map[core.Pool]int{core.PoolAggregated: 4}, Held: true, Reason: "no frontend reported"}
	if err := v.WriteDecision(ctx, "m", d); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(bodies) != 1 || bodies[0].Targets["aggregated"] != 4 || bodies[0].Reason != "no frontend reported" || !bodies[0].Held {
		t.Fatalf("bodies %+v", bodies)
	}
	fail = true
	mu.Unlock()
	err = v.WriteDecision(ctx, "m", d)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "planner off") {
		t.Fatalf("a 503: %v", err)
	}
}

func TestNewVirtualRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  VirtualConfig
		err  string
	}{
		{"neither", VirtualConfig{}, "exactly one"},
		{"both", VirtualConfig{File: filepath.Join(dir, "x"), WebhookURL: "http://h/"}, "exactly one"},
		{"not http", VirtualConfig{WebhookURL: "ftp://h/x"}, `webhook URL "ftp://h/x"`},
		{"no host", VirtualConfig{WebhookURL: "http:///x"}, "want http(s)://host"},
		{"unwritable", VirtualConfig{File: filepath.Join(dir, "missing", "x")}, "no such file"},
		{"negative initial", VirtualConfig{File: filepath.Join(dir, "y"), Initial: map[core.Pool]int{core.PoolDecode: -1}}, "initial decode size -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewVirtual(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("NewVirtual: %v, want %q", err, tc.err)
			}
		})
	}
}
