package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/hashicorp/consul/api"
)

// memberView decides which member list the Consul provider publishes. It is pure: Consul's
// answers and the clock go in, a member list comes out.
//
// Why it exists: protoactor's MemberList blocks, forever, every member id that leaves the
// published topology, even for one update (docs/actor-library.md §2). So an absence must
// be believed only when it is real:
//
//   - in steady state, a member whose check is not passing or that is missing from
//     Consul's answer has left: it is dropped at once (a dead node leaves within its TTL);
//   - after this provider saw Consul fail (a query error, a registration the agent no
//     longer knows, an index that went backwards, its own member missing from the answer),
//     absences are not trusted until the recovery window has passed since the last such
//     sign: members published before and missing now are kept, so that members
//     registering again one by one never make anyone leave. A member still missing when
//     the window closes is dropped then.
//
// The published list always holds the member itself (for a member; a client has no self),
// so it is never empty while the member runs. Lists are sorted by member id.
//
// Not safe for concurrent use: the provider calls it under its lock.
type memberView struct {
	self   *pcluster.Member // nil for a client
	window time.Duration

	known         map[string]*pcluster.Member // the last published list, by id
	published     bool                        // a list was published at least once
	selfSeen      bool                        // Consul's answers have held self since the last distrust
	distrustUntil time.Time
}

func newMemberView(self *pcluster.Member, window time.Duration) *memberView {
	return &memberView{self: self, window: window, known: map[string]*pcluster.Member{}}
}

// distrust records, at now, a sign that Consul lost or may have lost state: absences are
// not trusted for the recovery window from now on.
func (v *memberView) distrust(now time.Time) {
	if until := now.Add(v.window); until.After(v.distrustUntil) {
		v.distrustUntil = until
	}
	v.selfSeen = false
}

// recovering reports whether absences are untrusted at now.
func (v *memberView) recovering(now time.Time) bool { return now.Before(v.distrustUntil) }

// recoveryEnds is when absences are trusted again; zero when they are now.
func (v *memberView) recoveryEnds(now time.Time) time.Time {
	if v.recovering(now) {
		return v.distrustUntil
	}
	return time.Time{}
}

// observe takes the members whose checks pass in Consul's answer at now and returns the
// list to publish, and whether it differs from the last one published.
func (v *memberView) observe(now time.Time, passing []*pcluster.Member) (members []*pcluster.Member, changed bool) {
	next := make(map[string]*pcluster.Member, len(passing)+1)
	for _, m := range passing {
		next[m.Id] = m
	}
	if v.self != nil {
		if _, ok := next[v.self.Id]; ok {
			v.selfSeen = true
		} else if v.selfSeen {
			// Our registration vanished while we are alive: the agent lost its state.
			v.distrust(now)
		}
		next[v.self.Id] = v.self
	}
	if v.recovering(now) {
		for id, m := range v.known {
			if _, ok := next[id]; !ok {
				next[id] = m
			}
		}
	}
	changed = !v.published || !sameMembers(v.known, next)
	v.known, v.published = next, true
	return sortedMembers(next), changed
}

// current is the last published list (sorted), or nil before the first.
func (v *memberView) current() []*pcluster.Member {
	if !v.published {
		return nil
	}
	return sortedMembers(v.known)
}

func sameMembers(a, b map[string]*pcluster.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for id, m := range a {
		n, ok := b[id]
		if !ok || n.Host != m.Host || n.Port != m.Port || !slices.Equal(n.Kinds, m.Kinds) {
			return false
		}
	}
	return true
}

func sortedMembers(m map[string]*pcluster.Member) []*pcluster.Member {
	out := make([]*pcluster.Member, 0, len(m))
	for _, x := range m {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b *pcluster.Member) int { return strings.Compare(a.Id, b.Id) })
	return out
}

// passingMembers converts a health answer for the cluster's service into the members whose
// checks all pass, in protoactor's schema: Meta["id"] is the member id (absent:
// "cluster@host:port"), tags are the kinds, Address/Port the remoting endpoint.
func passingMembers(clusterName string, entries []*api.ServiceEntry) []*pcluster.Member {
	out := make([]*pcluster.Member, 0, len(entries))
	for _, e := range entries {
		if e.Service == nil || len(e.Checks) == 0 || e.Checks.AggregatedStatus() != api.HealthPassing {
			continue
		}
		id := e.Service.Meta["id"]
		if id == "" {
			id = fmt.Sprintf("%s@%s:%d", clusterName, e.Service.Address, e.Service.Port)
		}
		out = append(out, &pcluster.Member{
			Id:    id,
			Host:  e.Service.Address,
			Port:  int32(e.Service.Port),
			Kinds: slices.Clone(e.Service.Tags),
		})
	}
	return out
}
