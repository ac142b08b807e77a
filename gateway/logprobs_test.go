package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// lpOf is a deterministic logprob entry for token id at position i: rank 1 at even
// positions, rank 2 at odd ones (after token 1000+i); the alternatives are n tokens.
func lpOf(id uint32, i, n int) *messages.TokenLogprob {
	lp := &messages.TokenLogprob{TokenId: id, Rank: int32(1 + i%2)}
	q := 0.5
	rankLp := func(k int) float32 { return float32(math.Log(1-q) + float64(k-1)*math.Log(q)) }
	lp.Logprob = rankLp(int(lp.Rank))
	other := uint32(1000 + i)
	for k := 1; k <= n; k++ {
		switch {
		case k == int(lp.Rank):
			lp.Top = append(lp.Top, &messages.TopLogprob{TokenId: id, Logprob: lp.Logprob})
		default:
			lp.Top = append(lp.Top, &messages.TopLogprob{TokenId: other, Logprob: rankLp(k)})
			other += 7
		}
	}
	return lp
}

// withLogprobs scripts text one token per chunk, each with its logprobs (n
// alternatives), the first chunk with the prompt's logprobs when prompt is not nil,
// then the finishing chunk with end (its logprobs too).
func withLogprobs(m *model.Model, text string, n int, prompt []uint32, end ...uint32) []step {
	var steps []step
	i := 0
	for _, id := range m.Tokenizer.Encode(text) {
		steps = append(steps, step{chunk: &messages.TokenChunk{TokenIds: []uint32{id}, Logprobs: []*messages.TokenLogprob{lpOf(id, i, n)}}})
		i++
	}
	last := &messages.TokenChunk{TokenIds: end, FinishReason: "stop"}
	for _, id := range end {
		last.Logprobs = append(last.Logprobs, lpOf(id, i, n))
		i++
	}
	steps = append(steps, step{chunk: last})
	if prompt != nil {
		pl := []*messages.TokenLogprob{{TokenId: prompt[0], Logprob: float32(math.NaN())}}
		for j, id := range prompt[1:] {
			pl = append(pl, lpOf(id, j+1, n))
		}
		steps[0].chunk.PromptLogprobs = pl
	}
	return steps
}

const lpCompletionsPath = "/v1/completions"

func TestLogprobsGolden(t *testing.T) {
	m := builtinModel(t)
	imEnd := m.EOSTokenIDs[0]
	prompt := m.Tokenizer.Encode("The capital of France")
	promptJSON := strings.Trim(strings.ReplaceAll(fmt.Sprint(prompt), " ", ","), "")
	cases := []struct {
		name, path, body string
		steps            []step
		wantEngine       [2]int32 // logprobs, prompt_logprobs asked of the engine (-1: none)
	}{
		{"chat.json", chatPath, `{"model":"chatml","logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`,
			withLogprobs(m, "Olá 🙂 Paris", 2, nil, imEnd), [2]int32{2, -1}},
		{"chat_stream.txt", chatPath, `{"model":"chatml","stream":true,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`,
			withLogprobs(m, "Olá 🙂 Paris", 2, nil, imEnd), [2]int32{2, -1}},
		{"chat_token_ids.json", chatPath, `{"model":"chatml","logprobs":true,"return_tokens_as_token_ids":true,"messages":[{"role":"user","content":"hi"}]}`,
			withLogprobs(m, "Paris", 0, nil, imEnd), [2]int32{0, -1}},
		{"completions.json", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","logprobs":1}`,
			withLogprobs(m, " is Paris.", 1, nil, imEnd), [2]int32{1, -1}},
		{"completions_stream.txt", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","logprobs":1,"stream":true}`,
			withLogprobs(m, " is Paris.", 1, nil, imEnd), [2]int32{1, -1}},
		// lm-eval-harness's loglikelihood: echo, max_tokens 0 (or 1), logprobs 1.
		{"echo_max0.json", lpCompletionsPath, `{"model":"chatml","prompt":` + promptJSON + `,"echo":true,"max_tokens":0,"logprobs":1}`,
			withLogprobs(m, " is", 1, prompt), [2]int32{1, 1}},
		{"echo_max1.json", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","echo":true,"max_tokens":1,"logprobs":1}`,
			withLogprobs(m, " is", 1, prompt), [2]int32{1, 1}},
		{"echo_stream.txt", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","echo":true,"max_tokens":2,"logprobs":1,"stream":true}`,
			withLogprobs(m, " is Paris", 1, prompt), [2]int32{1, 1}},
		{"echo_text.json", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","echo":true,"max_tokens":2}`,
			withLogprobs(m, " is Paris", 1, nil), [2]int32{-1, -1}},
		{"prompt_logprobs.json", lpCompletionsPath, `{"model":"chatml","prompt":"The capital of France","max_tokens":1,"prompt_logprobs":2}`,
			withLogprobs(m, " is", 2, prompt), [2]int32{-1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, b := builtinServer(t, tc.steps...)
			rr := serve(s, http.MethodPost, tc.path, tc.body)
			if rr.Code != 200 {
				t.Fatalf("%d %s", rr.Code, rr.Body.String())
			}
			checkGolden(t, "logprobs/"+tc.name, rr.Body.Bytes())
			sp := b.generated()[0].Sampling
			got := [2]int32{-1, -1}
			if sp.Logprobs != nil {
				got[0] = *sp.Logprobs
			}
			if sp.PromptLogprobs != nil {
				got[1] = *sp.PromptLogprobs
			}
			if got != tc.wantEngine {
				t.Errorf("engine asked logprobs, prompt_logprobs %v, want %v", got, tc.wantEngine)
			}
		})
	}
}

func TestLogprobsValidation(t *testing.T) {
	for _, tc := range []struct{ path, body, param, msg string }{
		{chatPath, `{"model":"chatml","logprobs":true,"top_logprobs":21,"messages":[{"role":"user","content":"hi"}]}`, "top_logprobs", "greater than max allowed: 20"},
		{chatPath, `{"model":"chatml","top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`, "top_logprobs", "`logprobs` must be set to true"},
		{chatPath, `{"model":"chatml","logprobs":true,"top_logprobs":-1,"messages":[{"role":"user","content":"hi"}]}`, "top_logprobs", "must be a positive value"},
		{lpCompletionsPath, `{"model":"chatml","prompt":"x","logprobs":21}`, "logprobs", "greater than max allowed: 20"},
		{lpCompletionsPath, `{"model":"chatml","prompt":"x","prompt_logprobs":1,"stream":true}`, "prompt_logprobs", "not available when `stream=True`"},
		{lpCompletionsPath, `{"model":"chatml","prompt":"x","max_tokens":0}`, "max_tokens", "expected a value >= 1"},
		{lpCompletionsPath, `{"model":"chatml","prompt":"x","echo":"yes"}`, "echo", ""},
	} {
		s, _ := builtinServer(t)
		rr := serve(s, http.MethodPost, tc.path, tc.body)
		if rr.Code != 400 || !strings.Contains(rr.Body.String(), `"param":"`+tc.param+`"`) || !strings.Contains(rr.Body.String(), tc.msg) {
			t.Errorf("%s: %d %s", tc.body, rr.Code, rr.Body.String())
		}
	}
}

// Echo shows a prompt given as text as it was given (vLLM echoes the prompt string), not
// its tokens decoded: the two differ for a prompt that starts with a special token's
// text, which the decoded echo leaves out as it leaves out a BOS. A batch's prompts each
// echo their own text; token prompts echo their tokens decoded. The text offsets still
// count the token names.
func TestLogprobsEchoPromptText(t *testing.T) {
	m := builtinModel(t)
	const given = "<|im_start|>user said hi"
	if dec := m.Tokenizer.Decode(m.Tokenizer.Encode(given)[1:]); dec == given {
		t.Fatalf("the prompt %q round-trips through the tokenizer: the test shows nothing", given)
	}
	ids := m.Tokenizer.Encode(given)
	idsJSON := strings.ReplaceAll(fmt.Sprint(ids), " ", ",")
	for _, tc := range []struct{ body, want string }{
		{`{"model":"chatml","prompt":"` + given + `","echo":true,"max_tokens":0,"logprobs":0}`, given},
		{`{"model":"chatml","prompt":["` + given + `","x"],"echo":true,"max_tokens":0}`, given},
		{`{"model":"chatml","prompt":` + idsJSON + `,"echo":true,"max_tokens":0}`, m.Tokenizer.Decode(ids[1:])},
	} {
		s, _ := builtinServer(t, withLogprobs(m, " is", 0, append([]uint32{}, ids...))...)
		rr := serve(s, http.MethodPost, lpCompletionsPath, tc.body)
		if rr.Code != 200 {
			t.Fatalf("%d %s", rr.Code, rr.Body.String())
		}
		var resp struct {
			Choices []struct {
				Text     string `json:"text"`
				Logprobs *struct {
					TextOffset []int    `json:"text_offset"`
					Tokens     []string `json:"tokens"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(rr.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Text; got != tc.want {
			t.Errorf("%s: echoed %q, want %q", tc.body, got, tc.want)
		}
		if lp := resp.Choices[0].Logprobs; lp != nil {
			off := 0
			for i, tok := range lp.Tokens {
				if lp.TextOffset[i] != off {
					t.Errorf("text_offset %v for tokens %q", lp.TextOffset, lp.Tokens)
				}
				off += utf8.RuneCountInString(tok)
			}
		}
	}
}
