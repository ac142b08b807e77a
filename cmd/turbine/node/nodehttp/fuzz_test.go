package nodehttp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzMerge feeds engine pages to Parse; whatever parses must merge into a page that
// parses again with every sample kept and labelled.
func FuzzMerge(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "merge", "*", "*.txt"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("a{worker=\"x\",worker=\"y\"} 1\n"))
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 2\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		fams, err := Parse(bytes.NewReader(page))
		if err != nil {
			return
		}
		samples := 0
		for _, f := range fams {
			samples += len(f.GetMetric())
		}
		m := Merge(nil, []Scrape{{Worker: "w-0", Families: fams}, {Worker: "w-1", Families: fams}})
		var out bytes.Buffer
		if err := Write(&out, m.Families); err != nil {
			return // a family the text format cannot carry (the encoder says which)
		}
		again, err := Parse(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("merged page does not parse: %v\ninput:\n%q\nmerged:\n%q", err, page, out.Bytes())
		}
		got := 0
		for _, f := range again {
			for _, s := range f.GetMetric() {
				got++
				if w := label(s, WorkerLabel); w != "w-0" && w != "w-1" {
					t.Fatalf("sample without its worker label: %v", s)
				}
			}
		}
		if got != 2*samples {
			t.Fatalf("merged page has %d samples, want %d\ninput:\n%q\nmerged:\n%q", got, 2*samples, page, out.Bytes())
		}
	})
}
