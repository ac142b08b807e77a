package gateway

import (
	"net/http"
	"time"

	"github.com/turbine-llm/turbine/gateway/parse"
)

// openAIAPI is the shape of the chat completions and completions APIs: OpenAI's error
// body and, per endpoint, chunks and bodies (response.go).
type openAIAPI struct{ ep string }

var (
	chatAPI        api = openAIAPI{endpointChat}
	completionsAPI api = openAIAPI{endpointCompletions}
)

func (a openAIAPI) endpoint() string { return a.ep }

func (openAIAPI) writeError(w http.ResponseWriter, e *APIError, retryAfter time.Duration) {
	writeError(w, e, retryAfter)
}

func (a openAIAPI) answer(i answerInfo) answer {
	r := &responder{chat: a.ep == endpointChat, id: idPrefix(a.ep) + i.ID, created: i.Created, model: i.Model,
		includeUsage: i.IncludeUsage, usageNow: i.Usage, index: i.Index, lp: i.Logprobs, ids: i.TokenIDs}
	ans := &openAIAnswer{r: r, named: i.Chat != nil && i.Chat.ToolChoice.Mode == "function", multi: i.Multi}
	if r.chat && i.Chat != nil {
		ans.echo, ans.noReasoning = chatEcho(i.Chat), i.Chat.OmitReasoning
		if i.Chat.ReturnPromptText && i.Index == 0 { // once per answer, as vLLM sends it
			prompt := i.Chat.promptText
			r.promptText = &prompt
		}
	}
	return ans
}

// openAIAnswer renders a chat completion or completion: chunks with the role first
// (chat), deltas of content, reasoning and tool calls, the finishing chunk, the usage
// chunk when asked, [DONE]; or one body.
type openAIAnswer struct {
	r *responder
	// named: tool_choice named a function. The call was forced, not chosen, so a
	// finished answer reports "stop", as OpenAI and vLLM do, not "tool_calls".
	named bool
	// multi: one choice of several; streamEnd ends the choice only (choices.go ends the
	// stream).
	multi bool
	// echo starts a chat answer (vLLM's echo, chatEcho); noReasoning leaves its
	// reasoning out (include_reasoning false).
	echo        string
	noReasoning bool
}

// finish is the finish_reason the answer reports.
func (a *openAIAnswer) finish(end *ending) string {
	if a.named && end.Finish == "tool_calls" {
		return "stop"
	}
	return end.Finish
}

func (a *openAIAnswer) streamStart(s *sseWriter) error {
	first, ok := a.r.first()
	if !ok {
		return nil
	}
	if err := s.data(first); err != nil {
		return err
	}
	if a.echo != "" {
		// vLLM sends the echoed content in a chunk of its own after the role's.
		echo := a.echo
		return s.data(a.r.chunk(chatDelta{Content: &echo}, nil, nil))
	}
	return nil
}

func (a *openAIAnswer) streamEvents(s *sseWriter, evs []parse.Event) error {
	for _, d := range a.deltas(evs) {
		if err := s.data(a.r.chunk(d, nil, nil)); err != nil {
			return err
		}
	}
	return nil
}

// deltas groups events into chunk deltas: consecutive text of one kind in one delta,
// each tool call event in its own.
func (a *openAIAnswer) deltas(evs []parse.Event) []chatDelta {
	var out []chatDelta
	for _, e := range evs {
		var last *chatDelta
		if len(out) > 0 {
			last = &out[len(out)-1]
		}
		switch e.Kind {
		case parse.KindContent:
			if last != nil && last.Content != nil && last.ToolCalls == nil {
				*last.Content += e.Text
				continue
			}
			t := e.Text
			out = append(out, chatDelta{Content: &t})
		case parse.KindReasoning:
			if !a.r.chat || a.noReasoning {
				continue // completions carry text only; include_reasoning false none
			}
			if last != nil && last.Reasoning != nil {
				*last.Reasoning += e.Text
				*last.ReasoningContent += e.Text
				continue
			}
			t, t2 := e.Text, e.Text
			out = append(out, chatDelta{Reasoning: &t, ReasoningContent: &t2})
		case parse.KindToolCall:
			if !a.r.chat {
				continue
			}
			idx := e.Index
			out = append(out, chatDelta{ToolCalls: []chatToolCall{{Index: &idx, ID: e.ID, Type: "function",
				Function: chatToolFunction{Name: e.Name}}}})
		case parse.KindToolArgs:
			if !a.r.chat {
				continue
			}
			if last != nil && len(last.ToolCalls) == 1 && *last.ToolCalls[0].Index == e.Index {
				last.ToolCalls[0].Function.Arguments += e.Text
				continue
			}
			idx := e.Index
			out = append(out, chatDelta{ToolCalls: []chatToolCall{{Index: &idx, Function: chatToolFunction{Arguments: e.Text}}}})
		}
	}
	return out
}

func (a *openAIAnswer) streamEnd(s *sseWriter, end *ending) error {
	ds := a.deltas(end.Last)
	// The last delta goes out with finish_reason, as the last text always did; one that
	// is a tool call goes alone first, and the finishing chunk has an empty delta.
	var final chatDelta
	if n := len(ds); n > 0 && ds[n-1].ToolCalls == nil {
		final, ds = ds[n-1], ds[:n-1]
	}
	for _, d := range ds {
		if err := s.data(a.r.chunk(d, nil, nil)); err != nil {
			return err
		}
	}
	finish := a.finish(end)
	a.r.stop = vllmStopReason(end)
	if err := s.data(a.r.chunk(final, &finish, end.Info)); err != nil {
		return err
	}
	if a.multi {
		return nil
	}
	if a.r.includeUsage {
		if err := s.data(a.r.usageChunk(end.Usage)); err != nil {
			return err
		}
	}
	return s.done()
}

func (a *openAIAnswer) streamFail(s *sseWriter, e *APIError) error {
	if err := s.data(e); err != nil {
		return err
	}
	return s.done()
}

func (a *openAIAnswer) respond(w http.ResponseWriter, end *ending) error {
	r := a.r
	if !r.chat {
		return writeJSON(w, http.StatusOK, textCompletion{ID: r.id, Object: "text_completion", Created: r.created, Model: r.model,
			Choices: []textChoice{a.textChoice(end)},
			Usage:   mustJSON(end.Usage), Turbine: end.Info})
	}
	return writeJSON(w, http.StatusOK, chatCompletion{ID: r.id, Object: "chat.completion", Created: r.created, Model: r.model,
		Choices: []chatChoice{a.chatChoice(end)}, Usage: end.Usage, PromptLogprobs: r.lp.promptList(),
		PromptTokenIDs: r.ids.promptIDs(), PromptText: r.promptText, Turbine: end.Info})
}

// textChoice is the completions choice of a finished answer.
func (a *openAIAnswer) textChoice(end *ending) textChoice {
	text, lps := a.r.lp.textBody(end.Result.Content)
	return textChoice{Index: a.r.index, Text: text, Logprobs: lps, FinishReason: &end.Finish, StopReason: vllmStopReason(end),
		PromptTokenIDs: a.r.ids.promptIDs(), TokenIDs: a.r.ids.all(), PromptLogprobs: a.r.lp.promptList()}
}

// chatChoice is the chat completions choice of a finished answer.
func (a *openAIAnswer) chatChoice(end *ending) chatChoice {
	res := end.Result
	msg := chatRespMessage{Role: "assistant"}
	if res.Content != "" || len(res.Calls) == 0 || a.echo != "" {
		content := a.echo + res.Content
		msg.Content = &content
	}
	if res.Reasoning != "" && !a.noReasoning {
		rs, rs2 := res.Reasoning, res.Reasoning
		msg.Reasoning, msg.ReasoningContent = &rs, &rs2
	}
	for _, c := range res.Calls {
		msg.ToolCalls = append(msg.ToolCalls, chatToolCall{ID: c.ID, Type: "function",
			Function: chatToolFunction{Name: c.Name, Arguments: c.Arguments}})
	}
	return chatChoice{Index: a.r.index, Message: msg, Logprobs: a.r.lp.chatBody(), FinishReason: a.finish(end),
		StopReason: vllmStopReason(end), TokenIDs: a.r.ids.all()}
}
