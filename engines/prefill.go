package engines

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// Timing of a prefill leg whose context ends while its engine works on it (FinishPrefill).
const (
	// PrefillGrace is how long a cancelled prefill leg, not answered yet, may still run
	// on an engine whose pinned KV blocks can be released on request (KVReleaser that
	// does release: Turbine's mock engine). A prefill leg takes one prefill step, so it
	// usually answers within this time; its caller then releases the blocks it names.
	PrefillGrace = 2 * time.Second
	// PrefillReadTimeout bounds reading an answer that had begun to arrive when the leg's
	// context ended (a small JSON body: one token and the transfer parameters).
	PrefillReadTimeout = 2 * time.Second
)

// FinishPrefill runs call, the one HTTP request of a disaggregated prefill leg answered
// in one JSON body, so that a leg cancelled after its engine pinned the prompt's KV
// blocks does not lose the answer that names them (kv_transfer_params, TensorRT-LLM's
// disaggregated_params): such blocks would stay pinned until the engine's own timeout
// (480 s for vLLM). call gets a context that ctx's cancellation does not end at once.
// Once ctx ends:
//
//   - an answer whose first byte has arrived (net/http/httptrace GotFirstResponseByte)
//     is read to its end, for PrefillReadTimeout (or grace, when longer) at most;
//   - a leg not answered yet gets grace to answer. grace 0 aborts it at once (the
//     connection closes, and the engine aborts the request and frees its blocks): the
//     choice for engines that cannot release pinned blocks on request, for which a leg
//     that finishes after its caller left pins its blocks until the engine's timeout,
//     while an abort frees them;
//   - after that the request is aborted.
//
// It returns call's result and error: a leg that answered after ctx ended returns its
// answer (the caller passes it on so that its blocks are released, and reports ctx's
// error); one aborted returns the error of its cancelled request. A leg whose ctx ended
// before FinishPrefill was called is not sent: it returns ctx's error.
func FinishPrefill[T any](ctx context.Context, grace time.Duration, call func(context.Context) (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	var answering atomic.Bool
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { answering.Store(true) }}
	cctx, abort := context.WithCancel(httptrace.WithClientTrace(context.WithoutCancel(ctx), trace))
	defer abort()
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		wait := grace
		if answering.Load() {
			wait = max(grace, PrefillReadTimeout)
		}
		if wait <= 0 {
			abort()
			return
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			abort()
		}
	}()
	v, err := call(cctx)
	close(done)
	<-watched
	return v, err
}
