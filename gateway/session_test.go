package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// sessionBackend is a fakeBackend that records each request's session id.
type sessionBackend struct {
	*fakeBackend
	sessions []string
}

func (b *sessionBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	b.sessions = append(b.sessions, req.SessionID)
	return b.fakeBackend.Generate(ctx, req)
}

// TestSessionID: the router's session is the x-session-id header, else the body's user
// (chat, completions and every prompt of a batch, Responses, Anthropic's
// metadata.user_id); a longer one than MaxSessionIDBytes is hashed.
func TestSessionID(t *testing.T) {
	long := strings.Repeat("u", MaxSessionIDBytes+1)
	const longHashed = "sha256:36868c95693f7961e19205254a6e613547eeb4375b384159e91a462f70e8af26" // sha256sum of 257 "u"s
	for _, c := range []struct {
		name, path, body, header string
		want                     []string
	}{
		{"chat user", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"user":"alice"}`, "", []string{"alice"}},
		{"header wins", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"user":"alice"}`, "conv-7", []string{"conv-7"}},
		{"header alone", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, "conv-7", []string{"conv-7"}},
		{"none", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, "", []string{""}},
		{"completions batch: every prompt", compPath, `{"model":"tiny","prompt":["a","b"],"user":"bob"}`, "", []string{"bob", "bob"}},
		{"responses user", responsesPath, `{"model":"tiny","input":"hi","user":"carol"}`, "", []string{"carol"}},
		{"messages metadata.user_id", anthMessagesPath,
			`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"dave"}}`, "", []string{"dave"}},
		{"at the bound: kept", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"user":"` + long[1:] + `"}`, "",
			[]string{long[1:]}},
		{"past the bound: hashed", chatPath, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, long, []string{longHashed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &sessionBackend{fakeBackend: newFakeBackend(tokens("Hello"), finish(" world", "stop"))}
			req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
			req.RemoteAddr = "127.0.0.1:1234"
			req.Header.Set("Content-Type", "application/json")
			if c.header != "" {
				req.Header.Set("x-session-id", c.header)
			}
			rr := httptest.NewRecorder()
			newTestServer(t, b).ServeHTTP(rr, req)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body)
			}
			if strings.Join(b.sessions, "|") != strings.Join(c.want, "|") {
				t.Errorf("session ids %q, want %q", b.sessions, c.want)
			}
		})
	}
}
