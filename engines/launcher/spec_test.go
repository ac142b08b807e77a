package launcher

import (
	"strings"
	"testing"
)

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"no model", func(s *Spec) { s.ModelPath = "" }, "without a model path"},
		{"no GPU", func(s *Spec) { s.TensorParallelSize = 0 }, "tensor parallel size 0"},
		{"memory fraction", func(s *Spec) { s.GPUMemoryUtilization = 1.5 }, "GPU memory utilization 1.5"},
		{"block size", func(s *Spec) { s.BlockSize = 0 }, "KV block size 0"},
		{"negative limit", func(s *Spec) { s.MaxNumSeqs = -1 }, "must not be negative"},
		{"role", func(s *Spec) { s.Role = "both" }, `role "both"`},
		{"bootstrap port", func(s *Spec) { s.BootstrapPort = 70000 }, "bootstrap port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Engine: EngineVLLM, ModelPath: "/models/Qwen3-8B", TensorParallelSize: 2, GPUMemoryUtilization: 0.85,
				BlockSize: 64, MaxModelLen: 8192, MaxNumSeqs: 128, MaxNumBatchedTokens: 4096}
			if err := s.Validate(); err != nil {
				t.Fatalf("a valid spec: %v", err)
			}
			tc.mutate(&s)
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBootstrapAddr(t *testing.T) {
	var b BootstrapAddr
	if _, _, ok := b.Bootstrap(); ok {
		t.Fatal("the zero BootstrapAddr holds an address")
	}
	b.Set("10.0.0.5", 8998)
	if h, p, ok := b.Bootstrap(); !ok || h != "10.0.0.5" || p != 8998 {
		t.Fatalf("Bootstrap = %s:%d %v", h, p, ok)
	}
	b.Set("10.0.0.5", 0)
	if _, _, ok := b.Bootstrap(); ok {
		t.Fatal("port 0 recorded an address")
	}
}
