package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// fakeKvbm is a backend reaching the block managers sts.
type fakeKvbm struct {
	*fakeBackend
	sts []*messages.KvbmStatus
}

func (f *fakeKvbm) KvbmStatuses(context.Context) ([]*messages.KvbmStatus, error) { return f.sts, nil }

var kvbmStarted = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func kvbmStatus() *messages.KvbmStatus {
	return &messages.KvbmStatus{NodeId: "gpu-7", Policy: "demote", DiskDir: "/nvme/kvbm", RespAddress: "resp://127.0.0.1:6380",
		Epoch: uint64(kvbmStarted.UnixNano()), Models: []string{"qwen"}, PutBytes: 20e9, GetBytes: 10e9, Errors: 1,
		Tiers: []*messages.KvbmTierStatus{
			{Tier: messages.KvTier_KV_TIER_HOST, CapacityBytes: 4 << 30, UsedBytes: 1 << 30, Blocks: 512, Hits: 6, Misses: 4, Stored: 12},
			{Tier: messages.KvTier_KV_TIER_DISK, CapacityBytes: 64 << 30, UsedBytes: 2 << 30, Blocks: 1024, Hits: 2, Misses: 2, Stored: 9, Evicted: 1},
		}}
}

// TestKvbmNodeOf: hit rates per tier and overall, offloads (puts, not promotions),
// onboards, and GB/s since the start.
func TestKvbmNodeOf(t *testing.T) {
	n := KvbmNodeOf(kvbmStatus(), kvbmStarted.Add(10*time.Second))
	switch {
	case n.NodeID != "gpu-7" || n.StartedAt != "2026-01-02T03:04:05Z" || n.UptimeS != 10:
		t.Fatalf("node %+v", n)
	case len(n.Tiers) != 2 || n.Tiers[0].Tier != "host" || n.Tiers[0].HitRate != 0.6 || n.Tiers[1].Tier != "disk" || n.Tiers[1].HitRate != 0.5:
		t.Fatalf("tiers %+v", n.Tiers)
	case n.Reads != 10 || n.Hits != 8 || n.HitRate != 0.8 || n.Onboards != 8 || n.Offloads != 10:
		t.Fatalf("reads %d hits %d rate %g onboards %d offloads %d; want 10, 8, 0.8, 8, 10", n.Reads, n.Hits, n.HitRate, n.Onboards, n.Offloads)
	case n.OffloadGBPerS != 2 || n.OnboardGBPerS != 1:
		t.Fatalf("GB/s %g %g, want 2 and 1", n.OffloadGBPerS, n.OnboardGBPerS)
	}
	if z := KvbmNodeOf(&messages.KvbmStatus{NodeId: "x", Epoch: uint64(kvbmStarted.UnixNano())}, kvbmStarted); z.HitRate != 0 || z.OffloadGBPerS != 0 || z.Tiers == nil {
		t.Fatalf("an idle block manager: %+v", z)
	}
}

// TestAdminKvbm: GET /admin/kvbm lists the nodes (an empty list with none), refuses other
// methods, is an admin route, and is absent from a backend that reaches no block manager.
func TestAdminKvbm(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		sts          []*messages.KvbmStatus
		code         int
		want         []string
	}{
		{"none", "GET", nil, 200, []string{`{"nodes":[]}`}},
		{"one", "GET", []*messages.KvbmStatus{kvbmStatus()}, 200, []string{`"node_id":"gpu-7"`, `"policy":"demote"`,
			`"resp_address":"resp://127.0.0.1:6380"`, `"tier":"host","capacity_bytes":4294967296,"used_bytes":1073741824,"blocks":512`,
			`"hit_rate":0.8`, `"models":["qwen"]`}},
		{"post", "POST", nil, 405, []string{`"code":"method_not_allowed"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := serve(newTestServer(t, &fakeKvbm{fakeBackend: newFakeBackend(), sts: tc.sts}), tc.method, "/admin/kvbm", "")
			if rr.Code != tc.code {
				t.Fatalf("%d %s, want %d", rr.Code, rr.Body.String(), tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(rr.Body.String(), w) {
					t.Errorf("body %s\nlacks %s", rr.Body.String(), w)
				}
			}
			if tc.code == 200 {
				var l KvbmList
				if err := json.Unmarshal(rr.Body.Bytes(), &l); err != nil || len(l.Nodes) != len(tc.sts) {
					t.Fatalf("answer is no KvbmList of %d nodes: %v", len(tc.sts), err)
				}
			}
		})
	}
	req, _ := http.NewRequest("GET", "/admin/kvbm", nil)
	req.RemoteAddr = "192.0.2.7:40000"
	rr := newRecorder()
	newTestServer(t, &fakeKvbm{fakeBackend: newFakeBackend()}).ServeHTTP(rr, req)
	if rr.Code != 403 {
		t.Fatalf("remote client without an admin key: %d %s, want 403", rr.Code, rr.Body.String())
	}
	if rr := serve(newTestServer(t, newFakeBackend()), "GET", "/admin/kvbm", ""); rr.Code != 404 {
		t.Fatalf("backend without block managers: %d, want 404", rr.Code)
	}
}
