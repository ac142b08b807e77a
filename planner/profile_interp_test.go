package planner

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func fixtureBytes(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "profile-small.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProfileFixtureRoundTrip(t *testing.T) {
	p := smallProfile(t)
	if got := p.TensorParallelSizes(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("TensorParallelSizes = %v", got)
	}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := ParseProfile(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := q.Encode(&again); err != nil || again.String() != buf.String() {
		t.Errorf("encode → parse → encode changed the profile (%v)", err)
	}
	if _, err := p.ForTP(4); err == nil || !strings.Contains(err.Error(), "[1 2]") {
		t.Errorf("ForTP(4) = %v, want an error listing the sizes profiled", err)
	}
	if _, err := LoadProfile(filepath.Join("testdata", "no-such.json")); err == nil {
		t.Error("LoadProfile of a missing file")
	}
}

func TestParseProfileRefuses(t *testing.T) {
	good := string(fixtureBytes(t))
	for name, body := range map[string]string{
		"trailing ]":       good + "]",
		"trailing }":       good + "}",
		"second object":    good + "{}",
		"unknown field":    strings.Replace(good, `"engine"`, `"engin"`, 1),
		"version":          strings.Replace(good, `"version": 1`, `"version": 2`, 1),
		"block size":       strings.Replace(good, `"block_size": 16`, `"block_size": 0`, 1),
		"no entry":         `{"version":1,"engine":"x","model":"m","block_size":16,"tensor_parallel":[]}`,
		"tp order":         strings.Replace(good, `"tensor_parallel_size": 2`, `"tensor_parallel_size": 1`, 1),
		"kv blocks":        strings.Replace(good, `"kv_blocks": 4000`, `"kv_blocks": 0`, 1),
		"prefill isl":      strings.Replace(good, `"isl": 1000,`, `"isl": 400,`, 1),
		"ttft":             strings.Replace(good, `"ttft_ms": 25,`, `"ttft_ms": -25,`, 1),
		"kv usage":         strings.Replace(good, `"kv_usage": 0.0625,`, `"kv_usage": 1.5,`, 1),
		"not json":         "profile",
		"too large":        good + strings.Repeat(" ", MaxProfileBytes),
		"decode itl zero":  strings.Replace(good, `"itl_ms": 10,`, `"itl_ms": 0,`, 1),
		"empty document":   "",
		"null":             "null",
		"prefill missing":  strings.Replace(good, `"prefill"`, `"prefil"`, 1),
		"negative context": strings.Replace(good, `"context": 1000,`, `"context": -1,`, 1),
		"engine unknown":   strings.Replace(good, `"engine": "mocker"`, `"engine": "x"`, 1),
		"engine missing":   strings.Replace(good, `"engine": "mocker"`, `"engine": ""`, 1),
		"kv blocks huge":   strings.Replace(good, `"kv_blocks": 4000`, `"kv_blocks": 16777217`, 1),
		"max seqs huge":    strings.Replace(good, `"max_num_seqs": 64`, `"max_num_seqs": 65537`, 1),
		"ttft over 1 h":    strings.Replace(good, `"ttft_ms": 25,`, `"ttft_ms": 3600001,`, 1),
		"itl over 1 h":     strings.Replace(good, `"itl_ms": 10,`, `"itl_ms": 3600001,`, 1),
	} {
		if body == good {
			t.Errorf("%s: the fixture has not the field to change", name)
			continue
		}
		if _, err := ParseProfile([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestProfileInterpolation(t *testing.T) {
	e, _ := smallProfile(t).ForTP(1)
	for _, tc := range []struct {
		isl, ttft, tput float64
	}{
		{500, 25, 20000},
		{750, 32.5, 22500},  // between points: linear
		{3000, 75, 40000},   // on the flat part
		{250, 17.5, 20000},  // below the first point: TTFT extrapolated, throughput held
		{16000, 400, 40000}, // above the last: likewise
		{-1e9, 0.01, 20000}, // TTFT never below 0.01 ms
	} {
		if got := e.TTFT(tc.isl); math.Abs(got-tc.ttft) > 1e-9 {
			t.Errorf("TTFT(%v) = %v, want %v", tc.isl, got, tc.ttft)
		}
		if got := e.PrefillThroughput(tc.isl); math.Abs(got-tc.tput) > 1e-6 {
			t.Errorf("PrefillThroughput(%v) = %v, want %v", tc.isl, got, tc.tput)
		}
	}
	for _, tc := range []struct {
		u, ctx, itl float64
	}{
		{0.0625, 1000, 10},
		{0.5, 1000, 20},
		{0.75, 1000, 35}, // over usage within a context
		{0, 1000, 10},    // usage held at the measured range
		{1, 4000, 50},
		{0.5, 2500, 22.5}, // between contexts: linear
		{0.5, 100, 20},    // context held at the ends
		{0.5, 9000, 25},
	} {
		if got := e.ITL(tc.u, tc.ctx); math.Abs(got-tc.itl) > 1e-9 {
			t.Errorf("ITL(%v, %v) = %v, want %v", tc.u, tc.ctx, got, tc.itl)
		}
	}
	tm := e.Timing()
	if tm.PrefillMillis(0) != 0 || tm.PrefillMillis(2000) != 50 || tm.DecodeMillis(0.5, 1000) != 20 {
		t.Error("Timing does not follow the profile")
	}
}

func TestDecodeThroughput(t *testing.T) {
	e, _ := smallProfile(t).ForTP(1)
	// Context 1000, 64,000 tokens of cache, at most 64 sequences: the knee is at usage
	// 0.5 (32 sequences at 20 ms = 1,600 tokens/s); at 50 ms the full cache does worse.
	if tput, ok := e.DecodeThroughput(16, 50, 1000); !ok || math.Abs(tput-1600) > 1e-6 {
		t.Errorf("at 50 ms: %v %v, want 1600 tokens/s", tput, ok)
	}
	// A 15 ms target: the largest batch with ITL ≤ 15 ms.
	tput, ok := e.DecodeThroughput(16, 15, 1000)
	if !ok || tput >= 1600 || tput < 1000 {
		t.Errorf("at 15 ms: %v %v", tput, ok)
	}
	// Unreachable: one sequence of context 4000 takes 12 ms.
	if tput, ok := e.DecodeThroughput(16, 10, 4000); ok || math.Abs(tput-1000.0/12) > 1e-6 {
		t.Errorf("at 10 ms: %v %v, want one sequence's 83.3 tokens/s and not ok", tput, ok)
	}
	// TP 2 divides by the GPUs.
	e2, _ := smallProfile(t).ForTP(2)
	if tput, ok := e2.DecodeThroughput(16, 50, 1000); !ok || tput <= 0 {
		t.Errorf("TP 2: %v %v", tput, ok)
	}
	// A sequence longer than the cache runs at full usage.
	if tput, ok := e.DecodeThroughput(16, 1000, 1e6); !ok || math.Abs(tput-1000.0/50) > 1e-6 {
		t.Errorf("oversized context: %v %v", tput, ok)
	}
}

// With a big cache and short sequences the first 1 % step of KV usage already holds
// many sequences; one sequence alone (usage far below 1 %) may still meet a target the
// batch misses. The throughput search used to start at that step and answered "out of
// reach" with the batch's throughput as if it were one sequence's.
func TestDecodeThroughputOneSequence(t *testing.T) {
	e := EngineProfile{TensorParallelSize: 1, KVBlocks: 100000, MaxNumSeqs: 256,
		Prefill: []PrefillPoint{{ISL: 100, TTFTMs: 10, TokensPerSecPerGPU: 10000}},
		Decode: []DecodePoint{
			{Context: 100, Batch: 1, KVUsage: 0.0001, ITLMs: 5, TokensPerSecPerGPU: 200},
			{Context: 100, Batch: 256, KVUsage: 0.0128, ITLMs: 40, TokensPerSecPerGPU: 6400},
		}}
	// At usage 1 % the batch is 160 sequences (ITL ≈ 31 ms); one sequence takes 5 ms.
	tput, ok := e.DecodeThroughput(16, 6, 100)
	if !ok || tput < 150 || tput > 200 {
		t.Errorf("6 ms target: %v tokens/s ok=%v, want about one sequence's 200 and ok", tput, ok)
	}
	tput, ok = e.DecodeThroughput(16, 4, 100)
	if ok || math.Abs(tput-200) > 1e-6 {
		t.Errorf("4 ms target: %v ok=%v, want one sequence's 200 tokens/s, not ok", tput, ok)
	}
}

// FuzzProfileParse: a profile file is outside input. Parsing never panics; whatever
// parses re-encodes to a profile that parses the same, and its interpolations answer
// finite, non-negative figures.
func FuzzProfileParse(f *testing.F) {
	f.Add(fixtureBytes(f))
	f.Add([]byte(`{"version":1,"engine":"mocker","model":"m","block_size":1,"tensor_parallel":[{"tensor_parallel_size":1,"kv_blocks":1,"max_num_seqs":1,"prefill":[{"isl":1,"ttft_ms":1,"tokens_per_s_per_gpu":1}],"decode":[{"context":1,"batch":1,"kv_usage":0,"itl_ms":1,"tokens_per_s_per_gpu":1}]}]}`))
	f.Add([]byte(`{"version":1}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatalf("a parsed profile does not encode: %v", err)
		}
		if _, err := ParseProfile(buf.Bytes()); err != nil {
			t.Fatalf("a re-encoded profile does not parse: %v", err)
		}
		for i := range p.Parallel {
			e := &p.Parallel[i]
			for _, x := range []float64{0, 1, 1000, 1e9} {
				for _, v := range []float64{e.TTFT(x), e.PrefillThroughput(x), e.ITL(0.5, x)} {
					if !(v >= 0) || math.IsInf(v, 0) {
						t.Fatalf("interpolation at %v gave %v", x, v)
					}
				}
				if tput, _ := e.DecodeThroughput(p.BlockSize, 50, x); !(tput >= 0) || math.IsInf(tput, 0) {
					t.Fatalf("DecodeThroughput at context %v: %v", x, tput)
				}
			}
		}
	})
}

// LoadProfile refuses what is not a regular file at once: a FIFO nobody writes to must
// not hang it.
func TestLoadProfileRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadProfile(path)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("LoadProfile(FIFO) = %v, want a not-a-regular-file error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LoadProfile of a FIFO did not return within 5 s")
	}
}
