package mocker

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/planner"
)

// startMocker runs `turbine mocker` with args in this process and returns its base URL
// and ready line; the engine stops at the end of the test.
func startMocker(t *testing.T, args ...string) (string, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, append([]string{"--port", "0", "--log-format", "json", "--served-model-name", "m"}, args...), io.Discard, logs)
	}()
	ready := waitReady(t, logs, errc)
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	return fmt.Sprintf("http://127.0.0.1:%d", int(ready["port"].(float64))), ready
}

// uniquePrompt is n random token ids: no two prompts share a KV block.
func uniquePrompt(rng *rand.Rand, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = 1000 + uint32(rng.IntN(90000))
	}
	return p
}

// TestProfileReproducedOverHTTP: `turbine mocker --profile FILE --tensor-parallel-size 2`
// takes the profile's TP-2 entry — its KV blocks, block size and max sequences, and its
// times as they are — and its HTTP API reproduces the entry's TTFT (a prompt alone on
// the idle engine) and ITL (a batch decoding together) within 10 %. A busy machine only
// ever adds time (an engine never ends a step before its modelled end), so each figure
// is the least of several samples: TTFT per request, less what HTTP and the engine loop
// add (the least TTFT of the same prompt length on a second engine a million times
// faster, whose modelled time vanishes, sampled three times for each TTFT sample, in
// turn with the first), and ITL as a request's mean gap (its last token's time less its
// second's, over the gaps between), which a client that reads two frames at once does
// not shorten.
func TestProfileReproducedOverHTTP(t *testing.T) {
	prof, err := planner.LoadProfile("testdata/profile.json")
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := prof.ForTP(2)
	base, ready := startMocker(t, "--profile", "testdata/profile.json", "--tensor-parallel-size", "2", "--max-model-len", "4096")
	if ready["num_gpu_blocks"] != float64(8192) || ready["block_size"] != float64(16) || ready["max_num_seqs"] != float64(32) ||
		ready["tensor_parallel_size"] != float64(2) || ready["profile"] != "testdata/profile.json" {
		t.Fatalf("ready line %v: want the TP-2 entry's 8192 blocks of 16 tokens, 32 sequences", ready)
	}
	fastBase, _ := startMocker(t, "--profile", "testdata/profile.json", "--tensor-parallel-size", "2", "--max-model-len", "4096",
		"--speedup-ratio", "1e6")
	c, fast := &bench.Client{URL: base, Model: "m"}, &bench.Client{URL: fastBase, Model: "m"}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(what string, samples []float64, want float64) {
		t.Helper()
		got := slices.Min(samples)
		if got < 0.98*want || got > 1.1*want {
			t.Errorf("%s: %.1f ms (least of %.1f), profile %.1f ms: want within -2 %% and +10 %%", what, got, samples, want)
		}
	}
	for _, isl := range []int{512, 2048} {
		// Three overhead samples per TTFT sample: the overhead is a least too, and a busy
		// machine that inflates all of few samples would take too much off every TTFT.
		var ttft, overhead []float64
		for range 5 {
			for _, x := range []struct {
				c   *bench.Client
				out *[]float64
			}{{c, &ttft}, {fast, &overhead}, {fast, &overhead}, {fast, &overhead}} {
				r := x.c.Do(ctx, time.Now(), uniquePrompt(rng, isl), 1)
				if r.Error != "" {
					t.Fatalf("ISL %d: %s %s", isl, r.Error, r.Detail)
				}
				*x.out = append(*x.out, float64(r.TTFT)/float64(time.Millisecond))
			}
		}
		o := slices.Min(overhead)
		for i := range ttft {
			ttft[i] -= o
		}
		check(fmt.Sprintf("TTFT at ISL %d (less %.2f ms of overhead)", isl, o), ttft, ep.TTFT(float64(isl)))
	}
	for _, pt := range []struct{ context, batch, repeats int }{{256, 1, 4}, {1024, 8, 2}} {
		const out = 12
		var mu sync.Mutex
		var itl []float64
		for range pt.repeats {
			var wg sync.WaitGroup
			for range pt.batch {
				p := uniquePrompt(rng, pt.context-out/2)
				wg.Go(func() {
					r := c.Do(ctx, time.Now(), p, out)
					mu.Lock()
					defer mu.Unlock()
					if r.Error != "" || len(r.ITL) != out-1 {
						t.Errorf("context %d: %d gaps, %s %s", pt.context, len(r.ITL), r.Error, r.Detail)
						return
					}
					var sum time.Duration
					for _, g := range r.ITL[1:] { // the first gap may hold the last admissions' prefill
						sum += g
					}
					itl = append(itl, float64(sum)/float64(len(r.ITL)-1)/float64(time.Millisecond))
				})
			}
			wg.Wait()
		}
		usage := float64(pt.batch*((pt.context+15)/16)) / float64(ep.KVBlocks)
		check(fmt.Sprintf("ITL at context %d, batch %d", pt.context, pt.batch), itl, ep.ITL(usage, float64(pt.context)))
	}
}

// TestTensorParallelFlags: --tensor-parallel-size multiplies the default KV blocks (not
// given ones), and bad combinations with --profile are refused naming the flag.
func TestTensorParallelFlags(t *testing.T) {
	_, ready := startMocker(t, "--tensor-parallel-size", "4")
	if ready["num_gpu_blocks"] != float64(4*16384) || ready["tensor_parallel_size"] != float64(4) {
		t.Fatalf("TP 4 ready line %v: want 65536 blocks", ready)
	}
	_, ready = startMocker(t, "--tensor-parallel-size", "4", "--num-gpu-blocks-override", "1000", "--max-model-len", "4096")
	if ready["num_gpu_blocks"] != float64(1000) {
		t.Fatalf("TP 4 with blocks given, ready line %v: want 1000 blocks", ready)
	}
	t.Setenv("TURBINE_NUM_GPU_BLOCKS_OVERRIDE", "2000")
	_, ready = startMocker(t, "--tensor-parallel-size", "2", "--max-model-len", "4096")
	if ready["num_gpu_blocks"] != float64(2000) {
		t.Fatalf("TP 2 with blocks from the environment, ready line %v: want 2000 blocks", ready)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--profile", "testdata/missing.json"}, "--profile testdata/missing.json: planner: profile: open testdata/missing.json"},
		{[]string{"--profile", "testdata/profile.json", "--tensor-parallel-size", "4"}, "tensor-parallel size 4 not in the profile (profiled: [1 2])"},
		{[]string{"--profile", "testdata/profile.json", "--block-size", "64"}, "--block-size 64 differs from the profile's block_size 16"},
		{[]string{"--tensor-parallel-size", "65"}, "--tensor-parallel-size 65: want 1..64"},
		{[]string{"--tensor-parallel-size", "-1"}, "--tensor-parallel-size -1: want 1..64"},
	} {
		err := Run(context.Background(), append([]string{"--port", "0"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
