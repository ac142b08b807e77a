package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/bench"
	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/kv"
)

// slowerPrefill is a timing model whose prefill steps take factor times the reference
// ones; decode steps are the reference's.
type slowerPrefill struct{ factor float64 }

func (s slowerPrefill) PrefillMillis(t int) float64 { return s.factor * mocker.PrefillMillis(t) }
func (s slowerPrefill) DecodeMillis(u, _ float64) float64 {
	return mocker.DecodeMillis(u)
}

// TestPrefillEngine: prefill workers run Config.PrefillEngine (its timing, its KV
// blocks as registered with the router), decode workers Engine.
func TestPrefillEngine(t *testing.T) {
	eng := smallEngine()
	sp := eng.SpeedupRatio
	pre := eng
	pre.Timing = slowerPrefill{3}
	pre.NumGPUBlocks = 512
	const kvBytes = 131072
	transfer := ms(float64(2000*kvBytes)/(DefaultTransferBandwidth*sp)*1000, 1)
	req := bench.Request{InputLength: 2000, OutputLength: 3, HashIDs: []int64{1, 2, 3, 4}}
	cfg := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, PrefillEngine: pre, BlockTokens: 512, KVBytesPerToken: kvBytes}
	s, err := newSimulator(cfg, []bench.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, st := s.outcome()
	r := out.Results[0]
	if r.Error != "" || st.Decisions[kv.DisaggRemote] != 1 {
		t.Fatalf("result %+v, decisions %v: want a remote prefill", r, st.Decisions)
	}
	// Prefill worker: chunks of 512, 512, 512 and 464 tokens at three times the reference
	// time; the transfer; the decode worker's last prompt token at the reference time.
	want := 3*ms(3*mocker.PrefillMillis(512), sp) + ms(3*mocker.PrefillMillis(464), sp) + transfer + ms(mocker.PrefillMillis(1), sp)
	if d := r.TTFT - want; d < -2 || d > 2 { // nanoseconds of rounding
		t.Errorf("TTFT %v, want %v (the prefill engine's timing)", r.TTFT, want)
	}
	if s.workers[1].role != kv.RolePrefill || s.workerSpec(s.workers[1]).TotalBlocks != 512 || s.workerSpec(s.workers[0]).TotalBlocks != 256 {
		t.Errorf("registered blocks: prefill %d, decode %d; want 512, 256",
			s.workerSpec(s.workers[1]).TotalBlocks, s.workerSpec(s.workers[0]).TotalBlocks)
	}

	t.Run("zero value is Engine", func(t *testing.T) {
		c, err := Config{Workers: 1, PrefillWorkers: 1, Engine: eng, Seed: 3}.normalize()
		if err != nil || c.PrefillEngine != c.Engine || c.PrefillEngine.Seed != 3 {
			t.Fatalf("err %v, PrefillEngine %+v, Engine %+v", err, c.PrefillEngine, c.Engine)
		}
	})
	for _, tc := range []struct {
		name string
		edit func(*mocker.Config)
		want string
	}{
		{"block size", func(c *mocker.Config) { c.BlockSize = 32 }, "PrefillEngine: BlockSize 32"},
		{"context", func(c *mocker.Config) { c.MaxModelLen = 2048 }, "must equal Engine's"},
		{"speedup", func(c *mocker.Config) { c.SpeedupRatio = 1 }, "must equal Engine's"},
		{"invalid", func(c *mocker.Config) { c.MaxNumSeqs = 0 }, "PrefillEngine: mocker: --max-num-seqs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pre
			tc.edit(&p)
			_, _, err := Run(context.Background(), Config{Workers: 1, PrefillWorkers: 1, Engine: eng, PrefillEngine: p}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("memory counts each pool's blocks", func(t *testing.T) {
		p := pre
		p.NumGPUBlocks = mocker.MaxNumGPUBlocks // within the engine's bound, over a 1 GiB memory limit
		_, _, err := Run(context.Background(), Config{Workers: 1, PrefillWorkers: 1, Engine: eng, PrefillEngine: p, MemoryLimit: 1 << 30}, nil)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("PrefillEngine.NumGPUBlocks %d", mocker.MaxNumGPUBlocks)) {
			t.Fatalf("error %v: want the memory bound naming PrefillEngine.NumGPUBlocks", err)
		}
		c := Config{Workers: 3, PrefillWorkers: 2, Engine: eng, PrefillEngine: pre}
		c.PrefillEngine.Seed = 1
		if c.memoryEstimate() != MemoryEstimate(3, 256, 16)+MemoryEstimate(2, 512, 16) {
			t.Errorf("estimate %d, want the sum of the pools' %d", c.memoryEstimate(), MemoryEstimate(3, 256, 16)+MemoryEstimate(2, 512, 16))
		}
	})
}
