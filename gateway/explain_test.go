package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
)

// explainBackend is a fakeBackend whose streams explain their route, and which records
// whether each request asked for it.
type explainBackend struct {
	*fakeBackend
	ex    *RouteExplanation
	asked []bool
}

type explainFakeStream struct {
	*fakeStream
	ex *RouteExplanation
}

func (s *explainFakeStream) RouteExplanation() *RouteExplanation { return s.ex }

func (b *explainBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	b.asked = append(b.asked, req.ExplainRoute)
	s, err := b.fakeBackend.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	ex := b.ex
	if !req.ExplainRoute {
		ex = nil // as the frontend's streams do
	}
	return &explainFakeStream{fakeStream: s.(*fakeStream), ex: ex}, nil
}

func TestExplainRouteExtension(t *testing.T) {
	ex := &RouteExplanation{PredictedOverlapTokens: 128, Candidates: []RouteCandidate{
		{WorkerID: "worker-a", OverlapBlocks: 2, Cost: 3.5, Terms: map[string]JSONFloat{"weighted_prefill_blocks": 0.5, "decode_blocks": 3}, Chosen: true},
		{WorkerID: "worker-b", Cost: JSONFloat(math.Inf(1)), Terms: map[string]JSONFloat{}},
	}}
	wantRoute := `{"predicted_overlap_tokens":128,"candidates":[` +
		`{"worker_id":"worker-a","overlap_blocks":2,"cost":3.5,"terms":{"decode_blocks":3,"weighted_prefill_blocks":0.5},"chosen":true},` +
		`{"worker_id":"worker-b","overlap_blocks":0,"cost":null,"terms":{},"chosen":false}]}`
	for _, c := range []struct {
		name, path, body string
		asked            bool
		route            string // the `route` object; "" none; "-" no `turbine` object at all
	}{
		{"chat", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"turbine":{"explain_route":true}}`, true, wantRoute},
		{"chat stream: on the finishing chunk", chatPath,
			`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"turbine":{"explain_route":true,"return_worker":true}}`, true, wantRoute},
		{"completions", compPath, `{"model":"tiny","prompt":"Say","turbine":{"explain_route":true}}`, true, wantRoute},
		{"completions stream", compPath, `{"model":"tiny","prompt":"Say","stream":true,"turbine":{"explain_route":true}}`, true, wantRoute},
		{"responses", responsesPath, `{"model":"tiny","input":"hi","turbine":{"explain_route":true}}`, true, wantRoute},
		{"messages", anthMessagesPath, `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"turbine":{"explain_route":true}}`, true, wantRoute},
		{"return_worker alone: no route", compPath, `{"model":"tiny","prompt":"Say","turbine":{"return_worker":true}}`, false, ""},
		{"explain_route false", compPath, `{"model":"tiny","prompt":"Say","turbine":{"explain_route":false}}`, false, "-"},
		{"not asked", compPath, `{"model":"tiny","prompt":"Say"}`, false, "-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &explainBackend{fakeBackend: newFakeBackend(tokens("Hello"), finish(" world", "stop")), ex: ex}
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			if len(b.asked) != 1 || b.asked[0] != c.asked {
				t.Fatalf("GenerateRequest.ExplainRoute %v, want %v", b.asked, c.asked)
			}
			// The `turbine` object of the body, or of a stream's frame that carries one.
			raw := rr.Body.String()
			frames := []string{raw}
			if strings.Contains(raw, "data: ") {
				frames = nil
				for _, line := range strings.Split(raw, "\n") {
					if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
						frames = append(frames, d)
					}
				}
			}
			var turbine map[string]json.RawMessage
			for _, f := range frames {
				var v struct {
					Turbine map[string]json.RawMessage `json:"turbine"`
					// Anthropic's message_delta carries it at the top too; the Responses
					// API's completed event inside its response.
					Response struct {
						Turbine map[string]json.RawMessage `json:"turbine"`
					} `json:"response"`
				}
				if err := json.Unmarshal([]byte(f), &v); err != nil {
					t.Fatalf("frame %q: %v", f, err)
				}
				if v.Turbine != nil {
					turbine = v.Turbine
				}
				if v.Response.Turbine != nil {
					turbine = v.Response.Turbine
				}
			}
			switch {
			case c.route == "-":
				if turbine != nil {
					t.Fatalf("turbine object %s, want none", raw)
				}
			case turbine == nil:
				t.Fatalf("no turbine object in %s", raw)
			case string(turbine["worker_id"]) != `"worker-a"`:
				t.Errorf("worker_id %s", turbine["worker_id"])
			case c.route == "" && turbine["route"] != nil:
				t.Errorf("route %s, want none", turbine["route"])
			case c.route != "" && string(turbine["route"]) != c.route:
				t.Errorf("route %s\nwant  %s", turbine["route"], c.route)
			}
			b.checkClosed(t)
		})
	}
}

func TestExplainRouteValidation(t *testing.T) {
	b := newFakeBackend(tokens("Hello"), finish(" world", "stop"))
	for _, body := range []string{
		`{"model":"tiny","prompt":"Say","turbine":{"explain_route":"yes"}}`,
		`{"model":"tiny","prompt":"Say","turbine":{"explain_routes":true}}`,
	} {
		rr := serve(newTestServer(t, b), http.MethodPost, compPath, body)
		if rr.Code != http.StatusBadRequest || !strings.Contains(rr.Body.String(), "explain_route") {
			t.Errorf("%s: status %d body %s; want 400 naming explain_route", body, rr.Code, rr.Body)
		}
	}
}
