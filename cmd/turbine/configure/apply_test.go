package configure

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/planner"
)

// TestApplyGolden: --apply's command lines and Kubernetes values for an aggregated
// layout, a disaggregated one of one engine size and one of two (go test -update
// rewrites testdata/apply-*.golden).
func TestApplyGolden(t *testing.T) {
	o := Defaults()
	o.Profile = fixturePath
	o.Model = "my-model"
	o.Trace, o.Rate = "", 1
	s := &setup{profile: fixtureProfile(), maxModel: 131072, batched: 8192, kvBytes: 65536}
	card, err := o.card()
	if err != nil {
		t.Fatal(err)
	}
	s.card = card
	for _, format := range []string{"flags", "helm"} {
		o.Apply = format
		var b strings.Builder
		for _, name := range []string{"4×TP2", "2P×TP1+3D×TP1", "1P×TP2+3D×TP1"} {
			l, err := planner.ParseLayout(name)
			if err != nil {
				t.Fatal(err)
			}
			best := planner.RankedLayout{LayoutScore: planner.LayoutScore{Layout: l, Goodput: 0.5}, Rank: 1, Verdict: planner.VerdictBest, MeetsTargets: true}
			if strings.HasPrefix(name, "1P") {
				best.MeetsTargets, best.Reason = false, "TTFT p90 812 ms > 500 ms"
			}
			b.WriteString(o.applyText(s, best))
			b.WriteString("---\n")
		}
		path := filepath.Join("testdata", "apply-"+format+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, []byte(b.String())) {
			t.Errorf("--apply %s:\n%s\nwant (%s):\n%s", format, b.String(), path, want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	if got := shellJoin([]string{"--model", "/m/Qwen3-8B", "it's", "", "a b", "x=1,2"}); got != `--model /m/Qwen3-8B 'it'\''s' '' 'a b' x=1,2` {
		t.Errorf("shellJoin: %s", got)
	}
}

// TestJSONFloat: a latency without samples (NaN) is written as null, not refused.
func TestJSONFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{{math.NaN(), "null"}, {math.Inf(1), "null"}, {1.5, "1.5"}, {0, "0"}} {
		b, err := json.Marshal(LatenciesJSON{P50: jsonFloat(tc.in), At: jsonFloat(tc.in)})
		if want := `{"p50":` + tc.want + `,"at_percentile":` + tc.want + `}`; err != nil || string(b) != want {
			t.Errorf("%v: %s, %v; want %s", tc.in, b, err, want)
		}
	}
}
