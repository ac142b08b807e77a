package tracing

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestParseEndpointGarbage: values an operator might mistype are refused with
// ErrEndpoint, never taken as an endpoint the exporter would dial.
func TestParseEndpointGarbage(t *testing.T) {
	for _, s := range []string{
		"://", "http://", "grpc://", "https://:4318", ":4317", "host:0", "host:65536", "host:-1", "host:+1",
		"host:4317x", "http://host:port", "ftp://x", "unix:///tmp/otlp.sock", "http://h?x=1", "http://u:p@h",
		"grpc://h/v1/traces", "http://h\x00", "h\x00:1", "h\x7f:1", "[::1", "a:b:c", strings.Repeat("a", 1000),
		"http://h:4318 ", "\thttp://h", "grpc://h:1:2", "http//h:4318", "localhost",
	} {
		if ep, err := ParseEndpoint(s, false); !errors.Is(err, ErrEndpoint) {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want ErrEndpoint", s, ep, err)
		}
	}
}

// TestDownEndpointDoesNotBlock: with the OTLP receiver down (nothing listening) or
// silent (it accepts and never answers), starting and ending spans stays fast, and the
// shutdown returns within the context it is given.
func TestDownEndpointDoesNotBlock(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn, 1)
	go func() {
		var conns []net.Conn
		for {
			c, err := silent.Accept()
			if err != nil {
				accepted <- conns
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})
	// OTLP/HTTP only: an OTLP/gRPC exporter's connection goroutines outlive its shutdown
	// and race with the cluster members TestChainPropagatesClientTrace starts later in
	// this binary (their remoting sets grpclog's global logger).
	for _, tc := range []struct{ name, endpoint string }{
		{"http down", "http://" + closedAddr}, {"http silent", "http://" + silent.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := ParseEndpoint(tc.endpoint, true)
			if err != nil {
				t.Fatal(err)
			}
			shutdown, err := Setup(context.Background(), Config{Endpoint: ep, SampleRatio: 1, ServiceName: ServiceServe})
			if err != nil {
				t.Fatalf("Setup with the receiver down: %v", err)
			}
			start := time.Now()
			const n = 10000 // past the batcher's queue of 2048: the rest are dropped, not waited for
			for i := 0; i < n; i++ {
				ctx, sp := Start(context.Background(), SpanReceive)
				_, child := Start(ctx, SpanPreprocess)
				child.End()
				sp.End()
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("%d spans took %v with the receiver down", 2*n, took)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start = time.Now()
			_ = shutdown(sctx) // an error is expected: the spans could not be sent
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("shutdown took %v with a 300ms context", took)
			}
			if Enabled() {
				t.Error("tracing still on after shutdown")
			}
		})
	}
}
