package mocker

import (
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/kv"
)

// TestCacheSalt: the same prompt under two salts shares no cached block; under one salt
// it does; the engine's salted BlockStored, applied to the router's index, gives the
// router the same hits as the engine's own cache.
func TestCacheSalt(t *testing.T) {
	e := newEngine(t, smallConfig())
	const bs = 4
	prompt := seqTokens(1, 13) // three full blocks and one token
	x := kv.NewIndex(bs)
	var cached []int
	for i, salt := range []string{"a", "b", "a", ""} {
		id := string(rune('p' + i))
		// What the router expects this request to find cached, before it runs.
		want := 0
		if ov := x.Overlaps(kv.AppendSaltedSequenceHashes(nil, prompt, bs, "", salt), nil); len(ov) > 0 {
			want = min(int(ov[0]), (len(prompt)-1)/bs) * bs // the engine computes one token at least
		}
		mustAdd(t, e, Request{ID: id, Prompt: prompt, MaxTokens: 1, IgnoreEOS: true, CacheSalt: salt})
		rr := run(t, e, t0)
		got := rr.last[id].CachedTokens
		if got != want {
			t.Errorf("salt %q: engine found %d tokens cached, the router's index %d", salt, got, want)
		}
		cached = append(cached, got)
		for _, ev := range rr.events {
			if ev.Kind == kv.BlockStored && !ev.HasParent && ev.CacheSalt != salt {
				t.Errorf("salt %q: BlockStored carries salt %q", salt, ev.CacheSalt)
			}
			if err := x.Apply(0, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a: cold; b: another salt, cold; a again: its three full blocks; no salt: cold.
	if want := []int{0, 0, 12, 0}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens %v, want %v", cached, want)
	}
}

// TestAllowedTokenIDs: every drawn token is in the list, and EOS ends the request only
// when it is in the list.
func TestAllowedTokenIDs(t *testing.T) {
	e := newEngine(t, smallConfig())
	allowed := []uint32{105, 107, 300} // 300 is not an ordinary word: allowed all the same
	mustAdd(t, e, Request{ID: "a", Prompt: seqTokens(1, 5), MaxTokens: 64, AllowedTokenIDs: allowed})
	mustAdd(t, e, Request{ID: "b", Prompt: seqTokens(1, 5), MaxTokens: 64, AllowedTokenIDs: append(allowed, 2)})
	rr := run(t, e, t0)
	for _, tok := range rr.tokens["a"] {
		if !slices.Contains(allowed, tok) {
			t.Fatalf("a: token %d not allowed (%v)", tok, rr.tokens["a"])
		}
	}
	if o := rr.last["a"]; o.FinishReason != FinishLength || len(rr.tokens["a"]) != 64 {
		t.Fatalf("a: %d tokens, finish %s; EOS is not allowed, so it runs to max_tokens", len(rr.tokens["a"]), o.FinishReason)
	}
	seen := map[uint32]bool{}
	for _, tok := range rr.tokens["a"] {
		seen[tok] = true
	}
	if len(seen) != len(allowed) {
		t.Errorf("a: drew %v of %v", seen, allowed)
	}
	if o := rr.last["b"]; o.FinishReason != FinishStop || len(rr.tokens["b"]) == 64 {
		t.Fatalf("b: EOS allowed, but %d tokens, finish %s", len(rr.tokens["b"]), o.FinishReason)
	}
}

// TestLogitBias: +100 forces a token, -100 bans one, and the same request draws the
// same tokens (the bias is part of the deterministic draw).
func TestLogitBias(t *testing.T) {
	e := newEngine(t, smallConfig())
	plain := Request{ID: "plain", Prompt: seqTokens(1, 5), MaxTokens: 32, IgnoreEOS: true}
	mustAdd(t, e, plain)
	rr := run(t, e, t0)
	drawn := rr.tokens["plain"]
	banned := drawn[0]

	forced := plain
	forced.ID, forced.LogitBias = "forced", map[uint32]float64{108: 100, 101: 50}
	ban := plain
	ban.ID, ban.LogitBias = "ban", map[uint32]float64{banned: -100}
	half := plain
	half.ID, half.LogitBias = "half", map[uint32]float64{104: 50}
	for _, r := range []Request{forced, ban, half} {
		mustAdd(t, e, r)
	}
	rr = run(t, e, rr.end)
	for _, tok := range rr.tokens["forced"] {
		if tok != 108 {
			t.Fatalf("forced: %v, want only 108", rr.tokens["forced"])
		}
	}
	if slices.Contains(rr.tokens["ban"], banned) || len(rr.tokens["ban"]) != 32 {
		t.Fatalf("ban: %v contains banned %d", rr.tokens["ban"], banned)
	}
	n := 0
	for _, tok := range rr.tokens["half"] {
		if tok == 104 {
			n++
		}
	}
	if n < 4 || n > 28 {
		t.Errorf("half: 104 drawn %d times of 32 with bias +50", n)
	}
	mustAdd(t, e, Request{ID: "again", Prompt: half.Prompt, MaxTokens: 32, IgnoreEOS: true, LogitBias: half.LogitBias})
	if again := run(t, e, rr.end).tokens["again"]; !slices.Equal(again, rr.tokens["half"]) {
		t.Fatalf("same request, different tokens: %v then %v", rr.tokens["half"], again)
	}
	// EOS at -100 never ends a request.
	mustAdd(t, e, Request{ID: "noeos", Prompt: seqTokens(1, 5), MaxTokens: 100, LogitBias: map[uint32]float64{2: -100}})
	if rr := run(t, e, t0); rr.last["noeos"].FinishReason != FinishLength {
		t.Fatalf("EOS banned, finish %s after %d tokens", rr.last["noeos"].FinishReason, len(rr.tokens["noeos"]))
	}
}
