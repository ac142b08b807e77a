package vllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/turbine-llm/turbine/messages"
)

// Logprobs over vLLM's completions API (docs/reference.md §21). The adapter asks for
// `logprobs: N` with `return_tokens_as_token_ids` (so every token comes back as
// "token_id:ID", whatever its text) and, for prompt logprobs, `prompt_logprobs: N`,
// which vLLM answers only without streaming: such a request is sent with
// "stream": false and its one answer becomes the stream's one chunk.
//
// vLLM's completions logprobs give, per output position, the token's logprob and an
// object whose first member is the token itself, then the N most likely tokens (the
// token once: N members when it is among them, N+1 otherwise). The token's rank is read
// as 1 + the members more likely than it: exact within the top N, and N+1 (a lower
// bound) outside them. Prompt logprobs carry each token's rank.

// logprobMembers returns r's extra body members with the logprob fields added (r.Extra
// itself when r asks for none).
func (r CompletionRequest) logprobMembers() map[string]any {
	if r.Logprobs == nil && r.PromptLogprobs == nil {
		return r.Extra
	}
	m := maps.Clone(r.Extra)
	if m == nil {
		m = map[string]any{}
	}
	if r.Logprobs != nil {
		m["logprobs"] = *r.Logprobs
		m["return_tokens_as_token_ids"] = true
	}
	if r.PromptLogprobs != nil {
		m["prompt_logprobs"] = *r.PromptLogprobs
	}
	return m
}

// logprobsOf reads a choice's logprobs object for its token ids (one entry each), keeping
// at most n alternatives per position. Errors: a malformed object (lengths that differ
// from the tokens', a token that is not "token_id:ID" of its position's id, a logprob
// that is not a number, a top_logprobs member that is not a "token_id:ID" number).
func logprobsOf(raw json.RawMessage, ids []uint32, n int) ([]*messages.TokenLogprob, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var lp struct {
		TokenLogprobs []*float64      `json:"token_logprobs"`
		Tokens        []string        `json:"tokens"`
		TopLogprobs   []orderedFloats `json:"top_logprobs"`
	}
	if err := json.Unmarshal(raw, &lp); err != nil {
		return nil, fmt.Errorf("vllm: malformed logprobs: %w", err)
	}
	if len(lp.Tokens) != len(ids) || len(lp.TokenLogprobs) != len(ids) || len(lp.TopLogprobs) != len(ids) {
		return nil, fmt.Errorf("vllm: logprobs of %d tokens (%d logprobs, %d top) for %d token ids",
			len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(ids))
	}
	out := make([]*messages.TokenLogprob, len(ids))
	for i, id := range ids {
		tok, err := tokenID(lp.Tokens[i])
		if err != nil {
			return nil, err
		}
		if tok != id {
			return nil, fmt.Errorf("vllm: logprobs token %q at position %d, but the token id is %d", lp.Tokens[i], i, id)
		}
		if lp.TokenLogprobs[i] == nil {
			return nil, fmt.Errorf("vllm: no logprob for output position %d", i)
		}
		e := &messages.TokenLogprob{TokenId: id, Logprob: float32(*lp.TokenLogprobs[i]), Rank: 1}
		var tops []*messages.TopLogprob
		for _, m := range lp.TopLogprobs[i] {
			t, err := tokenID(m.key)
			if err != nil {
				return nil, err
			}
			if m.value > *lp.TokenLogprobs[i] {
				e.Rank++
			}
			tops = append(tops, &messages.TopLogprob{TokenId: t, Logprob: float32(m.value)})
		}
		slices.SortStableFunc(tops, func(a, b *messages.TopLogprob) int { return -cmpFloat(a.Logprob, b.Logprob) })
		e.Top = tops[:min(n, len(tops))]
		if int(e.Rank) > n { // outside the top n: not an alternative
			e.Top = slices.DeleteFunc(slices.Clone(e.Top), func(t *messages.TopLogprob) bool { return t.TokenId == id })
			e.Top = e.Top[:min(n, len(e.Top))]
		}
		out[i] = e
	}
	return out, nil
}

// promptLogprobsOf reads a choice's prompt_logprobs for prompt (one entry each; the
// first, null in vLLM's answer, has a NaN logprob), keeping at most n alternatives.
// Errors: a malformed list (not one entry per prompt token, an entry that lacks its
// prompt token, a key that is not a token id, a missing logprob or rank).
func promptLogprobsOf(raw json.RawMessage, prompt []uint32, n int) ([]*messages.TokenLogprob, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []map[string]*struct {
		Logprob *float64 `json:"logprob"`
		Rank    *int32   `json:"rank"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("vllm: malformed prompt_logprobs: %w", err)
	}
	if len(list) != len(prompt) {
		return nil, fmt.Errorf("vllm: prompt_logprobs of %d positions for a prompt of %d tokens", len(list), len(prompt))
	}
	out := make([]*messages.TokenLogprob, len(prompt))
	for i, pos := range list {
		if pos == nil {
			if i > 0 {
				return nil, fmt.Errorf("vllm: prompt_logprobs: no entry for position %d", i)
			}
			out[i] = &messages.TokenLogprob{TokenId: prompt[i], Logprob: float32(math.NaN())}
			continue
		}
		e := &messages.TokenLogprob{TokenId: prompt[i]}
		found := false
		type ranked struct {
			top  *messages.TopLogprob
			rank int32
		}
		var tops []ranked
		for k, v := range pos {
			id, err := strconv.ParseUint(k, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("vllm: prompt_logprobs key %q at position %d is not a token id", k, i)
			}
			if v == nil || v.Logprob == nil || v.Rank == nil || *v.Rank < 1 {
				return nil, fmt.Errorf("vllm: prompt_logprobs entry %q at position %d lacks its logprob or rank", k, i)
			}
			if uint32(id) == prompt[i] {
				e.Logprob, e.Rank, found = float32(*v.Logprob), *v.Rank, true
			}
			if *v.Rank <= int32(n) {
				tops = append(tops, ranked{&messages.TopLogprob{TokenId: uint32(id), Logprob: float32(*v.Logprob)}, *v.Rank})
			}
		}
		if !found {
			return nil, fmt.Errorf("vllm: prompt_logprobs at position %d lack the prompt token %d", i, prompt[i])
		}
		slices.SortFunc(tops, func(a, b ranked) int {
			if a.rank != b.rank {
				return int(a.rank - b.rank)
			}
			return int(a.top.TokenId) - int(b.top.TokenId)
		})
		for _, t := range tops[:min(n, len(tops))] {
			e.Top = append(e.Top, t.top)
		}
		out[i] = e
	}
	return out, nil
}

// tokenID reads "token_id:ID" (return_tokens_as_token_ids).
func tokenID(s string) (uint32, error) {
	v, ok := strings.CutPrefix(s, "token_id:")
	id, err := strconv.ParseUint(v, 10, 32)
	if !ok || err != nil {
		return 0, fmt.Errorf("vllm: logprobs token %.60q is not token_id:ID (return_tokens_as_token_ids)", s)
	}
	return uint32(id), nil
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// orderedFloats is a JSON object of numbers read in member order (null: none).
type orderedFloats []struct {
	key   string
	value float64
}

func (o *orderedFloats) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*o = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("top_logprobs entry is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		var v float64
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("top_logprobs member %.60q: %w", key, err)
		}
		*o = append(*o, struct {
			key   string
			value float64
		}{key, v})
	}
	_, err := dec.Token()
	return err
}
