package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receiver collects what an OTLP exporter sends, over HTTP or gRPC.
type receiver struct {
	collector.UnimplementedTraceServiceServer
	got chan *collector.ExportTraceServiceRequest
}

func (r *receiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	r.got <- req
	return &collector.ExportTraceServiceResponse{}, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.URL.Path != DefaultHTTPPath || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected "+req.URL.Path, http.StatusNotFound)
		return
	}
	var m collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.got <- &m
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// TestSetupExports: Setup with an http:// or host:port (gRPC, --otlp-insecure) endpoint
// exports the spans started while on to that receiver when shut down, under the
// service name (OTEL_SERVICE_NAME replacing it); after shutdown tracing is off.
func TestSetupExports(t *testing.T) {
	for _, c := range []struct {
		name, envService, wantService string
		grpc                          bool
	}{
		{"http", "", ServiceServe, false},
		{"grpc", "my-gateway", "my-gateway", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(EnvServiceName, c.envService)
			rcv := &receiver{got: make(chan *collector.ExportTraceServiceRequest, 4)}
			var endpoint string
			if c.grpc {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				collector.RegisterTraceServiceServer(gs, rcv)
				go func() { _ = gs.Serve(ln) }()
				t.Cleanup(gs.Stop)
				endpoint = ln.Addr().String()
			} else {
				hs := httptest.NewServer(rcv)
				t.Cleanup(hs.Close)
				endpoint = hs.URL
			}
			ep, err := ParseEndpoint(endpoint, c.grpc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			shutdown, err := Setup(ctx, Config{Endpoint: ep, SampleRatio: 1, ServiceName: ServiceServe})
			if err != nil {
				t.Fatal(err)
			}
			if !Enabled() {
				t.Fatal("tracing off after Setup")
			}
			sctx, sp := Start(context.Background(), SpanReceive)
			_, child := Start(sctx, SpanPreprocess)
			child.End()
			sp.End()
			if err := shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if Enabled() {
				t.Error("tracing still on after shutdown")
			}
			var names []string
			var service string
			for len(names) < 2 {
				select {
				case req := <-rcv.got:
					for _, rs := range req.ResourceSpans {
						for _, a := range rs.GetResource().GetAttributes() {
							if a.Key == "service.name" {
								service = a.GetValue().GetStringValue()
							}
						}
						for _, ss := range rs.ScopeSpans {
							for _, s := range ss.Spans {
								names = append(names, s.Name)
							}
						}
					}
				case <-ctx.Done():
					t.Fatalf("spans received: %v", names)
				}
			}
			if strings.Join(names, ",") != SpanPreprocess+","+SpanReceive || service != c.wantService {
				t.Errorf("exported spans %v of service %q; want [preprocess gateway.receive] of %q", names, service, c.wantService)
			}
		})
	}
}

func TestSetupOff(t *testing.T) {
	shutdown, err := Setup(context.Background(), Config{})
	if err != nil || Enabled() || shutdown(context.Background()) != nil {
		t.Fatalf("Setup without an endpoint: %v, enabled %v", err, Enabled())
	}
	if _, err := Setup(context.Background(), Config{Endpoint: Endpoint{Protocol: ProtocolHTTP, HostPort: "a:1", Path: "/v1/traces"},
		SampleRatio: 1.5}); err == nil || Enabled() {
		t.Fatalf("a sample ratio of 1.5 accepted")
	}
}
