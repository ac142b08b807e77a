package kvbmtier

import (
	"context"
	"net"
	"testing"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/kvbm/resp"
)

// The same tier against Turbine's own block manager (kvbm/resp over a kvbm.Store): the
// offloaded blocks enter the store's inventory under their block keys, in host memory.
func TestTierAgainstKvbm(t *testing.T) {
	st, err := kvbm.Open(kvbm.Config{HostBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := resp.New(st, resp.Options{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	ctx := context.Background()
	const bb = 1 << 20
	tier, err := Dial(ctx, Options{URL: "resp://" + l.Addr().String(), Model: "m", BlockBytes: bb})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for _, h := range []uint64{10, 11, 12} {
		tier.Offload(h)
	}
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tier.Match([]uint64{10, 11, 12, 13}); len(got) != 3 {
		t.Fatalf("Match = %v, want 3 blocks", got)
	}
	if n := tier.Onboard([]uint64{10, 11, 12}); n != 3 {
		t.Fatalf("Onboard read %d, want 3", n)
	}
	changes, _ := st.Changes(nil)
	held := map[uint64]kv.Tier{}
	for _, c := range changes {
		model, h, ok := kvbm.ParseBlockKey(c.Key)
		if !ok || model != "m" {
			t.Fatalf("inventory key %q is not a block key of m", c.Key)
		}
		if !c.Removed {
			held[h] = c.Tier
		}
	}
	if len(held) != 3 || held[11] != kv.TierHost {
		t.Fatalf("inventory %v, want blocks 10, 11, 12 in host memory", held)
	}
	if s := tier.Stats(); s.Offloaded != 3 || s.Onboarded != 3 || s.OnboardedBytes != 3*bb || s.ReadErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}
