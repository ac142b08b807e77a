package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP receiver keeping every span's name, trace id and service.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []string // "service name trace-id"
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m collector.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &m) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range m.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, service+" "+s.Name+" "+hex.EncodeToString(s.TraceId))
			}
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	_, _ = w.Write(b)
}

// TestServeExportsTraces: `turbine serve --otlp-endpoint http://…` exports the spans of a
// request made with a client traceparent, in the client's trace, by the time it exits.
func TestServeExportsTraces(t *testing.T) {
	rcv := &otlpReceiver{}
	hs := httptest.NewServer(rcv)
	defer hs.Close()
	s := startServe(t, 1, "--otlp-endpoint", hs.URL)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/completions",
		strings.NewReader(`{"model":"turbine-mock","prompt":"hello","max_tokens":3}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	s.stop() // flushes the batch processor on the way out
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, name := range []string{"gateway.receive", "preprocess", "route", "router.route", "decode", "worker.generate"} {
		if !slices.Contains(rcv.spans, "turbine-serve "+name+" "+trace) {
			t.Errorf("no %s span of turbine-serve in trace %s; received %v", name, trace, rcv.spans)
		}
	}
}
