package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// A request the model's engine refused itself (an error chunk with
// FAULT_INVALID_REQUEST, carrying the engine's message) is the client's to mend: a 400
// invalid_request_error whose message names the engine and repeats the engine's, without
// Retry-After; streamed, an error frame and [DONE] in the 200 stream (its headers went
// out when the request was sent, before the engine answered), or the Responses API's
// response.failed. Another failure after the refusal's fault is cleared stays a server
// error (the catalogue's engine_error).
func TestEngineRefusal(t *testing.T) {
	const engineMsg = "cache_salt should have at most 1024 characters, got 1025."
	refusal := step{chunk: &messages.TokenChunk{FinishReason: "error", Error: engineMsg, Fault: messages.Fault_FAULT_INVALID_REQUEST,
		WorkerId: "worker-a"}}
	const wantMsg = "The request was refused by vLLM, which serves model 'tiny': " + engineMsg
	for _, tc := range []struct {
		name, path, body string
		steps            []step
		status           int    // the answer's
		frame            string // an error frame's code, in a 200 stream
	}{
		{"chat", chatPath, `{"model":"tiny",` + hiChat + `}`, []step{refusal}, 400, ""},
		{"completions", compPath, `{"model":"tiny","prompt":"Say"}`, []step{refusal}, 400, ""},
		{"chat, streamed", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`, []step{refusal}, 200, "invalid_value"},
		{"completions, streamed", compPath, `{"model":"tiny","stream":true,"prompt":"Say"}`, []step{refusal}, 200, "invalid_value"},
		{"chat, after tokens", chatPath, `{"model":"tiny",` + hiChat + `}`, []step{tokens("Hel"), refusal}, 400, ""},
		{"chat, streamed after tokens", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`, []step{tokens("Hel"), refusal}, 200,
			"invalid_value"},
		{"responses", responsesPath, `{"model":"tiny","input":"hi"}`, []step{refusal}, 400, ""},
		{"responses, streamed", responsesPath, `{"model":"tiny","input":"hi","stream":true}`, []step{refusal}, 200, "response.failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(tc.steps...)
			b.cards[0].Engine = "vllm"
			rr := serve(newTestServer(t, b), http.MethodPost, tc.path, tc.body)
			if rr.Code != tc.status || rr.Header().Get("Retry-After") != "" {
				t.Fatalf("status %d Retry-After %q, want %d: %s", rr.Code, rr.Header().Get("Retry-After"), tc.status, rr.Body.String())
			}
			var e struct {
				Message, Type, Code string
				Param               *string
			}
			if tc.frame == "response.failed" {
				var f struct {
					Response struct{ Error json.RawMessage }
				}
				_, failed, _ := strings.Cut(rr.Body.String(), "event: response.failed\ndata: ")
				failed, _, _ = strings.Cut(failed, "\n")
				if json.Unmarshal([]byte(failed), &f) != nil || f.Response.Error == nil {
					t.Fatalf("no response.failed event with an error: %q", rr.Body.String())
				}
				var re struct{ Code, Message string }
				if err := json.Unmarshal(f.Response.Error, &re); err != nil {
					t.Fatal(err)
				}
				if re.Code != "invalid_value" || re.Message != wantMsg {
					t.Errorf("response.failed error %+v, want invalid_value %q", re, wantMsg)
				}
				b.checkClosed(t)
				return
			}
			if tc.status == 200 {
				frames := sseFrames(t, rr.Body.String())
				if len(frames) < 2 || frames[len(frames)-1] != "[DONE]" {
					t.Fatalf("stream does not end with [DONE]: %q", rr.Body.String())
				}
				var f struct{ Error json.RawMessage }
				if err := json.Unmarshal([]byte(frames[len(frames)-2]), &f); err != nil || f.Error == nil {
					t.Fatalf("no error frame before [DONE]: %q", rr.Body.String())
				}
				if err := json.Unmarshal(f.Error, &e); err != nil {
					t.Fatal(err)
				}
			} else {
				if ct := rr.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				var body struct{ Error json.RawMessage }
				if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(body.Error, &e); err != nil {
					t.Fatal(err)
				}
			}
			if e.Type != "invalid_request_error" || e.Code != "invalid_value" || e.Message != wantMsg || e.Param != nil {
				t.Errorf("error %+v, want invalid_request_error invalid_value %q", e, wantMsg)
			}
			b.checkClosed(t)
		})
	}
}

// The engine's message is bounded where an answer repeats it, and a card without an
// engine name still names one.
func TestEngineRefusalMessage(t *testing.T) {
	long := strings.Repeat("é", 2000)
	for _, tc := range []struct {
		engine, model, msg string
		want               string
	}{
		{"sglang", "m", "bad", "The request was refused by SGLang, which serves model 'm': bad"},
		{"mocker", "m", "bad", "The request was refused by the mock engine, which serves model 'm': bad"},
		{"", "m", "bad", "The request was refused by the engine, which serves model 'm': bad"},
		{"trtllm", "m", "", "The request was refused by TensorRT-LLM, which serves model 'm'."},
		{"vllm", "m", long, "The request was refused by vLLM, which serves model 'm': " + long[:maxEngineMessageBytes] + "…"},
	} {
		e := engineRefused(tc.engine, tc.model, tc.msg)
		if e.Kind != KindInvalidValue || e.Message != tc.want || e.Status() != 400 {
			t.Errorf("engineRefused(%q, %q, %.20q) = %s %q", tc.engine, tc.model, tc.msg, e.Kind, e.Message)
		}
	}
}
