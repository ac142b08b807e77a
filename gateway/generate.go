package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/turbine-llm/turbine/gateway/parse"
	"github.com/turbine-llm/turbine/messages"
)

// generation is one prepared request running on the Backend.
type generation struct {
	s   *Server
	rec *requestRecord
	p   *prepared
	// gen is the request that runs on stream (p.gen, or a choice's or batch prompt's own).
	gen    *GenerateRequest
	stream Stream
	out    *textOutput
	ans    answer
	// parser splits the output text into content, reasoning and tool calls.
	parser parse.Parser
	// calls counts the tool calls kept; dropped the ones parallel_tool_calls false cut.
	calls, dropped int
	// reasoningTokens counts the completion tokens of chunks that gave only reasoning.
	reasoningTokens int
	// text keeps a non-streaming answer's whole text (for outputParsing.textOnly).
	text     []byte
	keepText bool
	evs      []parse.Event // scratch, reused per chunk
	// choice is the choice's index in a request with several (choices.go); started, when
	// set, is called once, at the first chunk.
	choice  int
	started func()
	// idle, when set, is called when the stream (a ChunkPoller) has no chunk ready,
	// before pump waits for one: the SSE writer's flush. An error ends the pump as the
	// client gone.
	idle func() error
}

// errRequestTimeout is the cause of a request context that ran past Config.RequestTimeout.
var errRequestTimeout = errors.New("gateway: request timeout")

// timedOut returns the timeout error when ctx ended because the request ran past limit,
// nil otherwise (running, or the client went away).
func timedOut(ctx context.Context, limit time.Duration) *APIError {
	if ctx.Err() == nil || !errors.Is(context.Cause(ctx), errRequestTimeout) {
		return nil
	}
	return newError(KindTimeout, "", "The request did not finish within the server's %s limit; it was cancelled.", limit)
}

// generate starts p on the Backend and answers with a stream or one body. The Stream is
// closed on every path, which cancels the engine request when it has not finished
// (client gone, stop string hit, write failure).
func (s *Server) generate(w http.ResponseWriter, r *http.Request, rec *requestRecord, p *prepared) {
	ctx := r.Context()
	if s.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errRequestTimeout)
		defer cancel()
	}
	rec.model, rec.lora = servedNames(p.card)
	s.metrics.begin(rec)
	rec.usage.PromptTokens = len(p.gen.TokenIDs)
	if p.choices() > 1 {
		s.generateChoices(ctx, w, rec, p)
		return
	}

	stream, err := s.startGeneration(ctx, p.gen, rec.ticket)
	if err != nil {
		if aerr := timedOut(ctx, s.cfg.RequestTimeout); aerr != nil {
			rec.fail(aerr)
			p.api.writeError(w, aerr, s.cfg.RetryAfter)
			return
		}
		if ctx.Err() != nil {
			rec.cancel()
			return
		}
		aerr := backendError(rec.model, err)
		rec.fail(aerr)
		p.api.writeError(w, aerr, s.cfg.RetryAfter)
		return
	}
	defer s.released(rec.model)
	defer stream.Close()
	s.metrics.observeQueue(rec.model, s.cfg.Now().Sub(rec.start))
	// The headers as first routed: a stream sends them before its first chunk. A
	// non-streaming answer sets them again from the outcome once the request finished
	// (respond), and the log line names the outcome either way (below).
	rec.worker = stream.WorkerID()
	if ds, ok := stream.(DisaggStream); ok {
		rec.disagg = ds.Disagg()
	}
	setOutcomeHeaders(w.Header(), rec.worker, rec.disagg)

	g := s.newGeneration(rec, p, p.gen, stream, p.newParser(), answerInfo{ID: rec.id, Created: s.cfg.Now().Unix(), Model: p.common.Model,
		PromptTokens: len(p.gen.TokenIDs), IncludeUsage: p.common.IncludeUsage, Chat: p.chat})
	defer func() {
		// A prefill leg retried elsewhere, or a migration, changed where the request
		// ran: the log line names the final worker and decision.
		rec.worker, rec.disagg = g.outcome()
	}()
	if p.common.Stream {
		g.streamTo(ctx, w)
	} else {
		g.respond(ctx, w)
	}
}

// newGeneration is the reading and rendering state of one running request (one choice
// of a request with several): gen is what ran on stream, parser its output parser, info
// its renderer's.
func (s *Server) newGeneration(rec *requestRecord, p *prepared, gen *GenerateRequest, stream Stream, parser parse.Parser, info answerInfo) *generation {
	var stops StopMatcher
	if len(p.common.Stop) > 0 {
		stops = withStopString(s.opts.newStopMatcher(p.common.Stop), p.common.IncludeStopStr)
	}
	detok := s.opts.newDetokenizer(p.tokenizer(), p.common.SkipSpecialTokens)
	out := newTextOutput(detok, stops, p.stopIDs, int(p.common.MinTokens))
	out.lp = newLogprobSink(p.common, p.pre.Tokenizer(), p.chat != nil, gen.TokenIDs)
	out.lp.setPromptText(gen.PromptText)
	out.engine, out.model = p.card.GetEngine(), p.card.GetModel()
	info.Logprobs = out.lp
	out.stopReasons = p.stopReasons
	out.ids = newTokenIDSink(p.common, gen.TokenIDs)
	info.TokenIDs = out.ids
	if p.common.IncludeUsage && p.common.ContinuousUsage {
		prompt := info.PromptTokens
		info.Usage = func() Usage { return out.usage(prompt) }
	}
	return &generation{
		s: s, rec: rec, p: p, gen: gen, stream: stream,
		out:    out,
		parser: parser,
		ans:    p.api.answer(info),
	}
}

// setOutcomeHeaders sets X-Turbine-Worker, X-Turbine-Disagg and X-Turbine-Prefill-Worker
// (each removed when empty) from a request's worker and disaggregation decision.
func setOutcomeHeaders(h http.Header, worker string, d DisaggInfo) {
	for _, kv := range [...][2]string{{"X-Turbine-Worker", worker}, {"X-Turbine-Disagg", d.Decision},
		{"X-Turbine-Prefill-Worker", d.PrefillWorker}} {
		if kv[1] == "" {
			h.Del(kv[0])
		} else {
			h.Set(kv[0], kv[1])
		}
	}
}

// outcome is where the request ran, as far as it got: the worker of its last chunk (the
// stream's current worker before any chunk) and the latest disaggregation decision
// (zero when the stream reports none).
func (g *generation) outcome() (worker string, d DisaggInfo) {
	worker = g.out.workerID
	if worker == "" {
		worker = g.stream.WorkerID()
	}
	if worker == "" {
		worker = g.rec.worker
	}
	if ds, ok := g.stream.(DisaggStream); ok {
		d = ds.Disagg()
	}
	return worker, d
}

// idPrefix is OpenAI's response id prefix per endpoint.
func idPrefix(endpoint string) string {
	if endpoint == endpointChat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

// pump reads chunks until the request finishes, fails or the client leaves. emit gets
// the parsed events of every chunk before the finishing one; that chunk's events are
// returned (with the failure, when the stream failed). gone is true when the client went
// away (request context done, or emit failed writing).
func (g *generation) pump(ctx context.Context, emit func([]parse.Event) error) (last []parse.Event, aerr *APIError, gone bool) {
	var prev time.Time
	poller, _ := g.stream.(ChunkPoller)
	if g.idle == nil {
		poller = nil
	}
	for {
		var c *messages.TokenChunk
		if poller != nil && ctx.Err() == nil { // an ended ctx is Recv's to report
			if c = poller.Ready(); c == nil && g.idle() != nil {
				return nil, nil, true // the client is gone: its flush failed
			}
		}
		var err error
		if c == nil {
			c, err = g.stream.Recv(ctx)
		}
		if err != nil {
			switch {
			case timedOut(ctx, g.s.cfg.RequestTimeout) != nil:
				return nil, timedOut(ctx, g.s.cfg.RequestTimeout), false
			case ctx.Err() != nil:
				return nil, nil, true
			case errors.Is(err, io.EOF):
				return nil, newError(KindEngineError, "", "The token stream ended before the request finished."), false
			default:
				return nil, g.drainCut(backendError(g.rec.model, err)), false
			}
		}
		if g.started != nil {
			g.started()
			g.started = nil
		}
		n := len(c.GetTokenIds())
		if n > 0 {
			now := g.s.cfg.Now()
			if prev.IsZero() {
				g.s.metrics.observeTTFT(g.rec, now.Sub(g.rec.start))
				g.s.metrics.observeLoraTTFT(g.rec, now.Sub(g.rec.start))
			} else {
				g.s.metrics.observeITL(g.rec.model, now.Sub(prev), n)
			}
			prev = now
		}
		text, aerr := g.out.push(c)
		if aerr != nil {
			aerr = g.drainCut(aerr)
		}
		evs := g.parse(text, aerr != nil || g.out.finished(), n)
		if aerr != nil || g.out.finished() {
			return evs, aerr, false
		}
		if len(evs) > 0 {
			if err := emit(evs); err != nil {
				return nil, nil, true
			}
		}
	}
}

// parse runs text through the output parser (finishing it at the end of the answer),
// drops the tool calls after the first when parallel_tool_calls is false, and counts
// the chunk's n tokens as reasoning when it gave nothing else. The events are valid
// until the next call.
func (g *generation) parse(text string, end bool, n int) []parse.Event {
	evs := g.evs[:0]
	if text != "" {
		evs = g.parser.Push(text, evs)
		if g.keepText {
			g.text = append(g.text, text...)
		}
	}
	if end {
		evs = g.parser.Finish(evs)
		if m := g.parser.Malformed(); m > 0 {
			g.s.metrics.malformedToolCalls(g.rec.model, m)
		}
	}
	kept := evs[:0]
	onlyReasoning := len(evs) > 0
	for _, e := range evs {
		switch e.Kind {
		case parse.KindToolCall:
			if e.Index > 0 && !g.p.parallelToolCalls() {
				g.dropped++
				continue
			}
			g.calls++
		case parse.KindToolArgs:
			if e.Index > 0 && !g.p.parallelToolCalls() {
				continue
			}
		}
		if e.Kind != parse.KindReasoning {
			onlyReasoning = false
		}
		kept = append(kept, e)
	}
	if onlyReasoning {
		g.reasoningTokens += n
	}
	g.evs = kept
	return kept
}

// finish is the answer's finish_reason: a request that stopped after calling tools
// finished with "tool_calls", as OpenAI and vLLM report it.
func (g *generation) finish() string {
	if g.out.finishReason == "stop" && g.calls > 0 {
		return "tool_calls"
	}
	return g.out.finishReason
}

// ending is how the finished answer ended; all are its events (for Result).
func (g *generation) ending(all, last []parse.Event) *ending {
	usage := g.out.usage(len(g.gen.TokenIDs))
	return &ending{Finish: g.finish(), StopString: g.out.stopString, StopTokenID: g.out.stopTokenID, Usage: usage,
		ReasoningTokens: g.reasoningTokens, Result: parse.Collect(all), Last: last, Info: g.info()}
}

// drainCut turns a worker failure (502) or a failed re-route (503 no_live_workers) of a
// request that a draining worker handed back into 503 service_draining while this server
// drains: no worker is left to take the request, and the client should hear that the
// server is shutting down (retry elsewhere), not that a worker failed.
func (g *generation) drainCut(aerr *APIError) *APIError {
	if !g.s.draining.Load() || aerr.Kind != KindBackendError && aerr.Kind != KindNoWorkers {
		return aerr
	}
	out := newError(KindDraining, "", "The server is shutting down: the request was ended at the end of its drain period; it can be retried.")
	out.Cause = aerr.Cause
	return out
}

// info is the `turbine` extension object, when the request asked for it (return_worker
// or explain_route): the outcome, and with explain_route the route's explanation.
func (g *generation) info() *TurbineInfo {
	t := g.p.common.Turbine
	if !t.ReturnWorker && !t.ExplainRoute {
		return nil
	}
	worker, d := g.outcome()
	info := &TurbineInfo{WorkerID: worker, RequestID: g.rec.id, CachedTokens: g.out.cachedTokens,
		Disagg: d.Decision, PrefillWorkerID: d.PrefillWorker, DecodeWorkerID: d.DecodeWorker}
	if es, ok := g.stream.(ExplainedStream); ok && t.ExplainRoute {
		info.Route = es.RouteExplanation()
	}
	return info
}

// streamTo answers with SSE in the API's shape: its opening, the events as they come,
// its end. A failure after the header is written by the API's streamFail.
func (g *generation) streamTo(ctx context.Context, w http.ResponseWriter) {
	sse, err := startSSE(w)
	if err != nil {
		g.clientGone(err)
		return
	}
	if g.ans.streamStart(sse) != nil {
		g.clientGone(sse.err)
		return
	}
	var all []parse.Event
	// Frames of chunks already come are flushed together: once the stream has no chunk
	// ready (ChunkPoller), before Recv waits.
	if _, ok := g.stream.(ChunkPoller); ok {
		sse.lazy, g.idle = true, sse.flushPending
	}
	last, aerr, gone := g.pump(ctx, func(evs []parse.Event) error {
		all = append(all, evs...)
		return g.ans.streamEvents(sse, evs)
	})
	sse.lazy, g.idle = false, nil // every path below writes a frame, which flushes the rest
	switch {
	case gone:
		g.clientGone(sse.err)
		return
	case aerr != nil:
		g.rec.fail(aerr)
		if len(last) > 0 && g.ans.streamEvents(sse, last) != nil {
			return
		}
		_ = g.ans.streamFail(sse, aerr)
		return
	}
	last = append([]parse.Event(nil), last...)
	end := g.ending(append(all, last...), last)
	g.rec.succeed(end.Usage)
	if g.ans.streamEnd(sse, end) != nil {
		g.clientGone(sse.err)
	}
}

// clientGone marks the request as abandoned by its client; err is the write error that
// showed it, when a write failed. A write that waited Config.StreamWriteTimeout (the
// client stopped reading) is named as such in the log line.
func (g *generation) clientGone(err error) {
	g.rec.cancel()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		g.rec.err.Message = fmt.Sprintf("The client read nothing for the %s write timeout; its connection was closed.", g.s.cfg.StreamWriteTimeout)
		g.rec.err.Cause = err
	}
}

// respond answers with one JSON body once the request has finished, its X-Turbine-*
// headers naming the outcome (the worker that finished it, the latest decision).
func (g *generation) respond(ctx context.Context, w http.ResponseWriter) {
	var all []parse.Event
	g.keepText = g.p.chat != nil
	last, aerr, gone := g.pump(ctx, func(evs []parse.Event) error { all = append(all, evs...); return nil })
	if !gone {
		worker, d := g.outcome()
		setOutcomeHeaders(w.Header(), worker, d)
	}
	switch {
	case gone:
		g.rec.cancel()
		return
	case aerr != nil:
		g.rec.fail(aerr)
		g.p.api.writeError(w, aerr, g.s.cfg.RetryAfter)
		return
	}
	end := g.ending(append(all, last...), nil)
	if brokenCall(end.Result) {
		// A call the model did not finish (cut by max_tokens) or wrote with arguments that
		// are not JSON: the whole text comes back as content, with no call.
		end.Result = g.p.output.textOnly(string(g.text))
		if end.Finish == "tool_calls" {
			end.Finish = "stop"
		}
	}
	g.rec.succeed(end.Usage)
	if err := g.ans.respond(w, end); err != nil {
		g.clientGone(err)
	}
}
