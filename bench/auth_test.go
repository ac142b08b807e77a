package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyedServer passes a request carrying "Authorization: Bearer <key>" to next, and
// answers others 401 with OpenAI's error body (as Turbine and vLLM started with
// --api-key do). It records the Authorization headers it saw.
type keyedServer struct {
	key  string
	next http.HandlerFunc
	mu   sync.Mutex
	seen []string
}

func (k *keyedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	k.mu.Lock()
	k.seen = append(k.seen, auth)
	k.mu.Unlock()
	if auth != "Bearer "+k.key {
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
		return
	}
	k.next(w, r)
}

func TestClientAPIKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		key      string // Client.APIKey
		wantAuth string // the Authorization header the server saw
		want     string // error kind
		detail   string // part of the detail
	}{
		{"right key", "sk-right", "Bearer sk-right", "", ""},
		{"wrong key", "sk-wrong", "Bearer sk-wrong", ErrUnauthorized, "HTTP 401, the API key sent was refused: {\"error\":{\"message\":\"Incorrect API key provided."},
		{"no key", "", "", ErrUnauthorized, "HTTP 401, no API key was sent"},
	} {
		for _, chat := range []bool{false, true} {
			name := tc.name
			if chat {
				name += " chat"
			}
			t.Run(name, func(t *testing.T) {
				ks := &keyedServer{key: "sk-right", next: openAIStream(t)}
				if chat {
					ks.next = chatStream(t, nil)
				}
				srv := httptest.NewServer(ks)
				defer srv.Close()
				c := &Client{URL: srv.URL, Model: "m", APIKey: tc.key}
				var res Result
				if chat {
					res = c.DoChat(context.Background(), time.Now(), "hello world", 2)
				} else {
					res = c.Do(context.Background(), time.Now(), []uint32{1, 2, 3}, 2)
				}
				if res.Error != tc.want || !strings.Contains(res.Detail, tc.detail) {
					t.Fatalf("result %q %q, want kind %q with detail containing %q", res.Error, res.Detail, tc.want, tc.detail)
				}
				if len(ks.seen) != 1 || ks.seen[0] != tc.wantAuth {
					t.Fatalf("Authorization headers seen %q, want [%q]", ks.seen, tc.wantAuth)
				}
			})
		}
	}
}

// TestRunnerUnauthorized: every request of a run against a server that refuses the key
// ends as ErrUnauthorized, which the summary counts under that kind.
func TestRunnerUnauthorized(t *testing.T) {
	ks := &keyedServer{key: "sk-right", next: openAIStream(t)}
	srv := httptest.NewServer(ks)
	defer srv.Close()
	reqs, err := Synthetic(4, 8, 2, 16, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := (&Runner{Client: &Client{URL: srv.URL, Model: "m", APIKey: "sk-wrong"}, Concurrency: 2, BlockTokens: 16}).Run(context.Background(), reqs)
	if s := Summarize(out); s.Failed != 4 || s.Errors[ErrUnauthorized] != 4 {
		t.Fatalf("summary %+v: want 4 unauthorized failures", s)
	}
}
