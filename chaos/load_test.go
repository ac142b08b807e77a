package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// What the client records from each way a server can answer (an httptest server
// scripting the frontend's wire format).
func TestSendRecords(t *testing.T) {
	chunk := func(ids []uint32, finish string) string {
		c := map[string]any{"token_ids": ids, "finish_reason": nil}
		if finish != "" {
			c["finish_reason"] = finish
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{c}})
		return "data: " + string(b) + "\n\n"
	}
	cases := []struct {
		name   string
		serve  func(w http.ResponseWriter, f http.Flusher)
		cutAt  time.Duration
		check  func(r Record) bool
		expect string
	}{
		{"complete", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1, 2}, ""), chunk([]uint32{3}, "length"), "data: [DONE]\n\n")
		}, 0, func(r Record) bool {
			return r.Status == 200 && r.Done && r.Finish == "length" && slices.Equal(r.Tokens, []uint32{1, 2, 3}) && r.ErrCode == "" && r.Transport == ""
		}, "200, tokens 1 2 3, length, [DONE]"},
		{"error frame", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""), `data: {"error":{"message":"x","code":"backend_unavailable"}}`+"\n\n", "data: [DONE]\n\n")
		}, 0, func(r Record) bool {
			return r.Status == 200 && r.Done && r.ErrCode == "backend_unavailable" && slices.Equal(r.Tokens, []uint32{1})
		}, "the frame's code and [DONE]"},
		{"503", func(w http.ResponseWriter, f http.Flusher) {
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":{"message":"x","type":"server_error","code":"no_live_workers"}}`)
		}, 0, func(r Record) bool { return r.Status == 503 && r.ErrCode == "no_live_workers" }, "503 no_live_workers"},
		{"cut", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""))
			f.Flush()
			panic(http.ErrAbortHandler)
		}, 0, func(r Record) bool { return r.Status == 200 && !r.Done && r.Transport == "reset" && len(r.Tokens) == 1 }, "reset after one token"},
		{"cut inside a line", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""), `data: {"choices":[{"token_ids":[2,`)
			f.Flush()
			panic(http.ErrAbortHandler)
		}, 0, func(r Record) bool {
			return r.Status == 200 && !r.Done && r.Transport == "reset" && r.ErrCode == "" && slices.Equal(r.Tokens, []uint32{1})
		}, "reset after one token, the cut line not read"},
		{"closed inside a line", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""), `data: {"choices":[{"token_ids":[2,`)
		}, 0, func(r Record) bool {
			return r.Status == 200 && !r.Done && r.ErrCode == "" && slices.Equal(r.Tokens, []uint32{1})
		}, "one token and no [DONE], the cut line not read"},
		{"client disconnects inside a line", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""), `data: {"choices":[{"token_ids":[2,`)
			f.Flush()
			time.Sleep(2 * time.Second)
		}, 200 * time.Millisecond, func(r Record) bool {
			return r.Disconnect && r.Transport == "" && r.ErrCode == "" && slices.Equal(r.Tokens, []uint32{1})
		}, "a disconnect, not a malformed chunk"},
		{"client disconnects", func(w http.ResponseWriter, f http.Flusher) {
			fmt.Fprint(w, chunk([]uint32{1}, ""))
			f.Flush()
			time.Sleep(2 * time.Second)
		}, 200 * time.Millisecond, func(r Record) bool { return r.Disconnect && r.Transport == "" && len(r.Tokens) == 1 }, "a disconnect, not a failure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body map[string]any
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["return_token_ids"] != true || body["ignore_eos"] != true {
					t.Errorf("body %v (%v)", body, err)
				}
				if id := r.Header.Get("X-Request-Id"); id != "chaos-3" {
					t.Errorf("X-Request-Id %q, want chaos-3 (the frontends' logs name the request by it)", id)
				}
				c.serve(w, w.(http.Flusher))
			}))
			defer srv.Close()
			rec := Send(context.Background(), srv.Client(), srv.URL, "fe-1", time.Now(),
				Request{ID: 3, Model: "m", Prompt: []uint32{9}, MaxTokens: 3, DisconnectAfter: c.cutAt}, 10*time.Second)
			if !c.check(rec) || rec.ID != 3 || rec.Frontend != "fe-1" || rec.Model != "m" || rec.End < rec.Start {
				t.Errorf("record %+v, want %s", rec, c.expect)
			}
		})
	}
	rec := Send(context.Background(), http.DefaultClient, "http://127.0.0.1:1", "fe-2", time.Now(), Request{ID: 1, MaxTokens: 1}, time.Second)
	if rec.Transport != "connect" {
		t.Errorf("nothing listening: %+v, want a connect failure", rec)
	}
}

func TestSendKeepsTheMalformedLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"token_ids\":[1,\n\n")
	}))
	defer srv.Close()
	rec := Send(context.Background(), srv.Client(), srv.URL, "fe-1", time.Now(), Request{ID: 1, MaxTokens: 2}, 10*time.Second)
	if rec.ErrCode != ErrMalformedChunk || !strings.Contains(rec.Detail, `token_ids\":[1,`) {
		t.Errorf("record %+v", rec)
	}
}
