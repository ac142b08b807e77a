package kvbm

import (
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
	"github.com/turbine-llm/turbine/kv"
	store "github.com/turbine-llm/turbine/kvbm"
	"github.com/turbine-llm/turbine/messages"
)

// tiers are the tiers a status and the metrics list: those a store has.
var tiers = []kv.Tier{kv.TierHost, kv.TierDisk}

// StatusOf is the status of a block manager configured by cfg whose store's figures are
// st, serving RESP at respURL and lm:// at lmURL ("" when off), holding models' blocks.
// The disk tier is listed only when the store has one.
func StatusOf(cfg Config, st store.Stats, respURL, lmURL string, models []string) *messages.KvbmStatus {
	out := &messages.KvbmStatus{NodeId: cfg.NodeID, Policy: cfg.Store.Policy.String(), DiskDir: cfg.Store.DiskDir,
		RespAddress: respURL, LmAddress: lmURL, Epoch: cfg.Epoch, Models: models,
		PutBytes: st.PutBytes, GetBytes: st.GetBytes, Errors: st.Errors}
	for _, t := range tiers {
		if t == kv.TierDisk && cfg.Store.DiskDir == "" {
			continue
		}
		ts := st.Tiers[t]
		capacity := ts.CapacityBytes
		if capacity == 0 {
			capacity = cfg.Store.HostBytes
			if t == kv.TierDisk {
				capacity = cfg.Store.DiskBytes
			}
		}
		out.Tiers = append(out.Tiers, &messages.KvbmTierStatus{Tier: TierProto(t), CapacityBytes: capacity,
			UsedBytes: ts.UsedBytes, Blocks: ts.Blocks, Hits: ts.Hits, Misses: ts.Misses, Stored: ts.Stored,
			Evicted: ts.Evicted, BytesIn: ts.BytesIn, BytesOut: ts.BytesOut, Pinned: ts.Pinned})
	}
	return out
}

// FSStatusOf is the status of an fs:// janitor whose figures are st (a disk tier's).
func FSStatusOf(st store.TierStats) *messages.KvbmTierStatus {
	return &messages.KvbmTierStatus{Tier: TierProto(kv.TierDisk), CapacityBytes: st.CapacityBytes, UsedBytes: st.UsedBytes,
		Blocks: st.Blocks, Stored: st.Stored, Evicted: st.Evicted, BytesIn: st.BytesIn}
}

// Metric families of a block manager (docs/reference.md §9.5), on metrics' default set,
// labelled {node, tier} or {node}.
const (
	MetricBytes         = "turbine_kvbm_bytes"                    // gauge {node,tier}: bytes held
	MetricCapacityBytes = "turbine_kvbm_capacity_bytes"           // gauge {node,tier}: the tier's cap
	MetricBlocks        = "turbine_kvbm_blocks"                   // gauge {node,tier}: blocks held
	MetricPinned        = "turbine_kvbm_pinned_blocks"            // gauge {node,tier}: blocks being read
	MetricHits          = "turbine_kvbm_hits_total"               // counter {node,tier}: reads served from the tier
	MetricMisses        = "turbine_kvbm_misses_total"             // counter {node,tier}: reads of keys the tier did not hold
	MetricStored        = "turbine_kvbm_stored_total"             // counter {node,tier}: blocks written into the tier
	MetricEvictions     = "turbine_kvbm_evictions_total"          // counter {node,tier}: blocks evicted from the tier
	MetricTierIn        = "turbine_kvbm_tier_written_bytes_total" // counter {node,tier}: bytes written into the tier
	MetricTierOut       = "turbine_kvbm_tier_read_bytes_total"    // counter {node,tier}: bytes read from the tier
	MetricOffloads      = "turbine_kvbm_offloads_total"           // counter {node}: blocks put by engines
	MetricOnboards      = "turbine_kvbm_onboards_total"           // counter {node}: blocks read back by engines (hits)
	MetricOffloadBytes  = "turbine_kvbm_offload_bytes_total"      // counter {node}: bytes accepted by puts
	MetricOnboardBytes  = "turbine_kvbm_onboard_bytes_total"      // counter {node}: bytes served by gets
	MetricErrors        = "turbine_kvbm_errors_total"             // counter {node}: requests answered with an error

	// The fs:// janitor's (Config.FS), labelled {node}.
	MetricFSBytes         = "turbine_kvbm_fs_bytes"            // gauge: bytes of the .data files
	MetricFSCapacityBytes = "turbine_kvbm_fs_capacity_bytes"   // gauge: the directory's cap
	MetricFSFiles         = "turbine_kvbm_fs_files"            // gauge: .data files held
	MetricFSSeen          = "turbine_kvbm_fs_files_seen_total" // counter: .data files found by the scans
	MetricFSDeleted       = "turbine_kvbm_fs_evictions_total"  // counter: .data files deleted to keep the cap
)

// metricHelp is each family's # HELP text.
var metricHelp = map[string]string{
	MetricBytes:         "Bytes of blocks the tier holds.",
	MetricCapacityBytes: "The tier's byte cap.",
	MetricBlocks:        "Blocks the tier holds.",
	MetricPinned:        "Blocks of the tier being read now.",
	MetricHits:          "Reads the tier served.",
	MetricMisses:        "Reads that reached the tier for a key it did not hold.",
	MetricStored:        "Blocks written into the tier (puts, demotions, promotions).",
	MetricEvictions:     "Blocks evicted from the tier to keep its cap.",
	MetricTierIn:        "Bytes written into the tier (a demotion counts as written to disk).",
	MetricTierOut:       "Bytes the tier served to readers (demotions are not reads).",
	MetricOffloads:      "Blocks engines put into the block manager.",
	MetricOnboards:      "Blocks engines read back from the block manager (hits of every tier).",
	MetricOffloadBytes:  "Bytes engines put into the block manager.",
	MetricOnboardBytes:  "Bytes engines read back from the block manager.",
	MetricErrors:        "Requests answered with an error.",

	MetricFSBytes:         "Bytes of the fs:// directory's .data files.",
	MetricFSCapacityBytes: "The fs:// directory's byte cap.",
	MetricFSFiles:         ".data files in the fs:// directory.",
	MetricFSSeen:          ".data files the fs:// scans found.",
	MetricFSDeleted:       ".data files deleted to keep the fs:// directory under its cap.",
}

// writeMetadata writes family name's # HELP (metricHelp's text) and # TYPE lines when
// metrics.ExposeMetadata is on.
func writeMetadata(w io.Writer, name, typ string) {
	var probe bytes.Buffer
	metrics.WriteMetadataIfNeeded(&probe, name, typ) // empty when metadata is off
	if probe.Len() == 0 {
		return
	}
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, metricHelp[name], name, typ)
}

// Offloads is the blocks engines put into a store with figures st: the blocks that
// entered host memory other than by a promotion from disk (a disk hit).
func Offloads(st store.Stats) uint64 {
	in, promoted := st.Tiers[kv.TierHost].Stored, st.Tiers[kv.TierDisk].Hits
	if promoted > in {
		return 0
	}
	return in - promoted
}

// Onboards is the blocks engines read back from a store with figures st: the hits of
// every tier.
func Onboards(st store.Stats) uint64 {
	var n uint64
	for _, t := range tiers {
		n += st.Tiers[t].Hits
	}
	return n
}

// WriteMetrics writes node's figures st in Prometheus text format (metadata lines when
// metrics.ExposeMetadata is on).
func WriteMetrics(w io.Writer, node string, st store.Stats) {
	perTier := []struct {
		name, typ string
		val       func(store.TierStats) float64
	}{
		{MetricBytes, "gauge", func(t store.TierStats) float64 { return float64(t.UsedBytes) }},
		{MetricCapacityBytes, "gauge", func(t store.TierStats) float64 { return float64(t.CapacityBytes) }},
		{MetricBlocks, "gauge", func(t store.TierStats) float64 { return float64(t.Blocks) }},
		{MetricPinned, "gauge", func(t store.TierStats) float64 { return float64(t.Pinned) }},
		{MetricHits, "counter", func(t store.TierStats) float64 { return float64(t.Hits) }},
		{MetricMisses, "counter", func(t store.TierStats) float64 { return float64(t.Misses) }},
		{MetricStored, "counter", func(t store.TierStats) float64 { return float64(t.Stored) }},
		{MetricEvictions, "counter", func(t store.TierStats) float64 { return float64(t.Evicted) }},
		{MetricTierIn, "counter", func(t store.TierStats) float64 { return float64(t.BytesIn) }},
		{MetricTierOut, "counter", func(t store.TierStats) float64 { return float64(t.BytesOut) }},
	}
	for _, f := range perTier {
		writeMetadata(w, f.name, f.typ)
		for _, t := range tiers {
			fmt.Fprintf(w, "%s{node=%q,tier=%q} %s\n", f.name, node, t.String(), strconv.FormatFloat(f.val(st.Tiers[t]), 'f', -1, 64))
		}
	}
	for _, f := range []struct {
		name string
		val  uint64
	}{
		{MetricOffloads, Offloads(st)}, {MetricOnboards, Onboards(st)},
		{MetricOffloadBytes, st.PutBytes}, {MetricOnboardBytes, st.GetBytes}, {MetricErrors, st.Errors},
	} {
		writeMetadata(w, f.name, "counter")
		fmt.Fprintf(w, "%s{node=%q} %d\n", f.name, node, f.val)
	}
}

// WriteFSMetrics writes node's fs:// janitor figures st (Janitor.Stats) in Prometheus
// text format.
func WriteFSMetrics(w io.Writer, node string, st store.TierStats) {
	for _, f := range []struct {
		name, typ string
		val       int64
	}{
		{MetricFSBytes, "gauge", st.UsedBytes}, {MetricFSCapacityBytes, "gauge", st.CapacityBytes},
		{MetricFSFiles, "gauge", st.Blocks}, {MetricFSSeen, "counter", int64(st.Stored)},
		{MetricFSDeleted, "counter", int64(st.Evicted)},
	} {
		writeMetadata(w, f.name, f.typ)
		fmt.Fprintf(w, "%s{node=%q} %d\n", f.name, node, f.val)
	}
}
