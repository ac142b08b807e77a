package kvbm

import (
	"fmt"
	"testing"
)

// BenchmarkStorePutGet2MiB puts and gets 2 MiB blocks (a 16-token block of an 8B model,
// docs/reference.md §9.1) and reports GB/s moved (bytes put plus bytes got). host: both
// in host memory. disk: write-through with room in host memory for one block, so every
// put writes a file and every get reads one (and promotes it).
func BenchmarkStorePutGet2MiB(b *testing.B) {
	const size = 2 << 20
	data := block("bench", 0, size)
	fp := footprint("bench/000000", nil, data)
	for _, c := range []struct {
		name string
		cfg  func(dir string) Config
	}{
		{"host", func(string) Config { return Config{HostBytes: 64 * fp} }},
		{"disk", func(dir string) Config {
			return Config{HostBytes: fp, DiskDir: dir, DiskBytes: 64 * fp, Policy: PolicyWriteThrough}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := mustOpen(b, c.cfg(b.TempDir()))
			defer s.Close()
			b.SetBytes(2 * size)
			i := 0
			for b.Loop() {
				if err := s.Put(fmt.Sprintf("bench/%06d", i%32), nil, data, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Get(fmt.Sprintf("bench/%06d", (i+31)%32)); err != nil && i >= 31 {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(2*size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
