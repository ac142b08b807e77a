// Package pool tells the endpoint picker which endpoints it may pick and how loaded the
// ones that are not Turbine workers are: from a static list or from a Gateway API
// Inference Extension InferencePool and its pods (docs/epp.md).
package pool

import "time"

// Endpoint is one address a gateway may send a request to: a pod's IP and one of the
// pool's target ports.
type Endpoint struct {
	Address string            // "ip:port"
	Pod     string            // "namespace/name"; empty for a static endpoint
	Labels  map[string]string // the pod's labels; nil for a static endpoint
}

// Load is an endpoint's load as its model server reports it on /metrics (vLLM, SGLang
// or Turbine's mock engine names, docs/epp.md).
type Load struct {
	Waiting float64   // requests queued
	Running float64   // requests running
	KVUsage float64   // KV cache in use, 0..1
	At      time.Time // when it was scraped
}

// Source is what the endpoint picker reads; implementations are safe for concurrent use.
type Source interface {
	// Endpoints returns the endpoints ready now, sorted by Address.
	Endpoints() []Endpoint
	// Ready reports whether the pool is resolved and its pods listed at least once.
	Ready() bool
	// Load returns the last load scraped from the endpoint; ok is false when none is known.
	Load(address string) (l Load, ok bool)
}
