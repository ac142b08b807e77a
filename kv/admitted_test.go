package kv

import (
	"errors"
	"testing"
)

// An admitted request (a migration, a prefill retry: RouteInput.Admitted) is placed on
// a busy worker; a new one finds every worker busy and gets ErrAllBusy. The busy
// thresholds gate new work only.
func TestRouteAdmittedIgnoresBusyThresholds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fleet    string
		busy     func(r *Router) // makes workers busy (KV usage over 0.05 of 100 blocks)
		in       RouteInput
		admitted string         // the worker an admitted request gets
		kind     DisaggDecision // and its decision
		prefill  string         // its prefill worker, "" unless remote
	}{
		{name: "aggregated: the only worker busy", fleet: "w0",
			busy:     func(r *Router) { load(r, "w0", "x0", 40) },
			in:       RouteInput{Tokens: prompt(40)},
			admitted: "w0", kind: DisaggAggregated},
		{name: "aggregated: every worker not excluded busy", fleet: "w0 w1 w2",
			busy:     func(r *Router) { load(r, "w0", "x0", 40); load(r, "w1", "x1", 80) },
			in:       RouteInput{Tokens: prompt(40), Exclude: []string{"w2"}},
			admitted: "w0", kind: DisaggAggregated},
		{name: "disaggregated: the decode worker busy", fleet: "d0:decode p0:prefill",
			busy:     func(r *Router) { load(r, "d0", "x0", 40) },
			in:       RouteInput{Tokens: prompt(40)},
			admitted: "d0", kind: DisaggRemote, prefill: "p0"},
		{name: "disaggregated: decode and prefill workers busy, prefilled locally", fleet: "d0:decode p0:prefill",
			// The busy prefill pool still counts as a long queue: no refusal, a local prefill.
			busy:     func(r *Router) { load(r, "d0", "x0", 40); load(r, "p0", "x1", 40) },
			in:       RouteInput{Tokens: prompt(40)},
			admitted: "d0", kind: DisaggLocalPrefillQueue},
		{name: "disaggregated: no decode worker, the prefill pool busy", fleet: "d0:decode p0:prefill",
			busy:     func(r *Router) { load(r, "p0", "x1", 40) },
			in:       RouteInput{Tokens: prompt(40), Exclude: []string{"d0"}},
			admitted: "p0", kind: DisaggAggregated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(disaggBS)
			cfg.Policy = PolicyKV
			cfg.Busy.KVUsage = 0.05
			cfg.Disagg.MaxLocalPrefillTokens = 8
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			parseFleet(t, r, tc.fleet)
			tc.busy(r)

			in := tc.in
			in.RequestID = "new"
			if _, err := r.Route(in, t0, nil); !errors.Is(err, ErrAllBusy) {
				t.Fatalf("a new request: %v, want ErrAllBusy", err)
			}
			in.RequestID, in.Admitted = "moved", true
			d, err := r.Route(in, t0, nil)
			if err != nil {
				t.Fatalf("an admitted request: %v", err)
			}
			pw := ""
			if d.Prefill != nil {
				pw = d.Prefill.WorkerID
			}
			if d.WorkerID != tc.admitted || d.Disagg != tc.kind || pw != tc.prefill {
				t.Fatalf("admitted request: %s on %s, prefill %q; want %s on %s, prefill %q",
					d.Disagg, d.WorkerID, pw, tc.kind, tc.admitted, tc.prefill)
			}
			checkTracking(t, r, "moved", d, len(in.Tokens))
		})
	}
}
