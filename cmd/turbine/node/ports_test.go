package node

import "testing"

func TestEnginePorts(t *testing.T) {
	type step struct {
		op   string // "take" or "release"
		id   string
		want int
	}
	for _, tc := range []struct {
		name  string
		base  int
		steps []step
	}{
		{"off", 0, []step{{"take", "n-0", 0}, {"take", "n-1", 0}}},
		{"lowest free, kept per worker", 8000, []step{{"take", "n-0", 8000}, {"take", "n-1", 8001}, {"take", "n-0", 8000}}},
		{"released port reused", 8000, []step{{"take", "n-0", 8000}, {"take", "n-1", 8001}, {"release", "n-0", 0}, {"take", "n-2", 8000}, {"take", "n-3", 8002}}},
		{"release of an unknown worker", 9000, []step{{"release", "x", 0}, {"take", "n-0", 9000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newEnginePorts(tc.base)
			for i, s := range tc.steps {
				if s.op == "release" {
					p.release(s.id)
					continue
				}
				got, err := p.take(s.id)
				if err != nil || got != s.want {
					t.Fatalf("step %d take(%s) = %d, %v; want %d", i, s.id, got, err, s.want)
				}
			}
		})
	}
}

func TestEnginePortsExhausted(t *testing.T) {
	p := newEnginePorts(65535 - 1)
	for i, want := range []int{65534, 65535} {
		if got, err := p.take(string(rune('a' + i))); err != nil || got != want {
			t.Fatalf("take %d = %d, %v; want %d", i, got, err, want)
		}
	}
	if _, err := p.take("c"); err == nil {
		t.Fatal("a third worker got a port above 65535")
	}
}
