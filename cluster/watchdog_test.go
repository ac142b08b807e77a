package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestZombieCheck(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	base := zombieSigns{TopologySeen: true, InTopology: true, ProviderHealthy: true}
	with := func(f func(*zombieSigns)) zombieSigns { s := base; f(&s); return s }
	healthyIn := base
	absent := with(func(s *zombieSigns) { s.InTopology = false })
	absentUnhealthy := with(func(s *zombieSigns) { s.InTopology, s.ProviderHealthy = false, false })
	neverSeen := zombieSigns{ProviderHealthy: true}
	selfBlocked := with(func(s *zombieSigns) { s.SelfBlocked = true })
	blockedByPeer := with(func(s *zombieSigns) { s.TopologyPeers, s.BlockedBy = []string{"peer-1"}, []string{"peer-1"} })
	// peers: the latest topology holds exactly ps, gossip shows them as given, and
	// discovery does not report liveness (the topology is trusted).
	peers := func(healthy bool, ps ...peerSigns) zombieSigns {
		return with(func(s *zombieSigns) {
			s.Peers, s.ProviderHealthy = append([]peerSigns{}, ps...), healthy
			s.TopologyPeers = []string{}
			for _, p := range ps {
				s.TopologyPeers = append(s.TopologyPeers, p.ID)
			}
		})
	}
	heard := func(id string, at float64) peerSigns {
		return peerSigns{ID: id, Heard: sec(at), TopologyKnown: true, IncludesMe: true}
	}
	excludes := func(id string, at float64) peerSigns {
		return peerSigns{ID: id, Heard: sec(at), TopologyKnown: true, IncludesMe: false}
	}
	alive := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	// A healthy node of a three-member cluster (itself, node-2, frontend) whose frontend
	// was frozen past its TTL: the cluster (this node included) dropped the frontend,
	// which passes its check again once resumed, and which answers "blocked" when this
	// node connects to it, having blocked every peer it did not hear from while frozen.
	afterFreeze := func(f func(*zombieSigns)) zombieSigns {
		return with(func(s *zombieSigns) {
			s.TopologyPeers = []string{"node-2"}
			s.Alive = alive("self", "node-2", "frontend")
			f(s)
		})
	}
	blockedByDropped := afterFreeze(func(s *zombieSigns) { s.BlockedBy = []string{"frontend"} })
	// The frontend's peer is in the topology still, but its check fails (leaving, or
	// frozen itself): not live.
	blockedByFailing := with(func(s *zombieSigns) {
		s.TopologyPeers, s.Alive, s.BlockedBy = []string{"node-2", "frontend"}, alive("self", "node-2"), []string{"frontend"}
	})
	blockedByLive := afterFreeze(func(s *zombieSigns) { s.BlockedBy = []string{"node-2"} })
	blockedByBoth := afterFreeze(func(s *zombieSigns) { s.BlockedBy = []string{"frontend", "node-2"} })
	// The resumed frontend itself: frozen 20 s, it has since blocked the nodes (their
	// heartbeats expired) and published a topology without them, so they are not its
	// live peers and their "blocked" answers do not count; its pause does.
	resumedZombie := with(func(s *zombieSigns) {
		s.Paused, s.TopologyPeers, s.Alive = 20*time.Second, []string{}, alive("self", "node-1", "node-2")
		s.BlockedBy, s.Peers = []string{"node-1"}, []peerSigns{}
	})
	// The same, before any node answered "blocked": its connections to them, opened
	// before the freeze, stay open, so no handshake has told it anything yet.
	resumedUnanswered := resumedZombie
	resumedUnanswered.BlockedBy = nil
	starved := with(func(s *zombieSigns) { s.Paused = 2 * time.Second })
	withAlive := func(s zombieSigns, ids ...string) zombieSigns { s.Alive = alive(ids...); return s }
	// lapsedAt: discovery took the member back at at, and has answered since.
	lapsedAt := func(s zombieSigns, at float64) zombieSigns { s.Lapsed, s.Answered = sec(at), sec(at+0.1); return s }
	with2 := func(s zombieSigns, f func(*zombieSigns)) zombieSigns { f(&s); return s }

	type step struct {
		at float64 // seconds
		s  zombieSigns
	}
	for _, tc := range []struct {
		name       string
		pauseLimit time.Duration // 0: pauses are not looked at
		steps      []step
		lostAt     int      // index of the step that reports lost; -1 for never
		reason     string   // substring of the reason
		ignored    []string // the ignored "blocked" answers over all steps, sorted
	}{
		{"healthy member", 4 * time.Second, []step{{0, healthyIn}, {1, healthyIn}, {2, healthyIn}, {3, healthyIn}}, -1, "", nil},
		{"own id blocked", 4 * time.Second, []step{{0, healthyIn}, {1, selfBlocked}}, 1, "own id", nil},
		{"a peer blocked us", 4 * time.Second, []step{{0, blockedByPeer}}, 0, "peer-1", nil},
		{"absent three checks in a row", 4 * time.Second, []step{{0, healthyIn}, {1, absent}, {2, absent}, {3, absent}}, 3, "missing", nil},
		{"absent, back, absent: the count restarts", 4 * time.Second, []step{{0, absent}, {1, absent}, {2, healthyIn}, {3, absent}, {4, absent}}, -1, "", nil},
		{"absent while discovery fails does not count", 4 * time.Second,
			[]step{{0, absent}, {1, absentUnhealthy}, {2, absent}, {3, absentUnhealthy}, {4, absent}}, -1, "", nil},
		{"before the first topology with us", 4 * time.Second, []step{{0, neverSeen}, {1, neverSeen}, {2, neverSeen}, {3, neverSeen}}, -1, "", nil},

		{"peers that keep gossiping", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {20, peers(true, heard("a", 19.7), heard("b", 15))},
			{40, peers(true, heard("a", 39), heard("b", 31))}}, -1, "", nil},
		{"every peer silent for the limit", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {9, peers(true, heard("a", 0), heard("b", 0))},
			{10, peers(true, heard("a", 0), heard("b", 0))}}, 2, "none of the 2 members", nil},
		{"one peer silent, another talking: not lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {30, peers(true, heard("a", 0), heard("b", 29))}}, -1, "", nil},
		{"a new peer gets the limit from when it appears", 4 * time.Second, []step{
			{0, peers(true)}, {20, peers(true, peerSigns{ID: "a"})}, {29, peers(true, peerSigns{ID: "a"})},
			{30, peers(true, peerSigns{ID: "a"})}}, 3, "none of the 1 members", nil},
		{"silence while discovery is unhealthy does not count", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0))}, {30, peers(false, heard("a", 0))}}, -1, "", nil},
		{"no gossip answer at a check", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0))}, {30, with(func(s *zombieSigns) { s.Peers = nil })}}, -1, "", nil},
		{"a peer's topology leaves us out for the limit", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), excludes("b", 0))}, {5, peers(true, heard("a", 5), excludes("b", 5))},
			{10, peers(true, heard("a", 10), excludes("b", 10))}}, 2, "member b has left this member out", nil},
		{"a peer's topology leaving us out until it has seen us join", 4 * time.Second, []step{
			{0, peers(true, excludes("b", 0))}, {2, peers(true, excludes("b", 2))}, {9, peers(true, heard("b", 9))},
			{15, peers(true, heard("b", 15))}}, -1, "", nil},
		// A topology that held us and leaves us out has blocked us: protoactor blocks every
		// member that leaves its topology, and a peer's topology only goes forward.
		{"a peer's topology held us and leaves us out: lost at once", 4 * time.Second, []step{
			{0, peers(true, excludes("b", 0))}, {1, peers(true, heard("b", 1))}, {2, peers(true, excludes("b", 2))}},
			2, "member b had this member in its topology and has left it out", nil},
		{"held, then left out while discovery fails: lost too", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {1, peers(false, heard("a", 1), excludes("b", 1))}},
			1, "member b had this member", nil},
		{"held by a peer that then left the live set: its exclusion waits the limit", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {1, peers(true, heard("a", 1))},
			{2, peers(true, heard("a", 2), excludes("b", 2))}, {11, peers(true, heard("a", 11), excludes("b", 11))},
			{12, peers(true, heard("a", 12), excludes("b", 12))}}, 4, "member b has left this member out of its topology for 10s", nil},
		{"held by a member the cluster has since dropped: its exclusion does not count", 4 * time.Second, []step{
			{0, withAlive(peers(true, heard("a", 0), heard("z", 0)), "self", "a", "z")},
			{1, withAlive(peers(true, heard("a", 1), excludes("z", 1)), "self", "a")},
			{2, withAlive(peers(true, heard("a", 2), excludes("z", 2)), "self", "a")}}, -1, "", nil},
		{"a peer that leaves the topology is forgotten", 4 * time.Second, []step{
			{0, peers(true, excludes("b", 0))}, {5, peers(true)}, {12, peers(true, excludes("b", 12))}}, -1, "", nil},

		// A partition cut the member from Consul past its TTL: the side that watched its
		// check fail dropped it and stops gossiping with it, while the peers on its own side
		// keep gossiping (so not every live peer falls silent).
		{"lapsed, a peer heard before stays silent past the grace: lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{10, lapsedAt(peers(true, heard("a", 9.8), heard("b", 2)), 8)},
			{12.9, lapsedAt(peers(true, heard("a", 12.8), heard("b", 2)), 8)},
			{13, lapsedAt(peers(true, heard("a", 12.9), heard("b", 2)), 8)}},
			3, "lapsed 5s ago, and member b, live in discovery, has not gossiped to it for 11s", nil},
		{"lapsed, every peer gossips again: not lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{10, lapsedAt(peers(true, heard("a", 9), heard("b", 2)), 8)},
			{13, lapsedAt(peers(true, heard("a", 12.9), heard("b", 8.5)), 8)},
			{20, lapsedAt(peers(true, heard("a", 19.9), heard("b", 19.7)), 8)}}, -1, "", nil},
		// A message sent before the partition and retransmitted after it is heard once.
		{"lapsed, a peer heard once after the lapse and silent since: lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{10, lapsedAt(peers(true, heard("a", 9.8), heard("b", 9)), 8)},
			{13.9, lapsedAt(peers(true, heard("a", 13.8), heard("b", 9)), 8)},
			{14, lapsedAt(peers(true, heard("a", 13.9), heard("b", 9)), 8)}}, 3, "member b, live in discovery, has not gossiped to it for 5s", nil},
		{"lapsed: a peer first seen since gets the grace from then", 4 * time.Second, []step{
			{13, lapsedAt(peers(true, heard("a", 12.9), peerSigns{ID: "b"}), 8)},
			{17.9, lapsedAt(peers(true, heard("a", 17.8), peerSigns{ID: "b"}), 8)},
			{18, lapsedAt(peers(true, heard("a", 17.9), peerSigns{ID: "b"}), 8)}}, 2, "member b, live", nil},
		{"lapsed: a silent member the cluster has dropped does not count", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("z", 0))},
			{13, withAlive(lapsedAt(peers(true, heard("a", 12.9), heard("z", 2)), 8), "self", "a")}}, -1, "", nil},
		// Discovery's answer from before the lapse may still list a peer that died.
		{"lapsed: no discovery answer since the lapse: not lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{13, with2(lapsedAt(peers(true, heard("a", 12.9), heard("b", 2)), 8), func(s *zombieSigns) { s.Answered = sec(7) })}}, -1, "", nil},
		{"lapsed: discovery failing again: not lost", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{13, lapsedAt(peers(false, heard("a", 12.9), heard("b", 2)), 8)}}, -1, "", nil},
		{"lapsed long ago: a silence then is for the slower signs", 4 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{30, lapsedAt(peers(true, heard("a", 29.9), heard("b", 29.9)), 8)},
			{38.5, lapsedAt(peers(true, heard("a", 38.4), heard("b", 31)), 8)}}, -1, "", nil},
		{"a TTL past 4 s widens the grace", 12 * time.Second, []step{
			{0, peers(true, heard("a", 0), heard("b", 0))},
			{14, lapsedAt(peers(true, heard("a", 13.9), heard("b", 2)), 8)},
			{21, lapsedAt(peers(true, heard("a", 20.9), heard("b", 2)), 8)}}, 2, "lapsed 13s ago", nil},

		// Only the live cluster may make a member restart.
		{"blocked by a member the cluster dropped: not lost", 4 * time.Second, []step{
			{0, blockedByDropped}, {1, blockedByDropped}, {2, healthyIn}, {3, blockedByDropped}}, -1, "", []string{"frontend"}},
		{"blocked by a topology member whose check fails: not lost", 4 * time.Second, []step{
			{0, blockedByFailing}, {1, blockedByFailing}}, -1, "", []string{"frontend"}},
		{"blocked by a live member: lost", 4 * time.Second, []step{{0, healthyIn}, {1, blockedByLive}}, 1, "member node-2, live", nil},
		{"blocked by a dropped member and a live one: lost, naming the live one", 4 * time.Second, []step{
			{0, blockedByBoth}}, 0, "member node-2, live", nil},
		{"a dropped member's topology leaving us out does not count", 4 * time.Second, []step{
			{0, withAlive(peers(true, heard("a", 0), excludes("z", 0)), "self", "a")},
			{10, withAlive(peers(true, heard("a", 10), excludes("z", 10)), "self", "a")},
			{20, withAlive(peers(true, heard("a", 20), excludes("z", 20)), "self", "a")}}, -1, "", nil},
		{"a dropped member's silence does not count", 4 * time.Second, []step{
			{0, withAlive(peers(true, heard("a", 0), heard("z", 0)), "self", "a")},
			{30, withAlive(peers(true, heard("a", 29), heard("z", 0)), "self", "a")}}, -1, "", nil},
		{"resumed zombie: frozen past its TTL, it has blocked its peers: lost", 4 * time.Second, []step{
			{0, healthyIn}, {20, resumedZombie}}, 1, "did not run for 20s", nil},
		{"resumed zombie, no blocked answer yet: lost", 4 * time.Second, []step{
			{0, healthyIn}, {20, resumedUnanswered}, {21, resumedUnanswered}}, 1, "did not run for 20s", nil},
		{"a pause shorter than the limit (CPU starvation): not lost", 4 * time.Second, []step{
			{0, starved}, {1, starved}, {2, healthyIn}}, -1, "", nil},
		{"in-process discovery does not look at pauses", 0, []step{
			{0, with(func(s *zombieSigns) { s.Paused = time.Minute })}}, -1, "", nil},
	} {
		z := newZombieCheck(3, 10*time.Second, tc.pauseLimit)
		lostAt := -1
		var reason string
		var ignored []string
		for i, st := range tc.steps {
			r, ign := z.step(sec(st.at), st.s)
			ignored = append(ignored, ign...)
			if r != "" {
				lostAt, reason = i, r
				break
			}
		}
		if lostAt != tc.lostAt || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: lost at step %d (%q), want step %d with %q", tc.name, lostAt, reason, tc.lostAt, tc.reason)
		}
		slices.Sort(ignored)
		ignored = slices.Compact(ignored)
		if !slices.Equal(ignored, tc.ignored) {
			t.Errorf("%s: ignored %v, want %v", tc.name, ignored, tc.ignored)
		}
	}
}

func TestPauseOf(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	tick := 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		gap  time.Duration
		want time.Duration
	}{
		{"on time", tick, 0},
		{"early (ticker catching up)", tick / 2, 0},
		{"a little late", tick + 30*time.Millisecond, 30 * time.Millisecond},
		{"stopped 20 s", tick + 20*time.Second, 20 * time.Second},
	} {
		if got := pauseOf(t0, t0.Add(tc.gap), tick); got != tc.want {
			t.Errorf("%s: pauseOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestConsulLapse: the provider records a lapse when the agent takes the member back after
// a gap of the TTL or more since it last took it, and only then.
func TestConsulLapse(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name  string
		taken []float64 // seconds at which the agent took a registration or refresh
		want  float64   // the lapse recorded; -1: none
	}{
		{"refreshed every 500 ms", []float64{0, 0.5, 1, 1.5, 2}, -1},
		{"a gap just under the TTL", []float64{0, 0.5, 3.49}, -1},
		{"a gap of the TTL", []float64{0, 0.5, 3.5, 4}, 3.5},
		{"two lapses: the latest", []float64{0, 5, 5.5, 12, 12.5}, 12},
		{"a lapse before the first take is no lapse", []float64{30}, -1},
	} {
		var now time.Time
		p := &consulProvider{opts: ConsulOptions{TTL: 3 * time.Second}, now: func() time.Time { return now }}
		for _, at := range tc.taken {
			now = sec(at)
			p.tookUs()
		}
		want := time.Time{}
		if tc.want >= 0 {
			want = sec(tc.want)
		}
		if got, _ := p.lapse(); !got.Equal(want) {
			t.Errorf("%s: lapsed %v, want %v", tc.name, got.Sub(t0), want.Sub(t0))
		}
	}
}
