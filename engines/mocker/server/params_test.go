package server

import (
	"flag"
	"slices"
	"testing"
	"time"
)

// TestParamsArgsRoundTrip: the flags Args renders, parsed by Flags over the defaults,
// give back the parameters (the KV transfer port's address aside, which Args leaves to
// the launcher), whether every parameter differs from its default or is unset.
func TestParamsArgsRoundTrip(t *testing.T) {
	changed := DefaultParams()
	e := &changed.Engine
	e.BlockSize, e.NumGPUBlocks, e.MaxNumSeqs, e.MaxNumBatchedTokens, e.MaxModelLen = 16, 100, 3, 512, 1024
	e.SpeedupRatio, e.MeanOutputTokens, e.Seed = 2.5, 9, 1<<63+5
	e.EnablePrefixCaching, e.EnableChunkedPrefill = false, false
	changed.Dialect, changed.IncrementalStreamingOutput, changed.EventBufferMaxSize = DialectSGLang, true, 7
	changed.Role, changed.ToolCallParser, changed.ReasoningParser = RolePrefill, "hermes", "qwen3"
	changed.Engine.TensorParallelSize, changed.Profile = 4, "/profiles/engine.json"
	changed.KVTransfer = KVTransferOptions{Bandwidth: 1e9, BytesPerToken: 4096, Timeout: time.Minute,
		ConnectTimeout: 3 * time.Second, ReadTimeout: 4 * time.Second, LoadFailurePolicy: LoadFailureRecompute}
	unset := DefaultParams()
	unset.Dialect, unset.Role, unset.KVTransfer = "", "", KVTransferOptions{}
	for _, tc := range []struct {
		name string
		p    Params
	}{{"every parameter changed", changed}, {"defaults", DefaultParams()}, {"unset", unset}} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.p.Args()
			got := DefaultParams()
			fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
			got.Flags(fs)
			if err := fs.Parse(args); err != nil {
				t.Fatalf("parse %q: %v", args, err)
			}
			want := tc.p
			if tc.name == "unset" { // unset parameters take the engine's defaults
				want = DefaultParams()
			}
			if got != want {
				t.Fatalf("Args %q parsed as\n%+v\nwant %+v", args, got, want)
			}
			if slices.Contains(args, "--kv-transfer-host") || slices.Contains(args, "--kv-transfer-port") {
				t.Fatalf("Args %q renders the KV transfer port's address", args)
			}
		})
	}
}
