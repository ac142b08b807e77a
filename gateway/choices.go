package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
)

// Several choices in one request (docs/reference.md §22): n > 1 on chat completions and
// completions, and batches of prompts on completions. Choice k is prompt k / n's choice
// k % n; each is a request of its own on the Backend (request id "<id>-<k>"), so
// cancellation, failure and migration are per choice. Of each prompt's choices the first
// is routed as usual; the others start once it has its first chunk (its prefill is done,
// the prompt's KV blocks are in its worker's prefix cache) and are pinned to its worker
// (GenerateRequest.PinWorker), so the prompt is routed once and prefilled once. A
// request seed s gives choice c of a prompt the seed s + c, as vLLM seeds its parallel
// samples: the choices differ and stay reproducible.
//
// Every choice is read and rendered by its own goroutine (its own detokenizer, stop
// matcher, output parser and logprobs); a stream's frames are written one at a time
// (choiceRun.mu), so the choices' chunks interleave as they come, each with its index
// and its own finishing chunk; the handler then writes the usage (summed) and [DONE]
// once, or a body with the choices by index. The first failure ends the request (a
// stream ends with its error frame, after which no choice writes) and cancels the other
// choices, as does a client that goes away.

const (
	// MaxChoices bounds n (OpenAI's bound).
	MaxChoices = 128
	// MaxBatchChoices bounds the choices of one completions request: prompts × n.
	MaxBatchChoices = 1024
)

// choices is the number of choices p makes: n for each of its prompts.
func (p *prepared) choices() int { return max(p.common.N, 1) * (1 + len(p.more)) }

// choiceRequest is choice k's request: its prompt's, under request id "<id>-<k>", with
// the seed of the choice's place among its prompt's choices added to the request's.
func choiceRequest(p *prepared, id string, k int) *GenerateRequest {
	n := max(p.common.N, 1)
	base := p.gen
	if i := k / n; i > 0 {
		base = p.more[i-1]
	}
	g := *base
	g.RequestID = id + "-" + strconv.Itoa(k)
	g.Sampling = proto.Clone(base.Sampling).(*messages.SamplingParams)
	if c := k % n; c > 0 && g.Sampling.Seed != nil {
		seed := *g.Sampling.Seed + int64(c) // wraps past the int64 range, as a seed may
		g.Sampling.Seed = &seed
	}
	return &g
}

// choiceEvent is what a choice's goroutine reports to the merge when it ends.
type choiceEvent struct {
	k int
	// end is set when the choice finished (choice: its rendered body choice, prompt the
	// body's prompt_logprobs, for a non-streaming answer); aerr when it failed (g and
	// last: its generation and the events of its failing chunk, for the error frame);
	// gone when the request's context ended or the stream ended first.
	end    *ending
	choice any
	prompt []byte
	aerr   *APIError
	g      *generation
	last   []parse.Event
	gone   bool
}

// choiceRun runs the choices of one request and merges their answers.
type choiceRun struct {
	s       *Server
	rec     *requestRecord
	p       *prepared
	ctx     context.Context
	n       int
	answers []answer // by choice: the role chunks and the usage chunk
	events  chan choiceEvent
	wg      sync.WaitGroup
	stream  bool
	created int64
	// mu serialises the stream's frames; over: the stream has ended (failed, the client
	// went away), no choice writes any more.
	mu   sync.Mutex
	sse  *sseWriter
	over bool
}

// errStreamOver is what a choice's write returns once the stream has ended.
var errStreamOver = errors.New("gateway: the stream has ended")

// write runs f, which writes frames of the stream, unless the stream has ended; a
// failing write ends it (the client is gone).
func (r *choiceRun) write(f func(s *sseWriter) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return errStreamOver
	}
	if err := f(r.sse); err != nil {
		r.over = true
		return err
	}
	return nil
}

// end marks the stream ended and runs f (nil: nothing) under the write lock; it reports
// whether the stream was still open.
func (r *choiceRun) end(f func(s *sseWriter)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return false
	}
	r.over = true
	if f != nil {
		f(r.sse)
	}
	return true
}

// generateChoices answers a request with several choices (see the top of this file).
func (s *Server) generateChoices(ctx context.Context, w http.ResponseWriter, rec *requestRecord, p *prepared) {
	if _, ok := p.api.(openAIAPI); !ok {
		aerr := newError(KindUnsupported, "n", "n > 1 is only served by the chat completions and completions APIs.")
		rec.fail(aerr)
		p.api.writeError(w, aerr, s.cfg.RetryAfter)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	total := p.choices()
	run := &choiceRun{s: s, rec: rec, p: p, ctx: ctx, n: max(p.common.N, 1), answers: make([]answer, total),
		events: make(chan choiceEvent, total), stream: p.common.Stream}
	defer func() {
		cancel()
		run.wg.Wait() // every choice's stream is closed
	}()
	created := s.cfg.Now().Unix()
	prompt := len(p.gen.TokenIDs)
	for _, g := range p.more {
		prompt += len(g.TokenIDs)
	}
	rec.usage.PromptTokens = prompt
	run.created = created
	for k := range run.answers {
		run.answers[k] = p.api.answer(run.info(k))
	}

	// Each prompt's first choice is routed before the answer starts, so that a request
	// the cluster cannot take gets its error status.
	firsts := make([]*generation, 0, total/run.n)
	for k := 0; k < total; k += run.n {
		req := choiceRequest(p, rec.id, k)
		var st Stream
		var err error
		if k == 0 {
			st, err = s.startGeneration(ctx, req, rec.ticket)
			if err == nil {
				defer s.released(rec.model)
				s.metrics.observeQueue(rec.model, s.cfg.Now().Sub(rec.start))
			}
		} else {
			st, err = s.backend.Generate(ctx, req)
		}
		if err != nil {
			for _, g := range firsts {
				g.stream.Close()
			}
			switch aerr := timedOut(ctx, s.cfg.RequestTimeout); {
			case aerr != nil:
				rec.fail(aerr)
				p.api.writeError(w, aerr, s.cfg.RetryAfter)
			case ctx.Err() != nil:
				rec.cancel()
			default:
				aerr = backendError(rec.model, err)
				rec.fail(aerr)
				p.api.writeError(w, aerr, s.cfg.RetryAfter)
			}
			return
		}
		firsts = append(firsts, run.generation(k, req, st))
	}
	rec.worker = firsts[0].stream.WorkerID()
	if ds, ok := firsts[0].stream.(DisaggStream); ok {
		rec.disagg = ds.Disagg()
	}
	setOutcomeHeaders(w.Header(), rec.worker, rec.disagg)

	if run.stream {
		sse, err := startSSE(w)
		if err != nil {
			for _, g := range firsts {
				g.stream.Close()
			}
			rec.cancel()
			return
		}
		// vLLM opens every choice of a chat stream with its role chunk before any text.
		for _, a := range run.answers {
			if a.streamStart(sse) != nil {
				for _, g := range firsts {
					g.stream.Close()
				}
				rec.cancel()
				return
			}
		}
		run.sse = sse
	}
	for _, g := range firsts {
		k0 := g.choice
		g.started = func() { run.startSiblings(k0, g.stream.WorkerID()) }
		run.wg.Add(1)
		go run.read(k0, g)
	}
	run.merge(w)
}

// info is what choice k's renderer knows.
func (r *choiceRun) info(k int) answerInfo {
	i := answerInfo{ID: r.rec.id, Created: r.created, Model: r.p.common.Model, PromptTokens: len(r.request(k).TokenIDs),
		IncludeUsage: r.p.common.IncludeUsage, Chat: r.p.chat, Index: k, Multi: true,
		TokenIDs: newTokenIDSink(r.p.common, r.request(k).TokenIDs)} // the role chunk's and the body's prompt ids
	if r.p.common.IncludeUsage && r.p.common.ContinuousUsage {
		// The role chunk's usage: nothing generated yet (the choice's generation renders
		// the rest with its own count).
		prompt := i.PromptTokens
		i.Usage = func() Usage { return Usage{PromptTokens: prompt, TotalTokens: prompt} }
	}
	return i
}

// request is choice k's prompt's request (not the choice's own: see choiceRequest).
func (r *choiceRun) request(k int) *GenerateRequest {
	if i := k / r.n; i > 0 {
		return r.p.more[i-1]
	}
	return r.p.gen
}

// generation is choice k's reading state on st.
func (r *choiceRun) generation(k int, req *GenerateRequest, st Stream) *generation {
	parser := r.p.newParser()
	if c := k % r.n; c > 0 && c-1 < len(r.p.parsers) {
		parser = r.p.parsers[c-1]
	}
	g := r.s.newGeneration(r.rec, r.p, req, st, parser, r.info(k))
	g.choice = k
	g.keepText = !r.stream && r.p.chat != nil
	return g
}

// startSiblings starts the choices after k0 of its prompt, pinned to worker: called by
// choice k0's goroutine at its first chunk.
func (r *choiceRun) startSiblings(k0 int, worker string) {
	for k := k0 + 1; k < k0+r.n; k++ {
		r.wg.Add(1)
		go func() {
			req := choiceRequest(r.p, r.rec.id, k)
			req.PinWorker = worker
			st, err := r.s.backend.Generate(r.ctx, req)
			if err != nil {
				defer r.wg.Done()
				ev := choiceEvent{k: k, gone: r.ctx.Err() != nil}
				if aerr := timedOut(r.ctx, r.s.cfg.RequestTimeout); aerr != nil {
					ev.aerr, ev.gone = aerr, false
				} else if !ev.gone {
					ev.aerr = backendError(r.rec.model, err)
				}
				r.send(ev)
				return
			}
			r.read(k, r.generation(k, req, st))
		}()
	}
}

// send reports ev to the merge unless the request is over.
func (r *choiceRun) send(ev choiceEvent) {
	select {
	case r.events <- ev:
	case <-r.ctx.Done():
	}
}

// read runs choice k to its end on its own goroutine, writes its frames (a stream) and
// reports how it ended; the stream is closed on return.
func (r *choiceRun) read(k int, g *generation) {
	defer r.wg.Done()
	defer g.stream.Close()
	var all []parse.Event
	last, aerr, gone := g.pump(r.ctx, func(evs []parse.Event) error {
		all = append(all, evs...)
		if r.stream {
			return r.write(func(s *sseWriter) error { return g.ans.streamEvents(s, evs) })
		}
		return r.ctx.Err()
	})
	last = append([]parse.Event(nil), last...)
	switch {
	case gone:
		r.send(choiceEvent{k: k, gone: true})
	case aerr != nil:
		r.send(choiceEvent{k: k, aerr: aerr, g: g, last: last})
	case r.stream:
		end := g.ending(append(all, last...), last)
		if r.write(func(s *sseWriter) error { return g.ans.streamEnd(s, end) }) != nil {
			r.send(choiceEvent{k: k, gone: true})
			return
		}
		r.send(choiceEvent{k: k, end: end})
	default:
		end := g.ending(append(all, last...), nil)
		if brokenCall(end.Result) {
			// As respond does for one choice.
			end.Result = g.p.output.textOnly(string(g.text))
			if end.Finish == "tool_calls" {
				end.Finish = "stop"
			}
		}
		a := g.ans.(*openAIAnswer)
		ev := choiceEvent{k: k, end: end, prompt: a.r.lp.promptList()}
		if a.r.chat {
			ev.choice = a.chatChoice(end)
		} else {
			ev.choice = a.textChoice(end)
		}
		r.send(ev)
	}
}

// merge waits for the choices to end and ends the answer: once all have finished, the
// usage chunk and [DONE] of a stream, or the body; at the first failure the error (the
// error status, or the stream's error frame); when the client has gone, nothing.
func (r *choiceRun) merge(w http.ResponseWriter) {
	evs := make([]choiceEvent, len(r.answers))
	for left := len(evs); left > 0; {
		var ev choiceEvent
		select {
		case ev = <-r.events:
		case <-r.ctx.Done():
			ev = choiceEvent{gone: true}
		}
		switch {
		case ev.gone:
			aerr := timedOut(r.ctx, r.s.cfg.RequestTimeout)
			if aerr == nil {
				r.end(nil)
				r.clientGone(r.sseErr())
				return
			}
			ev.aerr = aerr
			fallthrough
		case ev.aerr != nil:
			r.fail(w, ev)
			return
		default:
			evs[ev.k] = ev
			left--
		}
	}
	ends := make([]*ending, len(evs))
	for k, ev := range evs {
		ends[k] = ev.end
	}
	usage := r.usage(ends)
	r.rec.succeed(usage)
	first := r.answers[0].(*openAIAnswer)
	if r.stream {
		var err error
		r.end(func(s *sseWriter) {
			if first.r.includeUsage {
				err = s.data(first.r.usageChunk(usage))
			}
			if err == nil {
				err = s.done()
			}
		})
		if err != nil {
			r.clientGone(err)
		}
		return
	}
	var err error
	if first.r.chat {
		body := chatCompletion{ID: first.r.id, Object: "chat.completion", Created: first.r.created, Model: first.r.model,
			Usage: usage, PromptLogprobs: evs[0].prompt, PromptTokenIDs: first.r.ids.promptIDs(), PromptText: first.r.promptText,
			Turbine: ends[0].Info}
		for _, ev := range evs {
			body.Choices = append(body.Choices, ev.choice.(chatChoice))
		}
		err = writeJSON(w, http.StatusOK, body)
	} else {
		body := textCompletion{ID: first.r.id, Object: "text_completion", Created: first.r.created, Model: first.r.model,
			Usage: mustJSON(usage), Turbine: ends[0].Info}
		for _, ev := range evs {
			body.Choices = append(body.Choices, ev.choice.(textChoice))
		}
		err = writeJSON(w, http.StatusOK, body)
	}
	if err != nil {
		r.clientGone(err)
	}
}

// sseErr is the stream's write error, if any.
func (r *choiceRun) sseErr() error {
	if r.sse == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sse.err
}

// usage sums the choices' usage as vLLM does: each prompt's tokens once (cached tokens:
// the most any of its choices found in the prefix cache), every choice's completion.
func (r *choiceRun) usage(ends []*ending) Usage {
	var u Usage
	for k, end := range ends {
		if k%r.n == 0 {
			u.PromptTokens += end.Usage.PromptTokens
			cached := 0
			for _, e := range ends[k : k+r.n] {
				cached = max(cached, e.Usage.PromptTokensDetails.CachedTokens)
			}
			u.PromptTokensDetails.CachedTokens += cached
		}
		u.CompletionTokens += end.Usage.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// fail ends the request with ev.aerr (a choice failed, or the request timed out): the
// error status before a body, or the stream's error frame after the events of the
// failing chunk; no choice writes after it.
func (r *choiceRun) fail(w http.ResponseWriter, ev choiceEvent) {
	r.rec.fail(ev.aerr)
	if !r.stream {
		r.p.api.writeError(w, ev.aerr, r.s.cfg.RetryAfter)
		return
	}
	r.end(func(s *sseWriter) {
		if ev.g != nil && len(ev.last) > 0 && ev.g.ans.streamEvents(s, ev.last) != nil {
			return
		}
		_ = r.answers[ev.k].streamFail(s, ev.aerr)
	})
}

// clientGone marks the request as abandoned by its client (a write failed with err).
func (r *choiceRun) clientGone(err error) {
	g := &generation{s: r.s, rec: r.rec}
	g.clientGone(err)
}
