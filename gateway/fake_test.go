package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// ---- a byte-level fake tokenizer ----

// Token ids of the fake tokenizer: three special tokens, then one token per byte.
const (
	fakeEOS      = 0 // "<|endoftext|>"
	fakeImStart  = 1 // "<|im_start|>"
	fakeImEnd    = 2 // "<|im_end|>"
	fakeByteBase = 3 // byte b is token fakeByteBase+b
)

var fakeSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

type fakeTokenizer struct{}

func (fakeTokenizer) Encode(text string) []uint32 {
	var ids []uint32
outer:
	for len(text) > 0 {
		for id, sp := range fakeSpecials {
			if strings.HasPrefix(text, sp) {
				ids = append(ids, uint32(id))
				text = text[len(sp):]
				continue outer
			}
		}
		ids = append(ids, fakeByteBase+uint32(text[0]))
		text = text[1:]
	}
	return ids
}

func (f fakeTokenizer) Decode(ids []uint32) string {
	var b []byte
	for _, id := range ids {
		tb, _ := f.TokenBytes(id)
		b = append(b, tb...)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (fakeTokenizer) TokenBytes(id uint32) ([]byte, bool) {
	switch {
	case id < fakeByteBase:
		return []byte(fakeSpecials[id]), true
	case id < fakeByteBase+256:
		return []byte{byte(id - fakeByteBase)}, true
	}
	return nil, false
}

func (fakeTokenizer) VocabSize() int           { return fakeByteBase + 256 }
func (fakeTokenizer) IsSpecial(id uint32) bool { return id < fakeByteBase }

// TokenString is a special token's text, and a byte token's byte in the byte-level
// alphabet, as byte-level BPE vocabularies write them.
func (f fakeTokenizer) TokenString(id uint32) (string, bool) {
	b, ok := f.TokenBytes(id)
	if !ok || f.IsSpecial(id) {
		return string(b), ok
	}
	return byteLevelString(b), true
}

// toks returns the fake token ids of text (bytes only, no specials).
func toks(text string) []uint32 {
	ids := make([]uint32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = fakeByteBase + uint32(text[i])
	}
	return ids
}

// ---- a ChatML-like fake preprocessor ----

type fakePreprocessor struct {
	ctxLen int
	eos    []uint32
}

func (fakePreprocessor) Tokenizer() model.Tokenizer { return fakeTokenizer{} }

func (fakePreprocessor) RenderChat(in model.ChatTemplateInput) (string, error) {
	var b strings.Builder
	if len(in.Tools) > 0 {
		var compact bytes.Buffer
		if err := json.Compact(&compact, in.Tools); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "<|im_start|>system\n# Tools\n%s<|im_end|>\n", compact.Bytes())
	}
	if len(in.Kwargs) > 0 {
		kj, _ := json.Marshal(in.Kwargs)
		fmt.Fprintf(&b, "<|im_start|>system\n# Kwargs\n%s<|im_end|>\n", kj)
	}
	for _, m := range in.Messages {
		if strings.Contains(m.Content, "TEMPLATE_ERROR") {
			return "", errors.New("template: raise_exception('roles must alternate')")
		}
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m.Role, m.Content)
	}
	if in.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

func (fakePreprocessor) EncodePrompt(text string) []uint32 { return fakeTokenizer{}.Encode(text) }
func (p fakePreprocessor) EOSTokenIDs() []uint32           { return p.eos }
func (p fakePreprocessor) ContextLength() int              { return p.ctxLen }

// fakeDetokenizer concatenates token bytes, holding back an incomplete UTF-8 tail.
type fakeDetokenizer struct {
	tok         model.Tokenizer
	skipSpecial bool
	buf         []byte
}

func (d *fakeDetokenizer) Push(ids ...uint32) string {
	for _, id := range ids {
		if d.skipSpecial && d.tok.IsSpecial(id) {
			continue
		}
		b, _ := d.tok.TokenBytes(id)
		d.buf = append(d.buf, b...)
	}
	cut := len(d.buf)
	for i := len(d.buf) - 1; i >= 0 && i >= len(d.buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(d.buf[i]) {
			if !utf8.FullRune(d.buf[i:]) {
				cut = i
			}
			break
		}
	}
	out := string(d.buf[:cut])
	d.buf = append([]byte(nil), d.buf[cut:]...)
	return out
}

func (d *fakeDetokenizer) Flush() string {
	out := strings.ToValidUTF8(string(d.buf), "\uFFFD")
	d.buf = nil
	return out
}

// fakeStopMatcher holds back any tail that could begin a stop string, and tells the
// stop string it found (as model.StopMatcher does).
type fakeStopMatcher struct {
	stops   []string
	buf     string
	matched string
}

func (s *fakeStopMatcher) Matched() string { return s.matched }

func (s *fakeStopMatcher) Push(text string) (string, bool) {
	s.buf += text
	best := -1
	for _, st := range s.stops {
		if i := strings.Index(s.buf, st); i >= 0 && (best < 0 || i < best) {
			best, s.matched = i, st
		}
	}
	if best >= 0 {
		out := s.buf[:best]
		s.buf = ""
		return out, true
	}
	hold := 0
	for _, st := range s.stops {
		for k := min(len(st)-1, len(s.buf)); k > hold; k-- {
			if strings.HasSuffix(s.buf, st[:k]) {
				hold = k
				break
			}
		}
	}
	out := s.buf[:len(s.buf)-hold]
	s.buf = s.buf[len(s.buf)-hold:]
	return out, false
}

func (s *fakeStopMatcher) Flush() string {
	out := s.buf
	s.buf = ""
	return out
}

func fakeOptions(pre Preprocessor) []Option {
	return []Option{
		WithModelLoader(func(card *messages.ModelCard) (Preprocessor, error) {
			if card.GetTokenizer() == "broken" {
				return nil, errors.New("model: tokenizer.json: unexpected end of JSON input")
			}
			return pre, nil
		}),
		WithDetokenizer(func(tok model.Tokenizer, skip bool) Detokenizer {
			return &fakeDetokenizer{tok: tok, skipSpecial: skip}
		}),
		WithStopMatcher(func(stops []string) StopMatcher { return &fakeStopMatcher{stops: stops} }),
		WithToolCallIDs(func(i int) string { return fmt.Sprintf("call-%d", i) }),
	}
}

// ---- a scripted Backend ----

// step is one scripted answer of Stream.Recv.
type step struct {
	chunk *messages.TokenChunk
	err   error
	// block makes Recv wait for its context to end (a slow engine).
	block bool
	// before runs when the step is reached (e.g. to cancel the client's context).
	before func()
}

func tokens(text string) step {
	return step{chunk: &messages.TokenChunk{TokenIds: toks(text)}}
}

func finish(text, reason string) step {
	return step{chunk: &messages.TokenChunk{TokenIds: toks(text), FinishReason: reason, WorkerId: "worker-a", CachedTokens: 2}}
}

type fakeStream struct {
	mu     sync.Mutex
	steps  []step
	next   int
	worker string
	closes int
	closed chan struct{}
}

func (s *fakeStream) Recv(ctx context.Context) (*messages.TokenChunk, error) {
	s.mu.Lock()
	if s.closes > 0 {
		s.mu.Unlock()
		return nil, errors.New("fake: Recv after Close")
	}
	if s.next >= len(s.steps) {
		s.mu.Unlock()
		return nil, io.EOF
	}
	st := s.steps[s.next]
	s.next++
	s.mu.Unlock()
	if st.before != nil {
		st.before()
	}
	if st.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if st.err != nil {
		return nil, st.err
	}
	return st.chunk, nil
}

func (s *fakeStream) WorkerID() string { return s.worker }

func (s *fakeStream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes++
	if s.closes == 1 {
		close(s.closed)
	}
}

type fakeBackend struct {
	mu        sync.Mutex
	poll      bool // its streams are ChunkPollers (pollingStream)
	cards     []*messages.ModelCard
	modelsErr error
	genErr    error
	steps     []step
	requests  []*GenerateRequest
	streams   []*fakeStream
}

func newFakeBackend(steps ...step) *fakeBackend {
	return &fakeBackend{
		cards: []*messages.ModelCard{
			{Model: "tiny", Tokenizer: "fake", ContextLength: 128, KvBlockSize: 16, EosTokenIds: []uint32{fakeEOS}},
			{Model: "org/big-model", Tokenizer: "fake", ContextLength: 4096, KvBlockSize: 16},
			{Model: "broken-model", Tokenizer: "broken", ContextLength: 128},
		},
		steps: steps,
	}
}

func (b *fakeBackend) Models(ctx context.Context) ([]*messages.ModelCard, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cards, b.modelsErr
}

func (b *fakeBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = append(b.requests, req)
	if b.genErr != nil {
		return nil, b.genErr
	}
	s := &fakeStream{steps: b.steps, worker: "worker-a", closed: make(chan struct{})}
	b.streams = append(b.streams, s)
	if b.poll {
		return pollingStream{s}, nil
	}
	return s, nil
}

// pollingStream is a fakeStream that is a ChunkPoller: every step that is a plain chunk
// (no block, error or hook) is ready at once.
type pollingStream struct{ *fakeStream }

func (s pollingStream) Ready() *messages.TokenChunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closes > 0 || s.next >= len(s.steps) {
		return nil
	}
	st := s.steps[s.next]
	if st.block || st.err != nil || st.before != nil || st.chunk == nil {
		return nil
	}
	s.next++
	return st.chunk
}

func (b *fakeBackend) generated() []*GenerateRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*GenerateRequest(nil), b.requests...)
}

// checkClosed fails t unless every stream the backend opened was closed.
func (b *fakeBackend) checkClosed(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.streams {
		select {
		case <-s.closed:
		case <-time.After(5 * time.Second): // a handler still running; bounded wait, not a timing assertion
			t.Errorf("stream %d (of %d) was never closed", i, len(b.streams))
		}
	}
}
