package nodehttp

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/")

// TestMerge runs every case under testdata/merge: own.txt is the node's own page, each
// other <worker>.txt an engine's page; want.txt is the merged page (regenerated with
// -rewrite) and conflicts.txt the families left out by worker ("<worker> <n>" lines;
// absent: none).
func TestMerge(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "merge", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			own := parseFile(t, filepath.Join(dir, "own.txt"))
			files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
			slices.Sort(files)
			var scrapes []Scrape
			for _, f := range files {
				switch filepath.Base(f) {
				case "own.txt", "want.txt", "conflicts.txt":
					continue
				}
				scrapes = append(scrapes, Scrape{Worker: strings.TrimSuffix(filepath.Base(f), ".txt"), Families: parseFile(t, f)})
			}
			m := Merge(own, scrapes)
			var got bytes.Buffer
			if err := Write(&got, m.Families); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "want.txt")
			if *rewrite {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -rewrite to create it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("merged page differs from %s:\n--- got\n%s--- want\n%s", golden, got.String(), want)
			}
			var conflicts strings.Builder
			for _, w := range slices.Sorted(mapKeys(m.Conflicts)) {
				fmt.Fprintf(&conflicts, "%s %d\n", w, m.Conflicts[w])
			}
			wantConflicts, _ := os.ReadFile(filepath.Join(dir, "conflicts.txt"))
			if conflicts.String() != string(wantConflicts) {
				t.Errorf("conflicts:\n%s\nwant:\n%s", conflicts.String(), wantConflicts)
			}
			checkPage(t, got.Bytes(), own, scrapes)
		})
	}
}

// checkPage checks the invariants of a merged page: it parses, each family's HELP and
// TYPE lines appear once, and every engine sample carries its worker's label.
func checkPage(t *testing.T, page []byte, own map[string]*dto.MetricFamily, scrapes []Scrape) {
	t.Helper()
	fams, err := Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("merged page does not parse: %v\n%s", err, page)
	}
	for name := range fams {
		if n := bytes.Count(page, []byte("# TYPE "+name+" ")); n != 1 {
			t.Errorf("family %s: %d TYPE lines, want 1", name, n)
		}
	}
	workers := map[string]bool{}
	for _, sc := range scrapes {
		workers[sc.Worker] = true
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			w := label(m, WorkerLabel)
			if w == "" {
				if _, ok := own[name]; !ok {
					t.Errorf("family %s: a sample without a worker label that is not the node's own", name)
				}
				continue
			}
			if !workers[w] {
				if _, ok := own[name]; !ok {
					t.Errorf("family %s: sample of unknown worker %q", name, w)
				}
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func parseFile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fams
}

// TestMergeLeavesInputs: merging twice gives the same page (the inputs are not
// relabelled in place).
func TestMergeLeavesInputs(t *testing.T) {
	dir := filepath.Join("testdata", "merge", "vllm-two-workers")
	sc := []Scrape{{Worker: "gpu-7-0", Families: parseFile(t, filepath.Join(dir, "gpu-7-0.txt"))}}
	var a, b bytes.Buffer
	if err := Write(&a, Merge(nil, sc).Families); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, Merge(nil, sc).Families); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatalf("second merge differs:\n%s\nvs\n%s", a.String(), b.String())
	}
}

// TestParseRejects: a malformed page is an error, with no families.
func TestParseRejects(t *testing.T) {
	for _, page := range []string{
		"vllm:x{model_name=\"m\" 1\n",
		"# TYPE a counter\na{le=\"1\"} x\n",
		"a 1\na{b=\"c\"} 2 3 4\n",
	} {
		fams, err := Parse(strings.NewReader(page))
		if err == nil || fams != nil {
			t.Errorf("Parse(%q) = %d families, %v; want an error and none", page, len(fams), err)
		}
	}
}
