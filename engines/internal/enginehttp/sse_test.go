package enginehttp

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll returns the events of a stream and the error that ended it.
func readAll(r io.Reader, max int) ([]string, error) {
	s := NewSSEReader(r, "eng", max)
	var out []string
	for {
		d, err := s.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // longer than the reader's 64 KiB buffer
	cases := []struct {
		name    string
		stream  string
		max     int
		want    []string
		wantErr string
	}{
		{"events", "data: a\n\ndata: [DONE]\n\n", 1 << 20, []string{"a", "[DONE]"}, "stream ended before [DONE]"},
		{"crlf, comments, other fields, no space after the colon", ": ping\r\nevent: x\r\nid: 3\r\ndata:{}\r\n\r\n", 1 << 20, []string{"{}"}, "ended before"},
		{"data lines joined by newlines", "data: a\ndata: b\n\n", 1 << 20, []string{"a\nb"}, "ended before"},
		{"events without data are skipped", "\n\ndata:\n\n: c\n\ndata: a\n\n", 1 << 20, []string{"a"}, "ended before"},
		{"a line longer than the buffer", "data: " + long + "\n\n", 1 << 20, []string{long}, "ended before"},
		{"a line over the bound", "data: " + long + "\n\n", 50 << 10, nil, "stream event longer than 51200 bytes"},
		{"an event over the bound", "data: 12345\ndata: 12345\n\n", 8, nil, "longer than 8 bytes"},
		{"cut inside an event", "data: a\n\ndata: b", 1 << 20, []string{"a"}, "ended before [DONE]"},
	}
	for _, tc := range cases {
		// Read whole (each event's blank line already buffered: the data handed out in
		// place), a byte at a time (never buffered: the data copied) and in small reads.
		for rname, wrap := range readerWrappers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(wrap(strings.NewReader(tc.stream)), tc.max)
				if strings.Join(got, "|") != strings.Join(tc.want, "|") {
					t.Fatalf("events %q, want %q", got, tc.want)
				}
				if err == nil || !strings.HasPrefix(err.Error(), "eng: ") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			})
		}
	}
}

// readerWrappers deliver a stream whole, a byte at a time, or in reads of 1 to 7 bytes in
// turn (so that a data line and its blank line, or a "\r" and its "\n", arrive in
// different reads).
var readerWrappers = map[string]func(io.Reader) io.Reader{
	"whole": func(r io.Reader) io.Reader { return r },
	"bytes": iotest.OneByteReader,
	"small": func(r io.Reader) io.Reader { return &smallReads{r: r} },
}

// smallReads returns at most 1, 2, ... 7, 1, 2 ... bytes per Read.
type smallReads struct {
	r io.Reader
	n int
}

func (s *smallReads) Read(p []byte) (int, error) {
	s.n = s.n%7 + 1
	return s.r.Read(p[:min(len(p), s.n)])
}

// TestSSEReaderRelease: a released reader reads no more, and readers made after it (which
// may get its buffer) and one still in use read their own events.
func TestSSEReaderRelease(t *testing.T) {
	a := NewSSEReader(strings.NewReader("data: one\n\ndata: two\n\n"), "eng", 1<<20)
	b := NewSSEReader(strings.NewReader("data: alpha\n\ndata: beta\n\n"), "eng", 1<<20)
	if d, err := a.Next(); err != nil || string(d) != "one" {
		t.Fatalf("a: %q, %v", d, err)
	}
	if d, err := b.Next(); err != nil || string(d) != "alpha" {
		t.Fatalf("b: %q, %v", d, err)
	}
	a.Release()
	a.Release() // twice: nothing more
	if _, err := a.Next(); !errors.Is(err, errReleased) {
		t.Fatalf("Next after Release: %v, want errReleased", err)
	}
	c := NewSSEReader(strings.NewReader("data: gamma\n\n"), "eng", 1<<20)
	if d, err := c.Next(); err != nil || string(d) != "gamma" {
		t.Fatalf("c: %q, %v", d, err)
	}
	if d, err := b.Next(); err != nil || string(d) != "beta" {
		t.Fatalf("b after a's release: %q, %v", d, err)
	}
	c.Release()
	b.Release()
}

func TestSSEReaderEndings(t *testing.T) {
	// A body cut short (the transport's unexpected EOF) reads as a stream ended early.
	_, err := readAll(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(io.ErrUnexpectedEOF)), 1<<20)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "ended before [DONE]") {
		t.Fatalf("cut body: %v", err)
	}
	boom := errors.New("boom")
	_, err = readAll(io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), 1<<20)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "eng: reading the stream") {
		t.Fatalf("transport error: %v", err)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add("data: a\n\ndata: [DONE]\n\n", 64)
	f.Add(": c\r\ndata:\r\ndata: b\r\n\r\n", 3)
	f.Fuzz(func(t *testing.T, stream string, max int) {
		if max < 1 || max > 1<<20 {
			return
		}
		events, err := readAll(strings.NewReader(stream), max)
		if err == nil || !strings.HasPrefix(err.Error(), "eng: ") {
			t.Fatalf("error %v", err)
		}
		// Whatever the reads' sizes, the same events and the same error.
		for name, wrap := range readerWrappers {
			got, err2 := readAll(wrap(strings.NewReader(stream)), max)
			if strings.Join(got, "\x00") != strings.Join(events, "\x00") || err2.Error() != err.Error() {
				t.Fatalf("read %s: %q, %v; read whole: %q, %v", name, got, err2, events, err)
			}
		}
		for _, e := range events {
			if len(e) == 0 || len(e) > max {
				t.Fatalf("event of %d bytes (max %d)", len(e), max)
			}
			if !strings.Contains(stream, strings.Split(e, "\n")[0]) {
				t.Fatalf("event %q not in the stream", e)
			}
		}
	})
}

// TestSSEReaderEventIsCapped: an event handed out in place cannot be appended to over the
// reader's next event.
func TestSSEReaderEventIsCapped(t *testing.T) {
	s := NewSSEReader(strings.NewReader("data: one\n\ndata: two\n\n"), "eng", 1<<20)
	d, err := s.Next()
	if err != nil || string(d) != "one" || cap(d) != len(d) {
		t.Fatalf("%q (cap %d), %v", d, cap(d), err)
	}
	_ = append(d, "XXXXXXXX"...)
	if d, err := s.Next(); err != nil || string(d) != "two" {
		t.Fatalf("next event %q, %v", d, err)
	}
}
