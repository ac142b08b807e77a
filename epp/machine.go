package epp

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Defaults of MachineConfig.
const (
	// DefaultMaxBodyBytes bounds the request body the EPP buffers (bytes); larger: 413.
	DefaultMaxBodyBytes = 16 << 20
	// DefaultTailBytes is how much of the end of an answer is kept to read its usage.
	DefaultTailBytes = 256 << 10
	// DefaultRetryAfter is the Retry-After of 429 and 503 answers.
	DefaultRetryAfter = time.Second
)

// MachineConfig configures a Machine; the zero value of a field means its default.
type MachineConfig struct {
	MaxBodyBytes int
	TailBytes    int
	RetryAfter   time.Duration
	// NewRequestID makes an x-request-id for a request that has none (required).
	NewRequestID func() string
}

func (c MachineConfig) withDefaults() MachineConfig {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.TailBytes <= 0 {
		c.TailBytes = DefaultTailBytes
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	return c
}

// PickRequest is what the shell asks the Picker once the request is read.
type PickRequest struct {
	RequestID string
	Method    string
	Path      string            // without the query
	Headers   map[string]string // lower-case names
	Body      []byte            // nil for a request without a body
	// Subset is the gateway's subset hint; SubsetPresent false: every endpoint eligible.
	Subset        []string
	SubsetPresent bool
}

// Pick is the Picker's answer: the endpoints, primary first, and what to release when
// the request ends.
type Pick struct {
	Endpoints []string
	Release   Release
}

// Release is what the Picker needs back when a request ends (opaque to the Machine).
type Release struct {
	Model    string
	RouteIDs []string // request ids the Router grain tracks (freed once)
	Endpoint string   // the primary endpoint
	Turbine  bool     // picked by a Turbine router (else by load)
}

// Outcome is how a request ended, given once in Step.Done.
type Outcome struct {
	Pick     *Pick  // nil: nothing was picked
	Err      *Error // the EPP answered with this immediate response
	Served   string // the endpoint the gateway reports it used ("" if it did not say)
	Status   int    // the model server's HTTP status (0: none seen)
	Usage    Usage
	HasUsage bool
	Aborted  bool // the stream ended before the response did
}

// Step is what the shell does after feeding the Machine one message: send Send in order,
// then, when Pick is set, ask the Picker and hand its answer to Machine.Picked; when Done
// is set, release it. Err: the stream is broken (a protocol violation); end it.
type Step struct {
	Send []*extprocv3.ProcessingResponse
	Pick *PickRequest
	Done *Outcome
	Err  error
}

type phase int

const (
	phaseHeaders  phase = iota // waiting for the request headers
	phaseBody                  // buffering the request body
	phasePicking               // the pick is asked for
	phasePicked                // the request went upstream
	phaseResponse              // the response is passing
	phaseDone
)

// Machine is the state machine of one ext_proc stream (one HTTP request) in
// FULL_DUPLEX_STREAMED body mode (docs/epp.md). It is not safe for concurrent use; the
// shell feeds it the stream's messages in order.
type Machine struct {
	cfg   MachineConfig
	phase phase

	req           PickRequest
	generatedID   bool
	headersEoS    bool // the request had no body
	body          []byte
	bodyEoS       bool // the body ended with end_of_stream (not with trailers)
	trailersAwait bool // request trailers arrived before the pick: answer them after the body

	pick        *Pick
	served      string
	status      int
	contentType string
	tail        []byte
	truncated   bool
}

// NewMachine returns the Machine of a new stream.
func NewMachine(cfg MachineConfig) *Machine {
	return &Machine{cfg: cfg.withDefaults()}
}

// Step feeds one message from the gateway.
func (m *Machine) Step(in *extprocv3.ProcessingRequest) Step {
	if md := in.GetMetadataContext(); md != nil {
		if sub, ok := SubsetHint(md); ok {
			m.req.Subset, m.req.SubsetPresent = sub, true
		}
		if s := ServedEndpoint(md); s != "" {
			m.served = s
		}
	}
	if m.phase == phaseDone {
		return Step{}
	}
	switch r := in.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return m.requestHeaders(r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return m.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return m.requestTrailers()
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return m.responseHeaders(r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return m.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return m.responseTrailers()
	default:
		return Step{} // flow control and other messages need no answer
	}
}

func (m *Machine) requestHeaders(h *extprocv3.HttpHeaders) Step {
	if m.phase != phaseHeaders {
		return Step{Err: fmt.Errorf("epp: request headers twice")}
	}
	m.req.Headers = headerMap(h.GetHeaders())
	m.req.Method = m.req.Headers[":method"]
	m.req.Path = m.req.Headers[":path"]
	if u, err := url.ParseRequestURI(m.req.Path); err == nil {
		m.req.Path = u.Path
	}
	m.req.RequestID = m.req.Headers[HeaderRequestID]
	if m.req.RequestID == "" {
		m.req.RequestID, m.generatedID = m.cfg.NewRequestID(), true
	}
	if h.GetEndOfStream() {
		m.headersEoS = true
		return m.askPick()
	}
	m.phase = phaseBody
	return Step{}
}

func (m *Machine) requestBody(b *extprocv3.HttpBody) Step {
	if m.phase != phaseBody {
		return Step{Err: fmt.Errorf("epp: request body out of order")}
	}
	if len(m.body)+len(b.GetBody()) > m.cfg.MaxBodyBytes {
		return m.fail(newError(KindTooLarge, "The request body is larger than %d bytes.", m.cfg.MaxBodyBytes))
	}
	m.body = append(m.body, b.GetBody()...)
	if b.GetEndOfStream() {
		m.bodyEoS = true
		return m.askPick()
	}
	return Step{}
}

func (m *Machine) requestTrailers() Step {
	switch m.phase {
	case phaseBody: // the trailers end the body
		m.trailersAwait = true
		return m.askPick()
	case phasePicked, phaseResponse:
		return Step{Send: []*extprocv3.ProcessingResponse{requestTrailersResponse()}}
	default:
		return Step{Err: fmt.Errorf("epp: request trailers out of order")}
	}
}

func (m *Machine) askPick() Step {
	m.phase = phasePicking
	req := m.req
	if !m.headersEoS {
		req.Body = m.body
		if req.Body == nil {
			req.Body = []byte{}
		}
	}
	return Step{Pick: &req}
}

// Picked hands the Picker's answer to the Machine: the pick, or the error the client
// gets as an immediate response.
func (m *Machine) Picked(p *Pick, perr *Error) Step {
	if m.phase != phasePicking {
		return Step{Err: fmt.Errorf("epp: a pick nobody asked for")}
	}
	if perr != nil {
		return m.fail(perr)
	}
	m.pick = p
	m.phase = phasePicked
	dest := strings.Join(p.Endpoints, ",")
	var remove []string
	for k := range m.req.Headers {
		if strings.HasPrefix(k, gatewayHeaderPrefix) && k != HeaderDestination {
			remove = append(remove, k)
		}
	}
	sort.Strings(remove)
	set := []*corev3.HeaderValueOption{setHeader(HeaderDestination, dest)}
	if m.generatedID {
		set = append(set, setHeader(HeaderRequestID, m.req.RequestID))
	}
	headers := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{
				ClearRouteCache: true,
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			},
		}},
		DynamicMetadata: destinationMetadata(dest),
	}
	out := []*extprocv3.ProcessingResponse{headers}
	if !m.headersEoS {
		chunks := Chunks(m.body, MaxChunk)
		for i, c := range chunks {
			out = append(out, streamedBody(true, c, m.bodyEoS && i == len(chunks)-1))
		}
	}
	m.body = nil
	if m.trailersAwait {
		out = append(out, requestTrailersResponse())
	}
	return Step{Send: out}
}

// fail answers with an immediate response and ends the request.
func (m *Machine) fail(e *Error) Step {
	hdrs := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if e.RetryAfter() {
		hdrs = append(hdrs, setHeader("retry-after", retryAfterValue(m.cfg.RetryAfter)))
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.HTTPStatus())},
			Headers: &extprocv3.HeaderMutation{SetHeaders: hdrs},
			Body:    e.JSON(),
			Details: "turbine_epp_" + strconv.Itoa(e.HTTPStatus()),
		},
	}}
	return m.finish(Step{Send: []*extprocv3.ProcessingResponse{resp}}, &Outcome{Pick: m.pick, Err: e})
}

func (m *Machine) responseHeaders(h *extprocv3.HttpHeaders) Step {
	if m.phase != phasePicked {
		return Step{Err: fmt.Errorf("epp: response headers out of order")}
	}
	hm := headerMap(h.GetHeaders())
	m.status, _ = strconv.Atoi(hm[":status"])
	m.contentType = hm["content-type"]
	m.phase = phaseResponse
	st := Step{Send: []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}}}
	if h.GetEndOfStream() {
		return m.finish(st, m.outcome())
	}
	return st
}

func (m *Machine) responseBody(b *extprocv3.HttpBody) Step {
	if m.phase != phaseResponse {
		return Step{Err: fmt.Errorf("epp: response body out of order")}
	}
	m.keep(b.GetBody())
	st := Step{Send: []*extprocv3.ProcessingResponse{streamedBody(false, b.GetBody(), b.GetEndOfStream())}}
	if b.GetEndOfStream() {
		return m.finish(st, m.outcome())
	}
	return st
}

func (m *Machine) responseTrailers() Step {
	if m.phase != phaseResponse && m.phase != phasePicked {
		return Step{Err: fmt.Errorf("epp: response trailers out of order")}
	}
	return m.finish(Step{Send: []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}}}, m.outcome())
}

// Abort ends the request because its stream ended early (the gateway, or the client
// behind it, went away): Done carries the pick to release, once.
func (m *Machine) Abort() Step {
	if m.phase == phaseDone {
		return Step{}
	}
	o := m.outcome()
	o.Aborted = true
	return m.finish(Step{}, o)
}

// Finished reports whether the request is over.
func (m *Machine) Finished() bool { return m.phase == phaseDone }

func (m *Machine) finish(st Step, o *Outcome) Step {
	m.phase = phaseDone
	st.Done = o
	return st
}

// keep appends b to the answer's tail, keeping at most TailBytes.
func (m *Machine) keep(b []byte) {
	m.tail = append(m.tail, b...)
	if over := len(m.tail) - m.cfg.TailBytes; over > 0 {
		m.tail = append(m.tail[:0], m.tail[over:]...)
		m.truncated = true
	}
}

func (m *Machine) outcome() *Outcome {
	o := &Outcome{Pick: m.pick, Served: m.served, Status: m.status}
	if strings.HasPrefix(m.contentType, "text/event-stream") {
		o.Usage, o.HasUsage = UsageFromSSE(m.tail)
	} else if !m.truncated && len(m.tail) > 0 {
		o.Usage, o.HasUsage = UsageFromJSON(m.tail)
	}
	return o
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			HeaderDestination: structpb.NewStringValue(dest)}}),
	}}
}

func streamedBody(request bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func requestTrailersResponse() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
}
