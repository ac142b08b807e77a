package gateway

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/turbine-llm/turbine/messages"
)

// The KV block managers' admin route (docs/reference.md §9.5): GET /admin/kvbm lists every
// node's block manager with its tiers' figures.

// KvbmAdmin is implemented by backends that can reach the cluster's KV block managers;
// the server then serves GET /admin/kvbm.
type KvbmAdmin interface {
	// KvbmStatuses returns the status of every block manager that answered (none: an
	// empty list), in node order. Members without one are skipped, as are those that did
	// not answer in time.
	KvbmStatuses(ctx context.Context) ([]*messages.KvbmStatus, error)
}

// KvbmList is the answer of GET /admin/kvbm.
type KvbmList struct {
	Nodes []KvbmNode `json:"nodes"`
}

// KvbmNode is one node's block manager. Rates (GB/s, 1e9 bytes per second) are since the
// block manager started (its epoch is its start time in Unix nanoseconds).
type KvbmNode struct {
	NodeID      string     `json:"node_id"`
	Policy      string     `json:"policy"`
	DiskDir     string     `json:"disk_dir,omitempty"`
	RESPAddress string     `json:"resp_address,omitempty"`
	LMAddress   string     `json:"lm_address,omitempty"`
	StartedAt   string     `json:"started_at"` // RFC 3339, UTC
	UptimeS     float64    `json:"uptime_s"`
	Models      []string   `json:"models"`
	Tiers       []KvbmTier `json:"tiers"`
	// Reads, hits and their ratio over every tier: reads are gets (host hits and
	// misses), hits those some tier served.
	Reads   uint64  `json:"reads"`
	Hits    uint64  `json:"hits"`
	HitRate float64 `json:"hit_rate"`
	// Offloads: blocks engines put (entered host memory other than by a promotion);
	// onboards: blocks read back (hits). Their bytes, and GB/s since the start.
	Offloads      uint64  `json:"offloads"`
	Onboards      uint64  `json:"onboards"`
	OffloadBytes  uint64  `json:"offload_bytes"`
	OnboardBytes  uint64  `json:"onboard_bytes"`
	OffloadGBPerS float64 `json:"offload_gb_per_s"`
	OnboardGBPerS float64 `json:"onboard_gb_per_s"`
	Errors        uint64  `json:"errors"`
	// FS is the LMCache fs:// directory the block manager keeps under a cap (janitor
	// mode), absent without one.
	FS *KvbmFS `json:"fs,omitempty"`
}

// KvbmFS is an LMCache fs:// directory under a block manager's cap: its .data files'
// bytes of the cap, files held, files seen by the scans and deleted to keep the cap.
type KvbmFS struct {
	Dir           string `json:"dir"`
	CapacityBytes int64  `json:"capacity_bytes"`
	UsedBytes     int64  `json:"used_bytes"`
	Files         int64  `json:"files"`
	Seen          uint64 `json:"seen"`
	Evicted       uint64 `json:"evicted"`
}

// KvbmTier is one tier of a node's block manager: bytes used of its capacity, blocks,
// reads it served (hits) and those that reached it and missed, its hit rate (hits /
// (hits + misses): of the reads that reached this tier), blocks stored and evicted.
type KvbmTier struct {
	Tier          string  `json:"tier"` // "host", "disk", "remote"
	CapacityBytes int64   `json:"capacity_bytes"`
	UsedBytes     int64   `json:"used_bytes"`
	Blocks        int64   `json:"blocks"`
	Pinned        int64   `json:"pinned"`
	Hits          uint64  `json:"hits"`
	Misses        uint64  `json:"misses"`
	HitRate       float64 `json:"hit_rate"`
	Stored        uint64  `json:"stored"`
	Evicted       uint64  `json:"evicted"`
	BytesIn       uint64  `json:"bytes_in"`
	BytesOut      uint64  `json:"bytes_out"`
}

// KvbmNodeOf is st's entry in GET /admin/kvbm at now.
func KvbmNodeOf(st *messages.KvbmStatus, now time.Time) KvbmNode {
	n := KvbmNode{NodeID: st.GetNodeId(), Policy: st.GetPolicy(), DiskDir: st.GetDiskDir(), RESPAddress: st.GetRespAddress(),
		LMAddress: st.GetLmAddress(), Models: append([]string{}, st.GetModels()...), Tiers: []KvbmTier{},
		OffloadBytes: st.GetPutBytes(), OnboardBytes: st.GetGetBytes(), Errors: st.GetErrors()}
	start := time.Unix(0, int64(st.GetEpoch()))
	n.StartedAt = start.UTC().Format(time.RFC3339Nano)
	up := now.Sub(start).Seconds()
	n.UptimeS = max(up, 0)
	var hostStored, diskHits uint64
	for _, t := range st.GetTiers() {
		name := strings.ToLower(strings.TrimPrefix(t.GetTier().String(), "KV_TIER_"))
		n.Tiers = append(n.Tiers, KvbmTier{Tier: name, CapacityBytes: t.GetCapacityBytes(), UsedBytes: t.GetUsedBytes(),
			Blocks: t.GetBlocks(), Pinned: t.GetPinned(), Hits: t.GetHits(), Misses: t.GetMisses(),
			HitRate: ratio(t.GetHits(), t.GetHits()+t.GetMisses()), Stored: t.GetStored(), Evicted: t.GetEvicted(),
			BytesIn: t.GetBytesIn(), BytesOut: t.GetBytesOut()})
		n.Hits += t.GetHits()
		switch t.GetTier() {
		case messages.KvTier_KV_TIER_HOST:
			n.Reads = t.GetHits() + t.GetMisses()
			hostStored = t.GetStored()
		case messages.KvTier_KV_TIER_DISK:
			diskHits = t.GetHits()
		}
	}
	n.HitRate = ratio(n.Hits, n.Reads)
	if fs := st.GetFs(); fs != nil {
		n.FS = &KvbmFS{Dir: st.GetFsDir(), CapacityBytes: fs.GetCapacityBytes(), UsedBytes: fs.GetUsedBytes(),
			Files: fs.GetBlocks(), Seen: fs.GetStored(), Evicted: fs.GetEvicted()}
	}
	n.Onboards = n.Hits
	if hostStored > diskHits {
		n.Offloads = hostStored - diskHits
	}
	if up > 0 {
		n.OffloadGBPerS = float64(n.OffloadBytes) / up / 1e9
		n.OnboardGBPerS = float64(n.OnboardBytes) / up / 1e9
	}
	return n
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// handleKvbm serves GET /admin/kvbm: every node's block manager (an empty list when there
// is none).
func (s *Server) handleKvbm(w http.ResponseWriter, r *http.Request) {
	admin, ok := s.backend.(KvbmAdmin)
	if !ok {
		writeError(w, newError(KindRouteNotFound, "", "This server's backend reaches no KV block manager."), 0)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		writeError(w, newError(KindMethodNotAllowed, "", "Method %s is not allowed on %s (use GET).", clipName(r.Method), r.URL.Path), 0)
		return
	}
	sts, err := admin.KvbmStatuses(r.Context())
	if err != nil {
		writeError(w, &APIError{Kind: KindBackendError, Cause: err, Message: "The block managers could not be listed; retry later."}, s.cfg.RetryAfter)
		return
	}
	out := KvbmList{Nodes: []KvbmNode{}}
	now := time.Now()
	for _, st := range sts {
		out.Nodes = append(out.Nodes, KvbmNodeOf(st, now))
	}
	writeJSON(w, http.StatusOK, out)
}
