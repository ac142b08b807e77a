package cluster

import (
	"strings"
	"testing"
)

func TestZombieCheck(t *testing.T) {
	healthyIn := zombieSigns{TopologySeen: true, InTopology: true, ProviderHealthy: true}
	absent := zombieSigns{TopologySeen: true, InTopology: false, ProviderHealthy: true}
	absentUnhealthy := zombieSigns{TopologySeen: true, InTopology: false, ProviderHealthy: false}
	neverSeen := zombieSigns{ProviderHealthy: true}
	selfBlocked := healthyIn
	selfBlocked.SelfBlocked = true
	blockedByPeer := healthyIn
	blockedByPeer.BlockedBy = "peer-1"

	for _, tc := range []struct {
		name   string
		steps  []zombieSigns
		lostAt int    // index of the step that reports lost; -1 for never
		reason string // substring of the reason
	}{
		{"healthy member", []zombieSigns{healthyIn, healthyIn, healthyIn, healthyIn}, -1, ""},
		{"own id blocked", []zombieSigns{healthyIn, selfBlocked}, 1, "own id"},
		{"a peer blocked us", []zombieSigns{blockedByPeer}, 0, "peer-1"},
		{"absent three checks in a row", []zombieSigns{healthyIn, absent, absent, absent}, 3, "missing"},
		{"absent, back, absent: the count restarts", []zombieSigns{absent, absent, healthyIn, absent, absent}, -1, ""},
		{"absent while discovery fails does not count", []zombieSigns{absent, absentUnhealthy, absent, absentUnhealthy, absent}, -1, ""},
		{"before the first topology with us", []zombieSigns{neverSeen, neverSeen, neverSeen, neverSeen}, -1, ""},
	} {
		z := zombieCheck{absentLimit: 3}
		lostAt := -1
		var reason string
		for i, s := range tc.steps {
			if r := z.step(s); r != "" {
				lostAt, reason = i, r
				break
			}
		}
		if lostAt != tc.lostAt || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: lost at step %d (%q), want step %d with %q", tc.name, lostAt, reason, tc.lostAt, tc.reason)
		}
	}
}
