package gateway

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Logprobs, as vLLM's OpenAI server returns them (docs/reference.md §21).
//
// Requests: chat `logprobs` (bool) with `top_logprobs` (0..20); completions
// `logprobs: N` (0..20, vLLM's default --max-logprobs, not OpenAI's 5) and `echo`; on
// both vLLM's `prompt_logprobs: N` (0..20, not with streaming) and
// `return_tokens_as_token_ids`. The engine is asked for N alternatives per output
// position (SamplingParams.logprobs) and, with prompt_logprobs or with echo and logprobs,
// for the prompt's (SamplingParams.prompt_logprobs).
//
// Answers: a token is named by its text, decoded alone with special tokens kept ("token_id:ID"
// with return_tokens_as_token_ids); bytes are the UTF-8 of that text. At each position
// the entries are the token itself first, then the most likely tokens (the token once):
// chat's top_logprobs are the first top_logprobs of them, completions' top_logprobs
// object the first logprobs + 1. Completions' text_offset counts characters (code
// points) from the start of the choice's text, token by token; streamed, each chunk's
// first offset is the length of the text streamed before it (vLLM counts the generated
// text only, not an echoed prompt). Logprobs are clamped at -9999.

// maxLogprobs bounds logprobs, top_logprobs and prompt_logprobs (vLLM's default
// --max-logprobs).
const maxLogprobs = 20

// logprobOptions are a request's logprob fields.
type logprobOptions struct {
	// Output is the number of alternatives asked per output position; nil: no logprobs.
	Output *int32
	// Prompt is prompt_logprobs; nil: none asked.
	Prompt *int32
	// AsIDs is return_tokens_as_token_ids.
	AsIDs bool
	// Echo (completions): the prompt's text (and, with Output, its logprobs) comes first.
	// EchoOnly: max_tokens 0 with echo: the engine generates one token, which is not
	// shown (vLLM's echo without generation).
	Echo, EchoOnly bool
}

// engineFields returns what the engine is asked: logprobs and prompt_logprobs (echo
// with logprobs asks the prompt's as many as the output's, as vLLM does).
func (o logprobOptions) engineFields() (out, prompt *int32) {
	prompt = o.Prompt
	if prompt == nil && o.Echo && o.Output != nil {
		prompt = o.Output
	}
	return o.Output, prompt
}

// addLogprobs sets the logprob fields of sp from c.
func addLogprobs(sp *messages.SamplingParams, c *commonRequest) {
	out, prompt := c.Logprobs.engineFields()
	if out != nil {
		v := *out
		sp.Logprobs = &v
	}
	if prompt != nil {
		v := *prompt
		sp.PromptLogprobs = &v
	}
}

// logprobField checks a logprobs count (0..maxLogprobs) as vLLM does.
func logprobField(o *object, key string, n int64, what string) *int32 {
	switch {
	case n < 0:
		o.fail(newError(KindInvalidValue, key, "Invalid '%s': `%s` must be a positive value, got %d.", key, key, n))
	case n > maxLogprobs:
		o.fail(newError(KindInvalidValue, key, "Invalid '%s': requested %s logprobs of %d, which is greater than max allowed: %d.", key, what, n, maxLogprobs))
	}
	v := int32(n)
	return &v
}

// parseExtraLogprobs reads prompt_logprobs and return_tokens_as_token_ids (both
// endpoints).
func parseExtraLogprobs(o *object, c *commonRequest) {
	if n, ok := o.integer("prompt_logprobs"); ok {
		if c.Stream && n > 0 {
			o.fail(newError(KindInvalidValue, "prompt_logprobs", "Invalid 'prompt_logprobs': `prompt_logprobs` are not available when `stream=True`."))
		}
		c.Logprobs.Prompt = logprobField(o, "prompt_logprobs", n, "prompt")
	}
	c.Logprobs.AsIDs, _ = o.boolean("return_tokens_as_token_ids")
}

// logprobSink collects one choice's logprobs as its chunks are read (textOutput.push)
// and renders them into its chunks and body. Not safe for concurrent use.
type logprobSink struct {
	opts logprobOptions
	tok  model.Tokenizer
	chat bool
	// pending are the output positions not yet rendered into a stream chunk; all are
	// every output position (for a body).
	pending, all []*messages.TokenLogprob
	// prompt are the prompt's logprobs (from the first chunk), promptIDs its tokens.
	prompt    []*messages.TokenLogprob
	promptIDs []uint32
	// promptString is the prompt as the request gave it, when it gave text; hasText says so.
	promptString string
	hasText      bool
	// echoed: the prompt went out (completions stream with echo); textLen counts the
	// characters of generated text streamed so far.
	echoed  bool
	textLen int
}

// newLogprobSink returns the sink of a choice whose prompt is promptIDs; nil when the
// request asks for no logprobs and no echo.
func newLogprobSink(c *commonRequest, tok model.Tokenizer, chat bool, promptIDs []uint32) *logprobSink {
	o := c.Logprobs
	if o.Output == nil && o.Prompt == nil && !o.Echo {
		return nil
	}
	return &logprobSink{opts: o, tok: tok, chat: chat, promptIDs: promptIDs}
}

// setPromptText makes echo show text, the prompt as the request gave it, instead of its
// tokens decoded (vLLM echoes the prompt string). The offsets (text_offset) still count
// the token names: echo does not move them. "" (a prompt given as token ids, or one
// truncated) keeps the decoded tokens.
func (l *logprobSink) setPromptText(text string) {
	if l == nil || text == "" {
		return
	}
	l.promptString, l.hasText = text, true
}

// add takes the logprobs of the token at position i of c (one the output keeps), and the
// chunk's prompt logprobs.
func (l *logprobSink) add(c *messages.TokenChunk, i int) {
	if l == nil {
		return
	}
	if p := c.GetPromptLogprobs(); len(p) > 0 && l.prompt == nil {
		l.prompt = p
	}
	if lps := c.GetLogprobs(); i < len(lps) && l.opts.Output != nil && !l.opts.EchoOnly {
		l.pending = append(l.pending, lps[i])
		l.all = append(l.all, lps[i])
	}
}

// token is how a token is named: its text, or "token_id:ID".
func (l *logprobSink) token(id uint32) string {
	if l.opts.AsIDs {
		return "token_id:" + strconv.FormatUint(uint64(id), 10)
	}
	return l.decoded(id)
}

// decoded is the token decoded alone, special tokens kept.
func (l *logprobSink) decoded(id uint32) string { return l.tok.Decode([]uint32{id}) }

func clampLogprob(v float32) float64 { return max(float64(v), -9999) }

// entries are a position's entries in vLLM's order: the token, then the most likely
// tokens other than it.
func entries(lp *messages.TokenLogprob) []*messages.TopLogprob {
	out := make([]*messages.TopLogprob, 0, len(lp.GetTop())+1)
	out = append(out, &messages.TopLogprob{TokenId: lp.GetTokenId(), Logprob: lp.GetLogprob()})
	for _, t := range lp.GetTop() {
		if t.GetTokenId() != lp.GetTokenId() {
			out = append(out, t)
		}
	}
	return out
}

// ---- chat ----

// chatLogprobs is vLLM's ChatCompletionLogProbs.
type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func utf8Bytes(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// chatOf renders positions lps; nil (JSON null) when the request asked for none.
func (l *logprobSink) chatOf(lps []*messages.TokenLogprob) *chatLogprobs {
	if l == nil || l.opts.Output == nil {
		return nil
	}
	out := &chatLogprobs{Content: make([]chatLogprob, 0, len(lps))}
	top := int(*l.opts.Output)
	for _, lp := range lps {
		e := chatLogprob{Token: l.token(lp.GetTokenId()), Logprob: clampLogprob(lp.GetLogprob()),
			Bytes: utf8Bytes(l.decoded(lp.GetTokenId())), TopLogprobs: []chatTopLogprob{}}
		for i, t := range entries(lp) {
			if i >= top {
				break
			}
			name := l.token(t.GetTokenId())
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: name, Logprob: clampLogprob(t.GetLogprob()), Bytes: utf8Bytes(name)})
		}
		out.Content = append(out.Content, e)
	}
	return out
}

// chatChunk renders the positions pending since the last chunk.
func (l *logprobSink) chatChunk() any {
	if l == nil || l.opts.Output == nil {
		return nil
	}
	lps := l.pending
	l.pending = nil
	return l.chatOf(lps)
}

// chatBody renders every position of a finished answer.
func (l *logprobSink) chatBody() any {
	if l == nil || l.opts.Output == nil {
		return nil
	}
	return l.chatOf(l.all)
}

// ---- completions ----

// textLogprobs is vLLM's CompletionLogProbs.
type textLogprobs struct {
	TextOffset    []int      `json:"text_offset"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
	Tokens        []string   `json:"tokens"`
	TopLogprobs   []topMap   `json:"top_logprobs"`
}

// topMap is one position's top_logprobs object, members in order (null when nil).
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
		k, err := encodeJSON(e.token)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := encodeJSON(e.logprob)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// textOf renders positions lps (a NaN logprob, the first prompt token's, is null), the
// first at character offset offset.
func (l *logprobSink) textOf(lps []*messages.TokenLogprob, offset int) *textLogprobs {
	out := &textLogprobs{TextOffset: []int{}, TokenLogprobs: []*float64{}, Tokens: []string{}, TopLogprobs: []topMap{}}
	n := int(*l.opts.Output)
	for _, lp := range lps {
		token := l.token(lp.GetTokenId())
		out.TextOffset = append(out.TextOffset, offset)
		offset += utf8.RuneCountInString(token)
		out.Tokens = append(out.Tokens, token)
		if math.IsNaN(float64(lp.GetLogprob())) {
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
			continue
		}
		v := clampLogprob(lp.GetLogprob())
		out.TokenLogprobs = append(out.TokenLogprobs, &v)
		top := topMap{}
		for i, t := range entries(lp) {
			if i > n {
				break
			}
			top = append(top, topEntry{l.token(t.GetTokenId()), clampLogprob(t.GetLogprob())})
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
}

// promptPositions are the prompt's logprobs as echo shows them: one per prompt token
// (a prompt token the engine gave none for counts as the first: null).
func (l *logprobSink) promptPositions() []*messages.TokenLogprob {
	out := make([]*messages.TokenLogprob, len(l.promptIDs))
	for i, id := range l.promptIDs {
		if i < len(l.prompt) && l.prompt[i].GetTokenId() == id {
			out[i] = l.prompt[i]
		} else {
			out[i] = &messages.TokenLogprob{TokenId: id, Logprob: float32(math.NaN())}
		}
	}
	return out
}

// promptText is the echoed prompt: the prompt's text as given, or, for a prompt given as
// token ids, its tokens decoded, leading special tokens (a BOS the prompt was given) left
// out.
func (l *logprobSink) promptText() string {
	if l.hasText {
		return l.promptString
	}
	ids := l.promptIDs
	for len(ids) > 0 && l.tok.IsSpecial(ids[0]) {
		ids = ids[1:]
	}
	return l.tok.Decode(ids)
}

// textChunk renders a completions chunk's text (the prompt first on the first chunk with
// echo; the generated text left out with echo only) and logprobs (nil: JSON null).
func (l *logprobSink) textChunk(text string) (string, any) {
	if l == nil {
		return text, nil
	}
	if l.opts.EchoOnly {
		text = ""
	}
	generated := utf8.RuneCountInString(text)
	var lps []*messages.TokenLogprob
	if l.opts.Echo && !l.echoed {
		l.echoed = true
		text = l.promptText() + text
		if l.opts.Output != nil {
			lps = l.promptPositions()
		}
	}
	lps = append(lps, l.pending...)
	l.pending = nil
	var rendered any
	if l.opts.Output != nil {
		rendered = l.textOf(lps, l.textLen)
	}
	l.textLen += generated
	return text, rendered
}

// textBody renders a finished completion's text and logprobs (nil: JSON null).
func (l *logprobSink) textBody(text string) (string, any) {
	if l == nil {
		return text, nil
	}
	if l.opts.EchoOnly {
		text = ""
	}
	lps := l.all
	if l.opts.Echo {
		text = l.promptText() + text
		if l.opts.Output != nil {
			lps = append(l.promptPositions(), lps...)
		}
	}
	if l.opts.Output == nil {
		return text, nil
	}
	return text, l.textOf(lps, 0)
}

// promptList renders vLLM's prompt_logprobs: null for the first token, then per position
// an object from token id to its logprob, rank and decoded text (the prompt token first,
// then the most likely tokens); nil (absent) when none were asked.
func (l *logprobSink) promptList() json.RawMessage {
	if l == nil {
		return nil
	}
	if _, asked := l.opts.engineFields(); asked == nil {
		return nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, lp := range l.promptPositions() {
		if i > 0 {
			b.WriteByte(',')
		}
		if math.IsNaN(float64(lp.GetLogprob())) {
			b.WriteString("null")
			continue
		}
		b.WriteByte('{')
		for k, t := range entries(lp) {
			rank := int32(0)
			if k == 0 {
				rank = lp.GetRank()
			} else {
				for j, u := range lp.GetTop() {
					if u.GetTokenId() == t.GetTokenId() {
						rank = int32(j + 1)
					}
				}
			}
			if k > 0 {
				b.WriteByte(',')
			}
			dec, _ := encodeJSON(l.decoded(t.GetTokenId()))
			v, _ := encodeJSON(clampLogprob(t.GetLogprob()))
			b.WriteString(`"` + strconv.FormatUint(uint64(t.GetTokenId()), 10) + `":{"logprob":`)
			b.Write(v)
			b.WriteString(`,"rank":` + strconv.Itoa(int(rank)) + `,"decoded_token":`)
			b.Write(dec)
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.Bytes()
}

// parseChatLogprobs reads chat's logprobs and top_logprobs, and the vLLM extras.
func parseChatLogprobs(o *object, c *commonRequest) {
	lp, _ := o.boolean("logprobs")
	if n, ok := o.integer("top_logprobs"); ok {
		if n > 0 && !lp {
			o.fail(newError(KindInvalidValue, "top_logprobs", "Invalid 'top_logprobs': when using `top_logprobs`, `logprobs` must be set to true."))
		}
		top := logprobField(o, "top_logprobs", n, "sample")
		if lp {
			c.Logprobs.Output = top
		}
	} else if lp {
		c.Logprobs.Output = new(int32)
	}
	parseExtraLogprobs(o, c)
}

// echoWithoutGeneration reports a completions body with echo true and max_tokens 0,
// which vLLM answers with the prompt alone; max_tokens is then taken out of o (the
// engine is asked for one token, which is not shown).
func echoWithoutGeneration(o *object) bool {
	if echo, _ := o.boolean("echo"); !echo {
		return false
	}
	if n, ok := o.integer("max_tokens"); !ok || n != 0 {
		return false
	}
	delete(o.m, "max_tokens")
	return true
}

// parseCompletionLogprobs reads completions' logprobs and echo, and the vLLM extras.
func parseCompletionLogprobs(o *object, c *commonRequest, echoOnly bool) {
	if n, ok := o.integer("logprobs"); ok {
		c.Logprobs.Output = logprobField(o, "logprobs", n, "sample")
	}
	c.Logprobs.Echo, _ = o.boolean("echo")
	if echoOnly {
		c.Logprobs.EchoOnly = true
		c.MaxTokens, c.MaxTokensParam = 1, "max_tokens"
	}
	parseExtraLogprobs(o, c)
}
