package bench

import (
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadMooncake(t *testing.T) {
	f, err := os.Open("testdata/mooncake.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f, "mooncake.jsonl", DefaultBlockTokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Arrival: 0, InputLength: 1000, OutputLength: 12, HashIDs: []int64{0, 1}},
		{Arrival: 0, InputLength: 1100, OutputLength: 3, HashIDs: []int64{0, 1, 2}},
		{Arrival: 1500 * time.Millisecond, InputLength: 512, OutputLength: 1, HashIDs: []int64{7}},
		{Arrival: 3027 * time.Millisecond, InputLength: 1600, OutputLength: 40, HashIDs: []int64{0, 8, 9, 10}},
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d", len(reqs), len(want))
	}
	for i := range want {
		g, w := reqs[i], want[i]
		if g.Arrival != w.Arrival || g.InputLength != w.InputLength || g.OutputLength != w.OutputLength || !slices.Equal(g.HashIDs, w.HashIDs) {
			t.Errorf("request %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestReadMooncakeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		block    int
		want     string
	}{
		{"not json", "{", 512, "x.jsonl:1"},
		{"ids do not match length", `{"timestamp":0,"input_length":1025,"output_length":1,"hash_ids":[1,2]}`, 512, "does not match 2 hash_ids"},
		{"other block size", `{"timestamp":0,"input_length":1025,"output_length":1,"hash_ids":[1,2]}`, 1024, ""},
		{"no timestamp", `{"input_length":1,"output_length":1,"hash_ids":[1]}`, 512, "no timestamp"},
		{"negative output", `{"timestamp":0,"input_length":1,"output_length":-1,"hash_ids":[1]}`, 512, "output_length -1"},
		// A request generates at least one token: 0 would be sent as max_tokens 1.
		{"zero output", "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n" +
			`{"timestamp":0,"input_length":1,"output_length":0,"hash_ids":[1]}`, 512,
			"x.jsonl:2: output_length 0: want > 0 (a request generates at least one token)"},
		{"no output_length", `{"timestamp":0,"input_length":1,"hash_ids":[1]}`, 512, "x.jsonl:1: output_length 0"},
		{"empty input", `{"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[]}`, 512, "input_length 0"},
		{"second line", "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n[]", 512, "x.jsonl:2"},
		{"zero block", `{}`, 0, "block size 0"},
		// Arrivals beyond MaxArrival (30 days) would overflow time.Duration further on.
		{"timestamp 1e300", `{"timestamp":1e300,"input_length":1,"output_length":1,"hash_ids":[1]}`, 512, "x.jsonl:1: timestamp 1e+300 ms: want at most 2592000000 ms"},
		{"timestamp past 30 days", `{"timestamp":2592000001,"input_length":1,"output_length":1,"hash_ids":[1]}`, 512, "x.jsonl:1: timestamp"},
		{"timestamp at 30 days", `{"timestamp":2592000000,"input_length":1,"output_length":1,"hash_ids":[1]}`, 512, ""},
		// Requests must come in arrival order; equal timestamps are fine.
		{"going back", "{\"timestamp\":2000,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n\n" +
			"{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}", 512, "x.jsonl:3: timestamp 0 ms is earlier than line 1's 2000 ms"},
		{"equal timestamps", "{\"timestamp\":5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n" +
			"{\"timestamp\":5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}", 512, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tc.in), "x.jsonl", tc.block, 0)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestReadMooncakeLongLine: a line over MaxTraceLine is an error naming the file, the
// line and the limit (not bufio's bare "token too long").
func TestReadMooncakeLongLine(t *testing.T) {
	first := `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[1]}` + "\n"
	long := io.MultiReader(strings.NewReader(first), io.LimitReader(repeatByte('x'), MaxTraceLine+1))
	_, err := ReadMooncake(long, "x.jsonl", 512, 0)
	if err == nil || !strings.Contains(err.Error(), "x.jsonl:2: line longer than 64 MiB") {
		t.Fatalf("error %v, want one naming x.jsonl:2 and the 64 MiB limit", err)
	}
	// The limit stops reading before the long line: no error.
	long = io.MultiReader(strings.NewReader(first), io.LimitReader(repeatByte('x'), MaxTraceLine+1))
	if reqs, err := ReadMooncake(long, "x.jsonl", 512, 1); err != nil || len(reqs) != 1 {
		t.Fatalf("limit 1: %d requests, %v; want 1, no error", len(reqs), err)
	}
}

// repeatByte reads as an endless run of one byte.
type repeatByte byte

func (b repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

func TestReadMooncakeLimit(t *testing.T) {
	f, err := os.Open("testdata/mooncake.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadMooncake(f, "mooncake.jsonl", DefaultBlockTokens, 2)
	if err != nil || len(reqs) != 2 {
		t.Fatalf("%d requests, %v; want 2", len(reqs), err)
	}
}

func TestReadAzure(t *testing.T) {
	f, err := os.Open("testdata/azure.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadAzure(f, "azure.csv", 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at      time.Duration
		in, out int
	}{{0, 374, 44}, {4314579 * time.Microsecond, 1396, 109}, {4419410 * time.Microsecond, 20, 1}}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d", len(reqs), len(want))
	}
	seen := map[int64]bool{}
	for i, w := range want {
		g := reqs[i]
		if g.Arrival != w.at || g.InputLength != w.in || g.OutputLength != w.out {
			t.Errorf("request %d = %v %d %d, want %v %d %d", i, g.Arrival, g.InputLength, g.OutputLength, w.at, w.in, w.out)
		}
		if len(g.HashIDs) != (w.in+511)/512 {
			t.Errorf("request %d: %d hash ids for %d tokens", i, len(g.HashIDs), w.in)
		}
		for _, h := range g.HashIDs {
			if seen[h] {
				t.Errorf("request %d: hash id %d shared, but the Azure trace has no prefix information", i, h)
			}
			seen[h] = true
		}
	}
}

func TestReadAzureErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"missing column", "TIMESTAMP,ContextTokens\n", "GeneratedTokens"},
		{"bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "x.csv:2: TIMESTAMP"},
		{"bad context", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,0,1\n", "ContextTokens"},
		{"bad generated", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,x\n", "GeneratedTokens"},
		{"zero generated", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,1\n2023-11-16 18:15:47,3,0\n",
			`x.csv:3: GeneratedTokens "0": want a positive integer (a request generates at least one token)`},
		{"negative generated", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,-2\n", `x.csv:2: GeneratedTokens "-2"`},
		{"going back", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,1\n2023-11-16 18:15:45,3,1\n", "x.csv:3"},
		// Earlier than the previous row, though not than the first: refused as well.
		{"going back after the first", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,1\n2023-11-16 18:15:50,3,1\n2023-11-16 18:15:48,3,1\n",
			"x.csv:4: TIMESTAMP 2023-11-16 18:15:48 is earlier than line 3's (2023-11-16 18:15:50): want the rows in arrival order"},
		// Years apart: beyond MaxArrival (and beyond time.Duration's 292 years).
		{"years 0001 to 9999", "TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00,3,1\n9999-12-31 23:59:59,3,1\n", "x.csv:3: TIMESTAMP 9999-12-31 23:59:59 is"},
		{"31 days", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-01 00:00:00,3,1\n2023-12-02 00:00:00,3,1\n", "after the first row's (2023-11-01 00:00:00): want at most 720h0m0s"},
		{"empty", "", "header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAzure(strings.NewReader(tc.in), "x.csv", 512, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSynthetic(t *testing.T) {
	const n, rate = 2000, 50.0
	reqs, err := Synthetic(n, 100, 7, 64, rate, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Arrival != 0 || !slices.IsSortedFunc(reqs, func(a, b Request) int { return int(a.Arrival - b.Arrival) }) {
		t.Fatal("Poisson arrivals must start at 0 and never go back")
	}
	// The mean gap of n exponential gaps of mean 1/rate is within 10 % (about 4.5
	// standard deviations) of 1/rate.
	mean := reqs[n-1].Arrival.Seconds() / (n - 1)
	if mean < 0.9/rate || mean > 1.1/rate {
		t.Errorf("mean gap %.4f s, want about %.4f", mean, 1/rate)
	}
	if r := reqs[5]; r.InputLength != 100 || r.OutputLength != 7 || len(r.HashIDs) != 2 {
		t.Errorf("request = %+v, want 100 in, 7 out, 2 blocks of 64", r)
	}
	closed, err := Synthetic(3, 10, 1, 64, 0, nil)
	if err != nil || closed[2].Arrival != 0 {
		t.Fatalf("rate 0: %v, %v; want all arrivals at 0", closed, err)
	}
	for _, bad := range [][4]float64{{0, 1, 1, 1}, {1, 0, 1, 1}, {1, 1, -1, 1}, {1, 1, 1, -1}} {
		if _, err := Synthetic(int(bad[0]), int(bad[1]), int(bad[2]), 64, bad[3], nil); err == nil {
			t.Errorf("Synthetic%v: no error", bad)
		}
	}
}

// TestSyntheticArrivalBounds: a rate below MinRate, or arrivals drawn beyond
// MaxArrival, are errors, never wrapped-around (negative) arrivals.
func TestSyntheticArrivalBounds(t *testing.T) {
	for _, tc := range []struct {
		n    int
		rate float64
		want string
	}{
		{3, 1e-300, "rate 1e-300 requests/s: want 0 (all at once) or a number from 1e-06"},
		{3, 1e-12, "rate 1e-12 requests/s: want 0"},
		{3, math.NaN(), "rate NaN"},
		{3, math.Inf(1), "rate +Inf"},
		{1000, 1e-6, "rate 1e-06 requests/s: request "}, // 1000 requests at ~11.6 days apart
		{1000, 1, ""},
	} {
		reqs, err := Synthetic(tc.n, 10, 1, 64, tc.rate, rand.New(rand.NewPCG(1, 2)))
		if tc.want == "" {
			if err != nil || reqs[tc.n-1].Arrival <= 0 || reqs[tc.n-1].Arrival > MaxArrival {
				t.Errorf("rate %v: %v; want arrivals within (0, MaxArrival]", tc.rate, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rate %v: error %v, want one containing %q", tc.rate, err, tc.want)
		}
	}
}

func TestScale(t *testing.T) {
	reqs := []Request{{Arrival: 2 * time.Second}, {Arrival: 3 * time.Second}}
	if err := Scale(reqs, 0.5); err != nil {
		t.Fatal(err)
	}
	if reqs[0].Arrival != time.Second || reqs[1].Arrival != 1500*time.Millisecond {
		t.Fatalf("arrivals %v %v, want 1s 1.5s", reqs[0].Arrival, reqs[1].Arrival)
	}
}

// TestScaleErrors: a factor that is not a positive number, or one that would move an
// arrival beyond MaxArrival (or past time.Duration's range), is an error and leaves
// the arrivals as they were.
func TestScaleErrors(t *testing.T) {
	for _, tc := range []struct {
		factor float64
		want   string
	}{
		{1e300, "time scale 1e+300: request 1 (arrival 3s) would arrive 3e+300 s after the start, beyond the 720h0m0s limit"},
		{1e6, "request 1 (arrival 3s) would arrive 3e+06 s"}, // 34.7 days
		{0, "time scale 0: want a positive number"},
		{-1, "time scale -1"},
		{math.NaN(), "time scale NaN"},
		{math.Inf(1), "time scale +Inf"},
	} {
		reqs := []Request{{Arrival: 0}, {Arrival: 3 * time.Second}}
		err := Scale(reqs, tc.factor)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("factor %v: error %v, want one containing %q", tc.factor, err, tc.want)
		}
		if reqs[1].Arrival != 3*time.Second {
			t.Errorf("factor %v: arrival changed to %v on error", tc.factor, reqs[1].Arrival)
		}
		if late := tc.factor > 1 && !math.IsInf(tc.factor, 0); errors.Is(err, ErrLateArrival) != late {
			t.Errorf("factor %v: errors.Is(%v, ErrLateArrival) != %v", tc.factor, err, late)
		}
	}
}

func TestTokensShareBlocks(t *testing.T) {
	const block = 16
	for _, tc := range []struct {
		name   string
		a, b   Request
		shared int // leading tokens equal
	}{
		{"same prefix", Request{InputLength: 40, HashIDs: []int64{1, 2, 3}}, Request{InputLength: 48, HashIDs: []int64{1, 2, 4}}, 32},
		{"first block differs", Request{InputLength: 16, HashIDs: []int64{1}}, Request{InputLength: 16, HashIDs: []int64{2}}, 0},
		{"one a prefix of the other", Request{InputLength: 20, HashIDs: []int64{5, 6}}, Request{InputLength: 30, HashIDs: []int64{5, 6}}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Tokens(tc.a, block)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Tokens(tc.b, block)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != tc.a.InputLength || len(b) != tc.b.InputLength {
				t.Fatalf("lengths %d %d, want %d %d", len(a), len(b), tc.a.InputLength, tc.b.InputLength)
			}
			n := 0
			for n < min(len(a), len(b)) && a[n] == b[n] {
				n++
			}
			if n != tc.shared {
				t.Fatalf("%d leading tokens shared, want %d", n, tc.shared)
			}
			for _, tok := range a {
				if tok < firstToken || tok >= firstToken+tokenRange {
					t.Fatalf("token %d outside [%d, %d)", tok, firstToken, firstToken+tokenRange)
				}
			}
		})
	}
	if _, err := Tokens(Request{InputLength: 33, HashIDs: []int64{1, 2}}, block); err == nil {
		t.Error("2 blocks of 16 for 33 tokens: no error")
	}
}

// TestTokensStable pins the synthesis: the same hash id gives the same block in every
// version, so results stay comparable across runs (and with cmd/turbine's replay test,
// which uses the same seeding).
func TestTokensStable(t *testing.T) {
	got, err := Tokens(Request{InputLength: 4, HashIDs: []int64{0}}, 512)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{71250, 60277, 21543, 24553}; !slices.Equal(got, want) {
		t.Fatalf("first tokens of hash id 0 = %v, want %v", got, want)
	}
}

// TestReadTraceBOM: one leading UTF-8 byte order mark (Excel's "CSV UTF-8", some JSONL
// writers) is skipped by both readers; a second one, or one further on, is still an
// error.
func TestReadTraceBOM(t *testing.T) {
	const bom = "\ufeff"
	mooncake := `{"timestamp":0,"input_length":1,"output_length":2,"hash_ids":[1]}` + "\n"
	azure := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,2\n"
	for _, tc := range []struct {
		name, in string
		read     func(io.Reader) ([]Request, error)
		want     string // error; "" for one request of output length 2
	}{
		{"mooncake", mooncake, readMooncakeX, ""},
		{"mooncake with a BOM", bom + mooncake, readMooncakeX, ""},
		{"mooncake with a BOM before a blank line", bom + "\n" + mooncake, readMooncakeX, ""},
		{"mooncake with two BOMs", bom + bom + mooncake, readMooncakeX, "x.jsonl:1: invalid character"},
		{"mooncake with a BOM on line 2", mooncake + bom + mooncake, readMooncakeX, "x.jsonl:2: invalid character"},
		{"azure", azure, readAzureX, ""},
		{"azure with a BOM", bom + azure, readAzureX, ""},
		{"azure with two BOMs", bom + bom + azure, readAzureX, "want TIMESTAMP, ContextTokens and GeneratedTokens"},
		{"only a BOM", bom, readAzureX, "x.csv: header: EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := tc.read(strings.NewReader(tc.in))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil || len(reqs) != 1 || reqs[0].OutputLength != 2 {
				t.Fatalf("%+v, %v: want one request of 2 output tokens", reqs, err)
			}
		})
	}
}

func readMooncakeX(r io.Reader) ([]Request, error) { return ReadMooncake(r, "x.jsonl", 512, 0) }
func readAzureX(r io.Reader) ([]Request, error)    { return ReadAzure(r, "x.csv", 512, 0) }

// TestReadSharedTraces: the traces beside the repository (../shared/data) load whole
// (every request generates at least one token). Skipped when they are not there.
func TestReadSharedTraces(t *testing.T) {
	dir := sharedData(t)
	for _, tc := range []struct {
		file string
		read func(io.Reader, string, int, int) ([]Request, error)
	}{
		{"mooncake_fast25_conversation_trace.jsonl", ReadMooncake},
		{"AzureLLMInferenceTrace_conv_2023.csv", ReadAzure},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, tc.file))
			if err != nil {
				t.Skipf("trace not available: %v", err)
			}
			defer f.Close()
			reqs, err := tc.read(f, tc.file, DefaultBlockTokens, 0)
			if err != nil || len(reqs) == 0 {
				t.Fatalf("%d requests, %v", len(reqs), err)
			}
		})
	}
}

// sharedData is ../shared/data beside the repository root (the directory of go.mod).
func sharedData(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "data")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the package directory")
		}
		dir = parent
	}
}
