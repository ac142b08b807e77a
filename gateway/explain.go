package gateway

import (
	"encoding/json"
	"math"
)

// Explained routing (`"turbine": {"explain_route": true}`, docs/reference.md §3.1): the
// `turbine` extension object of the answer gains `route`, the router's decision for the
// request with every candidate's cost terms.

// RouteExplanation is the `route` object: the latest route of the request (a migrated
// request was routed again). In disaggregated serving the candidates are those of the
// decode worker's choice, and the predicted overlap is the prefill worker's when the
// prompt was prefilled there (remote), else the decode worker's.
type RouteExplanation struct {
	// PredictedOverlapTokens: the prompt tokens the router expects the worker that
	// computes the prompt to find in its prefix cache: its overlap in whole KV blocks,
	// at most the blocks before the prompt's last token (an engine always computes that
	// one). Compare with usage.prompt_tokens_details.cached_tokens.
	PredictedOverlapTokens int `json:"predicted_overlap_tokens"`
	// Candidates: every worker the policy weighed, in the router's order.
	Candidates []RouteCandidate `json:"candidates"`
}

// RouteCandidate is one worker the router weighed.
type RouteCandidate struct {
	WorkerID string `json:"worker_id"`
	// OverlapBlocks: leading prompt blocks cached on the worker (KV blocks).
	OverlapBlocks int `json:"overlap_blocks"`
	// Cost: the policy's cost (the lowest wins unless the router draws); 0 for policies
	// without one (round-robin, random).
	Cost JSONFloat `json:"cost"`
	// Terms: the cost's named terms (the unit is in the name); empty for policies
	// without a cost.
	Terms  map[string]JSONFloat `json:"terms"`
	Chosen bool                 `json:"chosen"`
}

// JSONFloat is a float64 written as a JSON number, or null when it is not finite
// (JSON has no infinities).
type JSONFloat float64

// MarshalJSON implements json.Marshaler.
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

var _ json.Marshaler = JSONFloat(0)

// ExplainedStream is implemented by streams whose route can be explained: the latest
// route's explanation, nil when the request did not ask (GenerateRequest.ExplainRoute)
// or the router gave none. The answer may change while the stream runs (a migration
// routes again).
type ExplainedStream interface {
	RouteExplanation() *RouteExplanation
}
