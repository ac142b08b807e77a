package pool

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLoad(t *testing.T) {
	at := time.Unix(1700000000, 0)
	cases := []struct {
		file string
		want Load
		err  string // substring; "" when valid
	}{
		{file: "vllm_dp2.txt", want: Load{Waiting: 4, Running: 21, KVUsage: 0.5}},
		{file: "vllm_v0.txt", want: Load{Waiting: 4, Running: 7, KVUsage: 0.8125}},
		{file: "mocker_vllm.txt", want: Load{}},
		{file: "mocker_sglang.txt", want: Load{}},
		{file: "sglang_single.txt", want: Load{Waiting: 3, Running: 24, KVUsage: 0.73}},
		{file: "sglang_dp.txt", want: Load{Waiting: 7, Running: 10, KVUsage: 0.6}},
		{file: "vllm_kv_over_one.txt", want: Load{Waiting: 30, Running: 64, KVUsage: 1}},
		{file: "vllm_negative.txt", err: "running is -1"},
		{file: "vllm_nan.txt", err: "KV usage is NaN"},
		{file: "go_runtime_only.txt", err: "neither"},
		{file: "html_error_page.txt", err: "pool: /metrics:"},
		{file: "malformed.txt", err: "pool: /metrics:"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "metrics", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseLoad(f, at)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.want.At = at
			if math.Abs(got.KVUsage-c.want.KVUsage) > 1e-9 {
				t.Fatalf("KV usage %v, want %v", got.KVUsage, c.want.KVUsage)
			}
			got.KVUsage = c.want.KVUsage
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
	if _, err := ParseLoad(strings.NewReader("go_goroutines 1\n"), at); !errors.Is(err, ErrNoLoadMetrics) {
		t.Fatalf("err %v, want ErrNoLoadMetrics", err)
	}
}

func TestLoadStale(t *testing.T) {
	l := Load{At: time.Unix(100, 0)}
	if l.Stale(time.Unix(102, 0), DefaultStaleAfter) {
		t.Fatal("stale at exactly the threshold")
	}
	if !l.Stale(time.Unix(102, 1), DefaultStaleAfter) {
		t.Fatal("not stale past the threshold")
	}
}

func FuzzParseLoad(f *testing.F) {
	dir := filepath.Join("testdata", "metrics")
	ents, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".txt") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	at := time.Unix(5, 0)
	f.Fuzz(func(t *testing.T, page []byte) {
		l, err := ParseLoad(strings.NewReader(string(page)), at)
		if err != nil {
			return
		}
		for _, v := range []float64{l.Waiting, l.Running, l.KVUsage} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("accepted %+v", l)
			}
		}
		if l.KVUsage > 1 || !l.At.Equal(at) {
			t.Fatalf("accepted %+v", l)
		}
	})
}
