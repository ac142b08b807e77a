package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// dump renders a response for a golden file: status, the headers that matter, body.
func dump(rr *httptest.ResponseRecorder) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\n", rr.Code)
	for _, h := range []string{"Content-Type", "Cache-Control", "Retry-After", "X-Request-Id", "X-Turbine-Worker"} {
		if v := rr.Header().Get(h); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	b.WriteString("\n")
	b.WriteString(rr.Body.String())
	return []byte(b.String())
}

// sseFrames splits an SSE body into its data payloads, checking the framing.
func sseFrames(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("stream does not end with [DONE]: %q", body)
	}
	var out []string
	for _, f := range strings.SplitAfter(body, "\n\n") {
		if f == "" {
			continue
		}
		if !strings.HasPrefix(f, "data: ") || !strings.HasSuffix(f, "\n\n") || strings.Count(f, "\n") != 2 {
			t.Fatalf("bad frame %q", f)
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(f, "data: "), "\n\n"))
	}
	return out
}

// streamChunk is the union of chat and completion chunk fields the checks read.
type streamChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Turbine *TurbineInfo `json:"turbine"`
}

// streamResult is what a client reassembles from a stream.
type streamResult struct {
	text, finish string
	usage        *Usage
	err          string
	turbine      *TurbineInfo
}

// checkStream verifies the OpenAI streaming invariants and reassembles the stream.
func checkStream(t *testing.T, body string, chat, includeUsage bool) streamResult {
	t.Helper()
	frames := sseFrames(t, body)
	var res streamResult
	var id string
	var created int64
	wantObject := "text_completion"
	if chat {
		wantObject = "chat.completion.chunk"
	}
	for i, f := range frames[:len(frames)-1] {
		var c streamChunk
		if err := json.Unmarshal([]byte(f), &c); err != nil {
			t.Fatalf("frame %d: %v: %s", i, err, f)
		}
		if c.Error != nil {
			if i != len(frames)-2 {
				t.Errorf("error frame %d is not the last before [DONE]", i)
			}
			res.err = string(c.Error)
			continue
		}
		if i == 0 {
			id, created = c.ID, c.Created
			if chat && (len(c.Choices) != 1 || c.Choices[0].Delta.Role == nil || *c.Choices[0].Delta.Role != "assistant" ||
				c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content != "") {
				t.Errorf("first chat chunk is not the role delta: %s", f)
			}
		}
		if c.ID != id || c.Created != created || c.Object != wantObject || c.Model == "" {
			t.Errorf("frame %d: id/created/object/model differ: %s", i, f)
		}
		if includeUsage && string(c.Usage) != "null" && len(c.Choices) > 0 {
			t.Errorf("frame %d: usage must be null on choice chunks: %s", i, f)
		}
		if !includeUsage && c.Usage != nil {
			t.Errorf("frame %d: usage present without include_usage: %s", i, f)
		}
		if len(c.Choices) == 0 {
			if !includeUsage || i != len(frames)-2 {
				t.Errorf("frame %d: empty choices outside the final usage chunk", i)
			}
			var u Usage
			if err := json.Unmarshal(c.Usage, &u); err != nil {
				t.Errorf("usage chunk: %v", err)
			}
			res.usage = &u
			continue
		}
		if res.finish != "" {
			t.Errorf("frame %d: choice chunk after the finish_reason chunk", i)
		}
		ch := c.Choices[0]
		if chat && ch.Delta.Content != nil {
			res.text += *ch.Delta.Content
		}
		res.text += ch.Text
		if ch.FinishReason != nil {
			res.finish = *ch.FinishReason
			res.turbine = c.Turbine
		}
	}
	if res.err == "" && res.finish == "" {
		t.Error("stream has no finish_reason")
	}
	if includeUsage && res.err == "" && res.usage == nil {
		t.Error("include_usage stream has no usage chunk")
	}
	return res
}

const hiChat = `"messages":[{"role":"user","content":"hi"}]`

func chunk(ids []uint32, reason, errText string) step {
	return step{chunk: &messages.TokenChunk{TokenIds: ids, FinishReason: reason, Error: errText}}
}

func TestStreams(t *testing.T) {
	helloWorld := []step{tokens("Hel"), tokens("lo"), finish(" world", "stop")}
	e := []byte("é")
	cases := []struct {
		name, path, body string
		steps            []step
		chat, usage      bool
		wantText         string
		wantFinish       string
		wantErr          string // substring of the error frame
		wantRead         int    // steps Recv consumed (-1: all)
	}{
		{"chat_basic", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`, helloWorld, true, false, "Hello world", "stop", "", -1},
		{"chat_usage_worker", chatPath, `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"turbine":{"return_worker":true},` + hiChat + `}`, helloWorld, true, true, "Hello world", "stop", "", -1},
		{"chat_length", chatPath, `{"model":"tiny","stream":true,"max_tokens":5,` + hiChat + `}`, []step{tokens("Hel"), finish("lo", "length")}, true, false, "Hello", "length", "", -1},
		{"chat_stop_string", chatPath, `{"model":"tiny","stream":true,"stop":["wor","xyz"],"stream_options":{"include_usage":true},` + hiChat + `}`,
			[]step{tokens("Hello "), tokens("wo"), tokens("rld!"), finish("", "stop")}, true, true, "Hello ", "stop", "", 3},
		{"chat_eos_token", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hi"), chunk(append(toks("!"), append([]uint32{fakeEOS}, toks("junk")...)...), "", ""), finish("", "stop")}, true, false, "Hi!", "stop", "", 2},
		{"chat_ignore_eos", chatPath, `{"model":"tiny","stream":true,"ignore_eos":true,` + hiChat + `}`,
			[]step{tokens("Hi"), chunk(append([]uint32{fakeEOS}, toks("more")...), "", ""), finish("", "length")}, true, false, "Himore", "length", "", -1},
		{"chat_stop_token_ids", chatPath, `{"model":"tiny","stream":true,"stop_token_ids":[` + fmt.Sprint(toks(".")[0]) + `],` + hiChat + `}`,
			[]step{tokens("One. Two."), finish("", "stop")}, true, false, "One", "stop", "", 1},
		{"chat_utf8_split", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{chunk(append(toks("h"), fakeByteBase+uint32(e[0])), "", ""), chunk(append([]uint32{fakeByteBase + uint32(e[1])}, toks("llo")...), "", ""), finish("", "stop")}, true, false, "héllo", "stop", "", -1},
		{"chat_engine_error", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hel"), chunk(nil, "error", "CUDA error: out of memory")}, true, false, "Hel", "", "engine_error", -1},
		{"chat_worker_lost_not_migrated", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hel"), {chunk: &messages.TokenChunk{FinishReason: "error", Error: "engine: died; not migrated: migration is disabled", Fault: messages.Fault_FAULT_ENGINE_ERROR}}}, true, false, "Hel", "", "backend_unavailable", -1},
		{"chat_engine_abort", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hel"), chunk(nil, "abort", "")}, true, false, "Hel", "", "aborted", -1},
		{"chat_backend_error", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hel"), {err: errors.New("remote: worker terminated")}}, true, false, "Hel", "", "backend_unavailable", -1},
		{"chat_backend_busy_midstream", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{{err: fmt.Errorf("migration: %w", ErrAllBusy)}}, true, false, "", "", "all_workers_busy", -1},
		{"chat_early_eof", chatPath, `{"model":"tiny","stream":true,` + hiChat + `}`,
			[]step{tokens("Hel")}, true, false, "Hel", "", "ended before", -1},
		{"completions_basic", compPath, `{"model":"tiny","stream":true,"prompt":"Say"}`, helloWorld, false, false, "Hello world", "stop", "", -1},
		{"completions_usage_worker", compPath, `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"turbine":{"return_worker":true},"prompt":[10,11,12]}`, helloWorld, false, true, "Hello world", "stop", "", -1},
		{"completions_stop_string", compPath, `{"model":"tiny","stream":true,"stop":"lo w","prompt":"Say"}`, helloWorld, false, false, "Hel", "stop", "", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(c.steps...)
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rr.Code, rr.Body.String())
			}
			if rr.Header().Get("Content-Type") != "text/event-stream" || rr.Header().Get("Cache-Control") != "no-cache" {
				t.Errorf("headers %v", rr.Header())
			}
			if rr.Header().Get("X-Turbine-Worker") != "worker-a" {
				t.Errorf("X-Turbine-Worker %q", rr.Header().Get("X-Turbine-Worker"))
			}
			res := checkStream(t, rr.Body.String(), c.chat, c.usage)
			if res.text != c.wantText || res.finish != c.wantFinish {
				t.Errorf("text %q finish %q; want %q %q", res.text, res.finish, c.wantText, c.wantFinish)
			}
			if c.wantErr == "" && res.err != "" || c.wantErr != "" && !strings.Contains(res.err, c.wantErr) {
				t.Errorf("error frame %q; want %q", res.err, c.wantErr)
			}
			if strings.Contains(c.body, "return_worker") && (res.turbine == nil || res.turbine.WorkerID != "worker-a" || res.turbine.CachedTokens != 2) {
				t.Errorf("turbine object %+v", res.turbine)
			}
			b.checkClosed(t)
			if c.wantRead >= 0 && b.streams[0].next != c.wantRead {
				t.Errorf("Recv consumed %d steps, want %d (the stream must stop at the stop condition)", b.streams[0].next, c.wantRead)
			}
			checkGolden(t, "sse/"+c.name+".txt", dump(rr))
		})
	}
}

// TestStreamUsageCounts checks the usage chunk's arithmetic.
func TestStreamUsageCounts(t *testing.T) {
	b := newFakeBackend(tokens("Hello "), tokens("wo"), tokens("rld!"), finish("", "stop"))
	body := `{"model":"tiny","stream":true,"stop":"wor","stream_options":{"include_usage":true},` + hiChat + `}`
	rr := serve(newTestServer(t, b), http.MethodPost, chatPath, body)
	res := checkStream(t, rr.Body.String(), true, true)
	prompt := len(b.generated()[0].TokenIDs)
	// The stop string completes at "r", the 9th completion token.
	want := Usage{PromptTokens: prompt, CompletionTokens: 9, TotalTokens: prompt + 9, PromptTokensDetails: PromptTokensDetails{}}
	if res.usage == nil || *res.usage != want {
		t.Errorf("usage %+v want %+v", res.usage, want)
	}
}

// TestStreamContinuousUsage: with stream_options.continuous_usage_stats and
// include_usage (vLLM's), every chunk carries the usage so far (prompt, completion and
// total tokens), growing to the final usage chunk's; without include_usage, none does.
func TestStreamContinuousUsage(t *testing.T) {
	for _, path := range []string{chatPath, compPath} {
		for _, include := range []bool{true, false} {
			b := newFakeBackend(tokens("Hello "), tokens("wo"), tokens("rld!"), finish("", "stop"))
			prompt := hiChat
			if path == compPath {
				prompt = `"prompt":"Say"`
			}
			body := fmt.Sprintf(`{"model":"tiny","stream":true,"stream_options":{"include_usage":%v,"continuous_usage_stats":true},%s}`, include, prompt)
			rr := serve(newTestServer(t, b), http.MethodPost, path, body)
			frames := sseFrames(t, rr.Body.String())
			last, chunks := -1, 0
			for _, f := range frames {
				if f == "[DONE]" {
					continue
				}
				var c struct {
					Choices []json.RawMessage `json:"choices"`
					Usage   *struct {
						PromptTokens     int             `json:"prompt_tokens"`
						CompletionTokens int             `json:"completion_tokens"`
						TotalTokens      int             `json:"total_tokens"`
						Details          json.RawMessage `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(f), &c); err != nil {
					t.Fatalf("%s: frame %s: %v", path, f, err)
				}
				if !include {
					if c.Usage != nil {
						t.Errorf("%s without include_usage: usage in %s", path, f)
					}
					continue
				}
				chunks++
				u := c.Usage
				if u == nil || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.CompletionTokens < last {
					t.Fatalf("%s: chunk %s after completion_tokens %d", path, f, last)
				}
				if len(c.Choices) > 0 && u.Details != nil {
					t.Errorf("%s: a content chunk's usage has details (vLLM's has three counts): %s", path, f)
				}
				last = u.CompletionTokens
			}
			if include && (chunks < 3 || last != 12) {
				t.Errorf("%s: %d chunks, last completion_tokens %d; want every chunk, ending at 12 (one per character)", path, chunks, last)
			}
		}
	}
}

func TestFullResponses(t *testing.T) {
	helloWorld := []step{tokens("Hel"), tokens("lo"), finish(" world", "stop")}
	cases := []struct {
		name, path, body string
		steps            []step
		status           int
	}{
		{"chat_full", chatPath, `{"model":"tiny",` + hiChat + `}`, helloWorld, 200},
		{"chat_full_worker", chatPath, `{"model":"tiny","turbine":{"return_worker":true},` + hiChat + `}`, helloWorld, 200},
		{"chat_full_stop_string", chatPath, `{"model":"tiny","stop":" w",` + hiChat + `}`, helloWorld, 200},
		{"chat_full_length", chatPath, `{"model":"tiny","max_tokens":5,` + hiChat + `}`, []step{tokens("Hel"), finish("lo", "length")}, 200},
		{"chat_full_engine_error", chatPath, `{"model":"tiny",` + hiChat + `}`, []step{tokens("Hel"), chunk(nil, "error", "engine died")}, 500},
		{"chat_full_worker_lost_not_migrated", chatPath, `{"model":"tiny",` + hiChat + `}`, []step{tokens("Hel"), {chunk: &messages.TokenChunk{FinishReason: "error", Error: "worker w0 terminated; not migrated: the migration limit (3) is reached", Fault: messages.Fault_FAULT_WORKER_TERMINATED}}}, 502},
		{"chat_full_backend_busy", chatPath, `{"model":"tiny",` + hiChat + `}`, []step{{err: ErrAllBusy}}, 503},
		{"completions_full", compPath, `{"model":"tiny","prompt":"Say"}`, helloWorld, 200},
		{"completions_full_worker", compPath, `{"model":"tiny","prompt":"Say","turbine":{"return_worker":true}}`, helloWorld, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newFakeBackend(c.steps...)
			rr := serve(newTestServer(t, b), http.MethodPost, c.path, c.body)
			if rr.Code != c.status {
				t.Fatalf("status %d: %s", rr.Code, rr.Body.String())
			}
			var resp struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Choices []struct {
					Message struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"message"`
					Text         string `json:"text"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage *Usage `json:"usage"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			if c.status == 200 {
				if resp.Usage == nil || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens || resp.Usage.PromptTokens == 0 {
					t.Errorf("usage %+v", resp.Usage)
				}
				if len(resp.Choices) != 1 || resp.Choices[0].FinishReason == "" {
					t.Errorf("choices %+v", resp.Choices)
				}
				if c.path == chatPath && (resp.Object != "chat.completion" || resp.ID != "chatcmpl-req-1" || resp.Choices[0].Message.Role != "assistant") {
					t.Errorf("chat body %s", rr.Body.String())
				}
				if c.path == compPath && (resp.Object != "text_completion" || resp.ID != "cmpl-req-1") {
					t.Errorf("completions body %s", rr.Body.String())
				}
			}
			b.checkClosed(t)
			checkGolden(t, "full/"+c.name+".txt", dump(rr))
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	cases := []struct {
		err        error
		status     int
		retryAfter string
	}{
		{fmt.Errorf("router: %w", ErrUnknownModel), 404, ""},
		{fmt.Errorf("router: %w", ErrNoWorkers), 503, "1"},
		{fmt.Errorf("router: %w", ErrAllBusy), 503, "1"},
		{errors.New("grpc: connection refused"), 502, ""},
	}
	for _, stream := range []bool{false, true} {
		for _, c := range cases {
			b := newFakeBackend()
			b.genErr = c.err
			body := fmt.Sprintf(`{"model":"tiny","stream":%v,%s}`, stream, hiChat)
			rr := serve(newTestServer(t, b), http.MethodPost, chatPath, body)
			if rr.Code != c.status || rr.Header().Get("Retry-After") != c.retryAfter || rr.Header().Get("Content-Type") != "application/json" {
				t.Errorf("stream=%v %v: got %d Retry-After=%q %s", stream, c.err, rr.Code, rr.Header().Get("Retry-After"), rr.Body.String())
			}
		}
	}
}

// TestStreamContinuousUsageChoices: with n = 2 every chunk carries a usage too, the
// role chunks included (nothing generated yet), and the completion tokens of each
// choice's chunks never fall.
func TestStreamContinuousUsageChoices(t *testing.T) {
	b := newFakeBackend(tokens("Hello "), tokens("wo"), tokens("rld!"), finish("", "stop"))
	body := `{"model":"tiny","stream":true,"n":2,"stream_options":{"include_usage":true,"continuous_usage_stats":true},` + hiChat + `}`
	rr := serve(newTestServer(t, b), http.MethodPost, chatPath, body)
	last := map[int]int{}
	frames := 0
	for _, f := range sseFrames(t, rr.Body.String()) {
		if f == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(f), &c); err != nil {
			t.Fatalf("frame %s: %v", f, err)
		}
		frames++
		u := c.Usage
		if u == nil || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Fatalf("chunk without a usage so far: %s", f)
		}
		if len(c.Choices) == 1 {
			k := c.Choices[0].Index
			if u.CompletionTokens < last[k] {
				t.Errorf("choice %d: completion_tokens fell to %d from %d: %s", k, u.CompletionTokens, last[k], f)
			}
			last[k] = u.CompletionTokens
		}
	}
	if frames < 6 || last[0] != 12 || last[1] != 12 {
		t.Errorf("%d chunks, last completion_tokens %v; want both choices at 12", frames, last)
	}
}
