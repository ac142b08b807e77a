package kv

import "time"

// Sessions (docs/reference.md §3.5): a client's session id (RouteInput.SessionID: the
// request body's `user`, or an x-session-id header) remembers the worker its previous
// request was routed to, so that the next request of a conversation can find its
// history's KV blocks there. The Router marks that worker in its Candidate
// (SessionWorker); the policy decides whether following it is still cheap. A session is
// forgotten Config.SessionTTL after its last request, and the least recently used ones
// go first when more than Config.MaxSessions are kept.

// sessions is an LRU map from session id to the worker (by string id) its last request
// went to, with a time-to-live since that request. Pure: time is an argument. Not safe
// for concurrent use.
//
// Ownership and invariants: byID maps each kept session to its entry in ents; the
// entries of kept sessions form a doubly linked list (prev, next; -1 ends it) from the
// least recently used (head) to the most recently used (tail), in non-decreasing order
// of their last use when the clock does not go backwards; entries of forgotten
// sessions are on the free list.
type sessions struct {
	ttl        time.Duration
	max        int
	byID       map[string]int32
	ents       []sessionEntry
	free       []int32
	head, tail int32
}

type sessionEntry struct {
	id, worker string
	at         time.Time
	prev, next int32
}

// newSessions returns an empty store keeping at most max sessions (max > 0) for ttl
// (> 0) after their last request.
func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, byID: map[string]int32{}, head: -1, tail: -1}
}

// len is the number of sessions kept.
func (s *sessions) len() int { return len(s.byID) }

// get returns the worker session id's last request went to, if the session is kept
// and that request was routed no more than ttl before now.
func (s *sessions) get(id string, now time.Time) (string, bool) {
	i, ok := s.byID[id]
	if !ok {
		return "", false
	}
	e := &s.ents[i]
	if now.Sub(e.at) > s.ttl {
		s.remove(i)
		return "", false
	}
	return e.worker, true
}

// put records that session id's latest request was routed to worker at now, making it
// the most recently used; the least recently used session goes when the store is full.
func (s *sessions) put(id, worker string, now time.Time) {
	if i, ok := s.byID[id]; ok {
		e := &s.ents[i]
		e.worker, e.at = worker, now
		s.unlink(i)
		s.linkTail(i)
		return
	}
	if len(s.byID) >= s.max {
		s.remove(s.head)
	}
	var i int32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		i = int32(len(s.ents))
		s.ents = append(s.ents, sessionEntry{})
	}
	s.ents[i] = sessionEntry{id: id, worker: worker, at: now}
	s.byID[id] = i
	s.linkTail(i)
}

// expire forgets the sessions whose last request was routed more than ttl before now
// and returns how many.
func (s *sessions) expire(now time.Time) int {
	n := 0
	for s.head >= 0 && now.Sub(s.ents[s.head].at) > s.ttl {
		s.remove(s.head)
		n++
	}
	return n
}

func (s *sessions) remove(i int32) {
	delete(s.byID, s.ents[i].id)
	s.unlink(i)
	s.ents[i] = sessionEntry{}
	s.free = append(s.free, i)
}

func (s *sessions) unlink(i int32) {
	e := &s.ents[i]
	if e.prev >= 0 {
		s.ents[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.ents[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (s *sessions) linkTail(i int32) {
	e := &s.ents[i]
	e.prev, e.next = s.tail, -1
	if s.tail >= 0 {
		s.ents[s.tail].next = i
	} else {
		s.head = i
	}
	s.tail = i
}
