package server

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/messages"
)

// Logprobs in vLLM's completions dialect (docs/reference.md §21): the request's
// `logprobs` (0..20), `prompt_logprobs` (0..20, not with stream) and
// `return_tokens_as_token_ids`; the answer's choice `logprobs` object (text_offset,
// token_logprobs, tokens, top_logprobs: at each position the token itself first, then
// the most likely tokens, at most logprobs + 1 entries) and, without streaming, the
// choice's `prompt_logprobs` list (null for the first prompt token, then per position
// a map from token id to logprob, rank and decoded_token, the prompt token first).

// maxLogprobs is vLLM's default --max-logprobs.
const maxLogprobs = mocker.MaxLogprobs

// logprobOptions reads a completion request's logprob fields into r. Errors are vLLM's
// 400s.
func logprobOptions(logprobs, promptLogprobs *int, stream bool, r *mocker.Request) *apiError {
	if n := logprobs; n != nil {
		switch {
		case *n < 0:
			return badRequest("logprobs", "`logprobs` must be a positive value or -1.")
		case *n > maxLogprobs:
			return badRequest("logprobs", "Requested sample logprobs of %d, which is greater than max allowed: %d", *n, maxLogprobs)
		}
		v := *n
		r.Logprobs = &v
	}
	if n := promptLogprobs; n != nil {
		switch {
		case stream && *n > 0:
			return badRequest("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.")
		case *n < 0:
			return badRequest("prompt_logprobs", "`prompt_logprobs` must be a positive value or -1.")
		case *n > maxLogprobs:
			return badRequest("prompt_logprobs", "Requested prompt logprobs of %d, which is greater than max allowed: %d", *n, maxLogprobs)
		}
		v := *n
		r.PromptLogprobs = &v
	}
	return nil
}

// tokenText is a token as the logprobs name it: "token_id:ID" with
// return_tokens_as_token_ids, else the token decoded alone (special tokens included).
func (s *Server) tokenText(id uint32, asIDs bool) string {
	if asIDs {
		return "token_id:" + strconv.FormatUint(uint64(id), 10)
	}
	return s.tok.Decode([]uint32{id})
}

// clampLogprob is vLLM's max(logprob, -9999.0).
func clampLogprob(v float32) float64 { return max(float64(v), -9999) }

// completionLogprobs is vLLM's CompletionLogProbs. Top holds each position's entries in
// order (a JSON object whose member order matters, so it is written by hand).
type completionLogprobs struct {
	TextOffset    []int      `json:"text_offset"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
	Tokens        []string   `json:"tokens"`
	TopLogprobs   []topMap   `json:"top_logprobs"`
}

// topMap is one position's top_logprobs object (null when nil).
type topMap []topEntry

type topEntry struct {
	token   string
	logprob float64
}

func (m topMap) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(e.token)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.WriteString(strconv.FormatFloat(e.logprob, 'g', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// completionLogprobsOf renders the logprobs of ids (one entry each), the first at text
// offset offset (in characters). num is the request's logprobs.
func (s *Server) completionLogprobsOf(ids []uint32, lps []*messages.TokenLogprob, num int, asIDs bool, offset int) *completionLogprobs {
	out := &completionLogprobs{TextOffset: []int{}, TokenLogprobs: []*float64{}, Tokens: []string{}, TopLogprobs: []topMap{}}
	for i, id := range ids {
		token := s.tokenText(id, asIDs)
		out.TextOffset = append(out.TextOffset, offset)
		offset += utf8.RuneCountInString(token)
		out.Tokens = append(out.Tokens, token)
		if i >= len(lps) || math.IsNaN(float64(lps[i].GetLogprob())) {
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
			continue
		}
		lp := lps[i]
		v := clampLogprob(lp.GetLogprob())
		out.TokenLogprobs = append(out.TokenLogprobs, &v)
		top := topMap{{token, v}}
		for _, t := range lp.GetTop() {
			if len(top) > num {
				break
			}
			if t.GetTokenId() != id {
				top = append(top, topEntry{s.tokenText(t.GetTokenId(), asIDs), clampLogprob(t.GetLogprob())})
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
}

// promptLogprobList is vLLM's prompt_logprobs: null, then per position an object from
// token id to {logprob, rank, decoded_token}, the prompt token first.
type promptLogprobList []*messages.TokenLogprob

func (l promptLogprobList) render(s *Server) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, lp := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		if math.IsNaN(float64(lp.GetLogprob())) {
			b.WriteString("null")
			continue
		}
		b.WriteByte('{')
		entry := func(id uint32, logprob float32, rank int32) {
			dec, _ := json.Marshal(s.tok.Decode([]uint32{id}))
			b.WriteString(`"` + strconv.FormatUint(uint64(id), 10) + `":{"logprob":`)
			b.WriteString(strconv.FormatFloat(clampLogprob(logprob), 'g', -1, 64))
			b.WriteString(`,"rank":` + strconv.Itoa(int(rank)) + `,"decoded_token":`)
			b.Write(dec)
			b.WriteByte('}')
		}
		entry(lp.GetTokenId(), lp.GetLogprob(), lp.GetRank())
		for k, t := range lp.GetTop() {
			if t.GetTokenId() != lp.GetTokenId() {
				b.WriteByte(',')
				entry(t.GetTokenId(), t.GetLogprob(), int32(k+1))
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.Bytes()
}
