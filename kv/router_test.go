package kv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// runRouterOps drives a Router with arbitrary registrations, batches (any epoch and
// seq), dump parts, routes, frees and removals, and checks after every call that the
// internal invariants hold, that no call panics, and that the load tracking agrees
// with the requests the test believes active.
func runRouterOps(t testing.TB, c chooser, steps int, stop func() bool) {
	const bs = 4
	cfg := DefaultConfig(bs)
	cfg.MaxBufferedBatches = 3
	cfg.MaxSequenceAge = 50 * time.Second
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := newStreamGen(bs, 3, 4)
	m := newModel(bs) // only a source of plausible parents for the generator
	names := []string{"w0", "w1", "w2"}
	rng := rand.New(rand.NewPCG(1, 1))
	now := t0
	for step := 0; step < steps && (stop == nil || !stop()); step++ {
		name := names[c.IntN(len(names))]
		switch op := c.IntN(12); {
		case op < 2:
			_, err := r.Register(WorkerSpec{ID: name, BlockSize: bs, TotalBlocks: int64(c.IntN(40)),
				Ready: c.IntN(4) != 0, Epoch: uint64(c.IntN(3)), LastSeq: uint64(c.IntN(4))})
			if err != nil {
				t.Fatalf("step %d: register: %v", step, err)
			}
		case op < 6:
			var evs []Event
			for i := 0; i < 1+c.IntN(3); i++ {
				w, ev := g.next(c, m)
				_ = m.apply(w, ev)
				evs = append(evs, ev)
			}
			_, err := r.ApplyBatch(name, uint64(c.IntN(3)), uint64(c.IntN(8)), evs)
			if err != nil && !errors.Is(err, ErrUnknownWorker) && !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("step %d: batch: %v", step, err)
			}
		case op < 7:
			var evs []Event
			for i := 0; i < c.IntN(3); i++ {
				w, ev := g.next(c, m)
				_ = m.apply(w, ev)
				evs = append(evs, ev)
			}
			_, err := r.ApplyDump(name, uint64(c.IntN(3)), uint64(c.IntN(8)), evs, c.IntN(3), c.IntN(2) == 0)
			if err != nil && !errors.Is(err, ErrUnknownWorker) && !errors.Is(err, ErrInvalidEvent) &&
				!errors.Is(err, ErrDumpOrder) && !errors.Is(err, ErrUnknownParent) {
				t.Fatalf("step %d: dump: %v", step, err)
			}
		case op < 10:
			toks, lora := g.probe(c)
			in := RouteInput{RequestID: fmt.Sprint("r", c.IntN(8)), Tokens: toks, LoraName: lora, WillAck: c.IntN(2) == 0}
			if c.IntN(3) == 0 {
				in.Exclude = []string{names[c.IntN(3)]}
			}
			if c.IntN(3) == 0 {
				in.HasTemperature, in.Temperature = true, 0.5
			}
			_, err := r.Route(in, now, rng)
			if err != nil && !errors.Is(err, ErrNoWorkers) && !errors.Is(err, ErrAllBusy) {
				t.Fatalf("step %d: route: %v", step, err)
			}
		case op < 11:
			id := fmt.Sprint("r", c.IntN(8))
			switch c.IntN(3) {
			case 0:
				r.PrefillDone(id)
			case 1:
				r.Ack(id)
			default:
				r.Free(id)
			}
		default:
			switch c.IntN(3) {
			case 0:
				_, _ = r.RemoveWorker(name)
			case 1:
				now = now.Add(time.Duration(c.IntN(40)) * time.Second)
				r.Expire(now)
			default:
				_ = r.SetBusyThresholds(BusyThresholds{KVUsage: float64(c.IntN(3)) / 4, PrefillTokens: int64(c.IntN(3) * 8)})
			}
		}
		if err := checkIndexInvariants(r.index); err != nil {
			t.Fatalf("step %d: index: %v", step, err)
		}
		if err := checkActiveInvariants(r.active); err != nil {
			t.Fatalf("step %d: load tracking: %v", step, err)
		}
		if err := checkAckInvariants(r); err != nil {
			t.Fatalf("step %d: acknowledgements: %v", step, err)
		}
		st := r.Stats()
		sum := 0
		for _, ws := range st.Workers {
			sum += ws.ActiveRequests
			if ws.ActiveBlocks < 0 || ws.ActivePrefillTokens < 0 {
				t.Fatalf("step %d: negative load %+v", step, ws)
			}
		}
		if sum != st.ActiveRequests {
			t.Fatalf("step %d: workers carry %d requests, %d active", step, sum, st.ActiveRequests)
		}
	}
	for _, name := range names {
		_, _ = r.RemoveWorker(name)
	}
	if st := r.Stats(); st.ActiveRequests != 0 || st.IndexNodes != 0 || r.active.Blocks() != 0 {
		t.Fatalf("after removing every worker: %+v, %d active blocks", st, r.active.Blocks())
	}
	if r.Expire(now.Add(cfg.MaxUnackedAge + time.Second)); len(r.awaiting) != 0 || len(r.ackQueue.items) != 0 {
		t.Fatalf("after expiry: %d awaiting, %d queued", len(r.awaiting), len(r.ackQueue.items))
	}
}

func TestRouterRandomOps(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			runRouterOps(t, rand.New(rand.NewPCG(seed, 5)), 2000, nil)
		})
	}
}

func FuzzRouter(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 3; i++ {
		b := make([]byte, 300)
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &byteChooser{b: data}
		runRouterOps(t, c, 300, c.done)
	})
}

func TestRouterConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		is   error
		msg  string
	}{
		{"block size", func(c *Config) { c.BlockSize = 0 }, ErrInvalidConfig, "BlockSize 0"},
		{"weight", func(c *Config) { c.OverlapWeight = -1 }, ErrInvalidConfig, "OverlapWeight -1"},
		{"temperature", func(c *Config) { c.Temperature = -0.5 }, ErrInvalidConfig, "Temperature -0.5"},
		{"policy", func(c *Config) { c.Policy = "nope" }, ErrUnknownPolicy, `Policy: kv: unknown routing policy: "nope"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(16)
			tc.mod(&cfg)
			_, err := NewRouter(cfg)
			if !errors.Is(err, tc.is) || !containsStr(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
	r, _ := NewRouter(DefaultConfig(16))
	if _, err := r.Route(RouteInput{}, t0, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty request id: %v", err)
	}
	if _, err := r.Route(RouteInput{RequestID: "x", HasOverlapWeight: true, OverlapWeight: -1}, t0, nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("negative weight override: %v", err)
	}
	if _, err := r.Route(RouteInput{RequestID: "x"}, t0, nil); !errors.Is(err, ErrNoWorkers) {
		t.Fatalf("no workers: %v", err)
	}
	if _, err := r.Register(WorkerSpec{ID: "w", BlockSize: 64}); !errors.Is(err, ErrBlockSizeMismatch) ||
		err.Error() != `kv: KV block size mismatch: worker "w" uses KV block size 64, the router uses 16` {
		t.Fatalf("block size mismatch: %v", err)
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
