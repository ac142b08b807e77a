package server

import (
	"fmt"
	"math"

	"github.com/turbine-llm/turbine/engines/mocker"
	"github.com/turbine-llm/turbine/messages"
)

// Logprobs in SGLang's dialect (docs/reference.md §21): the request's top-level
// return_logprob, top_logprobs_num (alternatives per position, input and output alike),
// logprob_start_len (the first prompt position whose logprob is returned; -1, the
// default, returns none of the prompt's) and return_text_in_logprobs. The answer's
// meta_info holds, for the whole request so far on every streamed chunk (cumulative,
// with or without --incremental-streaming-output, which changes output_ids only):
//
//	output_token_logprobs  [[logprob, token_id, text|null], ...], one per output id
//	output_top_logprobs    per output position, a list of such triples, most likely first
//	input_token_logprobs   the prompt's, from logprob_start_len; the first prompt token's
//	                       logprob is null
//	input_top_logprobs     per prompt position, a list of triples, or null
//
// The top lists are present only with top_logprobs_num above 0.

// sglangLogprobReq are a /generate request's logprob fields.
type sglangLogprobReq struct {
	on    bool
	top   int
	start int // -1: no prompt logprobs
	text  bool
}

// sglangLogprobs reads g's logprob fields into r; msg is SGLang's error.
func (s *Server) sglangLogprobs(g *sglangGenerateReq, r *mocker.Request) (lr sglangLogprobReq, msg string) {
	lr.start = -1
	if g.LogprobStartLen != nil {
		lr.start = *g.LogprobStartLen
	}
	if g.TopLogprobsNum != nil {
		lr.top = *g.TopLogprobsNum
	}
	switch {
	case !g.ReturnLogprob:
		return sglangLogprobReq{}, ""
	case lr.top < 0:
		return lr, fmt.Sprintf("top_logprobs_num must be at least 0, got %d.", lr.top)
	case lr.top > mocker.MaxLogprobs:
		return lr, fmt.Sprintf("top_logprobs_num %d is above the mock engine's bound of %d.", lr.top, mocker.MaxLogprobs)
	case lr.start < -1:
		return lr, fmt.Sprintf("logprob_start_len must be -1 or at least 0, got %d.", lr.start)
	case lr.start >= len(r.Prompt):
		return lr, fmt.Sprintf("logprob_start_len (%d) is not below the input length (%d).", lr.start, len(r.Prompt))
	}
	lr.on, lr.text = true, g.ReturnTextInLogprobs
	top := lr.top
	r.Logprobs = &top
	if lr.start >= 0 {
		r.PromptLogprobs = &top
	}
	return lr, ""
}

// sglangLogprobState accumulates a request's logprobs for its meta_info.
type sglangLogprobState struct {
	req           sglangLogprobReq
	output, input []*messages.TokenLogprob
}

// add takes one engine output's logprobs.
func (l *sglangLogprobState) add(o *mocker.Output) {
	l.output = append(l.output, o.Logprobs...)
	if o.PromptLogprobs != nil && l.input == nil && l.req.start >= 0 {
		l.input = o.PromptLogprobs[min(l.req.start, len(o.PromptLogprobs)):]
	}
}

// triple is [logprob, token_id, text|null]; a NaN logprob is null.
func (s *Server) triple(lp float32, id uint32, text bool) []any {
	var v any = float64(lp)
	if math.IsNaN(float64(lp)) {
		v = nil
	}
	var t any
	if text {
		t = s.tok.Decode([]uint32{id})
	}
	return []any{v, id, t}
}

// fill writes the logprob members of meta.
func (l *sglangLogprobState) fill(s *Server, meta *sglangMeta) {
	if !l.req.on {
		return
	}
	list := func(lps []*messages.TokenLogprob) []any {
		out := make([]any, 0, len(lps))
		for _, lp := range lps {
			out = append(out, s.triple(lp.GetLogprob(), lp.GetTokenId(), l.req.text))
		}
		return out
	}
	tops := func(lps []*messages.TokenLogprob) []any {
		out := make([]any, 0, len(lps))
		for _, lp := range lps {
			if math.IsNaN(float64(lp.GetLogprob())) || len(lp.GetTop()) == 0 {
				out = append(out, nil)
				continue
			}
			ts := make([]any, 0, len(lp.GetTop()))
			for _, t := range lp.GetTop() {
				ts = append(ts, s.triple(t.GetLogprob(), t.GetTokenId(), l.req.text))
			}
			out = append(out, ts)
		}
		return out
	}
	meta.OutputTokenLogprobs, meta.InputTokenLogprobs = list(l.output), list(l.input)
	if l.req.top > 0 {
		meta.OutputTopLogprobs, meta.InputTopLogprobs = tops(l.output), tops(l.input)
	}
}
