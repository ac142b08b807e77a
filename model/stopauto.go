package model

import (
	"bytes"
	"slices"
)

// stopAutomaton is an Aho–Corasick automaton over a request's stop strings, on bytes.
// Node 0 is the root (the empty string); every other node is a proper or whole prefix of
// some stop string, and a matcher's state is the node of the longest suffix of the text
// so far that is such a prefix. One byte costs an amortized constant number of steps
// whatever the number of stop strings; building costs time and memory linear in their
// total length (21 bytes per node, at most one node per byte of stop strings, and
// about as much again while building).
//
// An automaton is immutable once built; matchers of equal lists share it, from any
// goroutine (see compiledStops).
//
// Arrays are indexed by node: node n's outgoing edges are labels[first[n]:first[n+1]]
// (sorted bytes) leading to next[first[n]:first[n+1]].
type stopAutomaton struct {
	// root is the root's transition for every byte, failures included (0: stay at root).
	root   [256]int32
	first  []int32
	labels []byte
	next   []int32
	// fail is the node of the longest proper suffix of the node's string that is also a
	// node; depth is the node's string length.
	fail  []int32
	depth []int32
	// match is the length of the longest stop string that is a suffix of the node's
	// string (0: none): the stop string that ends there, the longest of those ending at
	// the same byte.
	match []int32
}

// newStopAutomaton builds the automaton for stops, which must be non-empty, free of
// empty strings and sorted without duplicates.
func newStopAutomaton(stops []string) *stopAutomaton {
	total := 1
	for _, s := range stops {
		total += len(s)
	}
	// The trie, built from the sorted strings in one pass: the path of the previous
	// string is kept, the new one shares its first lcp nodes and adds the rest. Nodes
	// are numbered in creation order, so each parent's children come in byte order.
	parent := make([]int32, 1, total)
	label := make([]byte, 1, total)
	depth := make([]int32, 1, total)
	match := make([]int32, 1, total)
	path := []int32{0}
	prev := ""
	for _, s := range stops {
		l := 0
		for l < len(prev) && l < len(s) && prev[l] == s[l] {
			l++
		}
		path = path[:l+1]
		for i := l; i < len(s); i++ {
			n := int32(len(parent))
			parent = append(parent, path[i])
			label = append(label, s[i])
			depth = append(depth, int32(i+1))
			match = append(match, 0)
			path = append(path, n)
		}
		match[path[len(s)]] = int32(len(s))
		prev = s
	}
	nodes := len(parent)

	a := &stopAutomaton{
		first:  make([]int32, nodes+1),
		labels: make([]byte, nodes-1),
		next:   make([]int32, nodes-1),
		fail:   make([]int32, nodes),
		depth:  depth,
		match:  match,
	}
	for n := 1; n < nodes; n++ {
		a.first[parent[n]+1]++
	}
	for n := range nodes {
		a.first[n+1] += a.first[n]
	}
	fill := slices.Clone(a.first[:nodes])
	for n := 1; n < nodes; n++ {
		p := parent[n]
		a.labels[fill[p]] = label[n]
		a.next[fill[p]] = int32(n)
		fill[p]++
	}

	// Failure links, breadth first: a node's failure is found from its parent's, which
	// is shallower and so already known, as are the failures of every node on the way.
	queue := make([]int32, 0, nodes)
	for e := a.first[0]; e < a.first[1]; e++ {
		a.root[a.labels[e]] = a.next[e]
		queue = append(queue, a.next[e])
	}
	for qi := 0; qi < len(queue); qi++ {
		n := queue[qi]
		if a.match[n] == 0 {
			a.match[n] = a.match[a.fail[n]]
		}
		for e := a.first[n]; e < a.first[n+1]; e++ {
			c := a.next[e]
			a.fail[c] = a.step(a.fail[n], a.labels[e])
			queue = append(queue, c)
		}
	}
	return a
}

// step returns the state after byte b in state s.
func (a *stopAutomaton) step(s int32, b byte) int32 {
	for s != 0 {
		lo, hi := a.first[s], a.first[s+1]
		if i := bytes.IndexByte(a.labels[lo:hi], b); i >= 0 {
			return a.next[lo+int32(i)]
		}
		s = a.fail[s]
	}
	return a.root[b]
}
