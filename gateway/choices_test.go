package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// ---- a Backend whose streams take turns ----

// lockstep serves each request the steps script gives it, and hands out chunks in the
// order of order (request ids, one per chunk): a stream's turn ends when it asks for its
// next chunk or closes, that is once its reader has passed the previous chunk on. So the
// merge sees the choices' chunks in exactly that order, however the goroutines run.
type lockstep struct {
	mu       sync.Mutex
	cards    []*messages.ModelCard
	script   func(req *GenerateRequest) []step
	order    []string
	pos      int
	holder   string
	changed  chan struct{}
	requests []*GenerateRequest
	streams  []*lockStream
	genErr   map[string]error // by request id
}

type lockStream struct {
	l      *lockstep
	id     string
	steps  []step
	next   int
	worker string
	closed chan struct{}
	once   sync.Once
}

func newLockstep(script func(req *GenerateRequest) []step) *lockstep {
	return &lockstep{cards: newFakeBackend().cards, script: script, changed: make(chan struct{})}
}

func (l *lockstep) Models(context.Context) ([]*messages.ModelCard, error) { return l.cards, nil }

func (l *lockstep) Generate(_ context.Context, req *GenerateRequest) (Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, req)
	if err := l.genErr[req.RequestID]; err != nil {
		return nil, err
	}
	worker := req.PinWorker
	if worker == "" {
		worker = "w-" + req.RequestID
	}
	s := &lockStream{l: l, id: req.RequestID, steps: l.script(req), worker: worker, closed: make(chan struct{})}
	l.streams = append(l.streams, s)
	return s, nil
}

// release ends s's turn, if it holds one. l.mu is held.
func (l *lockstep) release(id string) {
	if l.holder == id {
		l.pos++
		l.holder = ""
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

func (s *lockStream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	l := s.l
	l.mu.Lock()
	l.release(s.id)
	for l.pos >= len(l.order) || l.order[l.pos] != s.id {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l.mu.Lock()
	}
	l.holder = s.id
	if s.next >= len(s.steps) {
		l.mu.Unlock()
		return nil, io.EOF
	}
	st := s.steps[s.next]
	s.next++
	l.mu.Unlock()
	if st.err != nil {
		return nil, st.err
	}
	return st.chunk, nil
}

func (s *lockStream) WorkerID() string { return s.worker }

func (s *lockStream) Close() {
	s.l.mu.Lock()
	s.l.release(s.id)
	s.l.mu.Unlock()
	s.once.Do(func() { close(s.closed) })
}

func (l *lockstep) generated() []*GenerateRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.requests)
	// Siblings start concurrently: by choice.
	slices.SortFunc(out, func(a, b *GenerateRequest) int { return choiceOf(a.RequestID) - choiceOf(b.RequestID) })
	return out
}

// checkClosed fails t unless every stream was closed (the handler has returned, so they
// all are by now, or never will be).
func (l *lockstep) checkClosed(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.streams {
		select {
		case <-s.closed:
		default:
			t.Errorf("stream %s was never closed", s.id)
		}
	}
}

// roundRobin is the turn order of choices 0..total-1 of request req-1 giving chunks
// chunks each: one chunk of every choice in turn.
func roundRobin(total, chunks int) []string {
	var out []string
	for c := 0; c < chunks; c++ {
		for k := 0; k < total; k++ {
			out = append(out, fmt.Sprintf("req-1-%d", k))
		}
	}
	return out
}

// choiceOf is the choice index of a request id "req-1-<k>".
func choiceOf(id string) int {
	var k int
	fmt.Sscanf(strings.TrimPrefix(id, "req-1-"), "%d", &k)
	return k
}

// twoChunks answers each choice k with "k.0 " and "k.1 " and a finishing chunk; the
// first choice of a prompt found nothing cached, the others the whole prompt's blocks.
func twoChunks(req *GenerateRequest) []step {
	k := choiceOf(req.RequestID)
	cached := int32(0)
	if req.PinWorker != "" {
		cached = 16
	}
	return []step{
		{chunk: &messages.TokenChunk{TokenIds: toks(fmt.Sprintf("%d.0 ", k))}},
		{chunk: &messages.TokenChunk{TokenIds: toks(fmt.Sprintf("%d.1 ", k))}},
		{chunk: &messages.TokenChunk{FinishReason: "length", CachedTokens: cached, WorkerId: req.PinWorker}},
	}
}

// ---- SSE reading ----

type sseFrame struct {
	raw   string
	chunk struct {
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Text         string  `json:"text"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *Usage          `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
}

func readFrames(t *testing.T, body string) []sseFrame {
	t.Helper()
	var out []sseFrame
	for _, l := range strings.Split(body, "\n\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			t.Fatalf("frame %q", l)
		}
		f := sseFrame{raw: data}
		if data != "[DONE]" {
			if err := json.Unmarshal([]byte(data), &f.chunk); err != nil {
				t.Fatalf("frame %q: %v", data, err)
			}
		}
		out = append(out, f)
	}
	return out
}

// ---- tests ----

const hiMsgs = `"messages":[{"role":"user","content":"hi"}]`

// n = 4 streamed: the role chunk of every choice first, then the choices' text
// interleaved as the engine hands it out, each choice's own finishing chunk, the usage
// summed once (the prompt counted once), [DONE].
func TestChoicesStreamInterleaved(t *testing.T) {
	l := newLockstep(twoChunks)
	l.order = roundRobin(4, 3)
	s := newTestServer(t, l)
	rr := serve(s, http.MethodPost, chatPath, `{"model":"tiny","n":4,"stream":true,"stream_options":{"include_usage":true},`+hiMsgs+`}`)
	if rr.Code != 200 {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	frames := readFrames(t, rr.Body.String())
	var seq []string
	for _, f := range frames {
		switch c := f.chunk; {
		case f.raw == "[DONE]":
			seq = append(seq, "done")
		case len(c.Choices) == 0 && c.Usage != nil:
			seq = append(seq, fmt.Sprintf("usage %d+%d=%d cached %d", c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens,
				c.Usage.PromptTokensDetails.CachedTokens))
		case len(c.Choices) != 1:
			t.Fatalf("frame with %d choices: %s", len(c.Choices), f.raw)
		case c.Choices[0].Delta.Role != "":
			seq = append(seq, fmt.Sprintf("%d role", c.Choices[0].Index))
		case c.Choices[0].FinishReason != nil:
			seq = append(seq, fmt.Sprintf("%d finish %s", c.Choices[0].Index, *c.Choices[0].FinishReason))
		default:
			seq = append(seq, fmt.Sprintf("%d %q", c.Choices[0].Index, *c.Choices[0].Delta.Content))
		}
	}
	// The prompt: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" is 21 fake
	// tokens; each choice gave 8 (two chunks of 4).
	want := []string{"0 role", "1 role", "2 role", "3 role",
		`0 "0.0 "`, `1 "1.0 "`, `2 "2.0 "`, `3 "3.0 "`,
		`0 "0.1 "`, `1 "1.1 "`, `2 "2.1 "`, `3 "3.1 "`,
		"0 finish length", "1 finish length", "2 finish length", "3 finish length",
		"usage 21+32=53 cached 16", "done"}
	if !slices.Equal(seq, want) {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(seq, "\n"), strings.Join(want, "\n"))
	}
	checkGolden(t, "choices/chat_n4_stream.txt", rr.Body.Bytes())
	gen := l.generated()
	if len(gen) != 4 {
		t.Fatalf("%d requests, want 4", len(gen))
	}
	for k, g := range gen {
		if g.RequestID != fmt.Sprintf("req-1-%d", k) {
			t.Errorf("request %d id %q", k, g.RequestID)
		}
		// One routing decision: the first choice is routed, the others follow it.
		if pin := map[bool]string{true: "", false: "w-req-1-0"}[k == 0]; g.PinWorker != pin {
			t.Errorf("choice %d pinned to %q, want %q", k, g.PinWorker, pin)
		}
	}
	l.checkClosed(t)
}

// n = 4 answered in one body: choices by index, usage summed with the prompt once, and
// each choice its own request, seeded seed + index as vLLM seeds parallel samples.
func TestChoicesNonStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seed  string
		seeds []string
	}{
		{"seeded", `"seed":7,`, []string{"7", "8", "9", "10"}},
		{"unseeded", ``, []string{"none", "none", "none", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLockstep(twoChunks)
			// The choices finish in reverse order; the body still lists them by index.
			l.order = append(roundRobin(4, 2), "req-1-3", "req-1-2", "req-1-1", "req-1-0")
			s := newTestServer(t, l)
			rr := serve(s, http.MethodPost, chatPath, `{"model":"tiny","n":4,`+tc.seed+hiMsgs+`}`)
			if rr.Code != 200 {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			var body struct {
				Choices []struct {
					Index   int `json:"index"`
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage Usage `json:"usage"`
			}
			if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if len(body.Choices) != 4 {
				t.Fatalf("%d choices: %s", len(body.Choices), rr.Body.String())
			}
			for k, c := range body.Choices {
				if c.Index != k || c.Message.Content != fmt.Sprintf("%d.0 %d.1 ", k, k) || c.FinishReason != "length" {
					t.Errorf("choice %d: %+v", k, c)
				}
			}
			if u := body.Usage; u.PromptTokens != 21 || u.CompletionTokens != 32 || u.TotalTokens != 53 || u.PromptTokensDetails.CachedTokens != 16 {
				t.Errorf("usage %+v", u)
			}
			var seeds []string
			for _, g := range l.generated() {
				if g.Sampling.Seed == nil {
					seeds = append(seeds, "none")
				} else {
					seeds = append(seeds, fmt.Sprint(*g.Sampling.Seed))
				}
			}
			if !slices.Equal(seeds, tc.seeds) {
				t.Errorf("seeds %v, want %v", seeds, tc.seeds)
			}
			if rr.Header().Get("X-Turbine-Worker") != "w-req-1-0" {
				t.Errorf("X-Turbine-Worker %q", rr.Header().Get("X-Turbine-Worker"))
			}
			l.checkClosed(t)
		})
	}
}

// best_of equal to n is served as n; above n it is refused as vLLM V1 refuses it.
func TestChoicesBestOf(t *testing.T) {
	l := newLockstep(twoChunks)
	l.order = roundRobin(2, 3)
	s := newTestServer(t, l)
	rr := serve(s, http.MethodPost, compPath, `{"model":"tiny","prompt":"hi","n":2,"best_of":2}`)
	if rr.Code != 200 || !strings.Contains(rr.Body.String(), `{"index":1,"text":"1.0 1.1 ","logprobs":null,"finish_reason":"length","stop_reason":null}`) {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	rr = serve(s, http.MethodPost, compPath, `{"model":"tiny","prompt":"hi","n":2,"best_of":4}`)
	if rr.Code != 400 || !strings.Contains(rr.Body.String(), `"param":"best_of"`) || !strings.Contains(rr.Body.String(), "got n=2 and best_of=4") {
		t.Errorf("best_of above n: %d %s", rr.Code, rr.Body.String())
	}
	l.checkClosed(t)
}

// echoPrompt answers each request with its prompt's text, in one chunk.
func echoPrompt(req *GenerateRequest) []step {
	return []step{{chunk: &messages.TokenChunk{TokenIds: toks("<" + fakeTokenizer{}.Decode(req.TokenIDs) + ">"), FinishReason: "stop"}}}
}

// A batch of 8 prompts, as strings and as token-id lists, with n = 1 and n = 2: each
// prompt routed on its own (none pinned but its own siblings), the choices indexed
// prompt × n + choice, the usage summed over the prompts.
func TestChoicesBatch(t *testing.T) {
	var words, lists []string
	for i := 0; i < 8; i++ {
		w := fmt.Sprintf("p%d", i)
		words = append(words, `"`+w+`"`)
		ids, _ := json.Marshal(toks(w))
		lists = append(lists, string(ids))
	}
	for _, tc := range []struct {
		name, prompt string
		n            int
		stream       bool
	}{
		{"strings", "[" + strings.Join(words, ",") + "]", 1, false},
		{"token lists", "[" + strings.Join(lists, ",") + "]", 1, false},
		{"strings n=2", "[" + strings.Join(words, ",") + "]", 2, false},
		{"token lists streamed n=2", "[" + strings.Join(lists, ",") + "]", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLockstep(echoPrompt)
			// The prompts' answers come in reverse order, the first choices' first (the
			// others start at their first chunk).
			for c := 0; c < tc.n; c++ {
				for i := 7; i >= 0; i-- {
					l.order = append(l.order, fmt.Sprintf("req-1-%d", i*tc.n+c))
				}
			}
			s := newTestServer(t, l)
			rr := serve(s, http.MethodPost, compPath, fmt.Sprintf(`{"model":"tiny","prompt":%s,"n":%d,"stream":%v}`, tc.prompt, tc.n, tc.stream))
			if rr.Code != 200 {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			texts := make([]string, 8*tc.n)
			var usage *Usage
			if tc.stream {
				for _, f := range readFrames(t, rr.Body.String()) {
					for _, c := range f.chunk.Choices {
						texts[c.Index] += c.Text
					}
					if f.chunk.Usage != nil {
						usage = f.chunk.Usage
					}
				}
			} else {
				var body struct {
					Choices []struct {
						Index int    `json:"index"`
						Text  string `json:"text"`
					} `json:"choices"`
					Usage Usage `json:"usage"`
				}
				if err := json.Unmarshal(rr.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				for i, c := range body.Choices {
					if c.Index != i {
						t.Errorf("choice %d has index %d", i, c.Index)
					}
					texts[c.Index] = c.Text
				}
				usage = &body.Usage
			}
			for k, text := range texts {
				if want := fmt.Sprintf("<p%d>", k/tc.n); text != want {
					t.Errorf("choice %d: %q, want %q", k, text, want)
				}
			}
			if !tc.stream && (usage.PromptTokens != 16 || usage.CompletionTokens != 8*tc.n*4) {
				t.Errorf("usage %+v", usage)
			}
			for k, g := range l.generated() {
				k = choiceOf(g.RequestID)
				want := ""
				if k%tc.n != 0 {
					want = fmt.Sprintf("w-req-1-%d", k-k%tc.n)
				}
				if prompt := (fakeTokenizer{}).Decode(g.TokenIDs); g.PinWorker != want || prompt != fmt.Sprintf("p%d", k/tc.n) {
					t.Errorf("request %s: pinned %q (want %q), prompt %q", g.RequestID, g.PinWorker, want, fakeTokenizer{}.Decode(g.TokenIDs))
				}
			}
			l.checkClosed(t)
		})
	}
}

// One choice failing mid-way ends the stream with its error frame, as vLLM does, and
// cancels the others; not streamed, the request fails.
func TestChoicesOneFails(t *testing.T) {
	script := func(req *GenerateRequest) []step {
		if req.RequestID == "req-1-2" {
			return []step{tokens("x"), {chunk: &messages.TokenChunk{FinishReason: "error", Error: "engine died"}}}
		}
		return []step{tokens("a"), tokens("b"), tokens("c"), finish("", "stop")}
	}
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			l := newLockstep(script)
			l.order = roundRobin(4, 2)
			s := newTestServer(t, l)
			rr := serve(s, http.MethodPost, chatPath, fmt.Sprintf(`{"model":"tiny","n":4,"stream":%v,%s}`, stream, hiMsgs))
			body := rr.Body.String()
			if stream {
				frames := readFrames(t, body)
				n := len(frames)
				if rr.Code != 200 || n < 2 || frames[n-1].raw != "[DONE]" || frames[n-2].chunk.Error == nil {
					t.Fatalf("%d %s", rr.Code, body)
				}
				if strings.Contains(body, `"finish_reason":"stop"`) {
					t.Errorf("a choice finished after the failure: %s", body)
				}
			} else if rr.Code != 500 || !strings.Contains(body, "engine failed") {
				t.Fatalf("%d %s", rr.Code, body)
			}
			l.checkClosed(t)
		})
	}
}

// A client that goes away cancels every choice.
func TestChoicesClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newLockstep(func(req *GenerateRequest) []step {
		return []step{tokens("a"), tokens("b"), finish("", "stop")}
	})
	// Every choice gets its first chunk; then the client leaves.
	l.order = append(roundRobin(3, 1), "cancel")
	go func() {
		l.mu.Lock()
		for l.pos < 3 || l.holder != "" {
			ch := l.changed
			l.mu.Unlock()
			<-ch
			l.mu.Lock()
		}
		l.mu.Unlock()
		cancel()
	}()
	s := newTestServer(t, l)
	rr := serveCtx(ctx, s, http.MethodPost, chatPath, `{"model":"tiny","n":3,"stream":true,`+hiMsgs+`}`)
	if strings.Contains(rr.Body.String(), "[DONE]") {
		t.Errorf("the stream was finished for a client that left: %s", rr.Body.String())
	}
	if got := len(l.generated()); got != 3 {
		t.Errorf("%d requests, want 3", got)
	}
	l.checkClosed(t)
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("the client never left")
	}
}
