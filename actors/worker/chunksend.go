package worker

import (
	"context"
	"sync"

	"github.com/turbine-llm/turbine/messages"
)

// chunkSender numbers one request's chunks and sends them within the credits its caller
// granted (Generate.initial_credits, then Credit messages). A chunk that finds no credit
// does not hold the engine's stream up: it waits, and the chunks the engine produces
// meanwhile are merged into it (their tokens, logprobs and, from the last, the finish
// and usage) up to mergedChunkTokens tokens, then into the next waiting one, so that a
// caller that falls behind receives fewer, larger chunks instead of a growing queue of
// one-token ones (docs/actor-library.md §10), none too large for one message or one
// client write. With no initial credits there is no flow control: every chunk leaves at
// once.
//
// put is called from the engine's stream (one goroutine); credits arrive on the
// request's channel. While chunks wait, one goroutine waits for credits to send them.
type chunkSender struct {
	ctx     context.Context
	credits <-chan int32
	send    func(*messages.TokenChunk)
	flow    bool

	mu       sync.Mutex
	left     int32
	index    uint32
	pending  []*messages.TokenChunk // waiting for a credit, in order
	flushing chan struct{}          // closed when the goroutine waiting for credits ends; nil: none
}

// mergedChunkTokens caps the tokens of a chunk that others were merged into: with 20 top
// logprobs a token takes about 2 KB of SSE, so a chunk stays within about half a
// megabyte however far behind its caller is.
const mergedChunkTokens = 256

func newChunkSender(ctx context.Context, initial int32, credits <-chan int32, send func(*messages.TokenChunk)) *chunkSender {
	return &chunkSender{ctx: ctx, credits: credits, send: send, flow: initial > 0, left: initial}
}

// put sends ch now if a credit allows and no chunk waits, else merges it into the last
// waiting one (a new one once that holds mergedChunkTokens, or when only one of them
// carries logprobs).
func (s *chunkSender) put(ch *messages.TokenChunk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.pending); n > 0 {
		if last := s.pending[n-1]; len(last.TokenIds)+len(ch.TokenIds) <= mergedChunkTokens && sameLogprobs(last, ch) {
			mergeChunk(last, ch)
		} else {
			s.pending = append(s.pending, ch)
		}
		return
	}
	s.takeCredits()
	if !s.flow || s.left > 0 {
		s.sendLocked(ch)
		return
	}
	s.pending = append(s.pending, ch)
	if s.flushing == nil {
		s.flushing = make(chan struct{})
		go s.flush(s.flushing)
	}
}

// flush waits for credits until the waiting chunks are sent or the request's context
// ends, then closes done.
func (s *chunkSender) flush(done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-s.ctx.Done():
			s.mu.Lock()
			s.flushing = nil
			s.mu.Unlock()
			return
		case n := <-s.credits:
			s.mu.Lock()
			s.left += n
			for len(s.pending) > 0 && s.left > 0 {
				ch := s.pending[0]
				s.pending = s.pending[1:]
				s.sendLocked(ch)
			}
			if len(s.pending) == 0 {
				s.flushing = nil
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
		}
	}
}

// drain waits until no chunk waits for a credit or the request's context ended, and
// returns the chunks left unsent, in order (none when all were sent).
func (s *chunkSender) drain() []*messages.TokenChunk {
	s.mu.Lock()
	done := s.flushing
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// sendNow sends ch at once, credits or not: an error chunk that ends the stream, sent
// after drain.
func (s *chunkSender) sendNow(ch *messages.TokenChunk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sendLocked(ch)
}

// takeCredits adds the credits already granted, without waiting.
func (s *chunkSender) takeCredits() {
	for {
		select {
		case n := <-s.credits:
			s.left += n
		default:
			return
		}
	}
}

func (s *chunkSender) sendLocked(ch *messages.TokenChunk) {
	ch.Index = s.index
	s.index++
	s.left--
	s.send(ch)
}

// sameLogprobs reports whether a and b both carry one logprob per token or both none:
// chunks that differ are not merged, since a chunk's logprobs pair with its tokens by
// position.
func sameLogprobs(a, b *messages.TokenChunk) bool {
	return (len(a.Logprobs) == len(a.TokenIds)) == (len(b.Logprobs) == len(b.TokenIds))
}

// mergeChunk appends b, a later chunk of the same request, to a: its tokens and their
// logprobs, and what only a stream's last chunk carries (finish reason, usage, transfer
// parameters). Prompt logprobs come on a stream's first chunk only, so a's stay.
func mergeChunk(a, b *messages.TokenChunk) {
	a.TokenIds = append(a.TokenIds, b.TokenIds...)
	a.Logprobs = append(a.Logprobs, b.Logprobs...)
	if len(a.PromptLogprobs) == 0 {
		a.PromptLogprobs = b.PromptLogprobs
	}
	if b.FinishReason != "" {
		a.FinishReason, a.KvTransferParams = b.FinishReason, b.KvTransferParams
		a.PromptTokens, a.CachedTokens, a.CompletionTokens = b.PromptTokens, b.CachedTokens, b.CompletionTokens
	}
}
