package kv

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSessions: the session store alone — TTL since the last request, refresh, LRU
// bound.
func TestSessions(t *testing.T) {
	type op struct {
		put    bool // put, else get
		id, w  string
		at     time.Duration
		expire bool
	}
	cases := []struct {
		name  string
		ttl   time.Duration
		max   int
		ops   []op
		query string
		at    time.Duration
		want  string // "" when forgotten
		kept  int
	}{
		{"remembered", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}}, "s", 30 * time.Second, "w1", 1},
		{"unknown", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}}, "t", 0, "", 1},
		{"latest worker wins", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}, {put: true, id: "s", w: "w2", at: time.Second}},
			"s", 2 * time.Second, "w2", 1},
		{"kept at the TTL", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}}, "s", time.Minute, "w1", 1},
		{"forgotten past the TTL", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}}, "s", time.Minute + 1, "", 0},
		{"a new request renews it", time.Minute, 4, []op{{put: true, id: "s", w: "w1"}, {put: true, id: "s", w: "w1", at: 50 * time.Second}},
			"s", 100 * time.Second, "w1", 1},
		{"least recently used out first", time.Minute, 2, []op{
			{put: true, id: "a", w: "w1"}, {put: true, id: "b", w: "w2", at: 1}, {put: true, id: "a", w: "w1", at: 2},
			{put: true, id: "c", w: "w3", at: 3}}, "b", 4, "", 2},
		{"the recently used one stays", time.Minute, 2, []op{
			{put: true, id: "a", w: "w1"}, {put: true, id: "b", w: "w2", at: 1}, {put: true, id: "a", w: "w1", at: 2},
			{put: true, id: "c", w: "w3", at: 3}}, "a", 4, "w1", 2},
		{"expire drops the stale", time.Minute, 4, []op{
			{put: true, id: "a", w: "w1"}, {put: true, id: "b", w: "w2", at: 30 * time.Second},
			{expire: true, at: 70 * time.Second}}, "b", 70 * time.Second, "w2", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSessions(c.ttl, c.max)
			for _, o := range c.ops {
				switch {
				case o.expire:
					s.expire(t0.Add(o.at))
				case o.put:
					s.put(o.id, o.w, t0.Add(o.at))
				}
			}
			got, ok := s.get(c.query, t0.Add(c.at))
			if ok != (c.want != "") || got != c.want {
				t.Errorf("get(%q) = %q, %v; want %q", c.query, got, ok, c.want)
			}
			if s.len() != c.kept {
				t.Errorf("%d sessions kept, want %d", s.len(), c.kept)
			}
		})
	}
}

// sessionProbe is a policy that chooses the candidate marked SessionWorker, else the
// first, and remembers which candidates were marked.
type sessionProbe struct{ marked []string }

func (p *sessionProbe) Select(in *SelectInput, _ *rand.Rand) (int, error) {
	p.marked = p.marked[:0]
	pick := 0
	for i, c := range in.Candidates {
		if c.SessionWorker {
			p.marked = append(p.marked, c.ID)
			pick = i
		}
	}
	return pick, nil
}

// TestRouteMarksSessionWorker: the worker a session's previous request went to is the
// one candidate marked, until the session expires or that worker leaves; requests
// without a session mark none.
func TestRouteMarksSessionWorker(t *testing.T) {
	probe := &sessionProbe{}
	reg := NewRegistry()
	if err := reg.Register("probe", func() Policy { return probe }); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(4)
	cfg.Policies, cfg.Policy, cfg.SessionTTL = reg, "probe", time.Minute
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		if _, err := r.Register(WorkerSpec{ID: id, BlockSize: 4, Ready: true, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		id, session, pin string
		at               time.Duration
		remove           string
		marked           string // "" for none
		worker           string
	}{
		{id: "r1", session: "conv", pin: "w2", worker: "w2"},
		{id: "r2", session: "conv", at: time.Second, marked: "w2", worker: "w2"},
		{id: "r3", at: 2 * time.Second, worker: "w1"},
		{id: "r4", session: "other", at: 3 * time.Second, worker: "w1"},
		{id: "r5", session: "conv", pin: "w3", at: 4 * time.Second, marked: "w2", worker: "w3"},
		{id: "r6", session: "conv", at: 5 * time.Second, marked: "w3", worker: "w3"},
		{id: "r7", session: "conv", at: 66 * time.Second, worker: "w1"},
		{id: "r8", session: "conv", at: 67 * time.Second, remove: "w1", worker: "w2"},
	}
	for _, s := range steps {
		if s.remove != "" {
			if _, err := r.RemoveWorker(s.remove); err != nil {
				t.Fatal(err)
			}
		}
		probe.marked = nil
		d, err := r.Route(RouteInput{RequestID: s.id, Tokens: prompt(12), SessionID: s.session, PinWorker: s.pin}, t0.Add(s.at), nil)
		if err != nil {
			t.Fatal(err)
		}
		marked := ""
		if len(probe.marked) > 1 {
			t.Fatalf("%s: %d candidates marked: %v", s.id, len(probe.marked), probe.marked)
		} else if len(probe.marked) == 1 {
			marked = probe.marked[0]
		}
		if s.pin == "" && marked != s.marked {
			t.Errorf("%s: marked %q, want %q", s.id, marked, s.marked)
		}
		if d.WorkerID != s.worker {
			t.Errorf("%s: routed to %s, want %s", s.id, d.WorkerID, s.worker)
		}
	}
	if n := r.Stats().Sessions; n != 1 { // "other" expired at 63 s
		t.Errorf("Stats.Sessions = %d, want 1", n)
	}
}
