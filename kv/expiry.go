package kv

import "time"

// queued is one entry of an expiryQueue: an id, the generation it was given when pushed
// (an id pushed again gets a new one, so the old entry is dead), and its start time.
type queued struct {
	id    string
	gen   uint64
	start time.Time
}

// expiryQueue holds ids in the order they started, for expiring the oldest first in
// amortized O(1). Its owner knows which (id, generation) pairs are still live; entries
// of ids ended or pushed again since stay until expire passes them or compact drops
// them. Invariants: items[:head] are consumed and zeroed; items[head:] are in push
// order (start times non-decreasing when the owner's clock is).
type expiryQueue struct {
	items []queued
	head  int
}

// push appends id with generation gen, started at start.
func (q *expiryQueue) push(id string, gen uint64, start time.Time) {
	q.items = append(q.items, queued{id: id, gen: gen, start: start})
}

// expire consumes, oldest first, every entry that started more than maxAge before now,
// calling end(id, gen) on each (end ignores the entries that are no longer live).
func (q *expiryQueue) expire(now time.Time, maxAge time.Duration, end func(id string, gen uint64)) {
	for q.head < len(q.items) {
		e := q.items[q.head]
		if now.Sub(e.start) <= maxAge {
			break
		}
		end(e.id, e.gen)
		q.items[q.head] = queued{}
		q.head++
	}
}

// compact drops the consumed entries, and the dead ones (live reports false) once the
// queue holds more than 2 × liveCount + 1024 entries, so that it stays within a constant
// factor of the live ids.
func (q *expiryQueue) compact(liveCount int, live func(id string, gen uint64) bool) {
	if q.head > 0 && q.head >= len(q.items) {
		q.items, q.head = q.items[:0], 0
		return
	}
	if len(q.items)-q.head < 2*liveCount+1024 {
		return
	}
	kept := q.items[:0]
	for _, e := range q.items[q.head:] {
		if live(e.id, e.gen) {
			kept = append(kept, e)
		}
	}
	clear(q.items[len(kept):])
	q.items, q.head = kept, 0
}

// len is the number of unconsumed entries, live or dead.
func (q *expiryQueue) len() int { return len(q.items) - q.head }
