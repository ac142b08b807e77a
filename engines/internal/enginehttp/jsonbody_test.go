package enginehttp

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestJSONBodyWriters(t *testing.T) {
	b := []byte{'{'}
	b = Key(b, "a")
	b = IDs(b, []uint32{0, 7, math.MaxUint32})
	b = Int(b, "n", -3)
	b, err := Float(b, "f", 0.25)
	if err != nil {
		t.Fatal(err)
	}
	b = String(Key(b, "s"), "q\"\\\x01é<")
	b = IDs(Key(b, "none"), nil)
	b, err = Extra(b, map[string]any{"z": []int{1}, "b": nil, "a": "claimed", "n": "claimed"}, map[string]bool{"a": true, "n": true})
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '}')
	want := `{"a":[0,7,4294967295],"n":-3,"f":0.25,"s":"q\"\\\u0001é\u003c","none":[],"b":null,"z":[1]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if !json.Valid(b) {
		t.Fatal("not JSON")
	}
}

func TestJSONBodyWriterErrors(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := Float([]byte{'{'}, "top_p", v); err == nil || !strings.HasPrefix(err.Error(), "top_p: ") {
			t.Errorf("Float(%v): %v", v, err)
		}
	}
	if _, err := Extra([]byte{'{'}, map[string]any{"bad": make(chan int)}, nil); err == nil || !strings.Contains(err.Error(), `field "bad"`) {
		t.Errorf("Extra: %v", err)
	}
}

// FuzzString: what String writes is one JSON string that decodes to what encoding/json's
// own encoding of the input decodes to (the input itself when it is valid UTF-8).
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "rid-1", `a"b\c`, "\x00\x1f\x7f", "é\u2028", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := String(nil, s)
		var got, want string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		ref, _ := json.Marshal(s)
		_ = json.Unmarshal(ref, &want)
		if got != want || utf8.ValidString(s) && got != s {
			t.Fatalf("%q -> %s -> %q, want %q", s, b, got, want)
		}
	})
}

// TestAppendID: appendID writes what strconv.AppendUint writes, at every digit count and
// its edges, and on random ids; IDs writes what encoding/json writes.
func TestAppendID(t *testing.T) {
	vs := []uint32{0, 9, 10, 99, 100, math.MaxUint32}
	for p := uint64(10); p <= math.MaxUint32; p *= 10 {
		vs = append(vs, uint32(p-1), uint32(p), uint32(p+1))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		vs = append(vs, rng.Uint32()>>rng.IntN(32))
	}
	for _, v := range vs {
		if got, want := string(appendID([]byte("x"), v)), "x"+strconv.FormatUint(uint64(v), 10); got != want {
			t.Fatalf("appendID(%d) = %q, want %q", v, got, want)
		}
	}
	want, _ := json.Marshal(vs)
	if got := IDs(nil, vs); string(got) != string(want) {
		t.Fatalf("IDs differs from encoding/json")
	}
	if got := IDs(nil, nil); string(got) != "[]" {
		t.Fatalf("IDs(nil) = %s", got)
	}
}

// BenchmarkIDs writes a 4,096-token prompt's ids; reports µs per prompt.
func BenchmarkIDs(b *testing.B) {
	ids := make([]uint32, 4096)
	for i := range ids {
		ids[i] = uint32(i*7919) % 100000
	}
	var buf []byte
	for b.Loop() {
		buf = IDs(buf[:0], ids)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/prompt")
}
