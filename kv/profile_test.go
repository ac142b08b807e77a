package kv

import (
	"errors"
	"math"
	"testing"
)

func TestProfileValidate(t *testing.T) {
	mod := func(f func(p *Profile)) Profile {
		p := DefaultProfile()
		f(&p)
		return p
	}
	for _, tc := range []struct {
		name string
		p    Profile
		ok   bool
	}{
		{"default", DefaultProfile(), true},
		{"linear prefill, constant decode", Profile{PrefillB: 0.01, DecodeC: 2, ChunkTokens: 1}, true},
		{"decode negative inside 0..1 but floored by DecodeMin", mod(func(p *Profile) { p.DecodeA, p.DecodeB, p.DecodeC = 4, -4, 0.9 }), true},
		{"NaN prefill", mod(func(p *Profile) { p.PrefillA = math.NaN() }), false},
		{"NaN decode minimum", mod(func(p *Profile) { p.DecodeMin = math.NaN() }), false},
		{"+Inf prefill constant", mod(func(p *Profile) { p.PrefillC = math.Inf(1) }), false},
		{"-Inf decode", mod(func(p *Profile) { p.DecodeA = math.Inf(-1) }), false},
		{"negative prefill quadratic", mod(func(p *Profile) { p.PrefillA = -1e-9 }), false},
		{"negative prefill per token", mod(func(p *Profile) { p.PrefillB = -0.01 }), false},
		{"negative prefill constant", mod(func(p *Profile) { p.PrefillC = -1 }), false},
		{"negative decode minimum", mod(func(p *Profile) { p.DecodeMin = -1 }), false},
		{"negative decode on an empty cache", mod(func(p *Profile) { p.DecodeC = -0.5 }), false},
		{"negative decode on a full cache", mod(func(p *Profile) { p.DecodeA, p.DecodeB, p.DecodeC = -10, 1, 1 }), false},
		{"zero chunk", mod(func(p *Profile) { p.ChunkTokens = 0 }), false},
		{"negative chunk", mod(func(p *Profile) { p.ChunkTokens = -8192 }), false},
		{"zero value", Profile{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate: %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewRouterProfile(t *testing.T) {
	cfg := DefaultConfig(16)
	cfg.Profile = Profile{}
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatalf("zero profile: %v", err)
	}
	if r.cfg.Profile != DefaultProfile() {
		t.Errorf("zero profile became %+v, want DefaultProfile", r.cfg.Profile)
	}
	cfg.Profile = DefaultProfile()
	cfg.Profile.ChunkTokens = 0
	if _, err := NewRouter(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero chunk: %v, want ErrInvalidConfig", err)
	}
}

// refStep is the reference engine's prefill step time (docs/reference.md §7), written out.
func refStep(t float64) float64 {
	return 4.209989e-7*t*t + 1.518344e-2*t + 16.50142
}

func TestProfilePrefillMsChunks(t *testing.T) {
	p := DefaultProfile()
	for _, tc := range []struct {
		tokens float64
		ms     float64
		steps  float64
	}{
		{-5, 0, 0},
		{0, 0, 0},
		{1, refStep(1), 1},
		{8192, refStep(8192), 1},
		{8193, refStep(8192) + refStep(1), 2},
		{20000, 2*refStep(8192) + refStep(20000-2*8192), 3},
		{3 * 8192, 3 * refStep(8192), 3},
	} {
		ms, steps := p.PrefillMs(tc.tokens)
		if math.Abs(ms-tc.ms) > 1e-9*math.Max(1, tc.ms) || steps != tc.steps {
			t.Errorf("PrefillMs(%v) = %v ms in %v steps, want %v ms in %v", tc.tokens, ms, steps, tc.ms, tc.steps)
		}
	}
	// The figures docs/reference.md §7 quotes for scale.
	for _, tc := range []struct{ tokens, ms float64 }{{1000, 32.1}, {8192, 169.1}} {
		if ms, _ := p.PrefillMs(tc.tokens); math.Abs(ms-tc.ms) > 0.05 {
			t.Errorf("PrefillMs(%v) = %.3f ms, the reference quotes %v", tc.tokens, ms, tc.ms)
		}
	}
	// A smaller chunk splits the same tokens into more, cheaper-per-step pieces.
	small := p
	small.ChunkTokens = 1000
	if ms, steps := small.PrefillMs(2500); steps != 3 || math.Abs(ms-(2*refStep(1000)+refStep(500))) > 1e-9 {
		t.Errorf("chunk 1000: PrefillMs(2500) = %v ms in %v steps", ms, steps)
	}
}

func TestProfileDecodeMs(t *testing.T) {
	p := DefaultProfile()
	ref := func(u float64) float64 { return -25.74*u*u + 54.01*u + 5.74 }
	floor := Profile{DecodeA: -20, DecodeB: 19.5, DecodeC: 0.5, DecodeMin: 1, ChunkTokens: 1}
	for _, tc := range []struct {
		name string
		p    Profile
		u    float64
		ms   float64
	}{
		{"empty cache", p, 0, ref(0)},
		{"half full", p, 0.5, ref(0.5)},
		{"full", p, 1, ref(1)},
		{"negative usage clamps to 0", p, -0.3, ref(0)},
		{"usage above 1 clamps to 1", p, 2.5, ref(1)},
		{"floored by DecodeMin", floor, 0, 1},
		{"floored by DecodeMin on a full cache", floor, 1, 1},
		{"above DecodeMin", floor, 0.5, -5 + 9.75 + 0.5},
	} {
		if got := tc.p.DecodeMs(tc.u); math.Abs(got-tc.ms) > 1e-12 {
			t.Errorf("%s: DecodeMs(%v) = %v, want %v", tc.name, tc.u, got, tc.ms)
		}
	}
	// docs/reference.md §7's figures: 5.7, 26.3 and 34.0 ms.
	for _, tc := range []struct{ u, ms float64 }{{0, 5.7}, {0.5, 26.3}, {1, 34.0}} {
		if got := p.DecodeMs(tc.u); math.Abs(got-tc.ms) > 0.05 {
			t.Errorf("DecodeMs(%v) = %.3f, the reference quotes %v", tc.u, got, tc.ms)
		}
	}
}
