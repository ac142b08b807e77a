package kv

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestActiveDecodeAges(t *testing.T) {
	a := NewActiveSequences(time.Hour)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	a.Add("r1", 0, []uint64{1, 2}, 32, at(0))
	a.Add("r2", 0, []uint64{3}, 16, at(0))
	a.Add("r3", 1, []uint64{4}, 16, at(0))
	a.NotePrediction("r1", 40)
	a.NotePrediction("gone", 1) // unknown: ignored

	type step struct {
		do      func() string // what happened, for the message
		w0, w1  Load
		decode0 float64 // DecodeSeconds of worker 0 at the step's time
		now     float64
		decode1 float64
	}
	var ft FirstToken
	var ok bool
	for i, s := range []step{
		{func() string { return "routed" }, Load{ActiveBlocks: 3, PrefillTokens: 48, Sequences: 2}, Load{ActiveBlocks: 1, PrefillTokens: 16, Sequences: 1}, 0, 0.5, 0},
		{func() string {
			ft, ok = a.PrefillDoneAt("r1", at(1))
			return "r1's first token at 1 s"
		}, Load{ActiveBlocks: 3, PrefillTokens: 16, Sequences: 2, Decoding: 1}, Load{ActiveBlocks: 1, PrefillTokens: 16, Sequences: 1}, 2, 3, 0},
		{func() string {
			if _, again := a.PrefillDoneAt("r1", at(3)); again {
				t.Error("a second PrefillDoneAt reported a first token")
			}
			return "r1 again at 3 s"
		}, Load{ActiveBlocks: 3, PrefillTokens: 16, Sequences: 2, Decoding: 1}, Load{ActiveBlocks: 1, PrefillTokens: 16, Sequences: 1}, 2, 3, 0},
		{func() string {
			a.PrefillDoneAt("r2", at(3))
			return "r2's first token at 3 s"
		}, Load{ActiveBlocks: 3, Sequences: 2, Decoding: 2}, Load{ActiveBlocks: 1, PrefillTokens: 16, Sequences: 1}, 4 + 2, 5, 0},
		{func() string {
			a.PrefillDone("r3") // without a time: not decoding
			return "r3's prefill done, no time"
		}, Load{ActiveBlocks: 3, Sequences: 2, Decoding: 2}, Load{ActiveBlocks: 1, Sequences: 1}, 4 + 2, 5, 0},
		{func() string {
			if _, late := a.PrefillDoneAt("r3", at(6)); late {
				t.Error("PrefillDoneAt after PrefillDone reported a first token")
			}
			return "r3 PrefillDoneAt after PrefillDone"
		}, Load{ActiveBlocks: 3, Sequences: 2, Decoding: 2}, Load{ActiveBlocks: 1, Sequences: 1}, 5 + 3, 6, 0},
		{func() string {
			a.Free("r1")
			return "r1 freed"
		}, Load{ActiveBlocks: 1, Sequences: 1, Decoding: 1}, Load{ActiveBlocks: 1, Sequences: 1}, 4, 7, 0},
		{func() string {
			a.Free("r2")
			a.Free("r3")
			return "all freed"
		}, Load{}, Load{}, 0, 8, 0},
	} {
		what := s.do()
		if l := a.Load(0); l != s.w0 {
			t.Errorf("step %d (%s): worker 0 load %+v, want %+v", i, what, l, s.w0)
		}
		if l := a.Load(1); l != s.w1 {
			t.Errorf("step %d (%s): worker 1 load %+v, want %+v", i, what, l, s.w1)
		}
		if d := a.DecodeSeconds(0, at(s.now)); math.Abs(d-s.decode0) > 1e-9 {
			t.Errorf("step %d (%s): worker 0 decode seconds at %v s: %v, want %v", i, what, s.now, d, s.decode0)
		}
		if d := a.DecodeSeconds(1, at(s.now)); d != s.decode1 {
			t.Errorf("step %d (%s): worker 1 decode seconds %v, want %v", i, what, d, s.decode1)
		}
		if err := checkActiveInvariants(a); err != nil {
			t.Fatalf("step %d (%s): %v", i, what, err)
		}
	}
	if !ok || ft.Worker != 0 || ft.TTFT != time.Second || ft.PredictedMs != 40 {
		t.Errorf("r1's first token: %+v %v, want worker 0, 1 s, predicted 40 ms", ft, ok)
	}
	if d := a.DecodeSeconds(7, t0); d != 0 {
		t.Errorf("an unknown worker's decode seconds: %v", d)
	}
}

func TestActiveDecodeAge(t *testing.T) {
	a := NewActiveSequences(time.Hour)
	a.Add("r", 3, []uint64{1}, 16, t0)
	if _, _, ok := a.DecodeAge("r", t0.Add(time.Second)); ok {
		t.Error("a request before its first token has a decode age")
	}
	if _, _, ok := a.DecodeAge("unknown", t0); ok {
		t.Error("an unknown request has a decode age")
	}
	a.PrefillDoneAt("r", t0.Add(2*time.Second))
	if w, age, ok := a.DecodeAge("r", t0.Add(5*time.Second)); !ok || w != 3 || age != 3 {
		t.Errorf("DecodeAge = %v %v %v, want worker 3, 3 s", w, age, ok)
	}
	if _, age, ok := a.DecodeAge("r", t0); !ok || age != 0 {
		t.Errorf("DecodeAge before the first token's time = %v %v, want 0 (clamped)", age, ok)
	}
	// Routed again (a migration): the old placement, decoding included, is gone.
	a.Add("r", 4, []uint64{1}, 16, t0.Add(6*time.Second))
	if l := a.Load(3); l != (Load{}) {
		t.Errorf("the old worker keeps %+v", l)
	}
	if _, _, ok := a.DecodeAge("r", t0.Add(7*time.Second)); ok {
		t.Error("the re-routed request is still decoding")
	}
	// Expiry and a removed worker release decoding too.
	a.PrefillDoneAt("r", t0.Add(7*time.Second))
	a.Add("s", 5, []uint64{9}, 16, t0.Add(7*time.Second))
	a.PrefillDoneAt("s", t0.Add(8*time.Second))
	if n := a.RemoveWorker(5); n != 1 || a.Load(5) != (Load{}) || a.DecodeSeconds(5, t0.Add(9*time.Second)) != 0 {
		t.Errorf("RemoveWorker: %d freed, load %+v", n, a.Load(5))
	}
	if n := a.Expire(t0.Add(2 * time.Hour)); n != 1 || a.Load(4) != (Load{}) || a.DecodeSeconds(4, t0.Add(2*time.Hour)) != 0 {
		t.Errorf("Expire: %d freed, load %+v", n, a.Load(4))
	}
}

func TestRouterPrefillDoneAt(t *testing.T) {
	t.Run("PrefillDone without a time still works", func(t *testing.T) {
		r := ttftRouter(t)
		if _, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(100), PinWorker: "w1"}, t0, nil); err != nil {
			t.Fatal(err)
		}
		w := r.byName["w1"].id
		if !r.PrefillDone("r") {
			t.Fatal("PrefillDone: not active")
		}
		if l := r.active.Load(w); l.PrefillTokens != 0 || l.Decoding != 0 || l.Sequences != 1 {
			t.Errorf("load %+v after PrefillDone, want no prefill, not decoding, 1 request", l)
		}
		if !r.PrefillDoneAt("r", t0.Add(time.Second)) {
			t.Error("PrefillDoneAt after PrefillDone: the request is still active")
		}
		if s := r.byName["w1"].speed; s != 0 {
			t.Errorf("speed %v learnt from a request without a first-token time", s)
		}
		if !r.FreeAt("r", t0.Add(2*time.Second)) || r.byName["w1"].decodeSecs != 0 {
			t.Errorf("decode seconds %v learnt from a request without a first-token time", r.byName["w1"].decodeSecs)
		}
	})
	t.Run("twice is harmless", func(t *testing.T) {
		r := ttftRouter(t)
		if _, err := r.Route(RouteInput{RequestID: "r", Tokens: prompt(100), PinWorker: "w1"}, t0, nil); err != nil {
			t.Fatal(err)
		}
		rw := r.byName["w1"]
		if !r.PrefillDoneAt("r", t0.Add(20*time.Millisecond)) {
			t.Fatal("PrefillDoneAt: not active")
		}
		speed := rw.speed
		if !(speed > 0) {
			t.Fatalf("speed %v after a first token", speed)
		}
		if !r.PrefillDoneAt("r", t0.Add(time.Minute)) {
			t.Error("a second PrefillDoneAt: the request is still active")
		}
		if rw.speed != speed {
			t.Errorf("speed %v after a second PrefillDoneAt, want %v", rw.speed, speed)
		}
		if l := r.active.Load(rw.id); l.Decoding != 1 || l.PrefillTokens != 0 {
			t.Errorf("load %+v, want 1 decoding, nothing to prefill", l)
		}
		if r.PrefillDoneAt("unknown", t0) {
			t.Error("PrefillDoneAt of an unknown request reported it active")
		}
	})
	t.Run("Free after PrefillDoneAt restores the load", func(t *testing.T) {
		r := ttftRouter(t)
		for _, id := range []string{"a", "b"} {
			if _, err := r.Route(RouteInput{RequestID: id, Tokens: prompt(100), PinWorker: "w2"}, t0, nil); err != nil {
				t.Fatal(err)
			}
			r.PrefillDoneAt(id, t0.Add(time.Second))
		}
		rw := r.byName["w2"]
		now := t0.Add(4 * time.Second)
		if l := r.active.Load(rw.id); l.Decoding != 2 {
			t.Errorf("load %+v, want 2 decoding", l)
		}
		if c := r.candidate(rw, r.active.Load(rw.id)); c.DecodingRequests != 2 || c.DecodeSeconds != 0 {
			// r.now is the last Route's (t0): both first tokens came after it
			t.Errorf("candidate %+v at the last route's time", c)
		}
		r.setNow(now)
		if c := r.candidate(rw, r.active.Load(rw.id)); c.DecodingRequests != 2 || math.Abs(c.DecodeSeconds-6) > 1e-9 {
			t.Errorf("candidate decoding %d for %v s, want 2 for 6 s", c.DecodingRequests, c.DecodeSeconds)
		}
		r.Free("a")
		r.FreeAt("b", now)
		if l := r.active.Load(rw.id); l != (Load{}) {
			t.Errorf("load %+v after freeing both, want none", l)
		}
		if d := r.active.DecodeSeconds(rw.id, now.Add(time.Hour)); d != 0 {
			t.Errorf("decode seconds %v after freeing both", d)
		}
	})
}

// TestActivePrefillElapsed: how long a worker's head prefill has run counts from the
// route that found its queue empty, restarts at each first token that leaves more
// queued, and is 0 with nothing queued.
func TestActivePrefillElapsed(t *testing.T) {
	a := NewActiveSequences(time.Hour)
	base := a.since(t0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for i, s := range []struct {
		do   func()
		what string
		now  float64 // seconds after t0
		want float64 // seconds
	}{
		{func() {}, "nothing routed", 1, 0},
		{func() { a.Add("r1", 0, []uint64{1}, 100, at(2)) }, "r1 routed to an empty queue at 2 s", 2.5, 0.5},
		{func() { a.Add("r2", 0, []uint64{2}, 100, at(3)) }, "r2 queued behind it at 3 s", 3.5, 1.5},
		{func() { a.Add("r0", 0, []uint64{3}, 0, at(3)) }, "a request with nothing to prefill changes nothing", 4, 2},
		{func() { a.PrefillDoneAt("r1", at(4)) }, "r1's first token at 4 s: r2 at the head", 4.25, 0.25},
		{func() { a.PrefillDoneAt("r2", at(5)) }, "r2's first token: nothing queued", 6, 0},
		{func() { a.Add("r3", 0, []uint64{4}, 50, at(7)) }, "r3 routed to the empty queue at 7 s", 7.5, 0.5},
		{func() { a.Free("r3") }, "r3 cancelled before its first token", 8, 0},
	} {
		s.do()
		if got := a.prefillElapsedAt(0, a.since(at(s.now))); math.Abs(got-s.want) > 1e-9 {
			t.Errorf("step %d (%s): elapsed at %v s = %v, want %v", i, s.what, s.now, got, s.want)
		}
	}
	if got := a.prefillElapsedAt(9, base); got != 0 {
		t.Errorf("unknown worker: %v, want 0", got)
	}
}

// TestFillCandidateOverwritesEveryField: a candidate buffer reused from an earlier
// route, every field set, is filled exactly as a zero one is (gather reuses its buffer).
func TestFillCandidateOverwritesEveryField(t *testing.T) {
	r := ttftRouter(t)
	if _, err := r.Route(RouteInput{RequestID: "a", Tokens: prompt(100), PinWorker: "w2"}, t0, nil); err != nil {
		t.Fatal(err)
	}
	rw := r.byName["w2"]
	var fresh, reused Candidate
	v := reflect.ValueOf(&reused).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64, reflect.Uint32:
			if f.CanInt() {
				f.SetInt(7)
			} else {
				f.SetUint(7)
			}
		case reflect.Float64:
			f.SetFloat(7)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.String:
			f.SetString("stale")
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	l := r.active.Load(rw.id)
	r.fillCandidate(rw, l, &fresh)
	r.fillCandidate(rw, l, &reused)
	if fresh != reused {
		t.Errorf("reused candidate %+v, want %+v", reused, fresh)
	}
}
