package planner

// Timing adapts an engine profile to the mock engine's timing model
// (mocker.Timing): a prefill step of t tokens takes the profile's TTFT at ISL t, a decode
// step at KV usage u and context c the profile's ITL there. A mock engine or a simulated
// fleet given it behaves like the profiled engine (docs/reference.md §27.1). Each step
// costs a few binary searches over the curves Validate laid out and allocates nothing; a
// profile not validated has its curves laid out here, once.
func (e *EngineProfile) Timing() ProfileTiming {
	t := ProfileTiming{e: e}
	if !e.curves.of(e) {
		t.c = layOut(e)
	}
	return t
}

// ProfileTiming is EngineProfile.Timing's value; it implements mocker.Timing. It reads
// the profile's points as EngineProfile.TTFT and ITL do, with the same results.
type ProfileTiming struct {
	e *EngineProfile
	c *profileCurves // laid out by Timing when the profile had none kept
}

// curves returns the curves Validate kept for the profile, else those Timing laid out,
// else (the profile's slices were replaced since) new ones for this one step.
func (t ProfileTiming) curves() *profileCurves {
	if c := t.e.curves; c.of(t.e) {
		return c
	}
	if t.c.of(t.e) {
		return t.c
	}
	return layOut(t.e)
}

// PrefillMillis is the profile's TTFT at ISL t in ms; 0 for t <= 0.
func (t ProfileTiming) PrefillMillis(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	return t.curves().ttftAt(float64(tokens))
}

// DecodeMillis is the profile's ITL in ms at KV usage u and context tokens per sequence.
func (t ProfileTiming) DecodeMillis(u, context float64) float64 {
	return t.curves().itlAt(u, context)
}
