package kv

import (
	"fmt"
	"testing"
	"time"
)

// adapterMs returns the adapter_ms term of the explained candidate w of d (0: none).
func adapterMs(t *testing.T, d Decision, w string) float64 {
	t.Helper()
	for _, c := range d.Candidates {
		if c.WorkerID != w {
			continue
		}
		for _, term := range c.Terms {
			if term.Name == "adapter_ms" {
				return term.Value
			}
		}
		return 0
	}
	t.Fatalf("no candidate %s in %+v", w, d.Candidates)
	return 0
}

// The adapter term of a worker that must load: the load; twice over when it evicts; plus
// a decode's wait when every unpinned adapter there is in use by a running request; and
// a worker that has measured no load time is assumed to take the fleet's mean, not the
// configured default.
func TestAdapterCostTerms(t *testing.T) {
	const block = 16
	prompt := make([]uint32, 2*block)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	for _, tc := range []struct {
		name string
		// w1's registration, and the requests routed before the one explained (each pinned
		// to w1 with its adapter; freed at once unless running).
		w1Known, w1Held []AdapterSpec
		w1LoadMs        float64
		before          []string
		running         bool
		want            float64
	}{
		{name: "free slot, fleet mean", w1Known: []AdapterSpec{{Name: "b", Path: "/b"}}, want: 40},
		{name: "free slot, own measure", w1Known: []AdapterSpec{{Name: "b", Path: "/b"}}, w1LoadMs: 10, want: 10},
		{name: "evicts an idle adapter", w1Known: []AdapterSpec{{Name: "b", Path: "/b"}},
			w1Held: []AdapterSpec{{Name: "a", Path: "/a"}, {Name: "c", Path: "/c"}}, before: []string{"a"}, want: 80},
		{name: "waits for a running adapter", w1Known: []AdapterSpec{{Name: "b", Path: "/b"}},
			w1Held: []AdapterSpec{{Name: "a", Path: "/a"}, {Name: "c", Path: "/c"}}, before: []string{"a", "c"}, running: true,
			want: 80 + defaultDecodeTokens*DefaultProfile().DecodeMs(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRouter(Config{BlockSize: block, Policy: PolicyTTFT, LoraLoadMs: 500})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			must := func(_ bool, err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			// w0 measured 40 ms and holds b: the fleet's mean for w1, which measured none.
			must(r.Register(WorkerSpec{ID: "w0", BlockSize: block, TotalBlocks: 1000, Ready: true, Epoch: 1,
				MaxLoras: 2, LoraLoadMs: 40, Adapters: []AdapterSpec{{Name: "b", Path: "/b"}}}))
			must(r.Register(WorkerSpec{ID: "w1", BlockSize: block, TotalBlocks: 1000, Ready: true, Epoch: 1,
				MaxLoras: 2, LoraLoadMs: tc.w1LoadMs, Adapters: tc.w1Held, KnownAdapters: tc.w1Known}))
			for i, a := range tc.before {
				id := fmt.Sprint("before", i)
				now = now.Add(time.Second)
				if _, err := r.Route(RouteInput{RequestID: id, Tokens: prompt, LoraName: a, PinWorker: "w1"}, now, nil); err != nil {
					t.Fatal(err)
				}
				if !tc.running {
					r.Free(id)
				}
			}
			d, err := r.Route(RouteInput{RequestID: "x", Tokens: prompt, LoraName: "b", Explain: true}, now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := adapterMs(t, d, "w1"); got != tc.want {
				t.Fatalf("adapter_ms of w1 = %v, want %v", got, tc.want)
			}
			if got := adapterMs(t, d, "w0"); got != 0 {
				t.Fatalf("adapter_ms of w0, which holds b = %v, want 0", got)
			}
		})
	}
}

// A request's adapter is in use on its worker (and its prefill leg's) until it is freed,
// whichever way: Free, expiry, the worker's removal.
func TestAdapterInUseUntilFreed(t *testing.T) {
	a := NewActiveSequences(time.Minute)
	now := time.Unix(1000, 0)
	a.Add("r1", 0, []uint64{1, 2}, 32, now)
	a.SetAdapter("r1", "sql")
	a.SetAdapter("r1", "other") // a second call is ignored
	a.Add("r2", 0, []uint64{1, 3}, 32, now)
	a.SetAdapter("r2", "sql")
	if !a.AdapterInUse(0, "sql") || a.AdapterInUse(0, "other") || a.AdapterInUse(1, "sql") {
		t.Fatal("in use: want sql on worker 0 only")
	}
	a.Free("r1")
	if !a.AdapterInUse(0, "sql") {
		t.Fatal("r2 still runs with sql")
	}
	a.Expire(now.Add(2 * time.Minute))
	if a.AdapterInUse(0, "sql") {
		t.Fatal("expired: sql should be free")
	}
	a.Add("r3", 1, []uint64{4}, 16, now)
	a.SetAdapter("r3", "sql")
	a.RemoveWorker(1)
	if a.AdapterInUse(1, "sql") {
		t.Fatal("worker removed: sql should be free")
	}
}
