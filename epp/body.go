package epp

import (
	"bytes"
	"encoding/json"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Protocol names (docs/epp.md, "Headers and metadata").
const (
	// HeaderDestination carries the picked endpoints, "ip:port" or "ip:port,ip:port,…"
	// (primary first, then fallbacks), to the gateway.
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetadataNamespace is the dynamic metadata namespace of the pick (the same value as
	// the header) and of the served endpoint on the response path.
	MetadataNamespace = "envoy.lb"
	// MetadataServed names the endpoint that served the request (response path).
	MetadataServed = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey: the gateway's hint of the endpoints the EPP may pick.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// HeaderRequestID is taken from the request, or set when the client sent none.
	HeaderRequestID = "x-request-id"
	// gatewayHeaderPrefix: client-sent headers with it are removed from the request.
	gatewayHeaderPrefix = "x-gateway-"
	// MaxChunk is the largest body chunk the EPP sends back to Envoy (bytes), as the
	// Gateway API Inference Extension's reference picker does.
	MaxChunk = 62000
)

// headerValue is a header's value: Envoy sends raw_value (bytes), older versions value.
func headerValue(h *corev3.HeaderValue) string {
	if v := h.GetValue(); v != "" {
		return v
	}
	return string(h.GetRawValue())
}

// headerMap turns Envoy's header list into a map keyed by lower-case name; a repeated
// header keeps its values joined with ",".
func headerMap(m *corev3.HeaderMap) map[string]string {
	out := make(map[string]string, len(m.GetHeaders()))
	for _, h := range m.GetHeaders() {
		k := strings.ToLower(h.GetKey())
		if old, ok := out[k]; ok {
			out[k] = old + "," + headerValue(h)
			continue
		}
		out[k] = headerValue(h)
	}
	return out
}

// SubsetHint reads the gateway's subset hint from a request's metadata context: the
// endpoints ("ip:port") the EPP may pick from, given as a list of strings or one
// comma-separated string. present is false when the gateway sent no hint (every endpoint
// of the pool is eligible); an empty hint that is present leaves none.
func SubsetHint(md *corev3.Metadata) (endpoints []string, present bool) {
	s, ok := md.GetFilterMetadata()[SubsetNamespace]
	if !ok {
		return nil, false
	}
	v, ok := s.GetFields()[SubsetKey]
	if !ok {
		return nil, true
	}
	add := func(str string) {
		for _, e := range strings.Split(str, ",") {
			if e = strings.TrimSpace(e); e != "" {
				endpoints = append(endpoints, e)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	}
	return endpoints, true
}

// ServedEndpoint is the endpoint the gateway reports it sent the request to
// (metadata_context["envoy.lb"]["x-gateway-destination-endpoint-served"]); "" if none.
func ServedEndpoint(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[MetadataNamespace].GetFields()[MetadataServed].GetStringValue()
}

// RequestInfo is what the EPP reads from an OpenAI request body on its own.
type RequestInfo struct {
	Model  string // the body's "model"; "" when absent
	Stream bool   // the body's "stream"
}

// ParseRequest reads an OpenAI request body (chat completions, completions, responses,
// embeddings …): it must be one JSON object; "model", when present, a string, and
// "stream", when present, a boolean. Errors are 400s.
func ParseRequest(body []byte) (RequestInfo, *Error) {
	var v struct {
		Model  json.RawMessage `json:"model"`
		Stream json.RawMessage `json:"stream"`
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return RequestInfo{}, newError(KindBadRequest, "The request body must be a JSON object.")
	}
	if err := json.Unmarshal(trimmed, &v); err != nil {
		return RequestInfo{}, newError(KindBadRequest, "The request body is not valid JSON: %v", err)
	}
	var info RequestInfo
	if len(v.Model) > 0 && string(v.Model) != "null" {
		if err := json.Unmarshal(v.Model, &info.Model); err != nil {
			return RequestInfo{}, newError(KindBadRequest, "'model' must be a string.")
		}
	}
	if len(v.Stream) > 0 && string(v.Stream) != "null" {
		if err := json.Unmarshal(v.Stream, &info.Stream); err != nil {
			return RequestInfo{}, newError(KindBadRequest, "'stream' must be a boolean.")
		}
	}
	return info, nil
}

// Chunks splits body into pieces of at most max bytes (max > 0), in order; an empty body
// is one empty piece, so that its end of stream can still be sent.
func Chunks(body []byte, max int) [][]byte {
	if len(body) == 0 {
		return [][]byte{nil}
	}
	out := make([][]byte, 0, (len(body)+max-1)/max)
	for len(body) > max {
		out = append(out, body[:max:max])
		body = body[max:]
	}
	return append(out, body)
}

// Usage is the token counts a model server reports at the end of an answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"-"`
}

type usageJSON struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		InputTokens         int `json:"input_tokens"`  // Responses API
		OutputTokens        int `json:"output_tokens"` // Responses API
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (u usageJSON) usage() (Usage, bool) {
	if u.Usage == nil {
		return Usage{}, false
	}
	out := Usage{PromptTokens: u.Usage.PromptTokens + u.Usage.InputTokens, CompletionTokens: u.Usage.CompletionTokens + u.Usage.OutputTokens}
	if d := u.Usage.PromptTokensDetails; d != nil {
		out.CachedTokens = d.CachedTokens
	}
	return out, true
}

// UsageFromJSON reads "usage" from a whole JSON answer.
func UsageFromJSON(body []byte) (Usage, bool) {
	var u usageJSON
	if json.Unmarshal(body, &u) != nil {
		return Usage{}, false
	}
	return u.usage()
}

// UsageFromSSE reads the usage of an SSE answer from its end (tail may start anywhere in
// the stream): the last `data:` event whose JSON has a non-null "usage" (OpenAI's last
// chunk with stream_options.include_usage; vLLM's continuous usage stats on every chunk).
func UsageFromSSE(tail []byte) (Usage, bool) {
	lines := bytes.Split(tail, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimRight(lines[i], "\r")
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`"usage"`)) {
			continue
		}
		var u usageJSON
		if json.Unmarshal(data, &u) != nil {
			continue
		}
		if out, ok := u.usage(); ok {
			return out, true
		}
	}
	return Usage{}, false
}
