package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
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
