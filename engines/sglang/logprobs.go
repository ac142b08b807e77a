package sglang

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/turbine-llm/turbine/messages"
)

// Logprobs over SGLang's /generate (docs/reference.md §21). The adapter asks with the
// top-level return_logprob, top_logprobs_num (one count for the prompt's and the
// output's positions: the larger of the two asked, each cut to its own afterwards) and
// logprob_start_len (0 for prompt logprobs, else -1: the output's only). SGLang answers
// in meta_info, with everything so far on every chunk (cumulative, whether or not
// output_ids are incremental): output_token_logprobs, one [logprob, token_id, text]
// triple per output id; output_top_logprobs, per position the top_logprobs_num most
// likely triples, most likely first; input_token_logprobs and input_top_logprobs the
// same for the prompt, the first prompt token's logprob null. SGLang gives no ranks: a
// token's rank is read as 1 + the alternatives more likely than it (exact within the
// top N; N+1, a lower bound, outside them; 1 when no alternatives were asked).

// LogprobRequest asks for logprobs in a generate request.
type LogprobRequest struct {
	// Top is the number of alternatives kept per output position (0..20); Output false
	// asks for no output logprobs (SGLang returns them anyway; they are dropped).
	Output bool
	Top    int
	// Prompt asks for the prompt tokens' logprobs, with PromptTop alternatives each.
	Prompt    bool
	PromptTop int
}

// logprobRequestFrom returns what s asks (nil: no logprobs).
func logprobRequestFrom(s *messages.SamplingParams) *LogprobRequest {
	if s.Logprobs == nil && s.PromptLogprobs == nil {
		return nil
	}
	return &LogprobRequest{Output: s.Logprobs != nil, Top: int(s.GetLogprobs()),
		Prompt: s.PromptLogprobs != nil, PromptTop: int(s.GetPromptLogprobs())}
}

// members returns the top-level body members that ask for l.
func (l *LogprobRequest) members() map[string]any {
	start := -1
	if l.Prompt {
		start = 0
	}
	return map[string]any{"return_logprob": true, "top_logprobs_num": max(l.Top, l.PromptTop), "logprob_start_len": start}
}

// logprobMeta are meta_info's logprob members, as sent.
type logprobMeta struct {
	InputTokenLogprobs  json.RawMessage `json:"input_token_logprobs"`
	OutputTokenLogprobs json.RawMessage `json:"output_token_logprobs"`
	InputTopLogprobs    json.RawMessage `json:"input_top_logprobs"`
	OutputTopLogprobs   json.RawMessage `json:"output_top_logprobs"`
}

// triple is [logprob, token_id, text|null]; a null logprob is NaN.
type triple struct {
	logprob float64
	id      uint32
}

func (t *triple) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) < 2 {
		return fmt.Errorf("logprob entry %.60s is not [logprob, token_id, text]", b)
	}
	if string(bytes.TrimSpace(raw[0])) == "null" {
		t.logprob = math.NaN()
	} else if err := json.Unmarshal(raw[0], &t.logprob); err != nil {
		return fmt.Errorf("logprob entry %.60s: the logprob is not a number", b)
	}
	var id float64
	if err := json.Unmarshal(raw[1], &id); err != nil || id < 0 || id > math.MaxUint32 || id != math.Trunc(id) {
		return fmt.Errorf("logprob entry %.60s: the token id is not one", b)
	}
	t.id = uint32(id)
	return nil
}

// logprobList reads a token logprob list and, when top is not empty or null, its top
// list (one entry per position, null or a list of triples).
func logprobList(tokens, top json.RawMessage, what string) ([]triple, [][]triple, error) {
	var list []triple
	if err := json.Unmarshal(tokens, &list); err != nil {
		return nil, nil, fmt.Errorf("sglang: malformed %s_token_logprobs: %w", what, err)
	}
	if len(top) == 0 || string(top) == "null" {
		return list, nil, nil
	}
	var tops [][]triple
	if err := json.Unmarshal(top, &tops); err != nil {
		return nil, nil, fmt.Errorf("sglang: malformed %s_top_logprobs: %w", what, err)
	}
	if len(tops) != len(list) {
		return nil, nil, fmt.Errorf("sglang: %s_top_logprobs of %d positions for %d token logprobs", what, len(tops), len(list))
	}
	return list, tops, nil
}

// entry builds the logprob of token t with the first n of its alternatives.
func entry(t triple, tops []triple, n int) (*messages.TokenLogprob, error) {
	e := &messages.TokenLogprob{TokenId: t.id, Logprob: float32(t.logprob), Rank: 1}
	if math.IsNaN(t.logprob) {
		return e, nil
	}
	for _, a := range tops {
		if math.IsNaN(a.logprob) {
			return nil, fmt.Errorf("sglang: a top logprob of token %d is null", t.id)
		}
		if a.logprob > t.logprob {
			e.Rank++
		}
	}
	sorted := slices.Clone(tops)
	slices.SortStableFunc(sorted, func(a, b triple) int {
		switch {
		case a.logprob > b.logprob:
			return -1
		case a.logprob < b.logprob:
			return 1
		}
		return 0
	})
	for _, a := range sorted[:min(n, len(sorted))] {
		e.Top = append(e.Top, &messages.TopLogprob{TokenId: a.id, Logprob: float32(a.logprob)})
	}
	return e, nil
}

// outputLogprobs returns the logprobs of ids, the output ids handed out in this chunk,
// of which seen (these included) were handed out in all, from m's cumulative lists.
// Errors: a malformed list, one that does not hold one entry per output id so far, an
// entry whose token is not its position's id, a null output logprob.
func outputLogprobs(m logprobMeta, ids []uint32, seen, n int) ([]*messages.TokenLogprob, error) {
	if len(m.OutputTokenLogprobs) == 0 || string(m.OutputTokenLogprobs) == "null" {
		return nil, fmt.Errorf("sglang: a chunk without output_token_logprobs (return_logprob was asked)")
	}
	list, tops, err := logprobList(m.OutputTokenLogprobs, m.OutputTopLogprobs, "output")
	if err != nil {
		return nil, err
	}
	if n > 0 && tops == nil && len(list) > 0 {
		return nil, fmt.Errorf("sglang: output_top_logprobs missing (top_logprobs_num %d was asked)", n)
	}
	if len(list) != seen {
		return nil, fmt.Errorf("sglang: output_token_logprobs of %d tokens for %d output ids", len(list), seen)
	}
	first := seen - len(ids)
	out := make([]*messages.TokenLogprob, len(ids))
	for i, id := range ids {
		t := list[first+i]
		if t.id != id || math.IsNaN(t.logprob) {
			return nil, fmt.Errorf("sglang: output logprob %d is of token %d (logprob %v), but the output id is %d", first+i, t.id, t.logprob, id)
		}
		var alt []triple
		if tops != nil {
			alt = tops[first+i]
		}
		if out[i], err = entry(t, alt, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// promptLogprobs returns the prompt's logprobs from m (nil, nil while m has none yet).
// Errors: a malformed list, one that is not one entry per prompt token, an entry whose
// token is not the prompt's, a null logprob after the first.
func promptLogprobs(m logprobMeta, prompt []uint32, n int) ([]*messages.TokenLogprob, error) {
	if len(m.InputTokenLogprobs) == 0 || string(m.InputTokenLogprobs) == "null" || string(m.InputTokenLogprobs) == "[]" {
		return nil, nil
	}
	list, tops, err := logprobList(m.InputTokenLogprobs, m.InputTopLogprobs, "input")
	if err != nil {
		return nil, err
	}
	if len(list) != len(prompt) {
		return nil, fmt.Errorf("sglang: input_token_logprobs of %d tokens for a prompt of %d (logprob_start_len 0 was asked)", len(list), len(prompt))
	}
	out := make([]*messages.TokenLogprob, len(prompt))
	for i, t := range list {
		if t.id != prompt[i] {
			return nil, fmt.Errorf("sglang: input logprob %d is of token %d, but the prompt token is %d", i, t.id, prompt[i])
		}
		if i == 0 {
			out[0] = &messages.TokenLogprob{TokenId: t.id, Logprob: float32(math.NaN())}
			continue
		}
		if math.IsNaN(t.logprob) {
			return nil, fmt.Errorf("sglang: input logprob %d is null", i)
		}
		var alt []triple
		if tops != nil {
			alt = tops[i]
		}
		if out[i], err = entry(t, alt, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}
