package sim

import (
	"context"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/bench"
)

// TestRequestCostCountsAgainstTimeout: the host's request cost reaches the client before
// it gives up or not at all: a request whose engine answers within RequestTimeout but
// whose answer, the cost added, would reach the client after it fails as a timeout, at
// the timeout, as a real client sees it; one within the timeout with its cost succeeds.
func TestRequestCostCountsAgainstTimeout(t *testing.T) {
	req := []bench.Request{{InputLength: 100, OutputLength: 4, HashIDs: []int64{1}}}
	base := Config{Workers: 1, Engine: smallEngine(), BlockTokens: 512}
	plain, _, err := Run(context.Background(), base, req)
	if err != nil || plain.Results[0].Error != "" {
		t.Fatalf("plain run: %v, %+v", err, plain.Results)
	}
	e2e := plain.Results[0].E2E
	const cost = 50 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		wantErr string
	}{
		{"answer, cost included, past the timeout", e2e + cost/2, bench.ErrTimeout},
		{"cost larger than the timeout", cost / 2, bench.ErrTimeout},
		{"answer, cost included, within the timeout", e2e + cost + time.Millisecond, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.RequestOverhead, cfg.RequestTimeout = cost, tc.timeout
			out, _, err := Run(context.Background(), cfg, req)
			if err != nil {
				t.Fatal(err)
			}
			r := out.Results[0]
			if r.Error != tc.wantErr {
				t.Fatalf("result %+v (E2E without the cost %v, timeout %v): want error %q", r, e2e, tc.timeout, tc.wantErr)
			}
			if tc.wantErr != "" && r.E2E != tc.timeout {
				t.Errorf("E2E %v: want the timeout %v (when the client gave up)", r.E2E, tc.timeout)
			}
			if tc.wantErr == "" && r.E2E != e2e+cost {
				t.Errorf("E2E %v: want %v", r.E2E, e2e+cost)
			}
		})
	}
}
