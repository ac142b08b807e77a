package kv

import (
	"fmt"
	"math"
)

// Profile is an engine's timing as the TTFT policy predicts it (docs/reference.md §3.6):
// a step that computes t new prompt tokens takes PrefillMs(t) = PrefillA·t² + PrefillB·t +
// PrefillC milliseconds, a step that also decodes adds DecodeMs(u) = max(DecodeMin,
// DecodeA·u² + DecodeB·u + DecodeC) at KV usage u (0..1), and a step computes at most
// ChunkTokens prompt tokens (chunked prefill). The default is the reference mock engine's
// timing (docs/reference.md §7), itself fitted to a real engine; each worker's own speed is
// learnt on top of it (Candidate.SpeedFactor), so a profile only has to have the right
// shape.
type Profile struct {
	PrefillA, PrefillB, PrefillC float64
	DecodeA, DecodeB, DecodeC    float64
	DecodeMin                    float64
	ChunkTokens                  int
}

// DefaultProfile returns the reference timing (docs/reference.md §7) with 8,192-token chunks.
func DefaultProfile() Profile {
	return Profile{PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74, DecodeMin: 1, ChunkTokens: 8192}
}

// Validate reports a profile whose figures are not finite, whose times could be negative
// over their domain, or whose chunk is not positive.
func (p Profile) Validate() error {
	for _, v := range []float64{p.PrefillA, p.PrefillB, p.PrefillC, p.DecodeA, p.DecodeB, p.DecodeC, p.DecodeMin} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: timing profile figure %v is not finite", ErrInvalidConfig, v)
		}
	}
	switch {
	case p.ChunkTokens <= 0:
		return fmt.Errorf("%w: timing profile chunk %d tokens must be positive", ErrInvalidConfig, p.ChunkTokens)
	case p.PrefillA < 0 || p.PrefillB < 0 || p.PrefillC < 0:
		return fmt.Errorf("%w: timing profile prefill coefficients must be >= 0", ErrInvalidConfig)
	case p.DecodeMin < 0 || p.DecodeC < 0 || p.DecodeA+p.DecodeB+p.DecodeC < 0:
		return fmt.Errorf("%w: timing profile decode time must be >= 0 over usage 0..1", ErrInvalidConfig)
	}
	return nil
}

// StepPrefillMs is the prefill part of one step computing t new tokens (ms; 0 for t <= 0).
func (p Profile) StepPrefillMs(t float64) float64 {
	if t <= 0 {
		return 0
	}
	return p.PrefillA*t*t + p.PrefillB*t + p.PrefillC
}

// PrefillMs is the prefill time of t tokens computed in chunks of ChunkTokens (ms), and the
// number of steps it takes.
func (p Profile) PrefillMs(t float64) (ms float64, steps float64) {
	m := newTTFTModel(&p, 1)
	return m.prefill(t)
}

// DecodeMs is the decode part of one step at KV usage u (clamped to 0..1), in ms.
func (p Profile) DecodeMs(u float64) float64 {
	u = max(0, min(1, u))
	return max(p.DecodeMin, p.DecodeA*u*u+p.DecodeB*u+p.DecodeC)
}
