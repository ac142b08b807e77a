package resp

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestString2ll(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"-1", -1, true},
		{"2097152", 2097152, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"18446744073709551616", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"-0", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1a", 0, false},
		{"123456789012345678901", 0, false}, // 21 bytes
	} {
		got, ok := string2ll([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("string2ll(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: unbalanced quotes
	}{
		{"", []string{}},
		{"   ", []string{}},
		{"PING", []string{"PING"}},
		{"  SET  k   v ", []string{"SET", "k", "v"}},
		{"\tSET\tk", []string{"SET", "k"}},
		{"a\vb c", []string{"a\vb", "c"}}, // \v separates only leading blanks
		{"\va", []string{"a"}},
		{`"a b" 'c d'`, []string{"a b", "c d"}},
		{`"\x41\x4a\n\r\t\b\a\\\"\q"`, []string{"AJ\n\r\t\b\a\\\"q"}},
		{`"\x4"`, []string{"x4"}},
		{`'it\'s' 'a\b'`, []string{"it's", `a\b`}},
		{`""`, []string{""}},
		{`a"b c"`, []string{"ab c"}}, // a quote opens mid-token
		{`"abc"d`, nil},
		{`'abc'd`, nil},
		{`"abc`, nil},
		{`'abc`, nil},
		{`"abc\`, nil},
		{"a\x00b c", []string{"a"}}, // a C string ends at NUL
		{"\x80\xff", []string{"\x80\xff"}},
	} {
		got, ok := splitArgs([]byte(tc.in))
		if tc.want == nil {
			if ok {
				t.Errorf("splitArgs(%q) = %q, want unbalanced quotes", tc.in, got)
			}
			continue
		}
		if !ok || len(got) != len(tc.want) {
			t.Errorf("splitArgs(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			continue
		}
		for i := range got {
			if string(got[i]) != tc.want[i] {
				t.Errorf("splitArgs(%q)[%d] = %q, want %q", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

// parseAll runs a parser over src until an error, and renders what it got.
func parseAll(src io.Reader, maxBulk int64, unauth bool) string {
	p := NewParser(src)
	p.MaxBulk = maxBulk
	p.Unauthenticated = unauth
	var out strings.Builder
	for {
		argv, err := p.Next()
		if err != nil {
			var pe *ProtocolError
			switch {
			case errors.As(err, &pe):
				out.WriteString("error " + pe.Msg + "\n")
			case errors.Is(err, io.EOF):
				out.WriteString("EOF\n")
			case errors.Is(err, io.ErrUnexpectedEOF):
				out.WriteString("unexpected EOF\n")
			default:
				out.WriteString("read error " + err.Error() + "\n")
			}
			return out.String()
		}
		out.WriteString(strconv.Itoa(len(argv)))
		for _, a := range argv {
			out.WriteString(" " + strconv.Quote(string(a)))
		}
		out.WriteString("\n")
	}
}

func TestParser(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		maxBulk  int64
		unauth   bool
		want     string
	}{
		{"multibulk", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", 0, false, "2 \"GET\" \"k\"\nEOF\n"},
		{"binary bulk", "*1\r\n$4\r\n\r\n\x00\n\r\n", 0, false, "1 \"\\r\\n\\x00\\n\"\nEOF\n"},
		{"empty bulk", "*1\r\n$0\r\n\r\n", 0, false, "1 \"\"\nEOF\n"},
		{"crlf unchecked", "*1\r\n$1\r\naXY", 0, false, "1 \"a\"\nEOF\n"},
		{"count cr then any", "*1\rX$1\rYa\r\n", 0, false, "1 \"a\"\nEOF\n"},
		{"empty multibulk", "*0\r\n*-3\r\n", 0, false, "0\n0\nEOF\n"},
		{"inline", "SET a 'b c'\r\nGET a\n", 0, false, "3 \"SET\" \"a\" \"b c\"\n2 \"GET\" \"a\"\nEOF\n"},
		{"inline empty", "\r\n\n", 0, false, "0\n0\nEOF\n"},
		{"inline lone cr", "\rPING\n", 0, false, "1 \"PING\"\nEOF\n"},
		{"truncated count", "*2\r", 0, false, "unexpected EOF\n"},
		{"truncated bulk", "*1\r\n$5\r\nab", 0, false, "unexpected EOF\n"},
		{"truncated crlf", "*1\r\n$2\r\nab\r", 0, false, "unexpected EOF\n"},
		{"truncated inline", "PING", 0, false, "unexpected EOF\n"},
		{"nul hides newline", "PI\x00NG\r\n", 0, false, "unexpected EOF\n"},
		{"bad count", "*x\r\n", 0, false, "error Protocol error: invalid multibulk length\n"},
		{"count too big", "*2147483648\r\n", 0, false, "error Protocol error: invalid multibulk length\n"},
		{"bad bulk", "*1\r\n$-1\r\n", 0, false, "error Protocol error: invalid bulk length\n"},
		{"bulk over max", "*1\r\n$11\r\n", 10, false, "error Protocol error: invalid bulk length\n"},
		{"bulk at max", "*1\r\n$10\r\n0123456789\r\n", 10, false, "1 \"0123456789\"\nEOF\n"},
		{"not a bulk", "*1\r\n:1\r\n", 0, false, "error Protocol error: expected '$', got ':'\n"},
		{"unauth count", "*11\r\n", 0, true, "error Protocol error: unauthenticated multibulk length\n"},
		{"unauth count ok", "*10\r\n", 0, true, "unexpected EOF\n"},
		{"unauth bulk", "*1\r\n$16385\r\n", 0, true, "error Protocol error: unauthenticated bulk length\n"},
		{"unbalanced", "ECHO \"a\r\n", 0, false, "error Protocol error: unbalanced quotes in request\n"},
		{"big inline", strings.Repeat("a", inlineMaxSize+1), 0, false, "error Protocol error: too big inline request\n"},
		{"inline at limit", strings.Repeat("a", inlineMaxSize), 0, false, "unexpected EOF\n"},
		{"big count", "*" + strings.Repeat("1", inlineMaxSize+1), 0, false, "error Protocol error: too big mbulk count string\n"},
		{"big bulk count", "*1\r\n$" + strings.Repeat("1", inlineMaxSize+1), 0, false, "error Protocol error: too big bulk count string\n"},
		{"big nul line", "A\x00" + strings.Repeat("\n", inlineMaxSize), 0, false, "error Protocol error: too big inline request\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseAll(strings.NewReader(tc.in), tc.maxBulk, tc.unauth); got != tc.want {
				t.Errorf("whole:\n%s\nwant:\n%s", got, tc.want)
			}
			// The same bytes one at a time: a request may arrive in any pieces.
			if got := parseAll(iotest.OneByteReader(strings.NewReader(tc.in)), tc.maxBulk, tc.unauth); got != tc.want {
				t.Errorf("one byte at a time:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestParserBulkIsOwnSlice: each bulk is its own exact-size slice, not a view of the
// read buffer, so a store may keep it.
func TestParserBulkIsOwnSlice(t *testing.T) {
	in := appendCommand(nil, []byte("SET"), []byte("k"), bytes.Repeat([]byte{'v'}, 100))
	in = appendCommand(in, []byte("SET"), []byte("k"), bytes.Repeat([]byte{'w'}, 100))
	p := NewParser(bytes.NewReader(in))
	a, err := p.Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	if v := a[2]; len(v) != 100 || cap(v) != 100 || !bytes.Equal(v, bytes.Repeat([]byte{'v'}, 100)) {
		t.Errorf("first value changed or oversized: len %d cap %d %q", len(v), cap(v), v[:8])
	}
}

// TestParserBeforeBlock: the hook runs before each read, so after all buffered requests.
func TestParserBeforeBlock(t *testing.T) {
	in := "PING\r\nPING\r\n"
	p := NewParser(iotest.HalfReader(strings.NewReader(in + in)))
	calls, got := 0, 0
	p.BeforeBlock = func() error { calls++; return nil }
	for {
		if _, err := p.Next(); err != nil {
			break
		}
		got++
	}
	if got != 4 {
		t.Fatalf("parsed %d requests, want 4", got)
	}
	if calls < 2 || calls > got+1 {
		t.Errorf("BeforeBlock ran %d times for %d requests", calls, got)
	}
	p = NewParser(strings.NewReader(in))
	p.BeforeBlock = func() error { return io.ErrClosedPipe }
	if _, err := p.Next(); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a failing BeforeBlock: Next = %v, want its error", err)
	}
}

// FuzzParse: any input parses to the same requests and final error whole or a byte at a
// time, and never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n\r\n\r\n\r\n",
		"PING\r\nECHO \"a\\x41\" 'b\\'c'\n",
		"*1\r\n$-1\r\n", "*x\r\n", "*0\r\n", "\r\n", "*1\r\n+a\r\n", "A\x00\r\n", `"\x`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, unauth bool) {
		whole := parseAll(bytes.NewReader(in), 1<<16, unauth)
		if bytes := parseAll(iotest.OneByteReader(bytes.NewReader(in)), 1<<16, unauth); bytes != whole {
			t.Errorf("one byte at a time:\n%s\nwhole:\n%s", bytes, whole)
		}
	})
}

// TestParserBulkAllocFollowsBytes: an announced bulk length is not allocated before its
// bytes arrive: a "$536870912" line and a few bytes cost the parser about bulkPrealloc,
// and a value sent whole is still one exact-size slice.
func TestParserBulkAllocFollowsBytes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		announced int
		sent      int // value bytes sent before the stream ends
		maxAlloc  uint64
	}{
		{"512 MiB announced, 3 bytes sent", 512 << 20, 3, 4 << 20},
		{"64 MiB announced, 3 MiB sent", 64 << 20, 3 << 20, 16 << 20},
		{"8 MiB sent whole", 8 << 20, 8<<20 + 2, 24 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + strconv.Itoa(tc.announced) + "\r\n"
			src := io.MultiReader(strings.NewReader(head), io.LimitReader(zeros{}, int64(tc.sent)))
			p := NewParser(src)
			p.MaxBulk = math.MaxInt32
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			argv, err := p.Next()
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > tc.maxAlloc {
				t.Errorf("allocated %d bytes for %d sent, want at most %d", got, tc.sent, tc.maxAlloc)
			}
			if tc.sent < tc.announced {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("Next = %v, want unexpected EOF", err)
				}
				return
			}
			if err != nil || len(argv) != 3 || len(argv[2]) != tc.announced || cap(argv[2]) != tc.announced {
				t.Fatalf("Next = %d args, %v", len(argv), err)
			}
		})
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
