// Package planner is the pure core of Turbine's planner (docs/reference.md §27): it sizes
// the prefill and decode pools (or the aggregated pool) of one model from what the
// frontends measured and, in SLA mode, from an engine profile.
//
// Pieces:
//
//   - Profile (profile.go, §27.1): what `turbine profile` measured of one engine, per
//     tensor-parallel size — TTFT and prefill throughput per GPU against ISL, ITL and
//     decode throughput per GPU against KV usage and context — read from and written to
//     JSON, interpolated.
//   - Histogram (histogram.go): fixed log-spaced latency buckets, so that the windows of
//     several frontends merge exactly before a percentile is read.
//   - Predictors (predict.go, §27.3): the next interval's load from the past ones,
//     chosen by name.
//   - Planner (core.go, §27.2): Observe one window, Decide the pools' sizes, every
//     decision explained (inputs, prediction, formula terms, clamps).
//
// Like kv, it does no I/O, starts no goroutines and reads no clock: time is an argument.
// The actor that runs it (actors/planner) owns timers, messages and the connectors that
// start and stop workers.
package planner
