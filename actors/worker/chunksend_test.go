package worker

import (
	"context"
	"slices"
	"testing"

	"github.com/turbine-llm/turbine/engines"
	"github.com/turbine-llm/turbine/messages"
)

// creditEngine streams its chunks one by one; after each but the last it waits on step
// (nil: it does not wait). produced (when not nil) is closed once every chunk was handed
// over.
type creditEngine struct {
	chunks   []engines.Chunk
	step     chan struct{}
	produced chan struct{}
}

func (*creditEngine) Health(context.Context) error { return nil }
func (*creditEngine) Load(context.Context) (*messages.WorkerLoad, error) {
	return &messages.WorkerLoad{}, nil
}

func (e *creditEngine) Generate(ctx context.Context, _ string, _ []uint32, _ *messages.SamplingParams, fn func(engines.Chunk) error) error {
	if e.produced != nil {
		defer close(e.produced)
	}
	for i, c := range e.chunks {
		if err := fn(c); err != nil {
			return err
		}
		if e.step != nil && i < len(e.chunks)-1 {
			select {
			case <-e.step:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func tokenChunks(n int) []engines.Chunk {
	var cs []engines.Chunk
	for i := range n {
		c := engines.Chunk{TokenIDs: []uint32{uint32(100 + i)},
			Logprobs: []*messages.TokenLogprob{{TokenId: uint32(100 + i), Logprob: -float32(i)}}}
		if i == n-1 {
			c.FinishReason, c.PromptTokens, c.CompletionTokens = "length", 3, n
		}
		cs = append(cs, c)
	}
	return cs
}

// TestChunksWaitingForCreditsMerge: with no credit left, the engine's stream is not held
// up; what it produces while the caller has not granted more leaves merged when credits
// come, at most mergedChunkTokens tokens a chunk, numbered next, tokens and logprobs in
// order, the last chunk's finish and usage kept.
func TestChunksWaitingForCreditsMerge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial int32
		n       int
		// want: the number of tokens of each chunk sent, by index (token ids 100 + i).
		want []int
	}{
		{"no flow control", 0, 4, []int{1, 1, 1, 1}},
		{"credits enough", 8, 4, []int{1, 1, 1, 1}},
		{"one credit", 1, 5, []int{1, 4}},
		{"two credits", 2, 6, []int{1, 1, 4}},
		{"far behind: merged chunks capped", 1, 600, []int{1, 256, 256, 87}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &creditEngine{chunks: tokenChunks(tc.n), produced: make(chan struct{})}
			credits := make(chan int32, 16)
			sentCh := make(chan *messages.TokenChunk, 64)
			send := func(c *messages.TokenChunk) { sentCh <- c }
			m := &messages.Generate{RequestId: "r", InitialCredits: tc.initial}
			done := make(chan error, 1)
			go func() {
				done <- streamChunks(context.Background(), eng, m, credits, send, nil, "w", func(string) {})
			}()
			// Once the engine handed everything over, the chunks the credits allow have
			// left (put sends before it returns); the rest waits for one more credit.
			<-eng.produced
			var sent []*messages.TokenChunk
			for len(sentCh) > 0 {
				sent = append(sent, <-sentCh)
			}
			if len(sent) < len(tc.want) && (tc.initial == 0 || len(sent) != int(tc.initial)) {
				t.Fatalf("%d chunks sent with %d credits before a grant", len(sent), tc.initial)
			}
			for len(sent) < len(tc.want) {
				credits <- 1
				sent = append(sent, next(t, sentCh))
			}
			if len(sent) != len(tc.want) {
				t.Fatalf("%d chunks sent, want %d", len(sent), len(tc.want))
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			tok := uint32(100)
			for i, c := range sent {
				want := make([]uint32, tc.want[i])
				for j := range want {
					want[j] = tok
					tok++
				}
				if c.Index != uint32(i) || !slices.Equal(c.TokenIds, want) {
					t.Fatalf("chunk %d: index %d tokens %v, want index %d tokens %v", i, c.Index, c.TokenIds, i, want)
				}
				if len(c.Logprobs) != len(c.TokenIds) {
					t.Fatalf("chunk %d: %d logprobs for %d tokens", i, len(c.Logprobs), len(c.TokenIds))
				}
				for j, lp := range c.Logprobs {
					if lp.TokenId != c.TokenIds[j] {
						t.Fatalf("chunk %d: logprob %d of token %d, want %d", i, j, lp.TokenId, c.TokenIds[j])
					}
				}
			}
			last := sent[len(sent)-1]
			if last.FinishReason != "length" || last.CompletionTokens != int32(tc.n) || last.PromptTokens != 3 {
				t.Fatalf("last chunk %v: finish and usage lost", last)
			}
			nothingMore(t, sentCh)
		})
	}
}

// TestChunkWaitingForCreditSentWhenGranted: a chunk that waits for a credit leaves as soon
// as one comes, not only when the engine produces the next one.
func TestChunkWaitingForCreditSentWhenGranted(t *testing.T) {
	eng := &creditEngine{chunks: tokenChunks(3), step: make(chan struct{})}
	credits := make(chan int32, 16)
	sentCh := make(chan *messages.TokenChunk, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go streamChunks(ctx, eng, &messages.Generate{RequestId: "r", InitialCredits: 1}, credits,
		func(c *messages.TokenChunk) { sentCh <- c }, nil, "w", func(string) {})
	if c := next(t, sentCh); c.Index != 0 {
		t.Fatalf("first chunk %v", c)
	}
	eng.step <- struct{}{} // the second chunk: no credit, it waits
	credits <- 1           // the engine produces nothing more meanwhile
	if c := next(t, sentCh); c.Index != 1 || !slices.Equal(c.TokenIds, []uint32{101}) {
		t.Fatalf("second chunk %v", c)
	}
}

// TestCancelWithChunkWaiting: a last chunk still waiting for a credit when the request
// ends is never sent, and its transfer parameters go to release (the caller never got
// them). A caller's cancel sends nothing more; a hand-over (a drain) ends the stream with
// a migratable error chunk, numbered next, so that another worker completes it.
func TestCancelWithChunkWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		error bool // a migratable error chunk follows
	}{
		{"cancelled by the caller", nil, false},
		{"handed over", errDraining, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunks := tokenChunks(2)
			chunks[1].KVTransferParams = `{"remote_block_ids":[7]}`
			eng := &creditEngine{chunks: chunks, produced: make(chan struct{})}
			sentCh := make(chan *messages.TokenChunk, 8)
			released := make(chan string, 1)
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- streamChunks(ctx, eng, &messages.Generate{RequestId: "r", InitialCredits: 1}, make(chan int32),
					func(c *messages.TokenChunk) { sentCh <- c }, nil, "w", func(p string) { released <- p })
			}()
			next(t, sentCh)
			<-eng.produced // the last chunk waits for a credit
			cancel(tc.cause)
			if err := <-done; err != errCancelled {
				t.Fatalf("streamChunks = %v, want errCancelled", err)
			}
			if p := next(t, released); p != chunks[1].KVTransferParams {
				t.Fatalf("released %q", p)
			}
			if tc.error {
				c := next(t, sentCh)
				if c.Index != 1 || c.FinishReason != "error" || c.Fault != messages.Fault_FAULT_ENGINE_ERROR || len(c.TokenIds) != 0 {
					t.Fatalf("chunk after the hand-over %v, want a migratable error chunk numbered 1", c)
				}
			}
			nothingMore(t, sentCh)
		})
	}
}

// TestChunksWithAndWithoutLogprobsStayApart: a waiting chunk without logprobs takes no
// chunk with them (nor the reverse): a chunk's logprobs pair with its tokens by position.
func TestChunksWithAndWithoutLogprobsStayApart(t *testing.T) {
	chunks := tokenChunks(4)
	chunks[1].Logprobs, chunks[2].Logprobs = nil, nil // 0 and 3 with logprobs, 1 and 2 without
	eng := &creditEngine{chunks: chunks, produced: make(chan struct{})}
	credits := make(chan int32, 4)
	sentCh := make(chan *messages.TokenChunk, 8)
	go streamChunks(context.Background(), eng, &messages.Generate{RequestId: "r", InitialCredits: 1}, credits,
		func(c *messages.TokenChunk) { sentCh <- c }, nil, "w", func(string) {})
	<-eng.produced
	credits <- 2
	for i, want := range [][]uint32{{100}, {101, 102}, {103}} {
		c := next(t, sentCh)
		if !slices.Equal(c.TokenIds, want) || (len(c.Logprobs) != 0 && len(c.Logprobs) != len(c.TokenIds)) {
			t.Fatalf("chunk %d: tokens %v with %d logprobs, want tokens %v", i, c.TokenIds, len(c.Logprobs), want)
		}
	}
}

// nothingMore fails the test if a chunk waits in sent: none may follow a stream's end.
func nothingMore(t *testing.T, sent chan *messages.TokenChunk) {
	t.Helper()
	select {
	case c := <-sent:
		t.Fatalf("chunk sent after the stream's end: %v", c)
	default:
	}
}
