package resp

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/turbine-llm/turbine/kvbm"
)

// BenchmarkRESPSetGet2MiB: one client over loopback TCP puts a 2 MiB block (a
// Llama-3.1-8B 16-token block) and reads it back, one request at a time. Reports GB/s
// of block bytes moved (put plus get).
func BenchmarkRESPSetGet2MiB(b *testing.B) {
	const size = 2 << 20
	st, err := kvbm.Open(kvbm.Config{HostBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv := New(st, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	value := binValue(size, 1)
	setHead := []byte("*3\r\n$3\r\nSET\r\n$16\r\nturbine@m@0000ff\r\n$" + strconv.Itoa(size) + "\r\n")
	get := appendCommand(nil, []byte("GET"), []byte("turbine@m@0000ff"))
	getHead := "$" + strconv.Itoa(size) + "\r\n"
	got := make([]byte, len(getHead)+size+2)
	ok := make([]byte, 5)
	b.SetBytes(2 * size)
	b.ResetTimer()
	for range b.N {
		bufs := net.Buffers{setHead, value, []byte("\r\n")}
		if _, err := bufs.WriteTo(c); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, ok); err != nil || string(ok) != "+OK\r\n" {
			b.Fatalf("SET: %q, %v", ok, err)
		}
		if _, err := c.Write(get); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, got); err != nil || string(got[:len(getHead)]) != getHead {
			b.Fatalf("GET: %q, %v", got[:len(getHead)], err)
		}
	}
	b.ReportMetric(float64(b.N)*2*size/b.Elapsed().Seconds()/1e9, "GB/s")
}
