package cluster

import (
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
	blockedByPeer := with(func(s *zombieSigns) { s.BlockedBy = "peer-1" })
	peers := func(healthy bool, ps ...peerSigns) zombieSigns {
		return with(func(s *zombieSigns) { s.Peers, s.ProviderHealthy = append([]peerSigns{}, ps...), healthy })
	}
	heard := func(id string, at float64) peerSigns {
		return peerSigns{ID: id, Heard: sec(at), TopologyKnown: true, IncludesMe: true}
	}
	excludes := func(id string, at float64) peerSigns {
		return peerSigns{ID: id, Heard: sec(at), TopologyKnown: true, IncludesMe: false}
	}

	type step struct {
		at float64 // seconds
		s  zombieSigns
	}
	for _, tc := range []struct {
		name   string
		steps  []step
		lostAt int    // index of the step that reports lost; -1 for never
		reason string // substring of the reason
	}{
		{"healthy member", []step{{0, healthyIn}, {1, healthyIn}, {2, healthyIn}, {3, healthyIn}}, -1, ""},
		{"own id blocked", []step{{0, healthyIn}, {1, selfBlocked}}, 1, "own id"},
		{"a peer blocked us", []step{{0, blockedByPeer}}, 0, "peer-1"},
		{"absent three checks in a row", []step{{0, healthyIn}, {1, absent}, {2, absent}, {3, absent}}, 3, "missing"},
		{"absent, back, absent: the count restarts", []step{{0, absent}, {1, absent}, {2, healthyIn}, {3, absent}, {4, absent}}, -1, ""},
		{"absent while discovery fails does not count",
			[]step{{0, absent}, {1, absentUnhealthy}, {2, absent}, {3, absentUnhealthy}, {4, absent}}, -1, ""},
		{"before the first topology with us", []step{{0, neverSeen}, {1, neverSeen}, {2, neverSeen}, {3, neverSeen}}, -1, ""},

		{"peers that keep gossiping", []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {20, peers(true, heard("a", 19.7), heard("b", 15))},
			{40, peers(true, heard("a", 39), heard("b", 31))}}, -1, ""},
		{"every peer silent for the limit", []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {9, peers(true, heard("a", 0), heard("b", 0))},
			{10, peers(true, heard("a", 0), heard("b", 0))}}, 2, "none of the 2 members"},
		{"one peer silent, another talking: not lost", []step{
			{0, peers(true, heard("a", 0), heard("b", 0))}, {30, peers(true, heard("a", 0), heard("b", 29))}}, -1, ""},
		{"a new peer gets the limit from when it appears", []step{
			{0, peers(true)}, {20, peers(true, peerSigns{ID: "a"})}, {29, peers(true, peerSigns{ID: "a"})},
			{30, peers(true, peerSigns{ID: "a"})}}, 3, "none of the 1 members"},
		{"silence while discovery is unhealthy does not count", []step{
			{0, peers(true, heard("a", 0))}, {30, peers(false, heard("a", 0))}}, -1, ""},
		{"no gossip answer at a check", []step{
			{0, peers(true, heard("a", 0))}, {30, with(func(s *zombieSigns) { s.Peers = nil })}}, -1, ""},
		{"a peer's topology leaves us out for the limit", []step{
			{0, peers(true, heard("a", 0), excludes("b", 0))}, {5, peers(true, heard("a", 5), excludes("b", 5))},
			{10, peers(true, heard("a", 10), excludes("b", 10))}}, 2, "member b has left this member out"},
		{"a peer's topology leaving us out briefly (joining)", []step{
			{0, peers(true, excludes("b", 0))}, {2, peers(true, heard("b", 2))}, {9, peers(true, excludes("b", 9))},
			{15, peers(true, heard("b", 15))}}, -1, ""},
		{"a peer that leaves the topology is forgotten", []step{
			{0, peers(true, excludes("b", 0))}, {5, peers(true)}, {12, peers(true, excludes("b", 12))}}, -1, ""},
	} {
		z := newZombieCheck(3, 10*time.Second)
		lostAt := -1
		var reason string
		for i, st := range tc.steps {
			if r := z.step(sec(st.at), st.s); r != "" {
				lostAt, reason = i, r
				break
			}
		}
		if lostAt != tc.lostAt || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: lost at step %d (%q), want step %d with %q", tc.name, lostAt, reason, tc.lostAt, tc.reason)
		}
	}
}
