package mocker

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/kv"
)

func loraConfig(maxLoras int) Config {
	c := smallConfig()
	c.MaxLoras, c.MaxLoraRank, c.LoraLoadMillis, c.SpeedupRatio = maxLoras, 16, 50, 10
	return c
}

// TestLoadLora: loads are refused for every reason in the table, nothing changes then,
// and a load takes LoraLoadMillis divided by the speed-up ratio.
func TestLoadLora(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		before  []string // adapters loaded first
		load    Adapter
		wantErr error
	}{
		{"adapters off", loraConfig(0), nil, Adapter{Name: "a", Rank: 8}, ErrLoraOff},
		{"a name taken", loraConfig(2), []string{"a"}, Adapter{Name: "a", Rank: 8}, ErrLoraLoaded},
		{"every slot taken", loraConfig(2), []string{"a", "b"}, Adapter{Name: "c", Rank: 8}, ErrLoraSlots},
		{"rank above the limit", loraConfig(2), nil, Adapter{Name: "a", Rank: 17}, ErrLoraRank},
		{"rank 0", loraConfig(2), nil, Adapter{Name: "a"}, ErrLoraRank},
		{"the default rank limit", func() Config { c := loraConfig(1); c.MaxLoraRank = 0; return c }(), nil,
			Adapter{Name: "a", Rank: DefaultMaxLoraRank + 1}, ErrLoraRank},
		{"the rank limit", loraConfig(1), nil, Adapter{Name: "a", Path: "/p", Rank: 16}, nil},
		{"the last slot", loraConfig(2), []string{"x"}, Adapter{Name: "a", Rank: 1}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.cfg)
			for _, n := range tc.before {
				if _, _, err := e.LoadLora(Adapter{Name: n, Rank: 4}); err != nil {
					t.Fatal(err)
				}
			}
			before := e.Loras()
			got, d, err := e.LoadLora(tc.load)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("LoadLora(%+v) = %v, want %v", tc.load, err, tc.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), `"`+tc.load.Name+`"`) {
					t.Errorf("error %q does not name the adapter", err)
				}
				if !slices.Equal(e.Loras(), before) || e.Stats().LoraLoads != uint64(len(before)) {
					t.Fatalf("a refused load changed the adapters: %+v", e.Loras())
				}
				return
			}
			want := tc.load
			want.ID = len(before) + 1
			if got != want || d != 5*time.Millisecond {
				t.Fatalf("loaded %+v in %v, want %+v in 5ms (50 ms at speed-up 10)", got, d, want)
			}
			if a, ok := e.Lora(tc.load.Name); !ok || a != want || e.Stats().LoadedLoras != len(before)+1 {
				t.Fatalf("Lora(%q) = %+v %v", tc.load.Name, a, ok)
			}
		})
	}
}

// TestUnloadLora: an unload frees the slot and the name; ids are never reused; an
// unknown name is refused.
func TestUnloadLora(t *testing.T) {
	e := newEngine(t, loraConfig(1))
	if _, _, err := e.LoadLora(Adapter{Name: "a", Rank: 4}); err != nil {
		t.Fatal(err)
	}
	if err := e.UnloadLora("b"); !errors.Is(err, ErrLoraNotLoaded) {
		t.Fatalf("unload of an unknown adapter: %v", err)
	}
	if err := e.UnloadLora("a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Lora("a"); ok || len(e.Loras()) != 0 {
		t.Fatalf("unloaded adapter still there: %+v", e.Loras())
	}
	a, _, err := e.LoadLora(Adapter{Name: "a", Rank: 4})
	if err != nil || a.ID != 2 {
		t.Fatalf("reload: %+v %v, want id 2", a, err)
	}
	if st := e.Stats(); st.LoraLoads != 2 || st.LoraUnloads != 1 || st.LoadedLoras != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLoraChangesOutputAndBlocks: the same prompt and seed give the same tokens under the
// same adapter and different ones under the base model and another adapter; the blocks
// of one are no prefix hit for another, and BlockStored events carry the adapter.
func TestLoraChangesOutputAndBlocks(t *testing.T) {
	prompt := seqTokens(200, 12)
	gen := func(e *Engine, id, lora string, now time.Time) runResult {
		mustAdd(t, e, Request{ID: id, Prompt: prompt, MaxTokens: 8, IgnoreEOS: true, LoraName: lora})
		return run(t, e, now)
	}
	e := newEngine(t, loraConfig(2))
	outs := map[string][]uint32{}
	now := t0
	for _, c := range []struct{ id, lora string }{{"base", ""}, {"a", "a"}, {"b", "b"}} {
		rr := gen(e, c.id, c.lora, now)
		now = rr.end
		outs[c.id] = rr.tokens[c.id]
		if got := rr.last[c.id].CachedTokens; got != 0 {
			t.Errorf("%s: %d cached tokens from another adapter's blocks", c.id, got)
		}
		var stored []kv.Event
		for _, ev := range rr.events {
			if ev.Kind == kv.BlockStored {
				stored = append(stored, ev)
			}
		}
		if len(stored) == 0 || stored[0].LoraName != c.lora {
			t.Errorf("%s: BlockStored %+v, want lora_name %q", c.id, stored, c.lora)
		}
	}
	if slices.Equal(outs["base"], outs["a"]) || slices.Equal(outs["a"], outs["b"]) || slices.Equal(outs["base"], outs["b"]) {
		t.Fatalf("adapters answer alike: %v", outs)
	}
	again := gen(e, "a2", "a", now)
	if !slices.Equal(again.tokens["a2"], outs["a"]) || again.last["a2"].CachedTokens != 8 {
		t.Fatalf("adapter a again: %v (cached %d), want %v from its own blocks", again.tokens["a2"],
			again.last["a2"].CachedTokens, outs["a"])
	}
	// Another engine answers the same: the output is a function of the request alone.
	other := newEngine(t, loraConfig(2))
	if rr := gen(other, "b", "b", t0); !slices.Equal(rr.tokens["b"], outs["b"]) {
		t.Fatalf("adapter b on another engine: %v, want %v", rr.tokens["b"], outs["b"])
	}
}

// TestIdleLoraAndRequests: the adapter a load on demand may evict is the least recently
// used one that no waiting or running request names; the stats count each adapter's
// waiting and running requests.
func TestIdleLoraAndRequests(t *testing.T) {
	e := newEngine(t, loraConfig(3))
	if _, ok := e.IdleLora(); ok {
		t.Fatal("an idle adapter on an engine without adapters")
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, _, err := e.LoadLora(Adapter{Name: n, Rank: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if a, ok := e.IdleLora(); !ok || a.Name != "a" {
		t.Fatalf("idle %+v %v, want a (loaded first)", a, ok)
	}
	cfg := e.Config()
	cfg.MaxNumSeqs = 1
	e.cfg = cfg // one running request: the other waits
	mustAdd(t, e, Request{ID: "1", Prompt: seqTokens(300, 6), MaxTokens: 4, IgnoreEOS: true, LoraName: "a"})
	mustAdd(t, e, Request{ID: "2", Prompt: seqTokens(400, 6), MaxTokens: 4, IgnoreEOS: true, LoraName: "b"})
	if a, ok := e.IdleLora(); !ok || a.Name != "c" {
		t.Fatalf("idle %+v %v, want c (a and b are in use)", a, ok)
	}
	e.Step(t0)
	want := []LoraRequests{{Name: "a", Running: 1}, {Name: "b", Waiting: 1}}
	if got := e.Stats().LoraRequests; !slices.Equal(got, want) {
		t.Fatalf("lora requests %+v, want %+v", got, want)
	}
	mustAdd(t, e, Request{ID: "3", Prompt: seqTokens(500, 6), MaxTokens: 4, IgnoreEOS: true, LoraName: "c"})
	if _, ok := e.IdleLora(); ok {
		t.Fatal("an idle adapter while every adapter has a request")
	}
	e.Abort("3")
	run(t, e, t0)
	if got := e.Stats().LoraRequests; got != nil {
		t.Fatalf("lora requests after every request ended: %+v", got)
	}
	// c was named last (request 3), then a and b, in that order: a is the least recent.
	if a, ok := e.IdleLora(); !ok || a.Name != "a" {
		t.Fatalf("idle %+v %v, want a", a, ok)
	}
}

func TestConfigValidatesLora(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"negative slots", func(c *Config) { c.MaxLoras = -1 }, "--max-loras"},
		{"negative rank", func(c *Config) { c.MaxLoraRank = -1 }, "--max-lora-rank"},
		{"negative load time", func(c *Config) { c.LoraLoadMillis = -1 }, "--lora-load-ms"},
		{"infinite load time", func(c *Config) { c.LoraLoadMillis = math.Inf(1) }, "--lora-load-ms"},
		{"load time not a number", func(c *Config) { c.LoraLoadMillis = math.NaN() }, "--lora-load-ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.set(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
