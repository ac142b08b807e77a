package planner

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// FuzzReport: a report from the network is merged or refused with ErrBadReport, never
// a panic; what is merged has finite, non-negative sums and the counts it carried.
func FuzzReport(f *testing.F) {
	f.Add("m", "f1", int64(5000), uint32(3), 300.0, 30.0, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add("other", "", int64(-1), uint32(0), math.NaN(), math.Inf(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2})
	f.Fuzz(func(t *testing.T, model, frontend string, durationMs int64, requests uint32, isl, osl float64, raw []byte) {
		var counts []uint64
		for i := 0; i+8 <= len(raw); i += 8 {
			counts = append(counts, binary.LittleEndian.Uint64(raw[i:]))
		}
		r := &messages.PlannerReport{Model: model, FrontendId: frontend, DurationMs: durationMs, Requests: requests,
			IslSum: isl, OslSum: osl, TtftBuckets: counts, ItlBuckets: counts}
		w, err := windowOf("m", r)
		if err != nil {
			if !errors.Is(err, ErrBadReport) {
				t.Fatalf("error %v does not wrap ErrBadReport", err)
			}
			return
		}
		var n uint64
		for _, c := range counts {
			n += c
		}
		if model != "m" || frontend == "" || w.TTFT.N != n || w.ITL.N != n || !(w.ISLSum >= 0) || math.IsInf(w.OSLSum, 0) {
			t.Fatalf("accepted %v as %+v", r, w)
		}
	})
}

// FuzzParseWorkload: a flag value parses or is refused; what parses prints back to
// itself.
func FuzzParseWorkload(f *testing.F) {
	for _, s := range []string{"deployment/prefill", "sts/decode", "pod/x", "/", "deployment/a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWorkload(s)
		if err != nil {
			return
		}
		again, err := ParseWorkload(w.String())
		if err != nil || again != w {
			t.Fatalf("%q parsed as %v, which reads back as %v, %v", s, w, again, err)
		}
	})
}
