package server

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/planner"
)

// testProfile is a profile of two tensor-parallel sizes whose figures are not the
// reference model's: TP 2 is not TP 1 divided by 2^0.8, so that a size applied twice
// shows. Decode points' KV usage is what batch sequences of context tokens hold in
// kv_blocks blocks of 16 tokens, as the mock engine counts it.
func testProfile() *planner.Profile {
	entry := func(tp, blocks int, ttft []float64, itl func(ctx, batch int) float64) planner.EngineProfile {
		e := planner.EngineProfile{TensorParallelSize: tp, KVBlocks: blocks, MaxNumSeqs: 32}
		for i, isl := range []int{64, 512, 2048} {
			e.Prefill = append(e.Prefill, planner.PrefillPoint{ISL: isl, TTFTMs: ttft[i], TokensPerSecPerGPU: float64(isl) / ttft[i] * 1000 / float64(tp)})
		}
		for _, ctx := range []int{256, 1024} {
			for _, b := range []int{1, 8, 32} {
				u := float64(b*((ctx+15)/16)) / float64(blocks)
				ms := itl(ctx, b)
				e.Decode = append(e.Decode, planner.DecodePoint{Context: ctx, Batch: b, KVUsage: u, ITLMs: ms, TokensPerSecPerGPU: float64(b) / ms * 1000 / float64(tp)})
			}
		}
		return e
	}
	return &planner.Profile{Version: planner.ProfileVersion, Engine: "mocker", Model: "m", BlockSize: 16,
		Parallel: []planner.EngineProfile{
			entry(1, 4096, []float64{30, 55, 140}, func(ctx, b int) float64 { return 15 + 0.01*float64(ctx) + 0.5*float64(b) }),
			entry(2, 8192, []float64{25, 40, 100}, func(ctx, b int) float64 { return 12 + 0.008*float64(ctx) + 0.3*float64(b) }),
		}}
}

func testVocab() mocker.Vocab {
	v := mocker.Vocab{EOS: []uint32{2}}
	for t := uint32(100); t < 200; t++ {
		v.Ordinary = append(v.Ordinary, t)
	}
	return v
}

// TestResolveParallel: the limits and timing a size and a profile give, flags given
// explicitly kept.
func TestResolveParallel(t *testing.T) {
	prof := testProfile()
	for _, tc := range []struct {
		name                  string
		tp                    int
		prof                  *planner.Profile
		given                 Given
		blockSize             int // before
		wantBlocks, wantSeqs  int
		wantBlockSize         int
		wantProfileTP, wantKV int // the entry used (0: none)
		wantErr               string
	}{
		{name: "one GPU, reference", tp: 0, blockSize: 64, wantBlocks: 16384, wantSeqs: 256, wantBlockSize: 64},
		{name: "TP 4, reference: four times the blocks", tp: 4, blockSize: 64, wantBlocks: 65536, wantSeqs: 256, wantBlockSize: 64},
		{name: "TP 4, blocks given", tp: 4, blockSize: 64, given: Given{NumGPUBlocks: true}, wantBlocks: 16384, wantSeqs: 256, wantBlockSize: 64},
		{name: "profile TP 1 (size 0)", tp: 0, prof: prof, blockSize: 64, wantBlocks: 4096, wantSeqs: 32, wantBlockSize: 16, wantProfileTP: 1},
		{name: "profile TP 2: its blocks as they are", tp: 2, prof: prof, blockSize: 64, wantBlocks: 8192, wantSeqs: 32, wantBlockSize: 16, wantProfileTP: 2},
		{name: "profile, limits given", tp: 2, prof: prof, blockSize: 16, given: Given{BlockSize: true, NumGPUBlocks: true, MaxNumSeqs: true},
			wantBlocks: 16384, wantSeqs: 256, wantBlockSize: 16, wantProfileTP: 2},
		{name: "profile lacks the size", tp: 4, prof: prof, blockSize: 64, wantErr: "--tensor-parallel-size 4: planner: tensor-parallel size 4 not in the profile (profiled: [1 2])"},
		{name: "block size differs", tp: 1, prof: prof, blockSize: 64, given: Given{BlockSize: true}, wantErr: "--block-size 64 differs from the profile's block_size 16"},
		{name: "size out of range", tp: 65, blockSize: 64, wantErr: "--tensor-parallel-size 65: want 1..64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mocker.DefaultConfig()
			e.TensorParallelSize, e.BlockSize = tc.tp, tc.blockSize
			ep, err := ResolveParallel(&e, tc.prof, tc.given)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.NumGPUBlocks != tc.wantBlocks || e.MaxNumSeqs != tc.wantSeqs || e.BlockSize != tc.wantBlockSize {
				t.Fatalf("blocks %d, seqs %d, block size %d; want %d, %d, %d", e.NumGPUBlocks, e.MaxNumSeqs, e.BlockSize,
					tc.wantBlocks, tc.wantSeqs, tc.wantBlockSize)
			}
			switch {
			case tc.wantProfileTP == 0 && (ep != nil || e.Timing != nil):
				t.Fatalf("entry %v, timing %v: want the reference timing", ep, e.Timing)
			case tc.wantProfileTP != 0 && (ep == nil || ep.TensorParallelSize != tc.wantProfileTP || e.Timing == nil):
				t.Fatalf("entry %+v, timing %v: want TP %d's", ep, e.Timing, tc.wantProfileTP)
			}
		})
	}
}

// TestProfileReproducedOnVirtualClock: a mock engine core given a profile's entry
// reproduces that entry's TTFT at every prefill point (a prompt alone on an idle engine)
// and its ITL at every decode point (a batch of sequences of that context decoding
// together), within 10 %, at both profiled sizes and at a speedup.
func TestProfileReproducedOnVirtualClock(t *testing.T) {
	prof := testProfile()
	for _, tp := range []int{1, 2} {
		for _, speedup := range []float64{1, 20} {
			cfg := mocker.DefaultConfig()
			cfg.TensorParallelSize, cfg.SpeedupRatio, cfg.EnablePrefixCaching = tp, speedup, false
			ep, err := ResolveParallel(&cfg, prof, Given{})
			if err != nil {
				t.Fatal(err)
			}
			scale := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) * speedup }
			seq := 0
			prompt := func(n int) []uint32 {
				seq++
				out := make([]uint32, n)
				for i := range out {
					out[i] = uint32(1000 + (seq*7919+i*31)%90000)
				}
				return out
			}
			for _, pt := range ep.Prefill {
				eng, err := mocker.New(cfg, testVocab())
				if err != nil {
					t.Fatal(err)
				}
				if err := eng.Add(mocker.Request{ID: "p", Prompt: prompt(pt.ISL), MaxTokens: 1, IgnoreEOS: true}); err != nil {
					t.Fatal(err)
				}
				now, start := time.Unix(0, 0), time.Unix(0, 0)
				for eng.HasWork() {
					now = eng.Step(now).End
				}
				if got := scale(now.Sub(start)); math.Abs(got-pt.TTFTMs) > 0.1*pt.TTFTMs {
					t.Errorf("TP %d ×%g: TTFT at ISL %d = %.2f ms, profile %.2f", tp, speedup, pt.ISL, got, pt.TTFTMs)
				}
			}
			const window = 16
			for _, pt := range ep.Decode {
				eng, err := mocker.New(cfg, testVocab())
				if err != nil {
					t.Fatal(err)
				}
				// Prompts end window/2 tokens short of the context, so that the window's
				// mean context is the point's.
				for i := range pt.Batch {
					r := mocker.Request{ID: fmt.Sprint(i), Prompt: prompt(pt.Context - window/2), MaxTokens: window + 1, IgnoreEOS: true}
					if err := eng.Add(r); err != nil {
						t.Fatal(err)
					}
				}
				now := time.Unix(0, 0)
				var gaps []float64
				for eng.HasWork() {
					res := eng.Step(now)
					if res.PrefillTokens == 0 && res.DecodeSeqs == pt.Batch {
						gaps = append(gaps, scale(res.Duration))
					}
					now = res.End
				}
				if len(gaps) < window/2 {
					t.Fatalf("TP %d: context %d batch %d: %d steady decode steps", tp, pt.Context, pt.Batch, len(gaps))
				}
				var sum float64
				for _, g := range gaps {
					sum += g
				}
				if got := sum / float64(len(gaps)); math.Abs(got-pt.ITLMs) > 0.1*pt.ITLMs {
					t.Errorf("TP %d ×%g: ITL at context %d batch %d = %.2f ms, profile %.2f", tp, speedup, pt.Context, pt.Batch, got, pt.ITLMs)
				}
			}
		}
	}
}
