package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/messages"
)

// disaggBackend is a fakeBackend whose streams report a disaggregation decision.
type disaggBackend struct {
	*fakeBackend
	info DisaggInfo
}

type disaggFakeStream struct {
	*fakeStream
	info DisaggInfo
}

func (s *disaggFakeStream) Disagg() DisaggInfo { return s.info }

func (b *disaggBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	s, err := b.fakeBackend.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &disaggFakeStream{fakeStream: s.(*fakeStream), info: b.info}, nil
}

func TestDisaggResponseExtension(t *testing.T) {
	remote := DisaggInfo{Decision: "remote", PrefillWorker: "p0", DecodeWorker: "worker-a"}
	local := DisaggInfo{Decision: "local_short_prefill", DecodeWorker: "worker-a"}
	cases := []struct {
		name   string
		info   DisaggInfo
		body   string
		header string // X-Turbine-Disagg
		pre    string // X-Turbine-Prefill-Worker
		want   *TurbineInfo
	}{
		{"remote full", remote, `{"model":"tiny","prompt":"Say","turbine":{"return_worker":true}}`, "remote", "p0",
			&TurbineInfo{WorkerID: "worker-a", RequestID: "req-1", CachedTokens: 2, Disagg: "remote", PrefillWorkerID: "p0", DecodeWorkerID: "worker-a"}},
		{"remote stream", remote, `{"model":"tiny","prompt":"Say","stream":true,"turbine":{"return_worker":true}}`, "remote", "p0",
			&TurbineInfo{WorkerID: "worker-a", RequestID: "req-1", CachedTokens: 2, Disagg: "remote", PrefillWorkerID: "p0", DecodeWorkerID: "worker-a"}},
		{"local full", local, `{"model":"tiny","prompt":"Say","turbine":{"return_worker":true}}`, "local_short_prefill", "",
			&TurbineInfo{WorkerID: "worker-a", RequestID: "req-1", CachedTokens: 2, Disagg: "local_short_prefill", DecodeWorkerID: "worker-a"}},
		{"headers only without return_worker", remote, `{"model":"tiny","prompt":"Say"}`, "remote", "p0", nil},
		{"no decision", DisaggInfo{}, `{"model":"tiny","prompt":"Say","turbine":{"return_worker":true}}`, "", "",
			&TurbineInfo{WorkerID: "worker-a", RequestID: "req-1", CachedTokens: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &disaggBackend{fakeBackend: newFakeBackend(tokens("Hello"), finish(" world", "stop")), info: c.info}
			rr := serve(newTestServer(t, b), http.MethodPost, compPath, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			if got := rr.Header().Get("X-Turbine-Disagg"); got != c.header {
				t.Errorf("X-Turbine-Disagg %q, want %q", got, c.header)
			}
			if got := rr.Header().Get("X-Turbine-Prefill-Worker"); got != c.pre {
				t.Errorf("X-Turbine-Prefill-Worker %q, want %q", got, c.pre)
			}
			// The `turbine` object of the body, or of the stream's finishing chunk.
			var got *TurbineInfo
			raw := rr.Body.String()
			frames := []string{raw}
			if strings.HasPrefix(raw, "data: ") {
				frames = nil
				for _, line := range strings.Split(raw, "\n") {
					if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
						frames = append(frames, d)
					}
				}
			}
			for _, f := range frames {
				var v struct {
					Turbine *TurbineInfo `json:"turbine"`
				}
				if err := json.Unmarshal([]byte(f), &v); err != nil {
					t.Fatalf("frame %q: %v", f, err)
				}
				if v.Turbine != nil {
					got = v.Turbine
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("turbine object %+v, want %+v\n%s", got, c.want, raw)
			}
			b.checkClosed(t)
		})
	}
}

func TestNoPrefillWorkersIs503(t *testing.T) {
	b := newFakeBackend()
	b.genErr = fmt.Errorf("%w: no live prefill worker", ErrNoPrefillWorkers)
	rr := serve(newTestServer(t, b), http.MethodPost, compPath, `{"model":"tiny","prompt":"Say"}`)
	if rr.Code != http.StatusServiceUnavailable || !strings.Contains(rr.Body.String(), "prefill worker") ||
		rr.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d headers %v body %s: want 503 naming the missing prefill worker, with Retry-After", rr.Code, rr.Header(), rr.Body)
	}
}

// reroutedStream starts as routed first (worker-a, remote with prefill worker p0) and,
// once its finishing chunk was taken, reports where the request ended (worker-b, the
// decode worker prefilling alone): a prefill retry that routed the request again.
type reroutedStream struct {
	*fakeStream
	done atomic.Bool
}

func (s *reroutedStream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	ch, err := s.fakeStream.Recv(ctx)
	if ch.GetFinishReason() != "" {
		s.done.Store(true)
	}
	return ch, err
}

func (s *reroutedStream) WorkerID() string {
	if s.done.Load() {
		return "worker-b"
	}
	return "worker-a"
}

func (s *reroutedStream) Disagg() DisaggInfo {
	if s.done.Load() {
		return DisaggInfo{Decision: "local_no_prefill_workers", DecodeWorker: "worker-b"}
	}
	return DisaggInfo{Decision: "remote", PrefillWorker: "p0", DecodeWorker: "worker-a"}
}

type reroutedBackend struct{ *fakeBackend }

func (b *reroutedBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	s, err := b.fakeBackend.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &reroutedStream{fakeStream: s.(*fakeStream)}, nil
}

// TestOutcomeHeaders: a non-streaming answer's X-Turbine-* headers name where the
// request ended after it was routed again; a stream's name its first routing (they go
// out first) while its finishing chunk's `turbine` object names the outcome; the log
// line names the outcome in both cases.
func TestOutcomeHeaders(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		stream                bool
		worker, decision, pre string // headers
	}{
		{"non-streaming: the outcome", false, "worker-b", "local_no_prefill_workers", ""},
		{"streaming: as first routed", true, "worker-a", "remote", "p0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			b := &reroutedBackend{newFakeBackend(tokens("Hello"),
				step{chunk: &messages.TokenChunk{TokenIds: toks(" world"), FinishReason: "stop", WorkerId: "worker-b"}})}
			s, err := New(Config{Now: func() time.Time { return testTime }, NewRequestID: func() string { return "generated-id" },
				Logger: zerolog.New(&logs)}, b, fakeOptions(fakePreprocessor{eos: []uint32{fakeEOS}})...)
			if err != nil {
				t.Fatal(err)
			}
			rr := serve(s, http.MethodPost, compPath,
				fmt.Sprintf(`{"model":"tiny","prompt":"Say","stream":%v,"turbine":{"return_worker":true}}`, tc.stream))
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			h := rr.Header()
			if h.Get("X-Turbine-Worker") != tc.worker || h.Get("X-Turbine-Disagg") != tc.decision ||
				h.Get("X-Turbine-Prefill-Worker") != tc.pre {
				t.Errorf("headers %v: want worker %q, decision %q, prefill worker %q", h, tc.worker, tc.decision, tc.pre)
			}
			want := `"turbine":{"worker_id":"worker-b","request_id":"req-1","cached_tokens":0,"disagg":"local_no_prefill_workers","decode_worker_id":"worker-b"}`
			if !strings.Contains(rr.Body.String(), want) {
				t.Errorf("body %s: want the outcome %s", rr.Body, want)
			}
			var rec map[string]any
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" {
					rec = m
				}
			}
			if rec == nil || rec["worker"] != "worker-b" || rec["disagg"] != "local_no_prefill_workers" || rec["prefill_worker"] != nil {
				t.Errorf("log line %v: want the outcome (worker-b, local_no_prefill_workers, no prefill worker)", rec)
			}
			b.checkClosed(t)
		})
	}
}
