package enginehttp

import "github.com/turbine-llm/turbine/messages"

// OptionalSampling returns the sampling parameters of s that a request may leave unset,
// nil where s does not set them (the engine's default applies): temperature, top_p and
// the seed.
func OptionalSampling(s *messages.SamplingParams) (temperature, topP *float64, seed *int64) {
	if s == nil {
		return nil, nil, nil
	}
	return s.Temperature, s.TopP, s.Seed
}
