package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A request the engine refuses itself — here a cache_salt longer than the mock engine
// takes (vLLM's bound, 1,024 characters), which the gateway passes on — is a 400 naming
// the engine and carrying its message, streamed or not, with no migration to the other
// workers (whose engines would refuse it alike) and no Retry-After; the workers go on
// serving.
func TestE2EEngineRefusalIsA400(t *testing.T) {
	s := startServe(t, 2, "--speedup-ratio", "50")
	salt := strings.Repeat("s", 1025)
	const engineMsg = "cache_salt should have at most 1024 characters, got 1025."
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"` + model + `","max_tokens":8,"cache_salt":"` + salt + `","messages":[{"role":"user","content":"hi"}]}`},
		{"chat, streamed", "/v1/chat/completions", `{"model":"` + model + `","max_tokens":8,"stream":true,"cache_salt":"` + salt + `","messages":[{"role":"user","content":"hi"}]}`},
		{"completions, streamed", "/v1/completions", `{"model":"` + model + `","max_tokens":8,"stream":true,"cache_salt":"` + salt + `","prompt":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(s.url+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			streamed := strings.Contains(tc.body, `"stream":true`)
			// Streamed, the headers went out when the request was sent: the refusal is the
			// stream's error frame, then [DONE].
			wantStatus, wantType := http.StatusBadRequest, "application/json"
			if streamed {
				wantStatus, wantType = http.StatusOK, "text/event-stream"
			}
			if resp.StatusCode != wantStatus || resp.Header.Get("Retry-After") != "" ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), wantType) {
				t.Fatalf("status %d Retry-After %q Content-Type %q, want %d %s: %s", resp.StatusCode,
					resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), wantStatus, wantType, raw)
			}
			if streamed {
				body := strings.TrimSpace(string(raw))
				if !strings.HasSuffix(body, "data: [DONE]") {
					t.Fatalf("stream does not end with [DONE]: %s", raw)
				}
				frames := strings.Split(strings.TrimSuffix(body, "data: [DONE]"), "\n\n")
				raw = []byte(strings.TrimPrefix(strings.TrimSpace(frames[len(frames)-2]), "data: "))
			}
			var e struct {
				Error struct{ Message, Type, Code string } `json:"error"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			want := "The request was refused by the mock engine, which serves model '" + model + "': " + engineMsg
			if e.Error.Type != "invalid_request_error" || e.Error.Code != "invalid_value" || e.Error.Message != want {
				t.Errorf("error %+v, want invalid_request_error invalid_value %q", e.Error, want)
			}
		})
	}
	if m := metricSum(s, "turbine_frontend_migrations_total"); m != 0 {
		t.Errorf("%v migrations counted for refused requests", m)
	}
	resp, err := http.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"`+model+`","max_tokens":8,"cache_salt":"`+salt[:1024]+`","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a cache_salt at the bound: status %d: %s", resp.StatusCode, raw)
	}
	s.waitIdle(t)
}
