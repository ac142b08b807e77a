package mocker

import (
	"math"
	"slices"
)

// The mock engine has no logits; its draw is a function of the generation state
// (vocab.go). allowed_token_ids and logit_bias act on that draw, deterministically:
//
//   - AllowedTokenIDs replaces the ordinary words as the list a word is drawn from
//     (index state mod its length), and EOS may end the request only when it is in the
//     list, as vLLM masks every other logit.
//   - LogitBias: of the tokens with a positive bias (within the allowed list, if any),
//     the one with the largest (the smallest id on ties) is taken with probability
//     bias/100, drawn from the state: +100 makes it certain, as it is in practice on a
//     real model. A drawn token with a negative bias is passed over with probability
//     -bias/100 for the next one in the list: -100 bans it. EOS with a bias of -100
//     never ends the request.
//
// min_tokens masks stop tokens first, as for ordinary draws. A persona's script is not
// affected (its tokens are the answer the request asked for).

// eosAllowed reports whether the request's constraints let EOS end it.
func (e *Engine) eosAllowed(s *sequence) bool {
	eos := e.vocab.EOS[0]
	if ids := s.req.AllowedTokenIDs; len(ids) > 0 && !slices.Contains(ids, eos) {
		return false
	}
	return s.req.LogitBias[eos] > -100
}

// constrainedWord draws the next word of s under its allowed list and logit bias.
func (e *Engine) constrainedWord(s *sequence, mayStop bool) uint32 {
	cand := s.req.AllowedTokenIDs
	if len(cand) == 0 {
		cand = e.vocab.Ordinary
	}
	usable := func(t uint32) bool { return mayStop || !e.isStop(s, t) }
	if t, b, ok := favoured(s.req.LogitBias, s.req.AllowedTokenIDs); ok && usable(t) &&
		unitFloat(mix64(s.state^0x2545f4914f6cdd1d)) < math.Min(b, 100)/100 {
		return t
	}
	idx := int(s.state % uint64(len(cand)))
	for j := range cand {
		t := cand[(idx+j)%len(cand)]
		if !usable(t) {
			continue
		}
		if b := s.req.LogitBias[t]; b < 0 && unitFloat(mix64(s.state^0x9e6c63d0676a9a99^uint64(j))) < math.Min(-b, 100)/100 {
			continue
		}
		return t
	}
	return cand[idx] // every token is banned or a masked stop token: the plain draw
}

// favoured returns the token with the largest positive bias (the smallest id on ties),
// within allowed when it is not empty; ok is false when there is none.
func favoured(bias map[uint32]float64, allowed []uint32) (tok uint32, b float64, ok bool) {
	for t, v := range bias {
		if v <= 0 || (len(allowed) > 0 && !slices.Contains(allowed, t)) {
			continue
		}
		if !ok || v > b || (v == b && t < tok) {
			tok, b, ok = t, v, true
		}
	}
	return tok, b, ok
}
