package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func zlibbed(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func rawDeflated(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// padded is a completions body of exactly n bytes (JSON white space fills it up).
func padded(n int) []byte {
	b := []byte(`{"model":"tiny","prompt":"hi"}`)
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

func TestContentCoding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   string // the coding, or "415"
	}{
		{"none", nil, ""},
		{"empty", []string{""}, ""},
		{"identity", []string{"identity"}, ""},
		{"blank list", []string{" , "}, ""},
		{"gzip", []string{"gzip"}, "gzip"},
		{"case", []string{"GZip"}, "gzip"},
		{"x-gzip", []string{"x-gzip"}, "gzip"},
		{"deflate", []string{"deflate"}, "deflate"},
		{"with identity", []string{"gzip, identity"}, "gzip"},
		{"identity header then gzip", []string{"identity", "gzip"}, "gzip"},
		{"padded", []string{"  gzip  "}, "gzip"},
		{"brotli", []string{"br"}, "415"},
		{"zstd", []string{"zstd"}, "415"},
		{"compress", []string{"compress"}, "415"},
		{"stacked", []string{"gzip, gzip"}, "415"},
		{"stacked headers", []string{"deflate", "gzip"}, "415"},
		{"parameters", []string{"gzip;q=1"}, "415"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, aerr := contentCoding(tc.values)
			if aerr != nil {
				if aerr.Status() != http.StatusUnsupportedMediaType {
					t.Fatalf("%q: %v, want 415", tc.values, aerr)
				}
				got = "415"
			}
			if got != tc.want {
				t.Errorf("%q: %q, want %q", tc.values, got, tc.want)
			}
		})
	}
}

// serveEncoded posts body with Content-Encoding encoding ("" sends none) from loopback.
func serveEncoded(h http.Handler, path, encoding string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr, req.Host = "127.0.0.1:1234", "127.0.0.1:8000"
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	return rr
}

// Compressed request bodies: gzip and deflate (zlib) are decoded, with MaxBodyBytes
// applied to the decoded body as well as to what arrives (a gzip bomb gets 413); other
// codings get 415 with Accept-Encoding, corrupt data 400.
func TestEncodedBodies(t *testing.T) {
	const limit = 4096
	incompressible := make([]byte, 2*limit)
	_, _ = rand.Read(incompressible)
	bomb := gzipped(bytes.Repeat([]byte{' '}, 16<<20)) // 16 MiB of white space in about 16 KiB
	valid := gzipped(padded(100))
	for _, tc := range []struct {
		name, path, encoding string
		body                 []byte
		code                 int
		errCode              string
	}{
		{"plain", compPath, "", padded(100), 200, ""},
		{"identity", compPath, "identity", padded(100), 200, ""},
		{"gzip", compPath, "gzip", valid, 200, ""},
		{"gzip chat", chatPath, "gzip", gzipped([]byte(`{"model":"tiny",` + hiChat + `}`)), 200, ""},
		{"gzip, two members", compPath, "gzip", append(gzipped([]byte(`{"model":"tiny",`)), gzipped([]byte(`"prompt":"hi"}`))...), 200, ""},
		{"deflate", compPath, "deflate", zlibbed(padded(100)), 200, ""},
		{"gzip admin", "/admin/busy_thresholds", "gzip", gzipped([]byte(`{"model":"tiny","kv_usage":0.5}`)), 200, ""},
		{"decoded at the limit", compPath, "gzip", gzipped(padded(limit)), 200, ""},
		{"decoded one byte over", compPath, "gzip", gzipped(padded(limit + 1)), 413, "request_too_large"},
		{"gzip bomb", compPath, "gzip", bomb, 413, "request_too_large"},
		{"deflate bomb", compPath, "deflate", zlibbed(bytes.Repeat([]byte{' '}, 16<<20)), 413, "request_too_large"},
		{"compressed over the limit", compPath, "gzip", gzipped(incompressible), 413, "request_too_large"},
		{"not gzip", compPath, "gzip", padded(100), 400, "invalid_content_encoding"},
		{"truncated gzip", compPath, "gzip", valid[:len(valid)-10], 400, "invalid_content_encoding"},
		{"bad checksum", compPath, "gzip", append(valid[:len(valid)-8:len(valid)-8], 0, 0, 0, 0, 100, 0, 0, 0), 400, "invalid_content_encoding"},
		{"raw deflate", compPath, "deflate", rawDeflated(padded(100)), 400, "invalid_content_encoding"},
		{"gzip sent as deflate", compPath, "deflate", valid, 400, "invalid_content_encoding"},
		{"brotli", compPath, "br", []byte("whatever"), 415, "unsupported_content_encoding"},
		{"stacked", compPath, "gzip, gzip", gzipped(valid), 415, "unsupported_content_encoding"},
		{"brotli admin", "/admin/busy_thresholds", "br", []byte("whatever"), 415, "unsupported_content_encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeAdmin{fakeBackend: newFakeBackend(finish("Hello", "stop")), st: BusyStatus{Workers: []BusyWorker{}}}
			cfg := Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "id" }, MaxBodyBytes: limit}
			s, err := New(cfg, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
			if err != nil {
				t.Fatal(err)
			}
			rr := serveEncoded(s, tc.path, tc.encoding, tc.body)
			if rr.Code != tc.code || !strings.Contains(rr.Body.String(), `"code":"`+tc.errCode+`"`) && tc.errCode != "" {
				t.Fatalf("%d %s, want %d %s", rr.Code, rr.Body.String(), tc.code, tc.errCode)
			}
			if tc.code == http.StatusUnsupportedMediaType && rr.Header().Get("Accept-Encoding") != "gzip, deflate" {
				t.Errorf("415 with Accept-Encoding %q, want %q", rr.Header().Get("Accept-Encoding"), "gzip, deflate")
			}
		})
	}
}

// An unsupported Content-Encoding is named in the answer, clipped.
func TestUnsupportedEncodingMessage(t *testing.T) {
	s := newTestServer(t, newFakeBackend())
	long := strings.Repeat("z", 10000)
	rr := serveEncoded(s, compPath, long, padded(100))
	if rr.Code != 415 || rr.Body.Len() > 1024 || !strings.Contains(rr.Body.String(), "(10000 bytes)") {
		t.Errorf("%d %.500s: want 415 naming the clipped coding", rr.Code, rr.Body.String())
	}
	rr = serveEncoded(s, compPath, "br", padded(100))
	want := `{"error":{"message":"The request's Content-Encoding br is not supported: send the body uncompressed, or compressed with gzip or deflate.","type":"invalid_request_error","param":null,"code":"unsupported_content_encoding"}}` + "\n"
	if rr.Body.String() != want {
		t.Errorf("got %s, want %s", rr.Body.String(), want)
	}
}

// FuzzEncodedBody: whatever arrives as a gzip or deflate body, readBody returns at most
// MaxBodyBytes decoded bytes or a 400 or 413 catalogue error.
func FuzzEncodedBody(f *testing.F) {
	f.Add(gzipped(padded(100)), false)
	f.Add(zlibbed(padded(100)), true)
	f.Add(gzipped(bytes.Repeat([]byte{'a'}, 5000)), false)
	f.Add(gzipped(gzipped(padded(200))), false)
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, false)
	f.Add([]byte{0x78, 0x9c}, true)
	const limit = 2048
	f.Fuzz(func(t *testing.T, data []byte, deflate bool) {
		s := &Server{cfg: Config{MaxBodyBytes: limit}}
		req := httptest.NewRequest(http.MethodPost, compPath, bytes.NewReader(data))
		req.Header.Set("Content-Encoding", map[bool]string{false: "gzip", true: "deflate"}[deflate])
		body, aerr := s.readBody(httptest.NewRecorder(), req)
		if aerr != nil {
			if body != nil || aerr.Status() != 400 && aerr.Status() != 413 || aerr.Message == "" {
				t.Fatalf("body %d bytes, error %v", len(body), aerr)
			}
			return
		}
		if len(body) > limit {
			t.Fatalf("%d decoded bytes accepted, limit %d", len(body), limit)
		}
	})
}

// TestDecodeEncodedBodyReadsTheRest: a body refused for its decoded size (or as corrupt)
// is still read to its end as received (within the limit the caller's MaxBytesReader
// sets), so that the server does not answer with unread request data on the connection,
// which resets it before a client waiting for 100 Continue reads the 413.
func TestDecodeEncodedBodyReadsTheRest(t *testing.T) {
	const limit = 4096
	bomb := gzipped(bytes.Repeat([]byte{' '}, 16<<20))
	for _, tc := range []struct {
		name, coding string
		body         []byte
		kind         ErrorKind
	}{
		{"decoded over the limit", "gzip", bomb, KindBodyTooLarge},
		{"deflate decoded over the limit", "deflate", zlibbed(bytes.Repeat([]byte{' '}, 16<<20)), KindBodyTooLarge},
		{"corrupt", "gzip", append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, bytes.Repeat([]byte{0xff}, 64<<10)...), KindInvalidEncoding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.body)
			_, aerr := decodeEncodedBody(tc.coding, r, limit)
			if aerr == nil || aerr.Kind != tc.kind {
				t.Fatalf("error %v, want kind %v", aerr, tc.kind)
			}
			if r.Len() != 0 {
				t.Errorf("%d of %d bytes of the body left unread", r.Len(), len(tc.body))
			}
		})
	}
}
