package frontend

import (
	"testing"

	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/kv"
)

func TestBusyUpdates(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	start := kv.BusyThresholds{KVUsage: 0.9, PrefillTokens: 1000}
	for _, tc := range []struct {
		name        string
		u           gateway.BusyUpdate
		wantKV      float64 // in the grain message (0 unchanged, -1 off)
		wantPrefill int64
		want        kv.BusyThresholds
	}{
		{"nothing", gateway.BusyUpdate{}, 0, 0, start},
		{"both", gateway.BusyUpdate{KVUsage: f(0.5), PrefillTokens: i(20000)}, 0.5, 20000, kv.BusyThresholds{KVUsage: 0.5, PrefillTokens: 20000}},
		{"kv off", gateway.BusyUpdate{KVUsage: f(0)}, -1, 0, kv.BusyThresholds{PrefillTokens: 1000}},
		{"prefill off", gateway.BusyUpdate{PrefillTokens: i(0)}, 0, -1, kv.BusyThresholds{KVUsage: 0.9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := thresholdsRequest(tc.u)
			if req.KvUsage != tc.wantKV || req.PrefillTokens != tc.wantPrefill {
				t.Errorf("grain message %v, want kv_usage %v prefill_tokens %v", req, tc.wantKV, tc.wantPrefill)
			}
			if got := apply(start, tc.u); got != tc.want {
				t.Errorf("applied %+v, want %+v", got, tc.want)
			}
		})
	}
}
