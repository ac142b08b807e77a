package planner

// Timing adapts an engine profile to the mock engine's timing model
// (mocker.Timing): a prefill step of t tokens takes the profile's TTFT at ISL t, a decode
// step at KV usage u and context c the profile's ITL there. A mock engine or a simulated
// fleet given it behaves like the profiled engine (docs/reference.md §27.1).
func (e *EngineProfile) Timing() ProfileTiming { return ProfileTiming{e: e} }

// ProfileTiming is EngineProfile.Timing's value; it implements mocker.Timing.
type ProfileTiming struct{ e *EngineProfile }

// PrefillMillis is the profile's TTFT at ISL t in ms; 0 for t <= 0.
func (t ProfileTiming) PrefillMillis(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	return t.e.TTFT(float64(tokens))
}

// DecodeMillis is the profile's ITL in ms at KV usage u and context tokens per sequence.
func (t ProfileTiming) DecodeMillis(u, context float64) float64 { return t.e.ITL(u, context) }
