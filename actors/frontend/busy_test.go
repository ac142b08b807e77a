package frontend

import (
	"fmt"
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
		wantKV      *float64 // in the grain message (nil unchanged, -1 off)
		wantPrefill *int64
		want        kv.BusyThresholds
	}{
		{"nothing", gateway.BusyUpdate{}, nil, nil, start},
		{"both", gateway.BusyUpdate{KVUsage: f(0.5), PrefillTokens: i(20000)}, f(0.5), i(20000), kv.BusyThresholds{KVUsage: 0.5, PrefillTokens: 20000}},
		{"kv off", gateway.BusyUpdate{KVUsage: f(0)}, f(-1), nil, kv.BusyThresholds{PrefillTokens: 1000}},
		{"prefill off", gateway.BusyUpdate{PrefillTokens: i(0)}, nil, i(-1), kv.BusyThresholds{KVUsage: 0.9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := thresholdsRequest(tc.u)
			if !samePtr(req.KvUsage, tc.wantKV) || !samePtr(req.PrefillTokens, tc.wantPrefill) {
				t.Errorf("grain message %v, want kv_usage %v prefill_tokens %v", req, fmtPtr(tc.wantKV), fmtPtr(tc.wantPrefill))
			}
			if got := apply(start, tc.u); got != tc.want {
				t.Errorf("applied %+v, want %+v", got, tc.want)
			}
		})
	}
}

// samePtr reports whether two optional fields are both absent or hold one value.
func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// fmtPtr prints an optional field: its value, or "absent".
func fmtPtr[T any](p *T) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
