package epp

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// scriptStream is an ext_proc server stream fed from a list: Recv hands out the messages
// then io.EOF (or recvErr); Send fails from the failSendAt-th answer on (0: never).
type scriptStream struct {
	grpc.ServerStream
	ctx        context.Context
	in         []*extprocv3.ProcessingRequest
	recvErr    error
	sent       []*extprocv3.ProcessingResponse
	failSendAt int
}

func (s *scriptStream) Context() context.Context { return s.ctx }

func (s *scriptStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(s.in) == 0 {
		if s.recvErr != nil {
			return nil, s.recvErr
		}
		return nil, io.EOF
	}
	m := s.in[0]
	s.in = s.in[1:]
	return m, nil
}

func (s *scriptStream) Send(r *extprocv3.ProcessingResponse) error {
	if s.failSendAt > 0 && len(s.sent)+1 >= s.failSendAt {
		return status.Error(codes.Canceled, "stream gone")
	}
	s.sent = append(s.sent, r)
	return nil
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
}

func respTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
}

// freedCount drains the Free calls made so far.
func (f *fakeTurbine) freedCount() int {
	n := 0
	for {
		select {
		case <-f.freed:
			n++
		default:
			return n
		}
	}
}

// outstandingTotal is the Picker's count of by-load requests not yet ended.
func outstandingTotal(p *Picker) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.outstanding {
		n += v
	}
	return n
}

// TestMalformedStreams: each malformed message order ends the stream with
// InvalidArgument or answers with the right immediate response; Process returns, and
// what was picked is freed exactly once.
func TestMalformedStreams(t *testing.T) {
	good := chatBody("m", "hi", false)
	picked := []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg(good, true)}
	for _, tc := range []struct {
		name   string
		max    int
		in     []*extprocv3.ProcessingRequest
		code   codes.Code // codes.OK: Process returns nil
		status int        // the immediate response's status (0: none)
		freed  int
	}{
		{name: "body before headers", in: []*extprocv3.ProcessingRequest{bodyMsg(good, true)}, code: codes.InvalidArgument},
		{name: "trailers only", in: []*extprocv3.ProcessingRequest{reqTrailers()}, code: codes.InvalidArgument},
		{name: "response trailers only", in: []*extprocv3.ProcessingRequest{respTrailers()}, code: codes.InvalidArgument},
		{name: "headers twice", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), headersMsg("/v1/chat/completions", false, nil)}, code: codes.InvalidArgument},
		{name: "headers twice after the pick", in: append(append([]*extprocv3.ProcessingRequest{}, picked...), headersMsg("/", false, nil)), code: codes.InvalidArgument, freed: 1},
		{name: "response headers before the pick", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), respHeadersMsg("200", "application/json", nil)}, code: codes.InvalidArgument},
		{name: "response body before the pick", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), respBodyMsg("{}", true)}, code: codes.InvalidArgument},
		{name: "response body before its headers", in: append(append([]*extprocv3.ProcessingRequest{}, picked...), respBodyMsg("{}", true)), code: codes.InvalidArgument, freed: 1},
		{name: "body after its end", in: append(append([]*extprocv3.ProcessingRequest{}, picked...), bodyMsg([]byte("x"), true)), code: codes.InvalidArgument, freed: 1},
		{name: "over max body", max: 100, in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg(make([]byte, 60), false), bodyMsg(make([]byte, 60), false), bodyMsg(make([]byte, 60), true)}, status: 413},
		{name: "invalid json", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg([]byte(`{"model": "m",`), true)}, status: 400},
		{name: "model not a string", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg([]byte(`{"model": 7}`), true)}, status: 400},
		{name: "model missing", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg([]byte(`{"messages": []}`), true)}, status: 404},
		{name: "binary body", in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg([]byte{0xff, 0, 0xfe}, true)}, status: 400},
		{name: "empty message", in: []*extprocv3.ProcessingRequest{{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ft := threeWorkers()
			p := &Picker{Source: src, Turbine: ft}
			s := NewServer(p, MachineConfig{MaxBodyBytes: tc.max, NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
			st := &scriptStream{ctx: context.Background(), in: tc.in}
			err := s.Process(st)
			if status.Code(err) != tc.code {
				t.Fatalf("Process: %v, want code %v", err, tc.code)
			}
			var imm *extprocv3.ImmediateResponse
			for _, r := range st.sent {
				if r.GetImmediateResponse() != nil {
					imm = r.GetImmediateResponse()
				}
			}
			if got := int(imm.GetStatus().GetCode()); got != tc.status {
				t.Fatalf("immediate status %d, want %d (%s)", got, tc.status, imm.GetBody())
			}
			if n := ft.freedCount(); n != tc.freed {
				t.Errorf("freed %d, want %d", n, tc.freed)
			}
			if n := outstandingTotal(p); n != 0 {
				t.Errorf("%d by-load requests left outstanding", n)
			}
		})
	}
}

// TestHeadersThenTrailersByLoad: a POST whose body is empty (trailers end it) is picked
// by load, its body's answer is one empty chunk without end of stream, then the
// trailers' answer; its outstanding count is released when the stream ends.
func TestHeadersThenTrailersByLoad(t *testing.T) {
	src, ft := threeWorkers()
	p := &Picker{Source: src, Turbine: ft}
	s := NewServer(p, MachineConfig{NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
	st := &scriptStream{ctx: context.Background(), in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), reqTrailers()}}
	if err := s.Process(st); err != nil {
		t.Fatal(err)
	}
	if len(st.sent) != 3 || st.sent[0].GetRequestHeaders() == nil || st.sent[1].GetRequestBody() == nil || st.sent[2].GetRequestTrailers() == nil {
		t.Fatalf("answers %v", st.sent)
	}
	if sb := st.sent[1].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); len(sb.GetBody()) != 0 || sb.GetEndOfStream() {
		t.Errorf("body answer %v", sb)
	}
	if n := outstandingTotal(p); n != 0 {
		t.Errorf("%d outstanding after the stream ended", n)
	}
}

// TestFreedWhenLastSendFails: when the answer to the message that ends the request cannot
// be sent (the stream broke at that moment), the router's load is still freed, once.
func TestFreedWhenLastSendFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		last *extprocv3.ProcessingRequest
	}{
		{"response body end", respBodyMsg(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`, true)},
		{"response trailers", respTrailers()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ft := threeWorkers()
			s := NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
			in := []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg(chatBody("m", "hi", false), true),
				respHeadersMsg("200", "application/json", nil), tc.last}
			// answers: request headers, request body, response headers, then the last one fails.
			st := &scriptStream{ctx: context.Background(), in: in, failSendAt: 4}
			if err := s.Process(st); err == nil {
				t.Fatal("Process did not report the failed send")
			}
			if n := ft.freedCount(); n != 1 {
				t.Fatalf("freed %d times, want 1", n)
			}
		})
	}
}

// TestImmediateResponsesCounted: the EPP's own answers are counted by status, the
// Machine's 413 included, also when the answer cannot be sent.
func TestImmediateResponsesCounted(t *testing.T) {
	for _, failSend := range []int{0, 1} {
		src, ft := threeWorkers()
		s := NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{MaxBodyBytes: 10, NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
		for _, body := range [][]byte{make([]byte, 11), []byte(`{}x`)} {
			st := &scriptStream{ctx: context.Background(), failSendAt: failSend,
				in: []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg(body, true)}}
			_ = s.Process(st)
		}
		for _, code := range []string{"413", "400"} {
			if got := readCounter(s.Metrics, `turbine_epp_immediate_responses_total{code="`+code+`"}`); got != 1 {
				t.Errorf("send failing at %d: %s counted %v times, want 1", failSend, code, got)
			}
		}
		if got := readCounter(s.Metrics, "turbine_epp_aborted_requests_total"); got != 0 {
			t.Errorf("answered requests counted as aborted (%v)", got)
		}
	}
}

// TestServedEndpointGarbage: a served endpoint the gateway reports that is not "ip:port"
// (quotes, new lines, a huge string) neither crashes the EPP nor makes a series of its
// own: the error is counted against the primary.
func TestServedEndpointGarbage(t *testing.T) {
	for _, served := range []string{`10.0.0.2:8000"} 1` + "\nx", `a"b`, strings.Repeat("z", 10000)} {
		src, ft := threeWorkers()
		s := NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
		in := []*extprocv3.ProcessingRequest{headersMsg("/v1/chat/completions", false, nil), bodyMsg(chatBody("m", "hi", false), true),
			respHeadersMsg("500", "application/json", servedMD(served)), respBodyMsg(`{}`, true)}
		if err := s.Process(&scriptStream{ctx: context.Background(), in: in}); err != nil {
			t.Fatal(err)
		}
		if got := readCounter(s.Metrics, `turbine_epp_model_server_errors_total{endpoint="10.0.0.1:8000",code="500"}`); got != 1 {
			t.Errorf("served %.20q: error not counted against the primary (%v)", served, got)
		}
		ft.freedCount()
	}
}

// TestCancelAtEachPhase: the gateway's stream cancelled after each message ends Process
// and frees what was picked exactly once; nothing picked, nothing freed.
func TestCancelAtEachPhase(t *testing.T) {
	all := []*extprocv3.ProcessingRequest{
		headersMsg("/v1/chat/completions", false, nil),
		bodyMsg(chatBody("m", "hi", true)[:5], false),
		bodyMsg(chatBody("m", "hi", true)[5:], true),
		respHeadersMsg("200", "text/event-stream", nil),
		respBodyMsg("data: {}\n\n", false),
	}
	for n := 0; n <= len(all); n++ {
		src, ft := threeWorkers()
		s := NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())
		st := &scriptStream{ctx: context.Background(), in: all[:n], recvErr: status.Error(codes.Canceled, "cancelled")}
		if err := s.Process(st); err != nil {
			t.Fatalf("after %d messages: %v", n, err)
		}
		want := 0
		if n >= 3 {
			want = 1
		}
		if got := ft.freedCount(); got != want {
			t.Errorf("after %d messages: freed %d, want %d", n, got, want)
		}
	}
}

// countingServer is a Server that counts its running Process handlers.
type countingServer struct {
	*Server
	open atomic.Int64
}

func (c *countingServer) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	c.open.Add(1)
	defer c.open.Add(-1)
	return c.Server.Process(st)
}

// TestCancelOverGRPC: cancelling the client's context at each point over a real gRPC
// stream frees the pick once and leaves no handler running.
func TestCancelOverGRPC(t *testing.T) {
	src, ft := threeWorkers()
	cs := &countingServer{Server: NewServer(&Picker{Source: src, Turbine: ft}, MachineConfig{NewRequestID: func() string { return "id" }}, nil, zerolog.Nop())}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, cs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///epp", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := extprocv3.NewExternalProcessorClient(conn)
	body := chatBody("m", "hi", true)
	steps := []func(st extprocv3.ExternalProcessor_ProcessClient) error{
		func(st extprocv3.ExternalProcessor_ProcessClient) error {
			return st.Send(headersMsg("/v1/chat/completions", false, nil))
		},
		func(st extprocv3.ExternalProcessor_ProcessClient) error { return st.Send(bodyMsg(body[:4], false)) },
		func(st extprocv3.ExternalProcessor_ProcessClient) error {
			if err := st.Send(bodyMsg(body[4:], true)); err != nil {
				return err
			}
			for i := 0; i < 2; i++ { // the headers and body answers
				if _, err := st.Recv(); err != nil {
					return err
				}
			}
			return nil
		},
		func(st extprocv3.ExternalProcessor_ProcessClient) error {
			if err := st.Send(respHeadersMsg("200", "text/event-stream", nil)); err != nil {
				return err
			}
			_, err := st.Recv()
			return err
		},
	}
	for n := 1; n <= len(steps); n++ {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range steps[:n] {
			if err := f(st); err != nil {
				t.Fatalf("step of %d: %v", n, err)
			}
		}
		cancel()
		if n >= 3 {
			ft.waitFreed(t)
		}
		// The handler notices the reset asynchronously: poll for it to end.
		deadline := time.Now().Add(5 * time.Second)
		for cs.open.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after %d steps: %d handlers still running", n, cs.open.Load())
			}
			time.Sleep(time.Millisecond)
		}
		if got := ft.freedCount(); got != 0 {
			t.Errorf("after %d steps: freed %d more", n, got)
		}
	}
}
