package epp

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/turbine-llm/turbine/epp/pool"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
)

// staticSource is a fixed pool with optional loads.
type staticSource struct {
	mu    sync.Mutex
	list  []pool.Endpoint
	loads map[string]pool.Load
	ready bool
}

func newStatic(addrs ...string) *staticSource {
	s := &staticSource{ready: true, loads: map[string]pool.Load{}}
	for _, a := range addrs {
		s.list = append(s.list, pool.Endpoint{Address: a})
	}
	return s
}

func (s *staticSource) Endpoints() []pool.Endpoint { s.mu.Lock(); defer s.mu.Unlock(); return s.list }
func (s *staticSource) Ready() bool                { s.mu.Lock(); defer s.mu.Unlock(); return s.ready }
func (s *staticSource) Load(a string) (pool.Load, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.loads[a]
	return l, ok
}

// fakeTurbine serves model "m" on the workers given; its router answers outcome, else
// the worker named by the prompt's first word when allowed ("w1 …"), else the first
// worker not excluded.
type fakeTurbine struct {
	mu      sync.Mutex
	workers []Worker
	outcome messages.RouteOutcome
	routed  []*messages.RouteRequest
	acked   []string
	freed   chan string
	fail    bool
}

func newFakeTurbine(workers ...Worker) *fakeTurbine {
	return &fakeTurbine{workers: workers, freed: make(chan string, 100)}
}

func (f *fakeTurbine) Prepare(_ context.Context, req *PickRequest) (*gateway.GenerateRequest, *Error) {
	info, perr := ParseRequest(req.Body)
	if perr != nil {
		return nil, perr
	}
	if info.Model != "m" {
		return nil, &Error{Kind: KindUpstream, Status: 404, Body: []byte(`{"error":{"message":"The model does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)}
	}
	ids := make([]uint32, 0, len(req.Body))
	for _, b := range req.Body {
		ids = append(ids, uint32(b))
	}
	return &gateway.GenerateRequest{Model: "m", RequestID: req.RequestID, TokenIDs: ids, Sampling: &messages.SamplingParams{}}, nil
}

func (f *fakeTurbine) Workers(context.Context, string) ([]Worker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workers, nil
}

func (f *fakeTurbine) WorkerEndpoints(context.Context) map[string]bool {
	out := map[string]bool{}
	for _, w := range f.workers {
		out[w.Endpoint] = true
	}
	return out
}

func (f *fakeTurbine) Route(_ context.Context, _ string, rr *messages.RouteRequest) (*messages.RouteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routed = append(f.routed, rr)
	if f.fail {
		return nil, context.DeadlineExceeded
	}
	if f.outcome != messages.RouteOutcome_ROUTE_OK {
		return &messages.RouteResponse{Outcome: f.outcome, Error: "fake"}, nil
	}
	excluded := map[string]bool{}
	for _, w := range rr.ExcludeWorkers {
		excluded[w] = true
	}
	var cands []*messages.RouteCandidate
	for i, w := range f.workers {
		if !excluded[w.ID] {
			cands = append(cands, &messages.RouteCandidate{WorkerId: w.ID, Cost: float64(i)})
		}
	}
	if len(cands) == 0 {
		return &messages.RouteResponse{Outcome: messages.RouteOutcome_ROUTE_NO_WORKERS}, nil
	}
	return &messages.RouteResponse{WorkerId: cands[0].WorkerId, Candidates: cands, Router: &messages.ActorRef{Address: "r", Id: "r"}}, nil
}

func (f *fakeTurbine) Started(_, id string, _ *messages.ActorRef) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked = append(f.acked, id)
}
func (f *fakeTurbine) Free(_, id string)              { f.freed <- id }
func (f *fakeTurbine) Reachable(context.Context) bool { return true }

// waitFreed waits for one Free and returns its id.
func (f *fakeTurbine) waitFreed(t *testing.T) string {
	t.Helper()
	select {
	case id := <-f.freed:
		return id
	case <-time.After(5 * time.Second):
		t.Fatal("no Free")
		return ""
	}
}

// eppHarness is an EPP served over bufconn and a client posing as Envoy.
type eppHarness struct {
	srv    *Server
	lis    *bufconn.Listener
	gs     *grpc.Server
	client extprocv3.ExternalProcessorClient
	conn   *grpc.ClientConn
}

func startEPP(t testing.TB, p *Picker) *eppHarness {
	t.Helper()
	h := &eppHarness{srv: NewServer(p, MachineConfig{NewRequestID: func() string { return "generated-id" }}, nil, zerolog.Nop())}
	h.listen(t)
	conn, err := grpc.NewClient("passthrough:///epp", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return h.lis.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn, h.client = conn, extprocv3.NewExternalProcessorClient(conn)
	return h
}

func (h *eppHarness) listen(t testing.TB) {
	h.lis = bufconn.Listen(1 << 20)
	h.gs = grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(h.gs, h.srv)
	go func() { _ = h.gs.Serve(h.lis) }()
	t.Cleanup(h.gs.Stop)
}

func headersMsg(path string, eos bool, md *corev3.Metadata, extra ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte(path)},
		{Key: "content-type", RawValue: []byte("application/json")}}
	if eos {
		hs[0].RawValue = []byte("GET")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: extra[i], RawValue: []byte(extra[i+1])})
	}
	return &extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}}}
}

func bodyMsg(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

func respHeadersMsg(status, contentType string, md *corev3.Metadata) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(status)}, {Key: "content-type", RawValue: []byte(contentType)}}}}}}
}

func respBodyMsg(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func subsetMD(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: v}}}}
}

func servedMD(ep string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataNamespace: {Fields: map[string]*structpb.Value{MetadataServed: structpb.NewStringValue(ep)}}}}
}

// exchange is one request path as Envoy drives it in FULL_DUPLEX_STREAMED mode: the
// headers, the body in pieces of chunk bytes, then the EPP's answers until the request
// body's end of stream (or an immediate response).
type exchange struct {
	stream   extprocv3.ExternalProcessor_ProcessClient
	headers  *extprocv3.HeadersResponse
	body     []byte
	bodyMsgs []*extprocv3.StreamedBodyResponse
	dynamic  map[string]any
	imm      *extprocv3.ImmediateResponse
}

func (h *eppHarness) requestPath(t testing.TB, ctx context.Context, path string, body []byte, chunk int, md *corev3.Metadata, extra ...string) *exchange {
	t.Helper()
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{stream: st}
	if err := st.Send(headersMsg(path, body == nil, md, extra...)); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		parts := Chunks(body, chunk)
		for i, p := range parts {
			if err := st.Send(bodyMsg(p, i == len(parts)-1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		switch v := r.Response.(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			x.imm = v.ImmediateResponse
			return x
		case *extprocv3.ProcessingResponse_RequestHeaders:
			x.headers = v.RequestHeaders
			x.dynamic = r.GetDynamicMetadata().AsMap()
			if body == nil {
				return x
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			sb := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			x.bodyMsgs = append(x.bodyMsgs, sb)
			x.body = append(x.body, sb.GetBody()...)
			if sb.GetEndOfStream() {
				return x
			}
		default:
			t.Fatalf("unexpected response %T", v)
		}
	}
}

// destination is the x-gateway-destination-endpoint the headers response sets.
func (x *exchange) destination() string {
	for _, h := range x.headers.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), HeaderDestination) {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}

// metadataDestination is the envoy.lb dynamic metadata's destination.
func (x *exchange) metadataDestination() string {
	lb, _ := x.dynamic[MetadataNamespace].(map[string]any)
	s, _ := lb[HeaderDestination].(string)
	return s
}

var (
	extprocRequestTrailers  = extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	extprocResponseTrailers = extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
)
